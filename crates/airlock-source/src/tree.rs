//! The tree a query sees: the configured ceilings laid over the working
//! directory, the most specific ceiling winning at every path.
//!
//! A ceiling mounted beneath another hides the parent's content at and
//! below its virtual root, in resolution and in enumeration alike; a
//! virtual directory that holds ceilings but is itself covered by none is
//! listed with only those ceilings in it. A path covered by no ceiling, and
//! holding none, is `grant.no_ceiling`; a ceiling that cannot be opened
//! (missing, a symlink, protected) fails the whole query (`config.ceiling`),
//! never an empty success.

use crate::outcome::{reason, Skip, Tally};
use airlock_core::source::limits;
use airlock_core::{ReasonCode, Refusal, RelPath};
use airlock_hostfs::{Dir, Entry, EntryKind, Resolver};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The configured ceilings, as the broker reaches them.
pub trait Ceilings {
    /// The virtual root of every ceiling (`None`: the working directory).
    fn roots(&self) -> Vec<Option<RelPath>>;
    /// Opens the ceiling whose virtual root is `root`; a ceiling that is
    /// missing or refused is an error.
    fn open(&self, root: Option<&RelPath>) -> Result<Dir, Refusal>;
}

/// Where a path leads in the tree.
pub(crate) enum Place {
    /// Beneath (or at) a ceiling: its handle and the rest of the path.
    Covered(Dir, Option<RelPath>),
    /// Covered by no ceiling but holding some: a virtual directory.
    Virtual,
}

/// `child` below `parent` (`None` is the working directory).
fn below(child: &RelPath, parent: Option<&RelPath>) -> Option<Option<RelPath>> {
    match parent {
        None => Some(Some(child.clone())),
        Some(p) => child.strip_prefix(p),
    }
}

/// The layered tree of one query.
pub(crate) struct Tree<'a> {
    ceilings: &'a dyn Ceilings,
    roots: Vec<Option<RelPath>>,
    pub(crate) resolver: &'a Resolver,
}

impl<'a> Tree<'a> {
    pub(crate) fn new(ceilings: &'a dyn Ceilings, resolver: &'a Resolver) -> Tree<'a> {
        Tree { roots: ceilings.roots(), ceilings, resolver }
    }

    /// The most specific ceiling covering `path`, and the rest below it.
    fn covering(&self, path: Option<&RelPath>) -> Option<(Option<&RelPath>, Option<RelPath>)> {
        self.roots
            .iter()
            .filter_map(|root| match (root, path) {
                (None, p) => Some((None, p.cloned())),
                (Some(_), None) => None,
                (Some(r), Some(p)) => p.strip_prefix(r).map(|rest| (Some(r), rest)),
            })
            .max_by_key(|(root, _)| root.map_or(0, RelPath::depth))
    }

    /// Ceilings strictly below `path`, by the name of the first component
    /// below it; `true` when that child is itself a ceiling's root.
    fn mounts_below(&self, path: Option<&RelPath>) -> BTreeMap<String, bool> {
        let mut found = BTreeMap::new();
        for root in self.roots.iter().flatten() {
            if let Some(Some(rest)) = below(root, path) {
                let first = rest.components().next().unwrap_or_default().to_owned();
                let exact = rest.depth() == 1;
                let e = found.entry(first).or_insert(false);
                *e |= exact;
            }
        }
        found
    }

    /// Where `path` leads.
    pub(crate) fn locate(&self, path: Option<&RelPath>) -> Result<Place, Refusal> {
        match self.covering(path) {
            Some((root, rest)) => Ok(Place::Covered(self.ceilings.open(root)?, rest)),
            None if !self.mounts_below(path).is_empty() => Ok(Place::Virtual),
            None => Err(Refusal::new(
                ReasonCode::GrantNoCeiling,
                format!("no configured ceiling covers {:?}", path.map_or("(the working directory)", RelPath::as_str)),
            )),
        }
    }

    /// The directory at `path`: a handle, or `None` for a virtual one.
    pub(crate) fn open_dir(&self, path: Option<&RelPath>) -> Result<Option<Arc<Dir>>, Refusal> {
        match self.locate(path)? {
            Place::Virtual => Ok(None),
            Place::Covered(dir, None) => Ok(Some(Arc::new(dir))),
            Place::Covered(dir, Some(rest)) => {
                let shown = path.map_or("", RelPath::as_str);
                let d = dir
                    .open_dir_beneath(self.resolver, &rest)
                    .map_err(|e| Refusal::new(e.code(), format!("{shown:?}: {}", e.message())))?;
                Ok(Some(Arc::new(d)))
            }
        }
    }
}

