//! Step 4: publishing a call's one output through its held parent, in
//! journaled steps, for every shape that creates a file.
//!
//! # Publication steps and recovery
//!
//! Pending marker `STATE/pending/ID@PID.START` (synced before the first
//! effect: before a missing parent is made, else beside the candidate's
//! sync) → with
//! `create_parents`, each missing parent made through the handle of the one
//! before and journaled (`OutputDirectoryCreated`, synced; made after the
//! call was authorized and ran, so a refused or failed call makes none) →
//! candidate synced and hashed: the staged output itself where it can be
//! moved into the parent (same mount, no set-group-ID bit or default ACL
//! there: `candidate_origin` `staged`, no copy; a file the worker wrote is
//! named in the call's staging directory and renamed from there,
//! `candidate_mode` `staged`; the standard output's unnamed staging file is
//! linked, `tmpfile`), else a copy (`copy`): unnamed; or, without
//! `O_TMPFILE`, `.airlock-candidate-ID`, named from the id so a crash
//! before any record still leaves it findable) →
//! `FilePublicationPrepared` (`candidate_mode` `tmpfile`|`named`|`staged`,
//! `candidate_name` (a name in the destination directory) or null,
//! `candidate_origin`, the candidate's `(dev, ino)`, size, hash, the
//! identity of the directory it is published into, the `mode` it gets) →
//! `linkat` (or `RENAME_NOREPLACE` + identity check) + directory fsync →
//! `FilePublicationFinished` → marker removed.
//!
//! Recovery decides by identity: the output's name holding the recorded inode
//! with the recorded size and hash is `published` (other bytes: `conflict`); a
//! named candidate that is the recorded inode is published by recovery (and
//! checked again after the rename); an unnamed candidate died with its
//! process, and a staged one is still in the call's staging directory (reaped
//! with it), so a free name is `never_linked` and settles as nothing published
//! without `--discard`; without an intent, a named candidate is removed only if
//! it is a regular file owned by airlock's user. A marker with a dead owner and
//! no recorded outcome blocks new effects (`journal.unconfirmed`); one whose
//! outcome is recorded is cleared automatically. Test-only crash points
//! (`AIRLOCK_TEST_CRASH_AT`) exist only in debug builds.

use super::prepared::PreparedCall;
use crate::{ledger, Runtime};
use airlock_core::{CreatedFile, ReasonCode, Refusal};
use airlock_hostfs::{AdoptError, Candidate, CandidateMode, HeldOutput, StagedFile};
use airlock_journal::kind;
use serde_json::json;

/// The output file in the call's staging data, where the worker's output
/// lands (a stdout output's name only where the staging file system has no
/// `O_TMPFILE`).
pub(crate) const OUTPUT_FILE: &str = "output";

/// `candidate_origin` of a candidate that is the staged output itself.
const ORIGIN_STAGED: &str = "staged";

/// `candidate_origin` of a candidate copied from the staged output.
const ORIGIN_COPY: &str = "copy";

