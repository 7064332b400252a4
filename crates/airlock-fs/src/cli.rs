//! The `airlock-fs` command: one operation per run, for shell scripts.
//!
//! ```text
//! airlock-fs read ROOT PATH [--max N]     the bytes to stdout (default max 65536)
//! airlock-fs write ROOT PATH              the bytes from stdin (up to 65,537 are sent)
//! airlock-fs list ROOT [PATH] [--max N]   one name a line (default PATH ".", max 256)
//! ```
//!
//! Exit status 0 on success; 1 when the operation was refused or failed
//! (`CODE: message` on stderr); 2 on a usage error. A listing that skipped
//! entries or was cut short says so on stderr (`skipped: N`, `truncated`).
//! `--` ends the options, for a path that starts with `-`.

use std::io::{Read, Write};
use std::process::ExitCode;

use airlock_fsproto::{MAX_IO_BYTES, MAX_LIST_NAMES};

use crate::client::Client;
use crate::error::FsError;

const USAGE: &str = "usage: airlock-fs read ROOT PATH [--max N]
       airlock-fs write ROOT PATH          (data on stdin)
       airlock-fs list ROOT [PATH] [--max N]
";

/// One parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `read ROOT PATH [--max N]`.
    Read {
        /// Root name.
        root: String,
        /// Path in the root.
        path: String,
        /// Most bytes wanted.
        max: u64,
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
}

/// Parses the arguments after the program name, strictly: a known
/// operation, exactly its positional arguments, `--max N` (decimal digits)
/// at most once and only for `read` and `list`, nothing else.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let (op, rest) = match args.split_first() {
        None => return Err("no operation given".into()),
        Some((op, rest)) => (op.as_str(), rest),
    };
    if matches!(op, "--help" | "-h") && rest.is_empty() {
        return Ok(Command::Help);
    }
    let (mut positional, mut max, mut options_done) = (Vec::new(), None, false);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if options_done || !a.starts_with('-') || a == "-" {
            positional.push(a.clone());
        } else if a == "--" {
            options_done = true;
        } else if a == "--max" && op != "write" {
            let n = it.next().ok_or("--max needs a number")?;
            if max.replace(parse_number(n)?).is_some() {
                return Err("--max given twice".into());
            }
        } else {
            return Err(format!("unknown option {a:?} for {op}"));
        }
    }
    let mut positional = positional.into_iter();
    let mut take = |what: &str| positional.next().ok_or(format!("{op} needs {what}"));
    let command = match op {
        "read" => Command::Read { root: take("ROOT")?, path: take("PATH")?, max: max.unwrap_or(MAX_IO_BYTES) },
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

fn parse_number(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("--max {s:?} is not a decimal number"));
    }
    s.parse().map_err(|_| format!("--max {s:?} is too large"))
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
        Command::Read { root, path, max } => {
            let bytes = client.read(root, path, *max)?;
            stdout.write_all(&bytes).and_then(|()| stdout.flush()).map_err(out)
        }
        Command::Write { root, path } => {
            // One byte past the limit, so airlock sees (and refuses) an
            // oversized write rather than a silently cut one.
            let mut data = Vec::new();
            stdin
                .take(MAX_IO_BYTES + 1)
                .read_to_end(&mut data)
                .map_err(|e| FsError::io(format!("reading stdin: {e}")))?;
            client.write(root, path, &data)
        }
        Command::List { root, path, max } => {
            let listing = client.list(root, path, *max)?;
            let mut text = String::new();
            for name in &listing.names {
                text.push_str(name);
                text.push('\n');
            }
            stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).map_err(out)?;
            // Best effort: the listing itself was delivered.
            if listing.skipped > 0 {
                let _ = writeln!(stderr, "skipped: {}", listing.skipped);
            }
            if listing.truncated {
                let _ = writeln!(stderr, "truncated");
            }
            Ok(())
        }
        Command::Help => Ok(()),
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
            Ok(Command::Read { root: "data".into(), path: "a.txt".into(), max: 65536 })
        );
        assert_eq!(
            parse(&args(&["read", "--max", "10", "data", "a.txt"])),
            Ok(Command::Read { root: "data".into(), path: "a.txt".into(), max: 10 })
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
            Ok(Command::Read { root: "data".into(), path: "-odd".into(), max: 65536 })
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
            &["write", "data"],
            &["list", "data", "a", "b"],
            &["list", "-x", "data"],
            &["--help", "read"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} accepted");
        }
    }
}
