//! Versions of what airlock stores and reads back (prepared records and
//! their descriptors, staging reservations, approvals). Each kind names its
//! version in one field; a reader checks that field *before* it parses the
//! rest, so a record written by another airlock is refused with
//! `record.version` (saying which version it found and which it reads),
//! never misread or reported as damage.

use crate::{ReasonCode, Refusal};
use serde_json::Value;

/// How a missing version field is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The field is required: a record without it is refused.
    Refuse,
    /// Records from before the field existed: they are this version.
    Is(u64),
}

/// Checks that `bytes` (a JSON object, the stored form of a `what`) has
/// the number `known` at `pointer` (a JSON pointer such as `/format`).
/// Bytes that are not a JSON object are left to the reader's own parser
/// (which reports damage); a version that is not `known` is
/// `record.version`.
pub fn check(what: &str, bytes: &[u8], pointer: &str, known: u64, missing: Missing) -> Result<(), Refusal> {
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    if !value.is_object() {
        return Ok(());
    }
    let found = match (value.pointer(pointer), missing) {
        (None, Missing::Is(v)) => return expect(what, pointer, &Value::from(v), known),
        (None, Missing::Refuse) => {
            return Err(Refusal::new(
                ReasonCode::RecordVersion,
                format!("the {what} has no version ({pointer}); this airlock reads version {known} only"),
            ))
        }
        (Some(found), _) => found,
    };
    expect(what, pointer, found, known)
}

fn expect(what: &str, pointer: &str, found: &Value, known: u64) -> Result<(), Refusal> {
    if found.as_u64() == Some(known) {
        return Ok(());
    }
    Err(Refusal::new(
        ReasonCode::RecordVersion,
        format!(
            "the {what} is version {found} ({pointer}); this airlock reads version {known} only: it was written by \
             another airlock — finish or discard it with that version, or remove it"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_known_version_passes() {
        let ok = br#"{"format":2,"descriptor":{"version":2}}"#;
        assert!(check("record", ok, "/format", 2, Missing::Refuse).is_ok());
        assert!(check("record", ok, "/descriptor/version", 2, Missing::Refuse).is_ok());
        for (bytes, pointer) in [
            (&br#"{"format":3}"#[..], "/format"),
            (br#"{"format":"2"}"#, "/format"),
            (br#"{"format":1}"#, "/format"),
            (br#"{}"#, "/format"),
            (br#"{"descriptor":{"version":99}}"#, "/descriptor/version"),
        ] {
            let e = check("record", bytes, pointer, 2, Missing::Refuse).unwrap_err();
            assert_eq!(e.code, ReasonCode::RecordVersion, "{}", String::from_utf8_lossy(bytes));
        }
        assert!(check("reservation", b"{}", "/version", 1, Missing::Is(1)).is_ok());
        assert!(check("reservation", b"{}", "/version", 2, Missing::Is(1)).is_err());
        // Damage is left to the reader's parser.
        assert!(check("record", b"not json", "/format", 2, Missing::Refuse).is_ok());
    }
}
