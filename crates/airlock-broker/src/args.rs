//! The broker's command line, parsed strictly: `--rights r,wl,l` (one
//! rights string per root, in descriptor order from 3) and an optional
//! `--resolver auto|openat2|emulated`; each at most once, nothing else.

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
}

/// A command line the broker does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "usage: airlock-broker --rights RIGHTS[,RIGHTS...] [--resolver auto|openat2|emulated]: {}", self.0)
    }
}

impl std::error::Error for UsageError {}

impl Args {
    /// Parses the arguments after `argv[0]`.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, UsageError> {
        let mut rights: Option<Vec<Rights>> = None;
        let mut resolver: Option<ResolverChoice> = None;
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
                "--rights" | "--resolver" => return Err(UsageError(format!("{flag} given twice"))),
                other => return Err(UsageError(format!("unexpected argument {other:?}"))),
            }
        }
        let rights = rights.ok_or_else(|| UsageError("--rights is required".into()))?;
        Ok(Args { rights, resolver: resolver.unwrap_or(ResolverChoice::Auto) })
    }
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
        let many = vec!["r"; MAX_ROOTS].join(",");
        assert_eq!(parse(&["--rights", &many]).unwrap().rights.len(), MAX_ROOTS);
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
            &["--rights=r"],
            &["--rights", &too_many],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
