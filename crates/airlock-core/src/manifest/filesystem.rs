//! `[filesystem]`: the entries checked at parse, and the files of one call.
//!
//! An entry is a literal relative path or one whole `{arg}` reference to a
//! declared argument of type `path`. At most 32 reads and one create; no
//! entry twice; `max_file_bytes` (the output's bound) and
//! `max_input_file_bytes` (each input's) inside 1 B and the hard cap; what
//! the operator allows is checked when a call is prepared. After the values
//! are bound, the same rules hold for the resolved paths.

use super::bind::BoundArgs;
use super::model::{ArgDef, FilesystemDef};
use crate::limits::{hard, Limits};
use crate::path::{PathEntry, RelPath};
use crate::reason::{ReasonCode, Refusal};
use std::collections::BTreeMap;

/// The files one call declares, after its arguments are bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilesystemPlan {
    /// Inputs, in declaration order (absent optional arguments left out).
    pub reads: Vec<RelPath>,
    /// The one new output, if any.
    pub create: Option<RelPath>,
    /// The manifest's `max_file_bytes`, already inside the hard bounds;
    /// `None` means the configured default.
    pub max_file_bytes: Option<u64>,
    /// The manifest's `max_input_file_bytes`, already inside the hard
    /// bounds; `None` means the operator's input limit.
    pub max_input_file_bytes: Option<u64>,
    /// `create_parents = true`: missing parents of the output may be made.
    pub create_parents: bool,
}

/// `[filesystem]` after parse.
#[derive(Debug, Clone, Default)]
pub(crate) struct CompiledFilesystem {
    read: Vec<PathEntry>,
    create: Option<PathEntry>,
    max_file_bytes: Option<u64>,
    max_input_file_bytes: Option<u64>,
    create_parents: bool,
}

impl CompiledFilesystem {
    /// Whether the create entry is the whole `{name}` reference.
    pub(crate) fn creates_from_arg(&self, name: &str) -> bool {
        matches!(&self.create, Some(PathEntry::Arg(arg)) if arg == name)
    }
}

fn entry_key(entry: &PathEntry) -> String {
    match entry {
        PathEntry::Literal(p) => p.as_str().to_owned(),
        PathEntry::Arg(name) => format!("{{{name}}}"),
    }
}

fn check_counts(reads: usize, creates: usize, what: &str) -> Result<(), Refusal> {
    if reads > hard::MAX_INPUTS {
        return Err(Refusal::new(
            ReasonCode::LimitInputs,
            format!("{what} {reads} read entries, more than {}", hard::MAX_INPUTS),
        ));
    }
    if creates > hard::MAX_OUTPUTS {
        return Err(Refusal::new(
            ReasonCode::LimitOutputs,
            format!("{what} {creates} create entries; a call creates at most {} file", hard::MAX_OUTPUTS),
        ));
    }
    Ok(())
}

