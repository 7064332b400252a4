//! The permission bits of what airlock publishes: output files (the exec
//! shape's one output and every broker write) and the parent directories a
//! `create_parents` call makes.
//!
//! By default a published file gets `0666 & ~umask` and a made directory
//! `0777 & ~umask`, the caller's umask read once when the runtime starts,
//! as any other program the caller runs would create them. `[filesystem]
//! output_mode = "0640"` and `output_dir_mode = "0750"` in `airlock.toml`
//! replace that. A configured mode is octal permission bits only:
//!
//! - no setuid, setgid or sticky bit, and no execute bit on a file: a
//!   published file is a tool's data, and a mode must not turn a tool's
//!   output into a program someone runs by mistake (a tool that produces
//!   programs leaves the chmod to a person);
//! - the owner keeps read and write (a file) or read, write and search (a
//!   directory): airlock must be able to hash what it published and to
//!   create the next component inside a directory it made.
//!
//! The umask is applied to the default modes only; a configured mode is
//! what the operator asked for and is set exactly (with `fchmod`, so the
//! umask cannot narrow it).

use crate::reason::{ReasonCode, Refusal};

/// `0666`: what a file gets before the umask.
pub const DEFAULT_FILE_MODE: u32 = 0o666;
/// `0777`: what a directory gets before the umask.
pub const DEFAULT_DIR_MODE: u32 = 0o777;

/// The configured modes (`[filesystem] output_mode`, `output_dir_mode`);
/// `None` is the umask default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputModes {
    /// Published files.
    pub file: Option<u32>,
    /// Directories a `create_parents` call makes.
    pub dir: Option<u32>,
}

/// The modes of one process: what files and directories get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveModes {
    /// Published files.
    pub file: u32,
    /// Made directories.
    pub dir: u32,
}

impl OutputModes {
    /// Parses the two settings (octal strings such as `"0640"`), refusing
    /// anything but the allowed permission bits (`config.invalid`).
    pub fn parse(file: Option<&str>, dir: Option<&str>) -> Result<OutputModes, Refusal> {
        let file = file.map(|s| parse_mode("output_mode", s, 0o666, 0o600)).transpose()?;
        let dir = dir.map(|s| parse_mode("output_dir_mode", s, 0o777, 0o700)).transpose()?;
        Ok(OutputModes { file, dir })
    }

    /// The modes for a process whose umask is `umask`.
    pub fn effective(&self, umask: u32) -> EffectiveModes {
        EffectiveModes {
            file: self.file.unwrap_or(DEFAULT_FILE_MODE & !umask),
            dir: self.dir.unwrap_or(DEFAULT_DIR_MODE & !umask),
        }
    }
}

fn parse_mode(key: &str, text: &str, allowed: u32, owner: u32) -> Result<u32, Refusal> {
    let bad = |why: String| Refusal::new(ReasonCode::ConfigInvalid, format!("[filesystem] {key} = {text:?}: {why}"));
    let digits = text.strip_prefix("0o").unwrap_or(text);
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad("write the mode as up to four octal digits, e.g. \"0640\"".to_owned()));
    }
    let mode = u32::from_str_radix(digits, 8).map_err(|e| bad(e.to_string()))?;
    if mode & !allowed != 0 {
        let what = if allowed == 0o666 {
            "only read and write bits are allowed (no execute, setuid, setgid or sticky bit)"
        } else {
            "only permission bits are allowed (no setuid, setgid or sticky bit)"
        };
        return Err(bad(format!("{what}; allowed at most {allowed:04o}")));
    }
    if mode & owner != owner {
        return Err(bad(format!("the owner must keep {owner:04o}, so airlock can use what it made")));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn umask_defaults_and_configured_modes() {
        let none = OutputModes::default();
        assert_eq!(none.effective(0o022), EffectiveModes { file: 0o644, dir: 0o755 });
        assert_eq!(none.effective(0o077), EffectiveModes { file: 0o600, dir: 0o700 });
        let set = OutputModes::parse(Some("0640"), Some("750")).unwrap();
        assert_eq!(set.effective(0o077), EffectiveModes { file: 0o640, dir: 0o750 });
        assert_eq!(OutputModes::parse(Some("0o666"), None).unwrap().file, Some(0o666));
    }

    #[test]
    fn special_and_exec_bits_refused() {
        for (file, dir) in [
            (Some("0755"), None),
            (Some("4644"), None),
            (Some("0400"), None),
            (Some("644x"), None),
            (Some(""), None),
            (Some("01644"), None),
            (None, Some("1777")),
            (None, Some("2750")),
            (None, Some("0500")),
        ] {
            let r = OutputModes::parse(file, dir).unwrap_err();
            assert_eq!(r.code, ReasonCode::ConfigInvalid, "{file:?} {dir:?}");
        }
    }
}
