//! Root names and rights.

use std::fmt;

/// Why a root name or rights string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RightsError(pub String);

/// Checks a root name: `[a-z][a-z0-9_-]{0,63}`.
pub fn check_root_name(name: &str) -> Result<(), RightsError> {
    let mut bytes = name.bytes();
    let ok = matches!(bytes.next(), Some(b'a'..=b'z'))
        && name.len() <= 64
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RightsError(format!(
            "root name {name:?} must start with a lower-case letter and use only a-z, 0-9, `_` and `-`, at most 64 bytes"
        )))
    }
}

/// What a root grants. The three rights are independent: `w` does not
/// imply `r`, `l` does not imply `r`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rights {
    /// `r`: read regular files.
    pub read: bool,
    /// `w`: create or replace regular files.
    pub write: bool,
    /// `l`: list directories.
    pub list: bool,
}

impl Rights {
    /// Parses a non-empty set of the letters `r`, `w`, `l`, each at most
    /// once, in any order.
    pub fn parse(s: &str) -> Result<Rights, RightsError> {
        let mut rights = Rights::default();
        if s.is_empty() {
            return Err(RightsError("rights are empty; use r, w and/or l".into()));
        }
        for c in s.chars() {
            let slot = match c {
                'r' => &mut rights.read,
                'w' => &mut rights.write,
                'l' => &mut rights.list,
                _ => return Err(RightsError(format!("rights {s:?}: {c:?} is not r, w or l"))),
            };
            if *slot {
                return Err(RightsError(format!("rights {s:?} name {c:?} twice")));
            }
            *slot = true;
        }
        Ok(rights)
    }
}

impl fmt::Display for Rights {
    /// Canonical order: `r`, `w`, `l`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (on, c) in [(self.read, "r"), (self.write, "w"), (self.list, "l")] {
            if on {
                f.write_str(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_names() {
        for ok in ["a", "data", "out_2", "x-y", &"a".repeat(64)] {
            check_root_name(ok).unwrap();
        }
        for bad in ["", "A", "1a", "_a", "-a", "a.b", "a/b", "é", &"a".repeat(65), "a b"] {
            assert!(check_root_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rights_are_independent_letters() {
        assert_eq!(Rights::parse("wl").unwrap(), Rights { read: false, write: true, list: true });
        assert_eq!(Rights::parse("lrw").unwrap().to_string(), "rwl");
        for bad in ["", "rr", "x", "R", "r w"] {
            assert!(Rights::parse(bad).is_err(), "{bad:?}");
        }
    }
}
