//! `airlock invocation inspect|recover`: finding out, from the journal and
//! the file system, where an interrupted publication stopped, and finishing
//! or discarding it through the recorded parent identity, never re-running
//! the tool.

use crate::ledger;
use crate::Runtime;
use airlock_core::{ReasonCode, Refusal, RelPath};
use airlock_hostfs::{CandidateMode, HeldOutput, CANDIDATE_PREFIX};
use airlock_journal::{kind, Record};
use serde::Serialize;
use serde_json::{json, Value};

/// Where an invocation's publication stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicationState {
    /// The journal records the outcome; nothing to recover.
    Settled,
    /// The call creates no file, or never reached publication.
    NoPublication,
    /// A synced named candidate matches the intent and the destination is free.
    ReadyToPublish,
    /// The destination is the recorded candidate, with the recorded bytes:
    /// the link or rename happened.
    Published,
    /// The recorded candidate was unnamed (`O_TMPFILE`), or the staged
    /// output still in the call's staging directory, and the destination is
    /// free: the process ended before the link or rename, so nothing was
    /// published.
    NeverLinked,
    /// A candidate exists that no intent announced (crash before the record).
    Unannounced,
    /// Neither the candidate nor a published file is there.
    Missing,
    /// Something else is in the way (another file, a changed parent…).
    Conflict,
}

/// What `inspect` found.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// Invocation id.
    pub invocation_id: String,
    /// Where the publication stands.
    pub state: PublicationState,
    /// Why, for people.
    pub detail: String,
    /// The recorded intent (`FilePublicationPrepared` body), if any.
    pub intent: Option<Value>,
    /// The recorded outcome (`FilePublicationFinished` or `RecoveryFinished`), if any.
    pub outcome: Option<Value>,
    /// Whether a live process still owns the publication.
    pub owner_alive: bool,
}

struct Target {
    held: HeldOutput,
    /// The name a named candidate of this invocation has.
    candidate: String,
}

/// Whether an intent's candidate was named in the destination directory,
/// where recovery can find and publish it (intents written before unnamed
/// candidates existed have no mode and were named). An unnamed (`tmpfile`)
/// candidate ended with its process; a `staged` one is named only in the
/// call's staging directory, which is reaped with the call: neither is ever
/// at the destination before its one atomic link or rename.
fn named(intent: &Value) -> bool {
    match intent["candidate_mode"].as_str().and_then(CandidateMode::parse) {
        Some(CandidateMode::Tmpfile | CandidateMode::Staged) => false,
        Some(CandidateMode::Named) | None => true,
    }
}

fn body_of<'r>(records: &'r [Record], k: &str) -> Option<&'r Value> {
    records.iter().rev().find(|r| r.kind == k).map(|r| &r.body)
}

fn dev_ino(v: &Value) -> Option<(u64, u64)> {
    Some((v["dev"].as_str()?.parse().ok()?, v["ino"].as_str()?.parse().ok()?))
}

impl Runtime {
    fn records_of(&self, id: &str) -> Result<Vec<Record>, Refusal> {
        self.journal()
            .records_where(|r| r.invocation_id.as_deref() == Some(id))
            .map_err(crate::failure::journal_refusal)
    }

    /// Re-opens the output's parent through the configured ceiling and
    /// checks it is the recorded directory.
    fn target(&self, path: &str, parent: &Value, id: &str) -> Result<Target, Refusal> {
        let path = RelPath::parse(path)?;
        let expected = dev_ino(parent).ok_or_else(|| Refusal::new(ReasonCode::Internal, "bad parent identity"))?;
        let (ceiling, rel) = self.config().ceiling_for(&path).ok_or_else(|| {
            Refusal::new(
                ReasonCode::GrantNoCeiling,
                format!("no configured ceiling covers {:?} any more", path.as_str()),
            )
        })?;
        let rel = rel.ok_or_else(|| Refusal::new(ReasonCode::OutputExists, "the output is a ceiling directory"))?;
        let dir = crate::ceilings::open(self.authority(), ceiling, self.protected())?;
        let held = HeldOutput::reopen(self.resolver(), &dir, &rel, &path, expected)?;
        Ok(Target { held, candidate: format!("{CANDIDATE_PREFIX}{id}") })
    }

    /// Reports where invocation `id`'s publication stands. Reads only.
    pub fn inspect(&self, id: &str) -> Result<Inspection, Refusal> {
        crate::id::check_invocation_id(id)?;
        let records = self.records_of(id)?;
        let owner_alive = ledger::pending(self.state())?.iter().any(|p| p.invocation_id == id && p.owner_alive);
        let intent = body_of(&records, kind::FILE_PUBLICATION_PREPARED).cloned();
        let outcome = body_of(&records, kind::RECOVERY_FINISHED)
            .or_else(|| body_of(&records, kind::FILE_PUBLICATION_FINISHED))
            .cloned();
        let mut found = Inspection {
            invocation_id: id.to_owned(),
            state: PublicationState::Settled,
            detail: String::new(),
            intent: intent.clone(),
            outcome: outcome.clone(),
            owner_alive,
        };
        if records.is_empty() {
            return Err(Refusal::new(ReasonCode::InvocationNotFound, format!("the journal has no record of {id:?}")));
        }
        if let Some(o) = &outcome {
            found.detail = format!("the journal records the outcome: {o}");
            return Ok(found);
        }
        let (state, detail) = match &intent {
            Some(intent) => self.judge_intent(intent, id)?,
            None => self.judge_unannounced(id)?,
        };
        found.state = state;
        found.detail = detail;
        Ok(found)
    }

