//! The `airlock-fs` command: one operation per run, for shell scripts.
//!
//! ```text
//! airlock-fs read ROOT PATH [--offset N] [--max N]
//!                                         the whole file (from N, at most N
//!                                         bytes) to stdout, in 64 KiB frames
//! airlock-fs write ROOT PATH              stdin, of any size, to the file (read
//!                                         whole before the first call, so a
//!                                         pipeline's commands take turns)
//! airlock-fs list ROOT [PATH] [--max N]   `KIND<TAB>NAME` a line, KIND one of
//!                                         file, dir, link, other (default
//!                                         PATH ".", max 256)
//! ```
//!
//! Exit status 0 on success; 1 when the operation was refused or failed
//! (`CODE: message` on stderr), including a file that changed between the
//! frames of a read (`broker.changed`) or a budget that ended it
//! (`broker.budget`): a read never stops short silently; 2 on a usage
//! error. A read that stopped at `--max` before the end says so on stderr
//! (`stopped at N of S bytes (--max)`, exit 0). A listing that skipped
//! entries or was cut short says so on stderr (`skipped: N`, `truncated:
//! …`). A write is named only once all of stdin arrived: a failure leaves
//! the old file (or none). `--` ends the options, for a path that starts
//! with `-`.

use std::io::{Read, Write};
use std::process::ExitCode;

use airlock_fsproto::MAX_LIST_NAMES;

use crate::client::Client;
use crate::error::FsError;

const USAGE: &str = "usage: airlock-fs read ROOT PATH [--offset N] [--max N]
       airlock-fs write ROOT PATH          (data on stdin)
       airlock-fs list ROOT [PATH] [--max N]
";

/// One parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `read ROOT PATH [--offset N] [--max N]`.
    Read {
        /// Root name.
        root: String,
        /// Path in the root.
        path: String,
        /// Where to start.
        offset: u64,
        /// Most bytes wanted (`None`: to the end of the file).
        max: Option<u64>,
    },
    /// `write ROOT PATH`.
    Write {
        /// Root name.
        root: String,
        /// Path in the root.
        path: String,
    },
    /// `list ROOT [PATH] [--max N]`.
    List {
        /// Root name.
        root: String,
        /// Directory in the root.
        path: String,
        /// Most names wanted.
        max: u64,
    },
    /// `--help` or `-h`.
    Help,
    /// `--handshake`: airlock's start-up check (print this build's
    /// [`airlock_fsproto::Handshake`] line).
    Handshake,
}

/// Parses the arguments after the program name, strictly: a known
/// operation, exactly its positional arguments, `--max N` (decimal digits)
/// at most once and only for `read` and `list`, `--offset N` at most once
/// and only for `read`, nothing else.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let (op, rest) = match args.split_first() {
        None => return Err("no operation given".into()),
        Some((op, rest)) => (op.as_str(), rest),
    };
    if matches!(op, "--help" | "-h") && rest.is_empty() {
        return Ok(Command::Help);
    }
    if op == airlock_fsproto::HANDSHAKE_FLAG && rest.is_empty() {
        return Ok(Command::Handshake);
    }
    let (mut positional, mut max, mut offset, mut options_done) = (Vec::new(), None, None, false);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if options_done || !a.starts_with('-') || a == "-" {
            positional.push(a.clone());
        } else if a == "--" {
            options_done = true;
        } else if a == "--max" && op != "write" {
            let n = it.next().ok_or("--max needs a number")?;
            if max.replace(parse_number("--max", n)?).is_some() {
                return Err("--max given twice".into());
            }
        } else if a == "--offset" && op == "read" {
            let n = it.next().ok_or("--offset needs a number")?;
            if offset.replace(parse_number("--offset", n)?).is_some() {
                return Err("--offset given twice".into());
            }
        } else {
            return Err(format!("unknown option {a:?} for {op}"));
        }
    }
    let mut positional = positional.into_iter();
    let mut take = |what: &str| positional.next().ok_or(format!("{op} needs {what}"));
    let command = match op {
        "read" => Command::Read { root: take("ROOT")?, path: take("PATH")?, offset: offset.unwrap_or(0), max },
        "write" => Command::Write { root: take("ROOT")?, path: take("PATH")? },
        "list" => Command::List {
            root: take("ROOT")?,
            path: positional.next().unwrap_or_else(|| ".".into()),
            max: max.unwrap_or(MAX_LIST_NAMES),
        },
        other => return Err(format!("unknown operation {other:?}")),
    };
    match positional.next() {
        Some(extra) => Err(format!("unexpected argument {extra:?}")),
        None => Ok(command),
    }
}

fn parse_number(option: &str, s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{option} {s:?} is not a decimal number"));
    }
    s.parse().map_err(|_| format!("{option} {s:?} is too large"))
}

