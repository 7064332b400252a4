//! `grep_files`: a literal needle in the regular files below a path, within
//! 1 MiB a file, 8 MiB in all and 200 matches, each excerpt at most 512
//! input bytes of the matching line.

use crate::outcome::{reason, Skip, Tally};
use crate::query::Query;
use crate::tree::{Flow, Tree, Visit, Walk};
use airlock_core::source::limits;
use airlock_core::{ReasonCode, Refusal, RelPath, SourceRange};
use airlock_hostfs::RegularFile;
use memchr::memmem::Finder;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// Input bytes before the match an excerpt of a long line starts at.
const LEAD: usize = 128;

struct Search<'n> {
    finder: Finder<'n>,
    matches: Vec<Value>,
    total: u64,
    files: u64,
    files_cut: u64,
    deadline: Option<Instant>,
}

pub(crate) fn grep(
    tree: &Tree<'_>,
    q: &Query,
    tally: &mut Tally,
    deadline: Option<Instant>,
) -> Result<Map<String, Value>, Refusal> {
    let root = q.path.as_ref();
    let mut s =
        Search { finder: Finder::new(&q.needle), matches: Vec::new(), total: 0, files: 0, files_cut: 0, deadline };
    match tree.open_dir(root) {
        Ok(handle) => {
            Walk::new(tree, deadline).walk(root, handle.as_ref(), 1, tally, &mut |visit, tally| match visit {
                Visit::Dir(_) => Flow::Go,
                Visit::File(p, e, dir, mount) => match dir.open_child_file(e, mount) {
                    Ok(file) => s.file(p, &file, tally),
                    Err(err) => {
                        tally.skip(skip_for(err.code()));
                        Flow::Go
                    }
                },
            })?;
        }
        Err(r) if r.code == ReasonCode::PathNotDirectory => {
            // The path names one file: search it alone.
            let path = root.ok_or(r.clone())?;
            let (dir, rest) = match tree.locate(Some(path))? {
                crate::tree::Place::Covered(dir, Some(rest)) => (dir, rest),
                _ => return Err(r),
            };
            let file = RegularFile::open_beneath(tree.resolver, &dir, &rest)
                .map_err(|e| Refusal::new(e.code(), format!("{:?}: {}", path.as_str(), e.message())))?;
            s.file(path, &file, tally);
        }
        Err(r) => return Err(r),
    }
    let pattern = String::from_utf8_lossy(&q.needle).into_owned();
    let body = json!({
        "operation": "grep_files",
        "path": q.path_str(),
        "pattern": pattern,
        "matches": s.matches,
        "files_searched": s.files,
        "files_truncated": s.files_cut,
        "bytes_searched": s.total,
    });
    Ok(body.as_object().cloned().unwrap_or_default())
}

fn skip_for(code: ReasonCode) -> Skip {
    match code {
        ReasonCode::PathSymlink => Skip::Symlink,
        ReasonCode::InputNotRegular => Skip::Special,
        ReasonCode::InputHardlink => Skip::Hardlink,
        ReasonCode::PathMountCrossing => Skip::Mount,
        ReasonCode::PathRace | ReasonCode::InputChanged => Skip::Changed,
        _ => Skip::Unreadable,
    }
}

impl Search<'_> {
    /// Searches one file; `Stop` once a budget is spent.
    fn file(&mut self, path: &RelPath, file: &RegularFile, tally: &mut Tally) -> Flow {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            tally.cut(reason::DEADLINE);
            return Flow::Stop;
        }
        let size = file.size();
        let per_file = size.min(limits::MAX_GREP_FILE_BYTES);
        let remaining = limits::MAX_GREP_TOTAL_BYTES - self.total;
        if per_file > remaining {
            tally.cut(reason::MAX_TOTAL_BYTES);
        }
        let want = per_file.min(remaining);
        if want == 0 && size > 0 {
            return Flow::Stop;
        }
        let got = match file.read_range(0, want) {
            Ok(g) => g,
            Err(e) => {
                tally.skip(skip_for(e.code()));
                return Flow::Go;
            }
        };
        if size > limits::MAX_GREP_FILE_BYTES {
            tally.cut(reason::MAX_FILE_BYTES);
            self.files_cut += 1;
        }
        self.files += 1;
        self.total += got.bytes.len() as u64;
        tally.ranges.push(SourceRange {
            path: path.as_str().to_owned(),
            offset: 0,
            bytes: got.bytes.len() as u64,
            sha256: format!("sha256:{}", got.sha256_hex),
        });
        if self.scan(path, &got.bytes, tally) == Flow::Stop || tally.was_cut(reason::MAX_TOTAL_BYTES) {
            return Flow::Stop;
        }
        Flow::Go
    }

    /// One match a line, in order.
    fn scan(&mut self, path: &RelPath, bytes: &[u8], tally: &mut Tally) -> Flow {
        let mut pos = 0;
        let mut line = 1u64;
        let mut counted_to = 0;
        while let Some(i) = self.finder.find(&bytes[pos..]) {
            let at = pos + i;
            if self.matches.len() == limits::MAX_MATCHES {
                tally.cut(reason::MAX_MATCHES);
                return Flow::Stop;
            }
            line += memchr::memchr_iter(b'\n', &bytes[counted_to..at]).count() as u64;
            counted_to = at;
            let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |n| n + 1);
            let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n);
            let (from, to, cut) = if end - start <= limits::MAX_EXCERPT_BYTES {
                (start, end, false)
            } else {
                // From a little before the match, filled to the bound.
                let from = start.max(at.saturating_sub(LEAD));
                let to = end.min(from + limits::MAX_EXCERPT_BYTES);
                (start.max(to - limits::MAX_EXCERPT_BYTES), to, true)
            };
            let excerpt = tally.render(&bytes[from..to]);
            self.matches.push(json!({
                "path": path.as_str(),
                "line": line,
                "column": at - start + 1,
                "excerpt": excerpt,
                "excerpt_truncated": cut,
            }));
            if end >= bytes.len() {
                break;
            }
            pos = end + 1;
        }
        Flow::Go
    }
}