    fn judge_intent(&self, intent: &Value, id: &str) -> Result<(PublicationState, String), Refusal> {
        use PublicationState::*;
        let path = intent["path"].as_str().unwrap_or_default();
        let t = match self.target(path, &intent["parent"], id) {
            Ok(t) => t,
            Err(r) => {
                return Ok((Conflict, format!("the recorded parent cannot be reached as recorded: {}", r.message)))
            }
        };
        let recorded = dev_ino(&intent["candidate"]);
        let named = named(intent);
        // An unnamed or staged candidate has no name to look at here;
        // whatever is at this invocation's candidate name then is not its
        // candidate.
        let candidate = if named { t.held.entry(&t.candidate)? } else { None };
        let dest = t.held.entry(t.held.name())?;
        Ok(match (candidate, dest) {
            (_, Some(d)) if Some(d.dev_ino) == recorded => match self.same_bytes(&t, intent, d.dev_ino) {
                Ok(()) => (Published, format!("{path} is the recorded candidate with the recorded bytes")),
                Err(why) => (Conflict, format!("{path} is the recorded inode but {why}")),
            },
            (Some(c), None) if Some(c.dev_ino) == recorded => {
                (ReadyToPublish, format!("the synced candidate for {path} is ready"))
            }
            (None, None) if !named => (
                NeverLinked,
                format!(
                    "the candidate was {} and {path} is free: the process ended before it was published (or the \
                     published file was moved away since)",
                    if intent["candidate_mode"] == CandidateMode::Staged.as_str() {
                        "the staged output, left in the call's staging directory to be reaped with it"
                    } else {
                        "an unnamed file, which ended with its process"
                    }
                ),
            ),
            (Some(_), Some(_)) => (Conflict, format!("{path} exists and is not the recorded candidate")),
            (None, Some(_)) => (Conflict, format!("{path} exists but is not what this invocation wrote")),
            (Some(_), None) => (Conflict, "the candidate is not the recorded inode".to_owned()),
            (None, None) => (Missing, format!("neither the candidate nor {path} is there")),
        })
    }

    /// Whether the file `dev_ino` at the output's name holds the intent's
    /// size and hash (read through a descriptor checked to be that inode).
    fn same_bytes(&self, t: &Target, intent: &Value, dev_ino: (u64, u64)) -> Result<(), String> {
        let (bytes, sha) = t.held.hash_entry(t.held.name(), dev_ino).map_err(|e| e.to_string())?;
        if Some(bytes) == intent["bytes"].as_u64()
            && Some(format!("sha256:{sha}").as_str()) == intent["sha256"].as_str()
        {
            Ok(())
        } else {
            Err("its bytes are not the recorded size and hash".to_owned())
        }
    }

    fn judge_unannounced(&self, id: &str) -> Result<(PublicationState, String), Refusal> {
        let record = self.invocations()?.open_subdir(id).ok().and_then(|d| {
            use std::io::Read;
            let mut s = String::new();
            d.open_file(crate::store::PREPARED_FILE).ok()?.read_to_string(&mut s).ok()?;
            serde_json::from_str::<crate::store::PreparedRecord>(&s).ok()
        });
        let Some(output) = record.and_then(|r| r.output) else {
            return Ok((
                PublicationState::NoPublication,
                "the invocation creates no file or never reached publication".into(),
            ));
        };
        let parent = json!({ "dev": output.parent.dev, "ino": output.parent.ino });
        let t = match self.target(&output.path, &parent, id) {
            Ok(t) => t,
            Err(r) => return Ok((PublicationState::NoPublication, format!("nothing to look at: {}", r.message))),
        };
        Ok(match t.held.entry(&t.candidate)? {
            Some(e) if !e.regular || e.owner != rustix::process::geteuid().as_raw() => (
                PublicationState::NoPublication,
                format!(
                    "the file under this invocation's candidate name for {} is not airlock's; left alone",
                    output.path
                ),
            ),
            Some(_) => (
                PublicationState::Unannounced,
                format!("a candidate for {} exists that no intent announced", output.path),
            ),
            None => (PublicationState::NoPublication, "no publication intent and no candidate".into()),
        })
    }

