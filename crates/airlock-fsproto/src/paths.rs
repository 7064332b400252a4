//! The path rules of a broker operation: airlock's path grammar (UTF-8,
//! ≤ 4,096 bytes, ≤ 64 components of ≤ 255 bytes, no `..`, `.`, empty
//! components, control or reserved characters, trailing dots or spaces,
//! Windows device names or control directories), plus the reserved staging
//! prefix in any letter case, Unicode folds included (see
//! `airlock_core::path`). `.` alone names the root, for listing only.

use airlock_core::path::fold_key;
use airlock_core::RelPath;

use crate::{codes, STAGE_PREFIX};

/// A refused path: the reason code (a `path.*` code of the grammar or
/// [`codes::PATH_RESERVED`]) and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct PathError {
    /// Stable reason code.
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
}

/// Checks `path` and returns its components; `"."` gives no components
/// (the root itself) when `allow_dot`, and is refused otherwise.
pub fn check_path(path: &str, allow_dot: bool) -> Result<Vec<&str>, PathError> {
    if path == "." && allow_dot {
        return Ok(Vec::new());
    }
    RelPath::parse(path).map_err(|r| PathError { code: r.code.as_str(), message: r.message })?;
    let comps: Vec<&str> = path.split('/').collect();
    for c in &comps {
        check_reserved(c)?;
    }
    Ok(comps)
}

/// Checks one directory entry name by the same rules (for listings: a name
/// that fails is skipped, never shown).
pub fn check_component(name: &str) -> Result<(), PathError> {
    match check_path(name, false)?.len() {
        1 => Ok(()),
        _ => Err(PathError { code: codes::PROTOCOL, message: format!("{name:?} is not a single component") }),
    }
}

/// Checks a staging name chosen by airlock: one component that starts with
/// [`STAGE_PREFIX`] exactly, followed by 32 lower-case hex digits.
pub fn check_stage_name(name: &str) -> Result<(), PathError> {
    let ok = name
        .strip_prefix(STAGE_PREFIX)
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    if ok {
        Ok(())
    } else {
        Err(PathError { code: codes::PROTOCOL, message: format!("{name:?} is not a staging name") })
    }
}

/// The staging prefix in any letter case, compared by the grammar's
/// Unicode-aware [`fold_key`] (`.airlock-ſtage-` with a long s, or a
/// KELVIN SIGN for the `k`), since a case-insensitive file system may open
/// the staging entry by such a name.
fn check_reserved(component: &str) -> Result<(), PathError> {
    let reserved = fold_key(component).starts_with(STAGE_PREFIX);
    if reserved {
        return Err(PathError {
            code: codes::PATH_RESERVED,
            message: format!("the component {component:?} uses the reserved staging prefix {STAGE_PREFIX}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_paths() {
        assert_eq!(check_path("a/b.txt", false).unwrap(), ["a", "b.txt"]);
        assert_eq!(check_path(".", true).unwrap(), Vec::<&str>::new());
        assert_eq!(check_path(".airlock-stag", false).unwrap(), [".airlock-stag"]);
        assert_eq!(check_path("\u{017F}tage.txt", false).unwrap(), ["\u{017F}tage.txt"]);
        check_path(&["a"; 64].join("/"), false).unwrap();
        check_path(&"x".repeat(255), false).unwrap();
    }

    #[test]
    fn seed_003_refusals() {
        let cases: &[(&str, &str)] = &[
            (".", "path.dot_component"),
            ("", "path.empty"),
            ("/etc/passwd", "path.absolute"),
            ("../x", "path.traversal"),
            ("a/../x", "path.traversal"),
            ("a//b", "path.empty_component"),
            ("./x", "path.dot_component"),
            ("a\\b", "path.backslash"),
            ("C:x", "path.mount_delimiter"),
            ("a\0b", "path.control_char"),
            ("a\rb", "path.control_char"),
            ("a\nb", "path.control_char"),
            ("a\u{7f}b", "path.control_char"),
            ("a<b", "path.reserved_char"),
            ("a>b", "path.reserved_char"),
            ("a\"b", "path.reserved_char"),
            ("a|b", "path.reserved_char"),
            ("a?b", "path.reserved_char"),
            ("a*b", "path.reserved_char"),
            ("name.", "path.trailing_dot_or_space"),
            ("name ", "path.trailing_dot_or_space"),
            ("CON", "path.device_name"),
            ("dir/nul.txt", "path.device_name"),
            ("COM1", "path.device_name"),
            ("LPT1.log", "path.device_name"),
            (".git/config", "path.control_dir"),
            ("x/.AIRLOCK", "path.control_dir"),
            (".airlock-stage-0123", codes::PATH_RESERVED),
            ("d/.AIRLOCK-Stage-x", codes::PATH_RESERVED),
            (".airloc\u{212A}-stage-x", codes::PATH_RESERVED), // KELVIN SIGN
            (".airlock-\u{017F}tage-x", codes::PATH_RESERVED), // long s
            (".airlock-\u{FB06}age-x", codes::PATH_RESERVED),  // ligature st
            (".a\u{0130}rlock-stage-x", codes::PATH_RESERVED), // dotted İ
            ("d/.a\u{0131}rlock-stage-x", codes::PATH_RESERVED), // dotless ı
            ("\u{200C}.airlock-stage-x", codes::PATH_RESERVED), // ignorable on HFS+
            (".airloc\u{212A}/x", "path.control_dir"),
            ("x/.g\u{0131}t", "path.control_dir"),
        ];
        for (path, code) in cases {
            let err = check_path(path, false).unwrap_err();
            assert_eq!(err.code, *code, "{path:?}: {err}");
        }
        assert_eq!(check_path(&["a"; 65].join("/"), false).unwrap_err().code, "path.too_deep");
        assert_eq!(check_path(&"x".repeat(256), false).unwrap_err().code, "path.component_too_long");
        let long = std::iter::repeat_n("y".repeat(200), 21).collect::<Vec<_>>().join("/");
        assert_eq!(check_path(&long, false).unwrap_err().code, "path.too_long");
    }

    #[test]
    fn stage_names() {
        check_stage_name(&format!("{STAGE_PREFIX}{}", "0a".repeat(16))).unwrap();
        for bad in [".airlock-stage-", ".airlock-stage-XYZ", "x", &format!("{STAGE_PREFIX}{}/x", "0".repeat(32))] {
            assert!(check_stage_name(bad).is_err(), "{bad:?}");
        }
    }
}