/// Structural checks of `[filesystem]`.
pub(crate) fn compile(
    def: Option<&FilesystemDef>,
    args: &BTreeMap<String, ArgDef>,
) -> Result<CompiledFilesystem, Refusal> {
    let Some(def) = def else {
        return Ok(CompiledFilesystem::default());
    };
    check_counts(def.read.len(), def.create.len(), "[filesystem] has")?;
    let parse = |kind: &str, raw: &str| -> Result<PathEntry, Refusal> {
        let entry = PathEntry::parse(raw)
            .map_err(|r| Refusal::new(r.code, format!("[filesystem] {kind} entry {raw:?}: {}", r.message)))?;
        if let PathEntry::Arg(name) = &entry {
            match args.get(name) {
                None => {
                    return Err(Refusal::new(
                        ReasonCode::ManifestInvalid,
                        format!("[filesystem] {kind} entry {raw:?} names no declared argument"),
                    ))
                }
                Some(a) if a.type_name != "path" => {
                    return Err(Refusal::new(
                        ReasonCode::ManifestInvalid,
                        format!(
                            "[filesystem] {kind} entry {raw:?} names argument `{name}` of type {:?}, not path",
                            a.type_name
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(entry)
    };
    let read = def.read.iter().map(|r| parse("read", r)).collect::<Result<Vec<_>, _>>()?;
    let create = def.create.first().map(|c| parse("create", c)).transpose()?;
    let mut seen: Vec<String> = Vec::new();
    for entry in read.iter().chain(create.as_ref()) {
        let key = entry_key(entry);
        if seen.contains(&key) {
            return Err(Refusal::new(ReasonCode::PathDuplicate, format!("[filesystem] declares {key} twice")));
        }
        seen.push(key);
    }
    Limits::check_manifest_bounds(def.max_file_bytes, def.max_input_file_bytes)
        .map_err(|r| Refusal::new(r.code, format!("[filesystem] {}", r.message)))?;
    Ok(CompiledFilesystem {
        read,
        create,
        max_file_bytes: def.max_file_bytes,
        max_input_file_bytes: def.max_input_file_bytes,
        create_parents: def.create_parents,
    })
}

impl CompiledFilesystem {
    /// Whether `[filesystem]` declares a create entry.
    pub(crate) fn has_create(&self) -> bool {
        self.create.is_some()
    }

    /// The create entry as it was written (`{out}` or a literal path).
    pub(crate) fn create_key(&self) -> Option<String> {
        self.create.as_ref().map(entry_key)
    }

    /// The resolved files of one call.
    pub(crate) fn plan(&self, args: &BoundArgs) -> Result<FilesystemPlan, Refusal> {
        let resolve = |entry: &PathEntry| -> Result<Option<RelPath>, Refusal> {
            match entry {
                PathEntry::Literal(p) => Ok(Some(p.clone())),
                PathEntry::Arg(name) => args
                    .get(name)
                    .map(|v| {
                        RelPath::parse(v).map_err(|r| Refusal::new(r.code, format!("argument `{name}`: {}", r.message)))
                    })
                    .transpose(),
            }
        };
        let mut reads = Vec::with_capacity(self.read.len());
        for entry in &self.read {
            if let Some(p) = resolve(entry)? {
                if reads.contains(&p) {
                    return Err(Refusal::new(ReasonCode::PathDuplicate, format!("{p} is declared as a read twice")));
                }
                reads.push(p);
            }
        }
        let create = self.create.as_ref().map(resolve).transpose()?.flatten();
        if let Some(c) = &create {
            if reads.contains(c) {
                return Err(Refusal::new(
                    ReasonCode::PathDuplicate,
                    format!("{c} is declared as both a read and the create"),
                ));
            }
        }
        check_counts(reads.len(), usize::from(create.is_some()), "the call has")?;
        Ok(FilesystemPlan {
            reads,
            create,
            max_file_bytes: self.max_file_bytes,
            max_input_file_bytes: self.max_input_file_bytes,
            create_parents: self.create_parents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::ReasonCode::*;

    fn args() -> BTreeMap<String, ArgDef> {
        toml::from_str(
            r#"
            input = { type = "path" }
            other = { type = "path" }
            out = { type = "path" }
            name = { type = "string" }
        "#,
        )
        .unwrap()
    }

    fn fs(text: &str) -> Result<CompiledFilesystem, Refusal> {
        let def: FilesystemDef = toml::from_str(text).unwrap();
        compile(Some(&def), &args())
    }

    fn code(text: &str) -> Option<ReasonCode> {
        fs(text).err().map(|r| r.code)
    }

    #[test]
    fn entries_checked_at_parse() {
        assert!(fs(r#"read = ["data/a.csv", "{input}"]
                      create = ["{out}"]
                      max_file_bytes = 1024"#)
        .is_ok());
        assert_eq!(code(r#"read = ["../x"]"#), Some(PathTraversal));
        assert_eq!(code(r#"read = ["/etc/passwd"]"#), Some(PathAbsolute));
        assert_eq!(code(r#"read = ["data/{input}"]"#), Some(ManifestPathTemplate));
        assert_eq!(code(r#"read = ["{missing}"]"#), Some(ManifestInvalid));
        assert_eq!(code(r#"read = ["{name}"]"#), Some(ManifestInvalid));
        assert_eq!(code(r#"read = ["a", "a"]"#), Some(PathDuplicate));
        assert_eq!(code(r#"read = ["{input}", "{input}"]"#), Some(PathDuplicate));
        assert_eq!(
            code(
                r#"read = ["{out}"]
                            create = ["{out}"]"#
            ),
            Some(PathDuplicate)
        );
        assert_eq!(code(r#"create = ["a", "b"]"#), Some(LimitOutputs));
        assert_eq!(code("max_file_bytes = 0"), Some(LimitFileBytes));
        // At parse only the hard cap (4 GiB) holds; the operator's limit is
        // checked when a call is prepared.
        assert_eq!(code("max_file_bytes = 4294967297"), Some(LimitFileBytes));
        assert!(fs("max_file_bytes = 4294967296").is_ok());
        assert!(fs("max_file_bytes = 1").is_ok());
        assert_eq!(code("max_input_file_bytes = 0"), Some(LimitInputFileBytes));
        assert_eq!(code("max_input_file_bytes = 4294967297"), Some(LimitInputFileBytes));
        assert!(fs("max_input_file_bytes = 4294967296\nmax_file_bytes = 1").is_ok());
    }

    #[test]
    fn thirty_two_reads_at_most() {
        let list = |n: usize| (0..n).map(|i| format!("\"d/f{i}\"")).collect::<Vec<_>>().join(",");
        assert!(fs(&format!("read = [{}]", list(32))).is_ok());
        assert_eq!(code(&format!("read = [{}]", list(33))), Some(LimitInputs));
        let msg = fs(&format!("read = [{}]", list(33))).unwrap_err().message;
        assert!(msg.contains("33"), "{msg}");
    }
}