    /// Finishes or discards invocation `id`'s interrupted publication and
    /// journals a `RecoveryFinished`. `discard` allows giving up a candidate
    /// when the state is `missing` or `conflict`. Serialized per state
    /// directory, so two recoveries at once are safe: the second sees the
    /// first's outcome.
    pub fn recover(&self, id: &str, discard: bool) -> Result<Inspection, Refusal> {
        use PublicationState::*;
        let lock = self.state().open_append(".recovery.lock")?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("flock(recovery lock): {e}")))?;
        let found = self.inspect(id)?;
        if found.owner_alive {
            return Err(Refusal::new(
                ReasonCode::InvocationActive,
                format!("{id} is still being run by a live process"),
            ));
        }
        let outcome = match found.state {
            Settled => {
                ledger::clear_pending(self.state(), id)?;
                return Ok(found);
            }
            NoPublication => "nothing_published",
            Published => {
                let intent = found.intent.as_ref().expect("published implies an intent");
                let t = self.target(intent["path"].as_str().unwrap_or_default(), &intent["parent"], id)?;
                t.held.parent().sync()?;
                self.finish(id, intent, "confirmed_by_recovery")?;
                "published"
            }
            ReadyToPublish => {
                let intent = found.intent.as_ref().expect("ready implies an intent");
                let t = self.target(intent["path"].as_str().unwrap_or_default(), &intent["parent"], id)?;
                let recorded = dev_ino(&intent["candidate"])
                    .ok_or_else(|| Refusal::new(ReasonCode::Internal, "bad candidate identity"))?;
                let (bytes, sha) = t.held.hash_entry(&t.candidate, recorded)?;
                if Some(bytes) != intent["bytes"].as_u64()
                    || Some(format!("sha256:{sha}").as_str()) != intent["sha256"].as_str()
                {
                    return Err(Refusal::new(
                        ReasonCode::RecoveryConflict,
                        "the candidate does not match the recorded size and hash",
                    ));
                }
                // Intents written before modes were recorded keep 0600.
                let mode = intent["mode"].as_str().and_then(|m| u32::from_str_radix(m, 8).ok());
                t.held.publish_candidate_named(&t.candidate, recorded, mode)?;
                self.finish(id, intent, "confirmed_by_recovery")?;
                "published"
            }
            NeverLinked => {
                let intent = found.intent.as_ref().expect("never linked implies an intent");
                self.finish(id, intent, "not_published_by_recovery")?;
                "nothing_published"
            }
            Unannounced => {
                self.discard_candidate(id, None)?;
                "discarded_unannounced_candidate"
            }
            Missing | Conflict if !discard => {
                return Err(Refusal::new(
                    ReasonCode::RecoveryConflict,
                    format!(
                        "{}; look, then run `airlock invocation recover {id} --discard` to give it up",
                        found.detail
                    ),
                ))
            }
            Missing | Conflict => {
                self.discard_candidate(id, found.intent.as_ref())?;
                if let Some(intent) = &found.intent {
                    self.finish(id, intent, "discarded_by_recovery")?;
                }
                "discarded"
            }
        };
        self.record(kind::RECOVERY_FINISHED, Some(id), json!({ "outcome": outcome, "from_state": found.state }))?;
        ledger::clear_pending(self.state(), id)?;
        self.inspect(id)
    }

    fn finish(&self, id: &str, intent: &Value, result: &str) -> Result<(), Refusal> {
        let body = json!({ "publication_id": intent["publication_id"], "result": result });
        self.record(kind::FILE_PUBLICATION_FINISHED, Some(id), body)
    }

    /// Removes this invocation's named candidate, if it is still there and
    /// still the recorded inode (without an intent: a regular file owned by
    /// this process's user, the only identity known before the intent).
    fn discard_candidate(&self, id: &str, intent: Option<&Value>) -> Result<(), Refusal> {
        if intent.is_some_and(|i| !named(i)) {
            // An unnamed candidate left nothing to remove, nor a staged one
            // here (its staging directory is reaped with the call).
            return Ok(());
        }
        let (path, parent) = match intent {
            Some(i) => (i["path"].as_str().unwrap_or_default().to_owned(), i["parent"].clone()),
            None => {
                let rec = self.prepared_record(id)?;
                let out = rec.output.ok_or_else(|| Refusal::new(ReasonCode::Internal, "no output recorded"))?;
                (out.path, json!({ "dev": out.parent.dev, "ino": out.parent.ino }))
            }
        };
        let Ok(t) = self.target(&path, &parent, id) else {
            return Ok(());
        };
        let Some(entry) = t.held.entry(&t.candidate)? else {
            return Ok(());
        };
        match intent {
            Some(i) if dev_ino(&i["candidate"]) != Some(entry.dev_ino) => return Ok(()),
            None if !entry.regular || entry.owner != rustix::process::geteuid().as_raw() => return Ok(()),
            _ => {}
        }
        Ok(t.held.remove_candidate_named(&t.candidate, entry.dev_ino)?)
    }

    /// The prepared record of invocation `id`.
    pub fn prepared_record(&self, id: &str) -> Result<crate::store::PreparedRecord, Refusal> {
        use std::io::Read;
        let dir = self.invocations()?.open_subdir(id)?;
        let mut s = String::new();
        dir.open_file(crate::store::PREPARED_FILE)?
            .read_to_string(&mut s)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading the prepared record: {e}")))?;
        crate::store::check_versions(s.as_bytes())?;
        serde_json::from_str(&s).map_err(|e| Refusal::new(ReasonCode::Internal, format!("bad prepared record: {e}")))
    }
}