/// Runs the command with the process's arguments, streams and
/// `AIRLOCK_FS_FD`; the exit status is 0, 1 (refused or failed) or 2 (usage).
pub fn main() -> ExitCode {
    let args: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(a) => a,
        Err(bad) => {
            eprint!("airlock-fs: argument {bad:?} is not UTF-8\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let command = match parse(&args) {
        Ok(c) => c,
        Err(why) => {
            eprint!("airlock-fs: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if command == Command::Help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if command == Command::Handshake {
        print!("{}", airlock_fsproto::Handshake::ours("airlock-fs").line());
        return ExitCode::SUCCESS;
    }
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let result = Client::from_env().and_then(|mut client| {
        execute(&mut client, &command, &mut stdin.lock(), &mut stdout.lock(), &mut stderr.lock())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// Runs one command on `client`.
pub fn execute(
    client: &mut Client,
    command: &Command,
    stdin: &mut impl Read,
    stdout: &mut impl Write,
    stderr: &mut impl Write,
) -> Result<(), FsError> {
    let out = |e: std::io::Error| FsError::io(format!("writing stdout: {e}"));
    match command {
        Command::Read { root, path, offset, max } => {
            let mut sink = std::io::BufWriter::with_capacity(1 << 16, &mut *stdout);
            let done = client.read_into(root, path, *offset, *max, &mut sink)?;
            sink.flush().map_err(out)?;
            drop(sink);
            if !done.complete {
                let (n, size) = (done.bytes, done.size);
                let _ = writeln!(stderr, "stopped at {n} of {size} bytes (--max)");
            }
            Ok(())
        }
        Command::Write { root, path } => {
            // All of stdin before the first call: in `airlock-fs read … |
            // airlock-fs write …` both commands share one socket, whose
            // calls must not interleave (ids strictly increase, answers
            // come in order), so the writer waits for the reader to finish.
            let mut data = Vec::new();
            stdin.read_to_end(&mut data).map_err(|e| FsError::io(format!("reading stdin: {e}")))?;
            client.write(root, path, &data)
        }
        Command::List { root, path, max } => {
            let listing = client.list(root, path, *max)?;
            let mut text = String::new();
            for (name, kind) in listing.names.iter().zip(&listing.kinds) {
                text.push_str(kind.as_str());
                text.push('\t');
                text.push_str(name);
                text.push('\n');
            }
            stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).map_err(out)?;
            // Best effort: the listing itself was delivered.
            if listing.skipped > 0 {
                let _ = writeln!(stderr, "skipped: {}", listing.skipped);
            }
            if listing.truncated {
                let _ = writeln!(stderr, "truncated: the directory has more than {max} names (--max, at most 256)");
            }
            Ok(())
        }
        Command::Help | Command::Handshake => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn operations_parse_with_their_defaults() {
        assert_eq!(
            parse(&args(&["read", "data", "a.txt"])),
            Ok(Command::Read { root: "data".into(), path: "a.txt".into(), offset: 0, max: None })
        );
        assert_eq!(
            parse(&args(&["read", "--max", "10", "data", "a.txt", "--offset", "7"])),
            Ok(Command::Read { root: "data".into(), path: "a.txt".into(), offset: 7, max: Some(10) })
        );
        assert_eq!(
            parse(&args(&["write", "out", "r.json"])),
            Ok(Command::Write { root: "out".into(), path: "r.json".into() })
        );
        assert_eq!(
            parse(&args(&["list", "data"])),
            Ok(Command::List { root: "data".into(), path: ".".into(), max: 256 })
        );
        assert_eq!(
            parse(&args(&["list", "data", "sub", "--max", "3"])),
            Ok(Command::List { root: "data".into(), path: "sub".into(), max: 3 })
        );
        assert_eq!(
            parse(&args(&["read", "data", "--", "-odd"])),
            Ok(Command::Read { root: "data".into(), path: "-odd".into(), offset: 0, max: None })
        );
        assert_eq!(parse(&args(&["--help"])), Ok(Command::Help));
    }

    #[test]
    fn anything_else_is_a_usage_error() {
        for bad in [
            &[][..],
            &["delete", "data", "a"],
            &["read", "data"],
            &["read", "data", "a", "b"],
            &["read", "data", "a", "--max"],
            &["read", "data", "a", "--max", "-1"],
            &["read", "data", "a", "--max", "+1"],
            &["read", "data", "a", "--max", "0x10"],
            &["read", "data", "a", "--max", "99999999999999999999"],
            &["read", "data", "a", "--max", "1", "--max", "2"],
            &["read", "data", "a", "--max=1"],
            &["write", "data", "a", "--max", "1"],
            &["write", "data", "a", "--offset", "1"],
            &["list", "data", ".", "--offset", "1"],
            &["read", "data", "a", "--offset", "1", "--offset", "2"],
            &["read", "data", "a", "--offset", "-1"],
            &["write", "data"],
            &["list", "data", "a", "b"],
            &["list", "-x", "data"],
            &["--help", "read"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} accepted");
        }
    }
}
