//! The runtime's use of the signed journal: one record per step, synced
//! before the effect it announces; pending-publication markers that make a
//! crashed publication block new effects (fail-stop) until an operator
//! recovers it; and the test-only crash points.
//!
//! # Journaling
//!
//! One record a step through `Runtime::record` (synced before the effect it
//! announces: `WorkerStarted`, `FilePublicationPrepared`,
//! `FilePublicationFinished`) or `Runtime::note` (records that announce no
//! effect: `InvocationPrepared` within a run, `InvocationAuthorized`,
//! `WorkerFinished`, `InvocationRefused`, `InvocationFinished`, appended without
//! their own `fdatasync` and durable with the next synced record). The journal
//! refuses numbers above 2^53, so [`ledger::record`]/[`ledger::note`] turn any
//! integer beyond ±(2^53 − 1) in a body into its decimal string
//! ([`ledger::exact_numbers`]): a step is never left unjournaled by a number.
//! `WorkerStarted` holds `argv` only up to 4 KiB of words (the word that does
//! not fit is cut at a character boundary), with `argv_truncated`,
//! `argv_bytes` and `argv_sha256` (SHA-256 of each word followed by NUL; the
//! full argv is in the descriptor), so a long argument costs a bounded record.
//!
//! An end that cannot be journaled keeps the answer: a call that ran answers
//! with its `created_files` and the journal's error (`journal_end`); an
//! isolated submission whose `WorkerFinished` or `BrokerOperations` fails to
//! append is not ended early by it.

use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use airlock_journal::Journal;
use airlock_staging::ProcessIdentity;
use serde_json::Value;

use crate::failure::journal_refusal;

/// Directory of pending-publication markers, `ID@PID.START`.
pub const PENDING: &str = "pending";

/// Appends one record and answers its seq; the call returns once it (and
/// every record before it) is durable. For records that announce an effect.
/// Integers beyond ±(2^53 − 1) in `body` are written as decimal strings
/// ([`exact_numbers`]).
pub fn record(journal: &Journal, kind: &str, invocation_id: Option<&str>, body: Value) -> Result<u64, Refusal> {
    journal.append(kind, invocation_id, exact_numbers(body)).map(|a| a.seq).map_err(journal_refusal)
}

/// Appends one record that announces no effect of its own; it becomes
/// durable with the next [`record`], which every effect is preceded by.
/// Integers as in [`record`]; answers its seq.
pub fn note(journal: &Journal, kind: &str, invocation_id: Option<&str>, body: Value) -> Result<u64, Refusal> {
    journal.append_deferred(kind, invocation_id, exact_numbers(body)).map(|a| a.seq).map_err(journal_refusal)
}

/// Most bytes of argv words a `WorkerStarted` record keeps (4 KiB).
pub const ARGV_PREFIX_BYTES: usize = 4096;

/// The body of a `WorkerStarted` record: `tier` (`native` unless `extra`
/// names the call's tier), then the argv
/// as evidence of bounded size, whatever its length: `argv` holds the
/// words while they fit in [`ARGV_PREFIX_BYTES`] (the word that does not
/// fit is cut at a character boundary, the rest left out), `argv_truncated`
/// says whether anything was left out, `argv_bytes` is the whole argv's
/// size and `argv_sha256` the SHA-256 of every word followed by a NUL byte
/// (as `/proc/PID/cmdline` holds it), so the full argv (in the call's
/// descriptor) can be checked against the record. `extra`'s fields are
/// added.
pub fn worker_started_body(argv: &[String], extra: Value) -> Value {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    let mut prefix = Vec::new();
    let mut room = ARGV_PREFIX_BYTES;
    let mut truncated = false;
    for word in argv {
        digest.update(word.as_bytes());
        digest.update([0u8]);
        if truncated {
            continue;
        }
        if word.len() <= room {
            room -= word.len();
            prefix.push(word.clone());
        } else {
            let cut = (0..=room).rev().find(|&i| word.is_char_boundary(i)).unwrap_or(0);
            prefix.push(word[..cut].to_owned());
            truncated = true;
        }
    }
    let mut body = serde_json::json!({
        "tier": "native",
        "argv": prefix,
        "argv_truncated": truncated,
        "argv_bytes": argv.iter().map(|w| w.len() as u64 + 1).sum::<u64>(),
        "argv_sha256": format!("sha256:{}", hex::encode(digest.finalize())),
    });
    if let (Value::Object(map), Value::Object(more)) = (&mut body, extra) {
        map.extend(more);
    }
    body
}

/// The largest integer the journal writes as a number (2^53 − 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `body` with every integer beyond ±(2^53 − 1) replaced by its decimal
/// string. The journal refuses such numbers (RFC 8785 would round them), and
/// a record it refuses is a step of a call that goes unrecorded; a 64-bit
/// counter, id, size or inode number from any source is therefore written
/// exactly, as a string, whatever its value. Smaller integers stay numbers.
pub fn exact_numbers(body: Value) -> Value {
    match body {
        Value::Number(n) => {
            let beyond = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                (None, None) => false,
            };
            if beyond {
                Value::String(n.to_string())
            } else {
                Value::Number(n)
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(exact_numbers).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, exact_numbers(v))).collect()),
        other => other,
    }
}

