//! Recovery records of a submission's writes.
//!
//! `STATE/isolated/ID/` holds `owner` (the submitting process) and one
//! `w-N.json` per write, saved and synced **before** the broker links the
//! prepared file under its staging name. Closing the submission (or
//! `airlock isolated recover` after a crash) removes every staging entry
//! whose `(dev, ino)` equals its record's, and nothing else: a file already
//! renamed over its target is kept, an unrelated entry is left alone.
//!
//! A live submission's close does not look on the host for the entry of a
//! write whose commit the broker answered: that rename is done, its staging
//! name gone. Looking would reopen the target's directory by path, which a
//! host process may have swapped for a symlink that instant; the write's
//! outcome is already known, so that swap cannot fail a finished
//! submission. Only a write whose commit never answered is looked for.

use std::os::fd::AsFd;

use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::{PrivateDir, Resolver};
use airlock_staging::ProcessIdentity;
use serde::{Deserialize, Serialize};

use super::roots::OpenRoot;

/// Directory of the submissions in the state dir.
pub(crate) const ISOLATED_DIR: &str = "isolated";
const OWNER: &str = "owner";

/// One write's staging entry, as saved before it is named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StageRecord {
    pub root: String,
    pub root_path: String,
    pub root_dev: u64,
    pub root_ino: u64,
    /// The target's directory, as components beneath the root.
    pub dir: Vec<String>,
    pub dir_dev: u64,
    pub dir_ino: u64,
    pub file_dev: u64,
    pub file_ino: u64,
    pub stage: String,
    pub target: String,
}

/// The records of one live submission.
#[derive(Debug)]
pub(crate) struct RecordBook {
    dir: PrivateDir,
    next: std::sync::atomic::AtomicU64,
    /// Records whose write the broker committed (renamed over its target).
    landed: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The name a saved record has in its submission's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordName(String);

impl RecordBook {
    /// Creates `STATE/isolated/ID/` with this process as owner, synced.
    pub fn create(state: &PrivateDir, id: &str) -> Result<RecordBook, Refusal> {
        let all = state.ensure_subdir(ISOLATED_DIR)?;
        let dir = all.create_subdir(id)?;
        let me = ProcessIdentity::current()
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "cannot read this process's identity"))?;
        dir.write_new_file(OWNER, me.encode().as_bytes())?;
        dir.sync()?;
        all.sync()?;
        Ok(RecordBook { dir, next: std::sync::atomic::AtomicU64::new(0), landed: Default::default() })
    }

    /// Saves `record` durably (file and directory synced).
    pub fn save(&self, record: &StageRecord) -> Result<RecordName, Refusal> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = serde_json::to_vec(record).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
        let name = format!("w-{n}.json");
        self.dir.write_new_file(&name, &body)?;
        self.dir.sync()?;
        Ok(RecordName(name))
    }

    /// Notes that the broker answered `name`'s commit: its staging entry
    /// was renamed over the target, so closing need not look for it.
    pub fn landed(&self, name: RecordName) {
        self.landed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.0);
    }

    /// Removes every leftover staging entry the records name, then the
    /// records. The records are kept if anything could not be decided.
    pub fn close(
        self,
        resolver: &Resolver,
        state: &PrivateDir,
        id: &str,
        roots: &[OpenRoot],
    ) -> Result<CleanupReport, Refusal> {
        let landed = self.landed.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let report = clean_records(resolver, &self.dir, roots, &landed)?;
        drop(self.dir);
        finish(state, id, report)
    }
}

/// What a cleanup did.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct CleanupReport {
    /// Records looked at.
    pub records: u64,
    /// Staging entries removed.
    pub removed: u64,
    /// Records whose entry was gone (renamed into place, or never linked).
    pub absent: u64,
    /// Records of writes the broker answered as committed: not looked for.
    pub landed: u64,
    /// Problems that kept the records.
    pub problems: Vec<String>,
}

fn finish(state: &PrivateDir, id: &str, report: CleanupReport) -> Result<CleanupReport, Refusal> {
    if !report.problems.is_empty() {
        return Err(Refusal::new(
            ReasonCode::BrokerCleanupFailed,
            format!(
                "staging entries of submission {id} could not all be cleaned ({}); run `airlock isolated recover` \
                 with the same roots",
                report.problems.join("; ")
            ),
        ));
    }
    let all = state.ensure_subdir(ISOLATED_DIR)?;
    all.remove_tree(id)?;
    all.sync()?;
    Ok(report)
}

