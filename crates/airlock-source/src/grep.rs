//! `grep_files`: a literal needle in the regular files below a path, within
//! 1 MiB a file, 8 MiB in all and 200 matches, each excerpt at most 512
//! input bytes of the matching line.

use crate::ordered::{with_pool, Pool};
use crate::outcome::into_map;
use crate::outcome::{reason, Skip, Tally};
use crate::query::Query;
use crate::tree::{Flow, Tree, Visit, Walk};
use airlock_core::source::limits;
use airlock_core::{ReasonCode, Refusal, RelPath, SourceRange};
use airlock_hostfs::{Dir, Entry, RegularFile};
use memchr::memmem::Finder;
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Input bytes before the match an excerpt of a long line starts at.
const LEAD: usize = 128;

/// Files searched ahead of the one whose result is applied next: bounds
/// the open files and the work done past a budget's end.
const AHEAD: usize = 64;

/// Files handed to a worker at once (on more than one thread): one
/// hand-over, and one wake-up, for this many files.
const BATCH: usize = 16;

/// One match, found by a worker, not yet counted.
struct Found {
    line: u64,
    column: usize,
    excerpt: String,
    truncated: bool,
    /// Rendering the excerpt replaced invalid UTF-8.
    replaced: bool,
}

/// The bytes of one file searched: how many, their hash, and the first
/// matches (one more than a result may hold, so a cut is seen).
struct Scanned {
    bytes: u64,
    sha256: [u8; 32],
    found: Vec<Found>,
}

/// What a worker did with one file, before any budget is applied.
// Moved once, through a channel, and never boxed: no allocation a file.
#[allow(clippy::large_enum_variant)]
enum Searched {
    /// It could not be opened by the checked-file rule.
    Skipped(Skip),
    /// The deadline passed (or the search had stopped, and the result is
    /// never read) before it was opened.
    Abandoned,
    /// Opened and searched in its first bytes: `min(size, 1 MiB)`, or
    /// fewer if the job said so.
    Opened(RegularFile, Result<Scanned, ReasonCode>),
}

/// One listed file to search.
struct Job {
    entry: Entry,
    dir: Arc<Dir>,
    mount: u64,
    /// The most bytes to read: what the total budget leaves this file if
    /// every file before it is read as listed.
    most: u64,
}

/// A file in flight: its path, the walk's notes before it, and the bytes
/// its listing says it will be searched in.
struct Waiting {
    path: RelPath,
    notes: Tally,
    listed: u64,
}