/// What the walk hands its visitor.
pub(crate) enum Visit<'a> {
    /// A directory that will be entered (or was cut by depth).
    Dir(&'a RelPath),
    /// A regular file with one link, the directory holding it (shared, so
    /// a search may open the file on another thread) and that directory's
    /// mount id.
    File(&'a RelPath, &'a Entry, &'a Arc<Dir>, u64),
}

/// Whether to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Go,
    Stop,
}

/// A depth-first walk in name order, bounded by the enumeration limits.
pub(crate) struct Walk<'t, 'a> {
    tree: &'t Tree<'a>,
    deadline: Option<Instant>,
    entries: usize,
    files: usize,
    path_bytes: usize,
}

impl<'t, 'a> Walk<'t, 'a> {
    pub(crate) fn new(tree: &'t Tree<'a>, deadline: Option<Instant>) -> Self {
        Walk { tree, deadline, entries: 0, files: 0, path_bytes: 0 }
    }

    /// Charges `path` against the path-byte budget.
    fn charge_path(&mut self, path: &RelPath, tally: &mut Tally) -> Flow {
        let len = path.as_str().len();
        if self.path_bytes + len > limits::MAX_PATH_BYTES {
            tally.cut(reason::MAX_PATH_BYTES);
            return Flow::Stop;
        }
        self.path_bytes += len;
        Flow::Go
    }

    /// Walks the directory at `at` (`handle` is `None` for a virtual one),
    /// whose entries are `depth` levels below the query root.
    pub(crate) fn walk(
        &mut self,
        at: Option<&RelPath>,
        handle: Option<&Arc<Dir>>,
        depth: usize,
        tally: &mut Tally,
        visit: &mut dyn FnMut(Visit<'_>, &mut Tally) -> Flow,
    ) -> Result<Flow, Refusal> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            tally.cut(reason::DEADLINE);
            return Ok(Flow::Stop);
        }
        let mounts = self.tree.mounts_below(at);
        let budget = limits::MAX_ENTRIES - self.entries;
        let (real, more) = match handle {
            None => (Vec::new(), false),
            Some(dir) => match dir.read_entries(budget) {
                Ok(r) => r,
                Err(_) => {
                    tally.skip(Skip::Unreadable);
                    return Ok(Flow::Go);
                }
            },
        };
        // One mount id a directory, for the files in it.
        let mount = handle.and_then(|d| d.mount_id().ok());
        // Names in order: real entries not hidden by a ceiling, then the
        // ceilings' own names, merged.
        let mut names: Vec<(&[u8], Option<&Entry>)> = real
            .iter()
            .filter(|e| !std::str::from_utf8(&e.name).is_ok_and(|n| mounts.contains_key(n)))
            .map(|e| (e.name.as_slice(), Some(e)))
            .chain(mounts.keys().map(|name| (name.as_bytes(), None)))
            .collect();
        // Unique names (a hidden entry gave way to its ceiling's).
        names.sort_by(|a, b| a.0.cmp(b.0));
        for &(name, entry) in &names {
            if entry.is_some() {
                self.entries += 1;
            }
            let Some(child) = child_path(at, name, tally) else { continue };
            let flow = match entry {
                Some(e) => self.visit_entry(&child, e, (handle, mount), depth, tally, visit)?,
                None => {
                    let exact = std::str::from_utf8(name).ok().and_then(|n| mounts.get(n)).copied().unwrap_or(false);
                    let own = real.iter().find(|e| e.name == name);
                    self.enter_mount(&child, exact, handle.zip(own), depth, tally, visit)?
                }
            };
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        if more {
            tally.cut(reason::MAX_ENTRIES);
            return Ok(Flow::Stop);
        }
        Ok(Flow::Go)
    }

