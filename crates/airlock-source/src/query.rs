//! A source query's arguments: strings in, validated and bounded values out.
//!
//! Arguments arrive as strings (the ToolClad model); whatever a manifest
//! declared, the broker checks them again against its own hard limits.

use airlock_core::source::{limits, SourceOp};
use airlock_core::{ReasonCode, Refusal, RelPath};
use std::collections::BTreeMap;

/// One validated query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The operation.
    pub op: SourceOp,
    /// The query path relative to the working directory; `None` is the
    /// working directory itself.
    pub path: Option<RelPath>,
    /// `read_file`: first byte.
    pub offset: u64,
    /// `read_file`: most bytes returned.
    pub limit: u64,
    /// `grep_files`: the literal needle.
    pub needle: Vec<u8>,
}

fn out_of_range(name: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::ArgOutOfRange, format!("argument `{name}` {why}"))
}

/// A decimal count: digits only (no sign, no spaces), within `min..=max`.
fn number(name: &str, value: &str, min: u64, max: u64) -> Result<u64, Refusal> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) || value.len() > 20 {
        return Err(Refusal::new(
            ReasonCode::ArgInvalid,
            format!("argument `{name}` {value:?} is not a decimal number of bytes"),
        ));
    }
    let n: u64 = value.parse().map_err(|_| out_of_range(name, format_args!("{value} is too large")))?;
    if n < min || n > max {
        return Err(out_of_range(name, format_args!("is {n}, outside {min} … {max}")));
    }
    Ok(n)
}

impl Query {
    /// Validates `args` (name → string) for `op`. Refused: a Git operation
    /// (`manifest.unsupported`), an argument the operation does not take
    /// (`arg.unknown`), a missing required one (`arg.missing`), a path
    /// outside the grammar (its path code), numbers that are not decimal
    /// (`arg.invalid`) or out of bounds (`arg.out_of_range`), a needle
    /// outside 1 … 1,024 bytes (`arg.out_of_range`).
    pub fn from_args(op: SourceOp, args: &BTreeMap<String, String>) -> Result<Query, Refusal> {
        if op.is_git() {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("{op} needs the Git engine, which this build does not include"),
            ));
        }
        let params = op.parameters();
        for name in args.keys() {
            if !params.iter().any(|(p, _)| p == name) {
                return Err(Refusal::new(ReasonCode::ArgUnknown, format!("{op} takes no argument `{name}`")));
            }
        }
        for (name, required) in params {
            if *required && !args.contains_key(*name) {
                return Err(Refusal::new(ReasonCode::ArgMissing, format!("{op} needs the argument `{name}`")));
            }
        }
        let path = match args.get("path") {
            None => None,
            Some(p) => {
                Some(RelPath::parse(p).map_err(|r| Refusal::new(r.code, format!("argument `path`: {}", r.message)))?)
            }
        };
        let offset = match args.get("offset") {
            None => 0,
            Some(v) => number("offset", v, 0, limits::MAX_OFFSET)?,
        };
        let limit = match args.get("limit") {
            None => limits::DEFAULT_READ_BYTES,
            Some(v) => number("limit", v, 1, limits::MAX_READ_BYTES)?,
        };
        let needle = match args.get("pattern") {
            None => Vec::new(),
            Some(p) => {
                let n = p.len();
                if !(limits::MIN_NEEDLE_BYTES..=limits::MAX_NEEDLE_BYTES).contains(&n) {
                    return Err(out_of_range(
                        "pattern",
                        format_args!(
                            "is {n} bytes; a literal needle is {} … {} bytes",
                            limits::MIN_NEEDLE_BYTES,
                            limits::MAX_NEEDLE_BYTES
                        ),
                    ));
                }
                p.as_bytes().to_vec()
            }
        };
        Ok(Query { op, path, offset, limit, needle })
    }

    /// The query path as written in results (`""` for the working directory).
    pub fn path_str(&self) -> &str {
        self.path.as_ref().map_or("", RelPath::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn code(op: SourceOp, pairs: &[(&str, &str)]) -> ReasonCode {
        Query::from_args(op, &args(pairs)).unwrap_err().code
    }

    #[test]
    fn read_bounds_at_the_edge_and_one_past() {
        let q = Query::from_args(SourceOp::ReadFile, &args(&[("path", "a")])).unwrap();
        assert_eq!((q.offset, q.limit), (0, 32_768));
        let q =
            Query::from_args(SourceOp::ReadFile, &args(&[("path", "a"), ("limit", "65536"), ("offset", "10000000")]))
                .unwrap();
        assert_eq!((q.offset, q.limit), (10_000_000, 65_536));
        assert_eq!(code(SourceOp::ReadFile, &[("path", "a"), ("limit", "65537")]), ReasonCode::ArgOutOfRange);
        assert_eq!(code(SourceOp::ReadFile, &[("path", "a"), ("limit", "0")]), ReasonCode::ArgOutOfRange);
        assert_eq!(code(SourceOp::ReadFile, &[("path", "a"), ("offset", "10000001")]), ReasonCode::ArgOutOfRange);
        assert_eq!(code(SourceOp::ReadFile, &[("path", "a"), ("offset", "-1")]), ReasonCode::ArgInvalid);
        assert_eq!(code(SourceOp::ReadFile, &[("path", "a"), ("offset", " 1")]), ReasonCode::ArgInvalid);
        assert_eq!(
            code(SourceOp::ReadFile, &[("path", "a"), ("offset", "99999999999999999999")]),
            ReasonCode::ArgOutOfRange
        );
        assert_eq!(code(SourceOp::ReadFile, &[]), ReasonCode::ArgMissing);
    }

    #[test]
    fn needle_bounds_and_paths() {
        let ok = "x".repeat(1024);
        assert_eq!(Query::from_args(SourceOp::GrepFiles, &args(&[("pattern", &ok)])).unwrap().needle.len(), 1024);
        let long = "x".repeat(1025);
        assert_eq!(code(SourceOp::GrepFiles, &[("pattern", &long)]), ReasonCode::ArgOutOfRange);
        assert_eq!(code(SourceOp::GrepFiles, &[("pattern", "")]), ReasonCode::ArgOutOfRange);
        assert_eq!(code(SourceOp::GrepFiles, &[("pattern", "a"), ("path", "../x")]), ReasonCode::PathTraversal);
        assert_eq!(code(SourceOp::ListFiles, &[("path", "a/.git")]), ReasonCode::PathControlDir);
        assert_eq!(code(SourceOp::ListFiles, &[("path", "/etc")]), ReasonCode::PathAbsolute);
        assert_eq!(code(SourceOp::ListFiles, &[("depth", "3")]), ReasonCode::ArgUnknown);
        assert_eq!(code(SourceOp::GitLog, &[]), ReasonCode::ManifestUnsupported);
    }
}
