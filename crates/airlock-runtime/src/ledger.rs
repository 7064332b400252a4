//! The runtime's use of the signed journal: one record per step, synced
//! before the effect it announces; pending-publication markers that make a
//! crashed publication block new effects (fail-stop) until an operator
//! recovers it; and the test-only crash points.

use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_journal::{Journal, JournalError};
use airlock_staging::ProcessIdentity;
use serde_json::Value;

/// Directory of pending-publication markers, `ID@PID.START`.
pub const PENDING: &str = "pending";

/// Maps a journal error to a refusal with the journal's own code in the message.
pub fn journal_refusal(e: JournalError) -> Refusal {
    let code = match e.code() {
        "journal.key_unsafe" | "journal.key_missing" | "journal.file_unsafe" => ReasonCode::JournalKeyUnsafe,
        "journal.io" | "journal.record_too_large" | "journal.invalid_record" => ReasonCode::JournalIo,
        _ => ReasonCode::JournalCorrupt,
    };
    Refusal::new(code, format!("{}: {e}", e.code()))
}

/// Appends one record; the call returns once it (and every record before
/// it) is durable. For records that announce an effect.
pub fn record(journal: &Journal, kind: &str, invocation_id: Option<&str>, body: Value) -> Result<(), Refusal> {
    journal.append(kind, invocation_id, body).map(|_| ()).map_err(journal_refusal)
}

/// Appends one record that announces no effect of its own; it becomes
/// durable with the next [`record`], which every effect is preceded by.
pub fn note(journal: &Journal, kind: &str, invocation_id: Option<&str>, body: Value) -> Result<(), Refusal> {
    journal.append_deferred(kind, invocation_id, body).map(|_| ()).map_err(journal_refusal)
}

/// A pending-publication marker; removed with [`PendingMarker::clear`].
#[derive(Debug)]
pub struct PendingMarker<'a> {
    dir: PrivateDir,
    name: String,
    _state: std::marker::PhantomData<&'a ()>,
}

/// Marks invocation `id` as publishing, owned by this process, durably.
pub fn mark_pending<'a>(state: &'a PrivateDir, id: &str) -> Result<PendingMarker<'a>, Refusal> {
    let dir = state.ensure_subdir(PENDING)?;
    let me = ProcessIdentity::current()
        .ok_or_else(|| Refusal::new(ReasonCode::Internal, "cannot read this process's identity from /proc"))?;
    let name = format!("{id}@{}.{}", me.pid, me.start_ticks);
    drop(dir.create_file(&name)?);
    dir.sync()?;
    Ok(PendingMarker { dir, name, _state: std::marker::PhantomData })
}

impl PendingMarker<'_> {
    /// Removes the marker once the publication's outcome is durably
    /// recorded. The removal itself is not synced: a marker that outlives a
    /// power loss has a dead owner and a recorded outcome, and the next
    /// fail-stop check clears it.
    pub fn clear(self) -> Result<(), Refusal> {
        Ok(self.dir.remove_tree(&self.name)?)
    }
}

/// One pending publication.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pending {
    /// Invocation id.
    pub invocation_id: String,
    /// Whether the process that owns it still runs.
    pub owner_alive: bool,
    /// The marker's file name.
    #[serde(skip)]
    pub marker: String,
}

/// Every pending publication marker.
pub fn pending(state: &PrivateDir) -> Result<Vec<Pending>, Refusal> {
    let dir = state.ensure_subdir(PENDING)?;
    let mut out = Vec::new();
    for marker in dir.entries()? {
        let (id, owner) = marker.rsplit_once('@').unwrap_or((marker.as_str(), ""));
        let alive = owner
            .split_once('.')
            .and_then(|(p, t)| Some(ProcessIdentity { pid: p.parse().ok()?, start_ticks: t.parse().ok()? }))
            .is_some_and(|o| o.alive());
        out.push(Pending { invocation_id: id.to_owned(), owner_alive: alive, marker: marker.clone() });
    }
    Ok(out)
}

/// Removes every marker of invocation `id` (after recovery).
pub fn clear_pending(state: &PrivateDir, id: &str) -> Result<(), Refusal> {
    let dir = state.ensure_subdir(PENDING)?;
    for p in pending(state)?.into_iter().filter(|p| p.invocation_id == id) {
        dir.remove_tree(&p.marker)?;
    }
    Ok(dir.sync()?)
}

/// Fail-stop: refuses (`journal.unconfirmed`) while any publication whose
/// owner is gone has no recorded outcome.
///
/// A marker whose publication the journal shows finished (the owner died
/// after recording the outcome) is cleared here: that outcome is confirmed.
pub fn refuse_if_unconfirmed(state: &PrivateDir, journal: &Journal) -> Result<(), Refusal> {
    let mut stuck: Vec<String> =
        pending(state)?.into_iter().filter(|p| !p.owner_alive).map(|p| p.invocation_id).collect();
    if stuck.is_empty() {
        return Ok(());
    }
    let records = journal.records().map_err(journal_refusal)?;
    let settled = |id: &str| {
        records.iter().any(|r| {
            r.invocation_id.as_deref() == Some(id)
                && (r.kind == airlock_journal::kind::FILE_PUBLICATION_FINISHED
                    || r.kind == airlock_journal::kind::RECOVERY_FINISHED)
        })
    };
    for id in stuck.iter().filter(|id| settled(id)) {
        clear_pending(state, id)?;
    }
    stuck.retain(|id| !settled(id));
    if stuck.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        ReasonCode::JournalUnconfirmed,
        format!(
            "the publication of {stuck:?} was interrupted and its outcome is not confirmed; new effects wait until an \
             operator runs `airlock invocation inspect ID` and `airlock invocation recover ID`"
        ),
    ))
}

/// Environment variable naming a crash point, honoured only by debug builds
/// (tests); release builds ignore it.
pub const CRASH_ENV: &str = "AIRLOCK_TEST_CRASH_AT";

/// Environment variable that, in debug builds (tests) only, makes
/// publication use a named candidate as on a file system without
/// `O_TMPFILE`; release builds ignore it.
pub const NAMED_CANDIDATE_ENV: &str = "AIRLOCK_TEST_NAMED_CANDIDATE";

/// How publication keeps its candidate: unnamed (`O_TMPFILE`, with a named
/// fallback where the file system lacks it), or named when a debug build
/// is told so by [`NAMED_CANDIDATE_ENV`].
pub fn candidate_mode() -> airlock_hostfs::CandidateMode {
    if cfg!(debug_assertions) && std::env::var_os(NAMED_CANDIDATE_ENV).is_some_and(|v| v == "1") {
        airlock_hostfs::CandidateMode::Named
    } else {
        airlock_hostfs::CandidateMode::Tmpfile
    }
}

/// Kills this process with SIGKILL at the named point, in debug builds when
/// [`CRASH_ENV`] names it. Points: `before_candidate`, `before_prepared`
/// (the candidate is synced), `after_prepared`, `after_publish` (linked or
/// renamed into place), `after_finished`.
pub fn crash_point(name: &str) {
    if cfg!(debug_assertions) && std::env::var(CRASH_ENV).is_ok_and(|v| v == name) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
}
