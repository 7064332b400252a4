//! Prepared calls kept in the state directory for a later dispatch.
//!
//! Layout: `STATE/invocations/ID/` holds `prepared.json` and
//! `manifest.clad.toml` (the exact bytes that were prepared); the snapshots
//! are in the call's staging reservation (`STATE/staging/data/ID/N`,
//! see `airlock-staging`). A
//! call is built in `invocations/.tmp-…` and renamed into place without
//! replacing anything, so an id is used once and a crash leaves no
//! half-written invocation under a real id.
//!
//! # Prepared calls and invocation ids
//!
//! A prepared call lives in `STATE/invocations/ID/` (`prepared.json` and the
//! exact manifest bytes; its snapshots are in its staging reservation), built
//! under a temporary name and renamed into place with `RENAME_NOREPLACE`; a
//! reused id is `invocation.duplicate`. `STATE/invocations/ID` is created for
//! every prepared call and for every refusal that named a valid id, so an id
//! the journal has seen is refused before any file is read. A call run at once
//! (`airlock run`) does not sync its prepared record (nothing later needs it to
//! survive a crash); `airlock prepare` does.

use airlock_core::{Descriptor, DirIdentity, ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// Directory under the state dir that holds invocations.
pub const INVOCATIONS: &str = "invocations";
/// File holding the [`PreparedRecord`].
pub const PREPARED_FILE: &str = "prepared.json";
/// Marker file of a prepared call that has been dispatched (or denied).
pub const DISPATCHED: &str = "dispatched";
/// File holding the manifest's bytes.
pub const MANIFEST_FILE: &str = "manifest.clad.toml";
/// Directory under [`INVOCATIONS`] holding one copy of each manifest text
/// calls were prepared from, named by its SHA-256 (hex). A call's
/// [`MANIFEST_FILE`] is a second name of its text's copy: calls of one
/// manifest make no inode each for the same bytes (see [`mark_in`] for
/// what an inode cost). A copy no call names any more goes with the next
/// retention sweep. Its name starts with a dot, so a sweep never takes it
/// for a call.
pub const SHARED_MANIFESTS: &str = ".manifests";
/// What a kept call of a shape `airlock prepare` does not keep needs at its
/// dispatch (a source query's sealed result).
pub const KEPT_FILE: &str = "kept.json";
/// Layout version of [`PreparedRecord`] (2: the principal is recorded).
pub const RECORD_FORMAT: u32 = 2;

/// Checks a stored prepared record's `format` ([`RECORD_FORMAT`]) and its
/// descriptor's `version` ([`airlock_core::descriptor::DESCRIPTOR_VERSION`])
/// before it is parsed: another version is `record.version`.
pub fn check_versions(bytes: &[u8]) -> Result<(), Refusal> {
    use airlock_core::record_version::{check, Missing};
    check("prepared record", bytes, "/format", RECORD_FORMAT.into(), Missing::Refuse)?;
    let descriptor = airlock_core::descriptor::DESCRIPTOR_VERSION.into();
    check("prepared record's descriptor", bytes, "/descriptor/version", descriptor, Missing::Refuse)
}
/// The manifest text kept in an invocation's `store` ([`MANIFEST_FILE`]),
/// bounded by [`crate::names::MAX_MANIFEST_BYTES`] (what `commit` wrote).
pub fn kept_manifest_text(store: &PrivateDir) -> Result<String, Refusal> {
    use std::io::Read;
    let mut text = String::new();
    store
        .open_file(MANIFEST_FILE)?
        .take(crate::names::MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading the kept manifest: {e}")))?;
    Ok(text)
}

/// Where earlier builds put a call's input snapshots, beneath its staging
/// data directory; a call such a build kept for dispatch has them there.
const LEGACY_INPUTS_DIR: &str = "inputs";

/// The directory holding a call's input snapshots (each named by its
/// [`RecordedInput::snapshot`]): its staging data directory `staged`
/// itself, or the `inputs/` beneath it of a call kept by an earlier
/// build. No subdirectory of their own: one inode fewer made and freed a
/// call (see [`mark_in`] for what an inode cost).
pub fn staged_inputs(staged: &PrivateDir) -> Result<PrivateDir, Refusal> {
    match staged.open_subdir(LEGACY_INPUTS_DIR) {
        Ok(legacy) => Ok(legacy),
        Err(e) if e.errno() == Some(rustix::io::Errno::NOENT) => Ok(staged.try_clone()?),
        Err(e) => Err(e.into()),
    }
}

/// Makes marker `name` in invocation directory `store`, a name whose
/// existence is the fact it records ([`DISPATCHED`], `settled`): see
/// [`mark_in`].
pub fn mark(store: &PrivateDir, name: &str) -> Result<(), airlock_hostfs::Error> {
    mark_in(store, store, name)
}

/// Makes marker `name` in `dir` (the invocation directory `store` itself,
/// or another directory of the state directory: a pending-publication
/// marker) as a second name of the call's [`PREPARED_FILE`], else, where
/// that cannot be linked, as an empty file. Fails with `EEXIST` if `name`
/// exists, either way. A link allocates no inode: on a file system that
/// passes over recently freed inodes one by one to find a free one (ext4
/// without a journal, as on the bench's host), each new inode of a call
/// cost 0.3–0.65 ms there.
pub fn mark_in(store: &PrivateDir, dir: &PrivateDir, name: &str) -> Result<(), airlock_hostfs::Error> {
    match store.link_as(PREPARED_FILE, dir, name) {
        Ok(()) => Ok(()),
        Err(e) if e.errno() == Some(rustix::io::Errno::EXIST) => Err(e),
        Err(_) => dir.create_file(name).map(drop),
    }
}

/// One snapshot as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedInput {
    /// Declared path.
    pub path: String,
    /// File name in the call's staging data ([`staged_inputs`]).
    pub snapshot: String,
    /// Size.
    pub bytes: u64,
    /// `sha256:` digest.
    pub sha256: String,
    /// Not copied: the host file itself was held unchanged by a read
    /// lease for the call (`airlock_sandbox::HeldInput`), and `snapshot`
    /// names no file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// Copied into a sealed memory file, not the staging data (a small
    /// input of a call run at once on the native tier, which no later
    /// dispatch reads), and `snapshot` names no file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_memory: bool,
}

/// The output as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOutput {
    /// Declared path.
    pub path: String,
    /// Identity of the parent directory held at prepare.
    pub parent: DirIdentity,
}

