//! The broker's command line, parsed strictly: `--rights r,wl,l` (one
//! rights string per root, in descriptor order from 3), an optional
//! `--resolver auto|openat2|emulated`, an optional `--mode 0644` (the
//! permission bits of the files it writes, read and write bits only;
//! default `0600`) and an optional `--max-file-bytes N` (decimal, 1 … 16
//! GiB; default 64 KiB); each at most once, nothing else.

use std::ffi::OsString;

use airlock_core::ResolverChoice;
use airlock_fsproto::{Rights, MAX_ROOTS};

/// What the broker was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The rights of root `i` (descriptor `3 + i`).
    pub rights: Vec<Rights>,
    /// The path resolver (default `auto`).
    pub resolver: ResolverChoice,
    /// Permission bits of written files (`--mode`, octal; `None`: `0600`
    /// less the umask, as before the option existed).
    pub mode: Option<u32>,
    /// The largest file the broker may write.
    pub max_file_bytes: u64,
}

/// The most `--max-file-bytes` may say: the hard cap of the write budget.
pub const MAX_FILE_BYTES_CAP: u64 = airlock_core::broker::BrokerBudgets::HARD_CAPS.write_bytes;

/// A command line the broker does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "usage: airlock-broker --rights RIGHTS[,RIGHTS...] [--resolver auto|openat2|emulated] [--mode OCTAL] \
             [--max-file-bytes N]: {}",
            self.0
        )
    }
}

impl std::error::Error for UsageError {}

impl Args {
    /// Parses the arguments after `argv[0]`.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, UsageError> {
        let mut rights: Option<Vec<Rights>> = None;
        let mut resolver: Option<ResolverChoice> = None;
        let mut mode: Option<u32> = None;
        let mut max_file_bytes: Option<u64> = None;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let flag = flag.into_string().map_err(|f| UsageError(format!("{f:?} is not UTF-8")))?;
            let mut value = || {
                args.next()
                    .ok_or_else(|| UsageError(format!("{flag} needs a value")))?
                    .into_string()
                    .map_err(|v| UsageError(format!("{flag} {v:?} is not UTF-8")))
            };
            match flag.as_str() {
                "--rights" if rights.is_none() => rights = Some(parse_rights(&value()?)?),
                "--resolver" if resolver.is_none() => {
                    let v = value()?;
                    resolver =
                        Some(ResolverChoice::parse(&v).ok_or_else(|| UsageError(format!("unknown resolver {v:?}")))?);
                }
                "--max-file-bytes" if max_file_bytes.is_none() => {
                    let v = value()?;
                    let n = v
                        .parse::<u64>()
                        .ok()
                        .filter(|n| (1..=MAX_FILE_BYTES_CAP).contains(n) && v.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or_else(|| UsageError(format!("--max-file-bytes {v:?} is not 1 … {MAX_FILE_BYTES_CAP}")))?;
                    max_file_bytes = Some(n);
                }
                "--mode" if mode.is_none() => mode = Some(parse_mode(&value()?)?),
                "--rights" | "--resolver" | "--mode" | "--max-file-bytes" => {
                    return Err(UsageError(format!("{flag} given twice")))
                }
                other => return Err(UsageError(format!("unexpected argument {other:?}"))),
            }
        }
        let rights = rights.ok_or_else(|| UsageError("--rights is required".into()))?;
        Ok(Args {
            rights,
            resolver: resolver.unwrap_or(ResolverChoice::Auto),
            mode,
            max_file_bytes: max_file_bytes.unwrap_or(airlock_sandbox::DEFAULT_MAX_FILE_BYTES),
        })
    }
}

/// The file mode rules of `[filesystem] output_mode` (read and write bits
/// only, the owner's `rw` kept), which airlock checked before passing it.
fn parse_mode(text: &str) -> Result<u32, UsageError> {
    let modes = airlock_core::modes::OutputModes::parse(Some(text), None)
        .map_err(|r| UsageError(format!("--mode: {}", r.message)))?;
    modes.file.ok_or_else(|| UsageError("--mode needs a value".into()))
}

fn parse_rights(list: &str) -> Result<Vec<Rights>, UsageError> {
    let rights = list
        .split(',')
        .map(|r| Rights::parse(r).map_err(|e| UsageError(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if rights.len() > MAX_ROOTS {
        return Err(UsageError(format!("{} roots, more than {MAX_ROOTS}", rights.len())));
    }
    Ok(rights)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, UsageError> {
        Args::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn rights_and_resolver() {
        let a = parse(&["--rights", "r,wl,l"]).unwrap();
        assert_eq!(a.rights.iter().map(|r| r.to_string()).collect::<Vec<_>>(), ["r", "wl", "l"]);
        assert_eq!(a.resolver, ResolverChoice::Auto);
        let a = parse(&["--resolver", "emulated", "--rights", "rwl"]).unwrap();
        assert_eq!(a.resolver, ResolverChoice::Emulated);
        assert_eq!(a.rights.len(), 1);
        assert_eq!(a.max_file_bytes, 65536);
        let a = parse(&["--rights", "w", "--max-file-bytes", "300000000"]).unwrap();
        assert_eq!(a.max_file_bytes, 300_000_000);
        let many = vec!["r"; MAX_ROOTS].join(",");
        assert_eq!(parse(&["--rights", &many]).unwrap().rights.len(), MAX_ROOTS);
        assert_eq!(parse(&["--rights", "w"]).unwrap().mode, None);
        assert_eq!(parse(&["--rights", "w", "--mode", "0640"]).unwrap().mode, Some(0o640));
    }

    #[test]
    fn everything_else_is_refused() {
        let too_many = vec!["r"; MAX_ROOTS + 1].join(",");
        for bad in [
            &[][..],
            &["--rights"],
            &["--rights", ""],
            &["--rights", "r,"],
            &["--rights", "r,,w"],
            &["--rights", "x"],
            &["--rights", "rr"],
            &["--rights", "r", "--rights", "w"],
            &["--rights", "r", "extra"],
            &["--rights", "r", "--resolver", "fast"],
            &["--rights", "r", "--resolver", "auto", "--resolver", "auto"],
            &["--rights", "r", "--max-file-bytes", "0"],
            &["--rights", "r", "--max-file-bytes", "+5"],
            &["--rights", "r", "--max-file-bytes", "17179869185"],
            &["--rights", "r", "--max-file-bytes", "1", "--max-file-bytes", "1"],
            &["--rights", "r", "--mode", "0755"],
            &["--rights", "r", "--mode", "0444"],
            &["--rights", "r", "--mode", "4644"],
            &["--rights", "r", "--mode", "64x"],
            &["--rights", "r", "--mode", "0644", "--mode", "0644"],
            &["--rights=r"],
            &["--rights", &too_many],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