/// Removes the leftover staging entries `dir`'s records name, except the
/// records in `landed`, whose writes are known to have been renamed into
/// place.
fn clean_records(
    resolver: &Resolver,
    dir: &PrivateDir,
    roots: &[OpenRoot],
    landed: &std::collections::HashSet<String>,
) -> Result<CleanupReport, Refusal> {
    let mut report = CleanupReport::default();
    for name in dir.entries()? {
        if !name.starts_with("w-") {
            continue;
        }
        report.records += 1;
        if landed.contains(&name) {
            report.landed += 1;
            continue;
        }
        let record: StageRecord = match read_record(dir, &name) {
            Ok(r) => r,
            Err(why) => {
                report.problems.push(format!("{name}: {why}"));
                continue;
            }
        };
        match remove_stage(resolver, &record, roots) {
            Ok(true) => report.removed += 1,
            Ok(false) => report.absent += 1,
            Err(why) => report.problems.push(format!("{name} ({}:{}): {why}", record.root, record.stage)),
        }
    }
    Ok(report)
}

/// At most `max` bytes of the file `name` in `dir`, as text.
fn read_small(dir: &PrivateDir, name: &str, max: u64) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    dir.open_file(name).map_err(|e| e.to_string())?.take(max).read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

fn read_record(dir: &PrivateDir, name: &str) -> Result<StageRecord, String> {
    serde_json::from_str(&read_small(dir, name, 64 * 1024)?).map_err(|e| e.to_string())
}

/// Removes one record's staging entry if it is still the file the record
/// names. `Ok(false)`: nothing there (it was renamed into place).
fn remove_stage(resolver: &Resolver, record: &StageRecord, roots: &[OpenRoot]) -> Result<bool, String> {
    let root = roots
        .iter()
        .find(|r| r.grant.name == record.root)
        .ok_or_else(|| format!("no root named {:?} was granted", record.root))?;
    if root.dir.dev_ino() != (record.root_dev, record.root_ino) {
        return Err(format!("root {:?} is not the directory the record names", record.root));
    }
    airlock_fsproto::check_stage_name(&record.stage).map_err(|e| e.message)?;
    let comps: Vec<&str> = record.dir.iter().map(String::as_str).collect();
    let dir = match airlock_hostfs::rooted::open_dir_beneath(resolver, root.dir.as_fd(), &comps) {
        Ok(d) => d,
        // The directory itself is gone: so is its staging entry.
        Err(e) if e.code() == airlock_fsproto::codes::NOT_FOUND => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let st = rustix::fs::fstat(&dir).map_err(|e| e.to_string())?;
    if (st.st_dev, st.st_ino) != (record.dir_dev, record.dir_ino) {
        return Err("the target's directory was replaced; its entries are left alone".into());
    }
    let expected = airlock_hostfs::rooted::FileId { dev: record.file_dev, ino: record.file_ino };
    airlock_hostfs::rooted::remove_stage_entry(dir.as_fd(), &record.stage, expected).map_err(|e| e.to_string())
}

/// One crashed submission found by recovery.
#[derive(Debug, Serialize)]
pub(crate) struct Recovered {
    pub invocation_id: String,
    #[serde(flatten)]
    pub report: CleanupReport,
}

/// Cleans every submission whose owner is gone. A live owner's submission
/// is skipped (`busy`); a record naming a root not granted refuses the
/// whole recovery before anything is removed.
pub(crate) fn recover(
    resolver: &Resolver,
    state: &PrivateDir,
    roots: &[OpenRoot],
) -> Result<(Vec<Recovered>, Vec<String>), Refusal> {
    let all = state.ensure_subdir(ISOLATED_DIR)?;
    let mut dead = Vec::new();
    let mut busy = Vec::new();
    for id in all.entries()? {
        let sub = all.open_subdir(&id)?;
        let owner = read_owner(&sub);
        if owner.is_some_and(|o| o.alive()) {
            busy.push(id);
        } else {
            dead.push((id, sub));
        }
    }
    // Check first that every record names a granted root at its identity.
    for (id, sub) in &dead {
        for name in sub.entries()?.into_iter().filter(|n| n.starts_with("w-")) {
            let record = read_record(sub, &name).map_err(|why| {
                Refusal::new(ReasonCode::BrokerCleanupFailed, format!("submission {id}: record {name}: {why}"))
            })?;
            let granted = roots.iter().any(|r| {
                r.grant.name == record.root
                    && r.dir.dev_ino() == (record.root_dev, record.root_ino)
                    && r.real.display().to_string() == record.root_path
            });
            if !granted {
                return Err(Refusal::new(
                    ReasonCode::BrokerRecoveryRoots,
                    format!(
                        "submission {id} wrote under root {:?} = {} (dev {}, ino {}); grant that same root to recover it",
                        record.root, record.root_path, record.root_dev, record.root_ino
                    ),
                ));
            }
        }
    }
    let mut done = Vec::new();
    for (id, sub) in dead {
        let report = clean_records(resolver, &sub, roots, &Default::default())?;
        drop(sub);
        let report = finish(state, &id, report)?;
        done.push(Recovered { invocation_id: id, report });
    }
    Ok((done, busy))
}

fn read_owner(dir: &PrivateDir) -> Option<ProcessIdentity> {
    ProcessIdentity::decode(read_small(dir, OWNER, 64).ok()?.trim())
}