/// Everything a later step needs to continue a prepared call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedRecord {
    /// Record layout version.
    pub format: u32,
    /// The invocation id.
    pub invocation_id: String,
    /// Who made the call (an `Airlock::Agent` id).
    pub principal: String,
    /// Where the manifest was read from.
    pub manifest_origin: String,
    /// The resolved call.
    pub descriptor: Descriptor,
    /// Its digest.
    pub descriptor_sha256: String,
    /// Snapshots, in declaration order.
    pub inputs: Vec<RecordedInput>,
    /// The output, if any.
    pub output: Option<RecordedOutput>,
    /// When it was prepared (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_at: Option<u64>,
    /// For a call kept for a later dispatch: when it expires (Unix seconds,
    /// `[approval] ttl` after it was prepared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// For a session's start or one of its interactions kept for an
    /// approval: the session's id (such a call is never dispatched as a
    /// one-shot call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// How a prepared call is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Kept for a later dispatch: everything synced.
    Kept,
    /// Run at once by this process (a later dispatch finds its staging
    /// reservation gone: `staging.not_reserved`).
    RunNow,
    /// Of a shape that is never dispatched: committed already marked
    /// [`DISPATCHED`], so a dispatch of its id is `invocation.duplicate`.
    RunOnly,
}

/// A prepared call being written; removed on drop unless committed.
pub struct PendingInvocation<'a> {
    invocations: &'a PrivateDir,
    tmp_name: String,
    dir: PrivateDir,
    committed: bool,
}

impl<'a> PendingInvocation<'a> {
    /// Starts a new invocation directory under `invocations`.
    pub fn begin(invocations: &'a PrivateDir) -> Result<Self, Refusal> {
        let tmp_name = format!(".tmp-{}", airlock_hostfs::random_suffix());
        let dir = invocations.create_subdir(&tmp_name).map_err(Refusal::from)?;
        Ok(PendingInvocation { invocations, tmp_name, dir, committed: false })
    }