impl Runtime {
    /// Publishes the one output in journaled steps: pending marker, synced
    /// candidate (an unnamed `O_TMPFILE` where the file system allows it),
    /// `FilePublicationPrepared` (the candidate's mode, identity, size and
    /// hash), a no-replace link or rename checked by identity and a
    /// directory sync, `FilePublicationFinished`, marker removed. A crash
    /// anywhere leaves the marker, which blocks new effects until recovery.
    pub(crate) fn publish<P>(
        &self,
        prepared: &PreparedCall<P>,
        held: Option<&HeldOutput>,
        staged: Option<&StagedFile>,
    ) -> Result<Vec<CreatedFile>, Refusal> {
        let (Some(held), Some(rec)) = (held, prepared.record().output.as_ref()) else {
            return Ok(Vec::new());
        };
        let file = staged.ok_or_else(|| Refusal::new(ReasonCode::Internal, "the call staged no output"))?;
        // A cancelled call publishes nothing.
        self.check_cancelled()?;
        let id = prepared.invocation_id();
        let began = std::time::Instant::now();
        let publication_id = format!("{id}/0");
        let expected = (parse_id(&rec.parent.dev)?, parse_id(&rec.parent.ino)?);
        let max = prepared.descriptor().command_boundary.filesystem.max_file_bytes;
        let marker = ledger::mark_pending(self.state(), prepared.store(), id)?;
        // The marker is durable before the first effect: before a parent is
        // made, else (the usual case) while the candidate is synced, on a
        // thread of its own, since neither sync needs the other.
        let parents = !held.missing_paths().is_empty();
        if parents {
            if let Err(r) = marker.sync() {
                marker.clear()?;
                return Err(r);
            }
        }
        let made = match self.make_parents(held, id) {
            Ok(made) => made,
            Err(r) => {
                marker.clear()?;
                return Err(r);
            }
        };
        let (held, expected) = match &made {
            Some(made) => (made, made.parent().dev_ino()),
            None => (held, expected),
        };
        ledger::crash_point("before_candidate");
        let intent_of = |candidate: &Candidate<'_>, origin: &str| {
            let c = candidate.file();
            json!({
                "publication_id": publication_id,
                "path": rec.path,
                "destination_name": held.name(),
                "candidate_mode": candidate.mode().as_str(),
                "candidate_name": candidate.name(),
                "candidate_origin": origin,
                "parent": { "dev": expected.0.to_string(), "ino": expected.1.to_string() },
                "mode": format!("{:04o}", self.output_modes().file),
                "candidate": { "dev": c.dev_ino.0.to_string(), "ino": c.dev_ino.1.to_string() },
                "bytes": c.bytes,
                "sha256": format!("sha256:{}", c.sha256_hex),
            })
        };
        let announce = |candidate: &Candidate<'_>| {
            ledger::crash_point("before_prepared");
            self.record(kind::FILE_PUBLICATION_PREPARED, Some(id), intent_of(candidate, ORIGIN_STAGED)).map(drop)
        };
        // The staged output itself where it can be published as itself,
        // else a copy of it beside the destination (always, when a named
        // candidate is asked for). The staged output is announced
        // (`FilePublicationPrepared`, synced) while its own sync runs, the
        // marker's sync beside both: none needs another, and all three
        // precede the link or rename. A named candidate, which recovery
        // may publish from its intent, is announced only once synced.
        let mode = ledger::candidate_mode();
        let (made, marked) = std::thread::scope(|s| {
            let marking = (!parents).then(|| s.spawn(|| marker.sync()));
            let adopted = if mode == CandidateMode::Named {
                Ok(None)
            } else {
                held.adopt_staged_announced(file, max, expected, announce)
            };
            let made = match adopted {
                Ok(Some(c)) => Ok((c, true)),
                Ok(None) => held
                    .write_candidate(file.file(), max, expected, id, mode)
                    .map(|c| (c, false))
                    .map_err(AdoptError::Unannounced),
                Err(e) => Err(e),
            };
            let marked = match marking.map(std::thread::ScopedJoinHandle::join) {
                None | Some(Ok(Ok(()))) => Ok(()),
                Some(Ok(Err(r))) => Err(r),
                Some(Err(_)) => {
                    Err(Refusal::new(ReasonCode::Internal, "the thread syncing the pending marker panicked"))
                }
            };
            (made, marked)
        });
        let (candidate, announced) = match (made, marked) {
            (Ok((c, announced)), Ok(())) => (c.with_mode(self.output_modes().file), announced),
            (Err(AdoptError::Unannounced(e)), _) => {
                marker.clear()?;
                return Err(e.into());
            }
            (Err(AdoptError::Announcing(r)), _) => {
                marker.clear()?;
                return Err(r);
            }
            (Err(AdoptError::Announced(e)), _) => return Err(self.abandon(marker, id, &publication_id, e.into())),
            (Ok((c, true)), Err(r)) => {
                drop(c);
                return Err(self.abandon(marker, id, &publication_id, r));
            }
            (Ok(_), Err(r)) => {
                marker.clear()?;
                return Err(r);
            }
        };
        if !announced {
            ledger::crash_point("before_prepared");
            let intent = intent_of(&candidate, ORIGIN_COPY);
            if let Err(r) = self.record(kind::FILE_PUBLICATION_PREPARED, Some(id), intent) {
                drop(candidate);
                marker.clear()?;
                return Err(r);
            }
        }
        let origin = if announced { ORIGIN_STAGED } else { ORIGIN_COPY };
        ledger::crash_point("after_prepared");
        let published = candidate.publish();
        ledger::crash_point("after_publish");
        let finished = match &published {
            Ok(_) => json!({ "publication_id": publication_id, "result": "confirmed" }),
            Err(e) => json!({
                "publication_id": publication_id,
                "result": "error",
                "code": e.code().as_str(),
                "message": e.message(),
            }),
        };
        // If this append fails the outcome stays unconfirmed: the marker is
        // kept and new effects wait for recovery.
        self.record(kind::FILE_PUBLICATION_FINISHED, Some(id), finished)?;
        ledger::crash_point("after_finished");
        marker.clear()?;
        let published = published?;
        tracing::debug!(
            path = %rec.path,
            bytes = published.bytes,
            candidate = origin,
            duration_ms = super::elapsed_ms(began),
            "published"
        );
        Ok(vec![CreatedFile {
            path: rec.path.clone(),
            bytes: published.bytes,
            sha256: format!("sha256:{}", published.sha256_hex),
        }])
    }
}

impl Runtime {
    /// A publication announced (`FilePublicationPrepared`) and then given
    /// up before its link or rename, for `why`: journals its end
    /// (`FilePublicationFinished`, `result` `error`) and clears the marker;
    /// answers `why`, or the journal's refusal if the end cannot be
    /// recorded (the marker then stays, and new effects wait for recovery,
    /// which finds the name free: nothing was published).
    fn abandon(&self, marker: ledger::PendingMarker<'_>, id: &str, publication_id: &str, why: Refusal) -> Refusal {
        let finished = json!({
            "publication_id": publication_id,
            "result": "error",
            "code": why.code.as_str(),
            "message": why.message,
        });
        if let Err(r) = self.record(kind::FILE_PUBLICATION_FINISHED, Some(id), finished) {
            return r;
        }
        match marker.clear() {
            Ok(()) => why,
            Err(r) => r,
        }
    }

    /// Makes the output's missing parents (`create_parents`), outermost
    /// first, each through the handle of the one before, with one synced
    /// `OutputDirectoryCreated` record a directory; the output held through
    /// the last one, or `None` when nothing was missing.
    fn make_parents(&self, held: &HeldOutput, id: &str) -> Result<Option<HeldOutput>, Refusal> {
        let mut current: Option<HeldOutput> = None;
        loop {
            let Some((next, made)) = current.as_ref().unwrap_or(held).make_next_parent(self.output_modes().dir)? else {
                return Ok(current);
            };
            let body = json!({
                "path": made.path,
                "dev": made.dev_ino.0.to_string(),
                "ino": made.dev_ino.1.to_string(),
                "mode": format!("{:04o}", made.mode),
            });
            self.record(kind::OUTPUT_DIRECTORY_CREATED, Some(id), body)?;
            current = Some(next);
        }
    }
}

fn parse_id(s: &str) -> Result<u64, Refusal> {
    s.parse()
        .map_err(|_| Refusal::new(ReasonCode::Internal, format!("bad directory identity {s:?} in the prepared record")))
}