/// A pending-publication marker; removed with [`PendingMarker::clear`].
#[derive(Debug)]
pub struct PendingMarker<'a> {
    dir: PrivateDir,
    name: String,
    _state: std::marker::PhantomData<&'a ()>,
}

/// Marks invocation `id` (its directory: `store`) as publishing, owned by
/// this process, not yet durably: [`PendingMarker::sync`] makes it durable,
/// and must return before the publication's first effect. Only the
/// marker's name means anything; it is made as a second name of the
/// call's record ([`crate::store::mark_in`]).
pub fn mark_pending<'a>(state: &'a PrivateDir, store: &PrivateDir, id: &str) -> Result<PendingMarker<'a>, Refusal> {
    let dir = state.ensure_subdir(PENDING)?;
    let me = ProcessIdentity::current()
        .ok_or_else(|| Refusal::new(ReasonCode::Internal, "cannot read this process's identity from /proc"))?;
    let name = format!("{id}@{}.{}", me.pid, me.start_ticks);
    crate::store::mark_in(store, &dir, &name)?;
    Ok(PendingMarker { dir, name, _state: std::marker::PhantomData })
}

impl PendingMarker<'_> {
    /// Makes the marker's name durable (`fsync` of its directory).
    pub fn sync(&self) -> Result<(), Refusal> {
        Ok(self.dir.sync()?)
    }

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
    let markers = dir.entries()?;
    crash_point("pending_listed");
    for marker in markers {
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
    let dead: Vec<Pending> = pending(state)?.into_iter().filter(|p| !p.owner_alive).collect();
    if dead.is_empty() {
        return Ok(());
    }
    // A marker listed while its owner still ran may have been removed by
    // that owner (a publication refused before its intent, which records no
    // outcome) before it exited and was judged dead here. Listed again now,
    // after its owner was seen dead, a marker that is still there is one
    // nobody will remove: only those are stuck.
    let listed = state.ensure_subdir(PENDING)?.entries()?;
    let mut stuck: Vec<String> =
        dead.into_iter().filter(|p| listed.contains(&p.marker)).map(|p| p.invocation_id).collect();
    if stuck.is_empty() {
        return Ok(());
    }
    // Only the outcomes of the stuck ids are kept as the segments are read.
    let records = journal
        .records_where(|r| {
            (r.kind == airlock_journal::kind::FILE_PUBLICATION_FINISHED
                || r.kind == airlock_journal::kind::RECOVERY_FINISHED)
                && r.invocation_id.as_ref().is_some_and(|id| stuck.contains(id))
        })
        .map_err(journal_refusal)?;
    let settled = |id: &str| records.iter().any(|r| r.invocation_id.as_deref() == Some(id));
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
/// renamed into place), `after_finished`; and, for pauses, `pending_listed`
/// (pending markers listed, their owners not yet checked).
///
/// In debug builds [`PAUSE_ENV`] = `POINT:MS` instead pauses the call
/// there for MS milliseconds (at most 60 s), so a test can act at that point
/// (cancel a call already past its publication point).
pub fn crash_point(name: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    if std::env::var(CRASH_ENV).is_ok_and(|v| v == name) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
    let pause = std::env::var(PAUSE_ENV).ok();
    if let Some(ms) = pause.as_deref().and_then(|v| v.strip_prefix(name)?.strip_prefix(':')?.parse::<u64>().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms.min(60_000)));
    }
}

/// The environment variable naming a test pause point (debug builds only).
pub const PAUSE_ENV: &str = "AIRLOCK_TEST_PAUSE_AT";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn worker_started_keeps_a_bounded_prefix_and_the_digest_of_the_whole_argv() {
        let short = vec!["wc".to_owned(), "-l".to_owned()];
        let body = worker_started_body(&short, json!({"mcp_tool": "t"}));
        assert_eq!(body["argv"], json!(["wc", "-l"]));
        assert_eq!(body["argv_truncated"], false);
        assert_eq!(body["argv_bytes"], 6);
        assert_eq!(body["mcp_tool"], "t");
        use sha2::Digest;
        assert_eq!(body["argv_sha256"], format!("sha256:{}", hex::encode(sha2::Sha256::digest(b"wc\0-l\0"))));
        let long = vec!["tool".to_owned(), "é".repeat(16 * 1024), "next".to_owned()];
        let body = worker_started_body(&long, json!({}));
        let kept: Vec<&str> = body["argv"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0], "tool");
        assert_eq!(kept[1].len(), ARGV_PREFIX_BYTES - 4, "cut at a character boundary within the prefix");
        assert_eq!(body["argv_truncated"], true);
        assert_eq!(body["argv_bytes"], 5 + 32 * 1024 + 1 + 5);
        assert_ne!(body["argv_sha256"], worker_started_body(&long[..2], json!({}))["argv_sha256"]);
    }

    #[test]
    fn integers_beyond_2_pow_53_become_strings() {
        let body = json!({
            "max": (1u64 << 53) + 1,
            "ok": MAX_SAFE_INTEGER,
            "neg": -(1i64 << 60),
            "f": 0.5,
            "nested": [{"id": u64::MAX}, 3],
        });
        assert_eq!(
            exact_numbers(body),
            json!({
                "max": "9007199254740993",
                "ok": MAX_SAFE_INTEGER,
                "neg": "-1152921504606846976",
                "f": 0.5,
                "nested": [{"id": "18446744073709551615"}, 3],
            })
        );
    }
}