    /// Adds file `name` with `bytes` (synced at commit with the rest).
    pub fn add(&mut self, name: &str, bytes: &[u8]) -> Result<(), Refusal> {
        let mut f = self.dir.create_file(name).map_err(Refusal::from)?;
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing {name}: {e}")))
    }

    /// Writes the record and manifest, then renames the directory to the
    /// invocation id; an id in use is `invocation.duplicate`.
    pub fn commit(mut self, record: &PreparedRecord, manifest_text: &str, how: Commit) -> Result<PrivateDir, Refusal> {
        let durable = how == Commit::Kept;
        let json = serde_json::to_vec_pretty(record).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
        // The directory is private and renamed into place whole, so its
        // files need no rename of their own; `durable` adds the syncs that
        // let the call survive a crash for a later dispatch.
        let shared = self.link_shared_manifest(manifest_text).is_some();
        let own = (!shared).then_some((MANIFEST_FILE, manifest_text.as_bytes()));
        for (name, bytes) in own.into_iter().chain([(PREPARED_FILE, json.as_slice())]) {
            let mut f = self.dir.create_file(name).map_err(Refusal::from)?;
            f.write_all(bytes)
                .and_then(|()| if durable { f.sync_all() } else { Ok(()) })
                .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing {name}: {e}")))?;
        }
        if how == Commit::RunOnly {
            mark(&self.dir, DISPATCHED).map_err(Refusal::from)?;
        }
        if durable {
            self.dir.sync().map_err(Refusal::from)?;
        }
        self.invocations.rename_noreplace(&self.tmp_name, &record.invocation_id).map_err(|e| {
            let r = Refusal::from(e);
            if r.code == ReasonCode::InvocationDuplicate {
                Refusal::new(r.code, format!("invocation id {:?} has been used before", record.invocation_id))
            } else {
                r
            }
        })?;
        self.committed = true;
        if durable {
            self.invocations.sync().map_err(Refusal::from)?;
        }
        self.invocations.open_subdir(&record.invocation_id).map_err(Refusal::from)
    }

    /// Makes [`MANIFEST_FILE`] a second name of the shared copy of `text`
    /// in [`SHARED_MANIFESTS`], making that copy (synced) if there is none.
    /// `None` where it cannot (the call then writes its own copy, as a call
    /// did before): the shared directory cannot be made, the copy under
    /// that name does not hold exactly `text`, or it cannot be linked (a
    /// sweep removed it meanwhile, or it has the most links the file
    /// system allows).
    fn link_shared_manifest(&self, text: &str) -> Option<()> {
        use sha2::Digest;
        let shared = self.invocations.ensure_subdir(SHARED_MANIFESTS).ok()?;
        let name = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        if !holds_exactly(&shared, &name, text) {
            match shared.write_new_file(&name, text.as_bytes()) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(rustix::io::Errno::EXIST) => {}
                Err(_) => return None,
            }
            if !holds_exactly(&shared, &name, text) {
                return None;
            }
        }
        shared.link_as(&name, &self.dir, MANIFEST_FILE).ok()
    }
}

/// Whether file `name` of `dir` holds exactly `text`.
fn holds_exactly(dir: &PrivateDir, name: &str, text: &str) -> bool {
    use std::io::Read;
    let Ok(file) = dir.open_file(name) else { return false };
    let mut bytes = Vec::with_capacity(text.len() + 1);
    file.take(text.len() as u64 + 1).read_to_end(&mut bytes).is_ok() && bytes == text.as_bytes()
}

/// Removes every shared manifest copy no call's directory names any more
/// (one link left: its own name); see [`SHARED_MANIFESTS`]. A call linking
/// one as it is removed writes its own copy instead.
pub fn sweep_shared_manifests(invocations: &PrivateDir) {
    let Ok(shared) = invocations.open_subdir(SHARED_MANIFESTS) else { return };
    for name in shared.entries().unwrap_or_default() {
        if shared.link_count(&name) == Some(1) {
            let _ = shared.remove_tree(&name);
        }
    }
}

impl Drop for PendingInvocation<'_> {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.invocations.remove_tree(&self.tmp_name);
        }
    }
}