/// The budgets and what they let into the result, applied in walk order.
struct Search<'n> {
    finder: &'n Finder<'n>,
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
    threads: usize,
) -> Result<Map<String, Value>, Refusal> {
    let root = q.path.as_ref();
    let finder = Finder::new(&q.needle);
    let mut s = Search { finder: &finder, matches: Vec::new(), total: 0, files: 0, files_cut: 0, deadline };
    match tree.open_dir(root) {
        Ok(handle) => {
            // Set once the walk is done: workers leave the rest of a batch.
            let stopped = AtomicBool::new(false);
            let work = |jobs: Vec<Job>, buf: &mut Vec<u8>| -> Vec<Searched> {
                let search = |job: Job| {
                    if stopped.load(Ordering::Relaxed) {
                        Searched::Abandoned
                    } else {
                        job.search(&finder, deadline, buf)
                    }
                };
                jobs.into_iter().map(search).collect()
            };
            let batch = if threads > 1 { BATCH } else { 1 };
            with_pool(threads, &work, |pool| {
                let walked = s.walk(tree, root, handle.as_ref(), (pool, batch), tally);
                // Before the workers are joined: nothing after this is read.
                stopped.store(true, Ordering::Relaxed);
                walked
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
            let read = search(&file, first_bytes(&file), &finder, &mut Vec::new());
            s.settle(path, Searched::Opened(file, read), tally);
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
    Ok(into_map(body))
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

/// The bytes of `file` a search looks at before the total budget: its
/// first MiB.
fn first_bytes(file: &RegularFile) -> u64 {
    file.size().min(limits::MAX_GREP_FILE_BYTES)
}

impl Job {
    /// Opens the file by the checked-file rule and searches its first MiB.
    fn search(self, finder: &Finder<'_>, deadline: Option<Instant>, buf: &mut Vec<u8>) -> Searched {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Searched::Abandoned;
        }
        match self.dir.open_child_file(&self.entry, self.mount) {
            Ok(file) => {
                let read = search(&file, first_bytes(&file).min(self.most), finder, buf);
                Searched::Opened(file, read)
            }
            Err(err) => Searched::Skipped(skip_for(err.code())),
        }
    }
}

/// Reads the first `want` bytes of `file` (hashing them as they arrive)
/// and finds the needle in them.
fn search(file: &RegularFile, want: u64, finder: &Finder<'_>, buf: &mut Vec<u8>) -> Result<Scanned, ReasonCode> {
    let (bytes, sha256) = file.read_range_into(0, want, buf).map_err(|e| e.code())?;
    Ok(Scanned { bytes: bytes.len() as u64, sha256, found: scan(finder, bytes) })
}

/// One match a line, in order, at most one more than a result holds.
fn scan(finder: &Finder<'_>, bytes: &[u8]) -> Vec<Found> {
    let mut found = Vec::new();
    let mut pos = 0;
    let mut line = 1u64;
    let mut counted_to = 0;
    while let Some(i) = finder.find(&bytes[pos..]) {
        let at = pos + i;
        line += memchr::memchr_iter(b'\n', &bytes[counted_to..at]).count() as u64;
        counted_to = at;
        let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |n| n + 1);
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n);
        let (from, to, truncated) = if end - start <= limits::MAX_EXCERPT_BYTES {
            (start, end, false)
        } else {
            // From a little before the match, filled to the bound.
            let from = start.max(at.saturating_sub(LEAD));
            let to = end.min(from + limits::MAX_EXCERPT_BYTES);
            (start.max(to - limits::MAX_EXCERPT_BYTES), to, true)
        };
        let text = String::from_utf8_lossy(&bytes[from..to]);
        let replaced = matches!(text, std::borrow::Cow::Owned(_));
        found.push(Found { line, column: at - start + 1, excerpt: text.into_owned(), truncated, replaced });
        if found.len() > limits::MAX_MATCHES || end >= bytes.len() {
            break;
        }
        pos = end + 1;
    }
    found
}

impl Search<'_> {
    /// Walks below `root`, each listed file searched by `pool`, the results
    /// applied in walk order. The walk's own notes (skips, enumeration
    /// cuts) between two files are held with the later file and counted
    /// only once the results before it are applied, so a search that stops
    /// at a file counts exactly what a serial walk would have.
    fn walk(
        &mut self,
        tree: &Tree<'_>,
        root: Option<&RelPath>,
        handle: Option<&Arc<Dir>>,
        (pool, batch): (&mut Pool<'_, Vec<Job>, Vec<Searched>>, usize),
        tally: &mut Tally,
    ) -> Result<(), Refusal> {
        let mut notes = Tally::default();
        let mut jobs = Vec::with_capacity(batch);
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        // Bytes the files in flight are listed to be searched in: no file
        // is handed out that the total budget would leave unread.
        let mut ahead = 0u64;
        let mut stopped = false;
        let walked = Walk::new(tree, self.deadline).walk(root, handle, 1, &mut notes, &mut |visit, notes| {
            if stopped {
                return Flow::Stop;
            }
            let Visit::File(path, entry, dir, mount) = visit else { return Flow::Go };
            let listed = entry.size.min(limits::MAX_GREP_FILE_BYTES);
            let most = limits::MAX_GREP_TOTAL_BYTES.saturating_sub(self.total + ahead);
            ahead += listed;
            waiting.push_back(Waiting { path: path.clone(), notes: std::mem::take(notes), listed });
            jobs.push(Job { entry: entry.clone(), dir: Arc::clone(dir), mount, most });
            if jobs.len() == batch {
                pool.submit(std::mem::replace(&mut jobs, Vec::with_capacity(batch)));
            }
            loop {
                let full = pool.in_flight() * batch >= AHEAD || self.total + ahead >= limits::MAX_GREP_TOTAL_BYTES;
                if full && !jobs.is_empty() {
                    // Nothing waits on a file not yet handed out.
                    pool.submit(std::mem::replace(&mut jobs, Vec::with_capacity(batch)));
                }
                let Some(done) = pool.next(full) else { break };
                if self.apply_all(&mut waiting, &mut ahead, done, tally) == Flow::Stop {
                    stopped = true;
                    return Flow::Stop;
                }
            }
            Flow::Go
        });
        if !stopped && !jobs.is_empty() {
            pool.submit(jobs);
        }
        while !stopped {
            let Some(done) = pool.next(true) else { break };
            stopped = self.apply_all(&mut waiting, &mut ahead, done, tally) == Flow::Stop;
        }
        if stopped {
            // Stopped at a file: what the walk noted or met after it, a
            // serial search would never have reached.
            return Ok(());
        }
        tally.absorb(notes);
        walked.map(drop)
    }

    /// Applies a batch's results, in order, until one says `Stop`.
    fn apply_all(
        &mut self,
        waiting: &mut VecDeque<Waiting>,
        ahead: &mut u64,
        done: Vec<Searched>,
        tally: &mut Tally,
    ) -> Flow {
        for searched in done {
            if self.apply(waiting, ahead, searched, tally) == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Go
    }

    /// Applies the oldest file in flight: first the walk's notes before it.
    fn apply(
        &mut self,
        waiting: &mut VecDeque<Waiting>,
        ahead: &mut u64,
        searched: Searched,
        tally: &mut Tally,
    ) -> Flow {
        let Some(w) = waiting.pop_front() else { return Flow::Stop };
        *ahead -= w.listed;
        tally.absorb(w.notes);
        self.settle(&w.path, searched, tally)
    }

    /// Applies the budgets to one file's search; `Stop` once one is spent.
    fn settle(&mut self, path: &RelPath, searched: Searched, tally: &mut Tally) -> Flow {
        let (file, read) = match searched {
            Searched::Skipped(why) => {
                tally.skip(why);
                return Flow::Go;
            }
            Searched::Abandoned => {
                tally.cut(reason::DEADLINE);
                return Flow::Stop;
            }
            Searched::Opened(file, read) => (file, read),
        };
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            tally.cut(reason::DEADLINE);
            return Flow::Stop;
        }
        let size = file.size();
        let per_file = first_bytes(&file);
        let remaining = limits::MAX_GREP_TOTAL_BYTES - self.total;
        if per_file > remaining {
            tally.cut(reason::MAX_TOTAL_BYTES);
        }
        let want = per_file.min(remaining);
        if want == 0 && size > 0 {
            return Flow::Stop;
        }
        // A file read to another length than the budget now gives it (the
        // one the budget cuts, or one after a file that was not as listed)
        // is read again, to that length.
        let read = match read {
            Ok(s) if s.bytes != want => search(&file, want, self.finder, &mut Vec::new()),
            other => other,
        };
        let scanned = match read {
            Ok(s) => s,
            Err(code) => {
                tally.skip(skip_for(code));
                return Flow::Go;
            }
        };
        if size > limits::MAX_GREP_FILE_BYTES {
            tally.cut(reason::MAX_FILE_BYTES);
            self.files_cut += 1;
        }
        self.files += 1;
        self.total += scanned.bytes;
        tally.ranges.push(SourceRange {
            path: path.as_str().to_owned(),
            offset: 0,
            bytes: scanned.bytes,
            sha256: format!("sha256:{}", hex::encode(scanned.sha256)),
        });
        if self.take(path, scanned.found, tally) == Flow::Stop || tally.was_cut(reason::MAX_TOTAL_BYTES) {
            return Flow::Stop;
        }
        Flow::Go
    }

    /// Counts one file's matches into the result, up to the bound.
    fn take(&mut self, path: &RelPath, found: Vec<Found>, tally: &mut Tally) -> Flow {
        for f in found {
            if self.matches.len() == limits::MAX_MATCHES {
                tally.cut(reason::MAX_MATCHES);
                return Flow::Stop;
            }
            tally.replaced |= f.replaced;
            self.matches.push(json!({
                "path": path.as_str(),
                "line": f.line,
                "column": f.column,
                "excerpt": f.excerpt,
                "excerpt_truncated": f.truncated,
            }));
        }
        Flow::Go
    }
}