    fn visit_entry(
        &mut self,
        child: &RelPath,
        e: &Entry,
        (handle, mount): (Option<&Arc<Dir>>, Option<u64>),
        depth: usize,
        tally: &mut Tally,
        visit: &mut dyn FnMut(Visit<'_>, &mut Tally) -> Flow,
    ) -> Result<Flow, Refusal> {
        let Some(dir) = handle else { return Ok(Flow::Go) };
        match e.kind {
            EntryKind::Symlink => tally.skip(Skip::Symlink),
            EntryKind::Special => tally.skip(Skip::Special),
            EntryKind::Regular if e.nlink != 1 => tally.skip(Skip::Hardlink),
            EntryKind::Regular => {
                if self.files == limits::MAX_FILES {
                    tally.cut(reason::MAX_FILES);
                    return Ok(Flow::Stop);
                }
                if self.charge_path(child, tally) == Flow::Stop {
                    return Ok(Flow::Stop);
                }
                self.files += 1;
                let Some(mount) = mount else {
                    tally.skip(Skip::Unreadable);
                    return Ok(Flow::Go);
                };
                return Ok(visit(Visit::File(child, e, dir, mount), tally));
            }
            EntryKind::Directory => {
                if self.charge_path(child, tally) == Flow::Stop {
                    return Ok(Flow::Stop);
                }
                if visit(Visit::Dir(child), tally) == Flow::Stop {
                    return Ok(Flow::Stop);
                }
                if depth >= limits::MAX_DEPTH {
                    // Partial only if something was really left below.
                    let left = dir.open_child_dir(e).ok().and_then(|d| d.read_entries(1).ok());
                    if left.is_none_or(|(v, _)| !v.is_empty()) {
                        tally.cut(reason::MAX_DEPTH);
                    }
                    return Ok(Flow::Go);
                }
                match dir.open_child_dir(e) {
                    Ok(sub) => return self.walk(Some(child), Some(&Arc::new(sub)), depth + 1, tally, visit),
                    Err(err) if err.code() == ReasonCode::PathMountCrossing => tally.skip(Skip::Mount),
                    Err(err) if err.code() == ReasonCode::PathRace => tally.skip(Skip::Changed),
                    Err(_) => tally.skip(Skip::Unreadable),
                }
            }
        }
        Ok(Flow::Go)
    }

    /// A child that is (or holds) a ceiling: its own ceiling's content, or
    /// the parent's directory of that name with the deeper ceilings laid
    /// over it, or a virtual directory.
    fn enter_mount(
        &mut self,
        child: &RelPath,
        exact: bool,
        own: Option<(&Arc<Dir>, &Entry)>,
        depth: usize,
        tally: &mut Tally,
        visit: &mut dyn FnMut(Visit<'_>, &mut Tally) -> Flow,
    ) -> Result<Flow, Refusal> {
        if self.charge_path(child, tally) == Flow::Stop {
            return Ok(Flow::Stop);
        }
        if visit(Visit::Dir(child), tally) == Flow::Stop {
            return Ok(Flow::Stop);
        }
        if depth >= limits::MAX_DEPTH {
            tally.cut(reason::MAX_DEPTH);
            return Ok(Flow::Go);
        }
        let handle = match own {
            // A create-only ceiling is never listed: its name shows, its
            // content does not, and the result is partial.
            _ if exact => match self.tree.ceilings.open(Some(child)) {
                Ok(d) => Some(Arc::new(d)),
                Err(r) if r.code == ReasonCode::GrantCreateOnly => {
                    tally.skip(Skip::Unreadable);
                    return Ok(Flow::Go);
                }
                Err(r) => return Err(r),
            },
            // The parent's own directory of that name, when it has one,
            // with the deeper ceilings laid over it.
            Some((parent, e)) if e.kind == EntryKind::Directory => match parent.open_child_dir(e) {
                Ok(d) => Some(Arc::new(d)),
                Err(_) => {
                    tally.skip(Skip::Changed);
                    None
                }
            },
            _ => None,
        };
        self.walk(Some(child), handle.as_ref(), depth + 1, tally, visit)
    }
}

/// `at/name`, or `None` (counted) when the name is outside the grammar or
/// a control directory.
fn child_path(at: Option<&RelPath>, name: &[u8], tally: &mut Tally) -> Option<RelPath> {
    let one = match RelPath::parse_bytes(name) {
        Ok(p) => p,
        Err(r) if r.code == ReasonCode::PathControlDir => {
            tally.skip(Skip::ControlDir);
            return None;
        }
        Err(_) => {
            tally.skip(Skip::InvalidName);
            return None;
        }
    };
    match at {
        None => Some(one),
        Some(parent) => match parent.join(&one) {
            Ok(p) => Some(p),
            Err(_) => {
                tally.skip(Skip::InvalidName);
                None
            }
        },
    }
}
