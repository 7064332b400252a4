//! `airlock journal verify|show|export|prune`, `airlock invocation
//! inspect|recover`, `airlock attest`.

use super::Answer;
use airlock_core::{Config, Envelope, ReasonCode, Refusal};
use airlock_hostfs::{HostAuthority, PrivateDir};
use airlock_journal::{verify as verify_bytes, JournalReader, PublicKey, MAX_SEGMENT_BYTES, PUBLIC_KEY_FILE};
use airlock_runtime::recovery::Inspection;
use airlock_runtime::Runtime;
use serde_json::json;
use std::io::Read;
use std::path::Path;

fn read_bounded(file: impl Read, what: &str) -> Result<Vec<u8>, Refusal> {
    let mut bytes = Vec::new();
    file.take(MAX_SEGMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Refusal::new(ReasonCode::JournalIo, format!("reading {what}: {e}")))?;
    if bytes.len() as u64 > MAX_SEGMENT_BYTES {
        return Err(Refusal::new(ReasonCode::JournalIo, format!("{what} is larger than the segment bound")));
    }
    Ok(bytes)
}

/// Verifies a journal from its bytes and a public key only: `public_key`,
/// else `journal.pub` beside `journal`, else the state dir's `journal.pub`.
/// The state dir is never created here.
pub fn verify(
    config: &Config,
    public_key: Option<&Path>,
    journal: Option<&Path>,
    stream: Option<Option<&str>>,
) -> Result<Envelope, Refusal> {
    let authority = HostAuthority::ambient();
    let state_exists = std::fs::symlink_metadata(&config.state_dir).is_ok();
    let state = || {
        if !state_exists {
            return Err(Refusal::new(
                ReasonCode::JournalPublicKeyMissing,
                format!(
                    "there is no state directory at {} to verify; name a journal file with --journal FILE and its \
                     public key with --public-key FILE",
                    config.state_dir.display()
                ),
            ));
        }
        PrivateDir::open_or_create(&authority, &config.state_dir).map_err(Refusal::from)
    };
    let key_file = match public_key {
        Some(p) => p.to_path_buf(),
        None => default_public_key(config, journal)?,
    };
    let key_text = String::from_utf8(read_bounded(
        std::fs::File::open(&key_file)
            .map_err(|e| Refusal::new(ReasonCode::Usage, format!("{}: {e}", key_file.display())))?,
        "the public key",
    )?)
    .unwrap_or_default();
    let key = PublicKey::parse(&key_text)
        .map_err(|e| Refusal::new(ReasonCode::Usage, format!("public key {}: {e}", key_file.display())))?;
    let report = match journal {
        Some(p) => verify_bytes(
            &read_bounded(
                std::fs::File::open(p).map_err(|e| Refusal::new(ReasonCode::Usage, format!("{}: {e}", p.display())))?,
                "the journal",
            )?,
            &key,
        ),
        None => JournalReader::new(&state()?)
            .and_then(|reader| reader.verify_chain(&key))
            .map_err(airlock_runtime::failure::journal_refusal)?,
    };
    let stream_check = match stream {
        None => None,
        Some(nats) => {
            let at = airlock_runtime::cluster::endpoint_of(&authority, config, nats)?;
            Some(airlock_runtime::cluster::check_against_stream(&at, &key, &state()?)?)
        }
    };
    let mut content = json!({
        "records": report.records,
        "segments": report.segments,
        "head": report.head,
        "truncated_tail": report.truncated_tail,
        "starts_after": report.starts_after.as_ref().map(|s| json!({ "segment": s.segment, "seq": s.seq, "head": s.head })),
        "public_key": key.to_text(),
        "public_key_file": key_file.display().to_string(),
        "first_bad": report.first_bad.as_ref().map(|b| json!({ "segment": b.segment, "line": b.line, "seq": b.seq, "reason": b.reason })),
    });
    if let Some(check) = &stream_check {
        content["stream"] = serde_json::to_value(check).unwrap_or_default();
    }
    if let (None, Some(mismatch)) = (&report.first_bad, stream_check.as_ref().and_then(|c| c.mismatch.as_ref())) {
        return Ok(Envelope {
            content: Some(content),
            ..Envelope::from_refusal(&Refusal::new(ReasonCode::JournalStreamMismatch, mismatch.clone()))
        });
    }
    Ok(match &report.first_bad {
        None => Envelope { content: Some(content), ..Envelope::ok() },
        Some(bad) => Envelope {
            content: Some(content),
            ..Envelope::from_refusal(&Refusal::new(
                ReasonCode::JournalInvalid,
                format!(
                    "the record at {}line {}{} fails verification: {}",
                    bad.segment.map_or_else(String::new, |n| format!("segment {n}, ")),
                    bad.line,
                    bad.seq.map_or_else(|| " (its seq is unreadable)".to_owned(), |seq| format!(" (seq {seq})")),
                    bad.reason
                ),
            ))
        },
    })
}

/// `journal.pub` beside `journal` (an exported copy kept with its key),
/// else in the state dir; refused, naming `--public-key`, when neither
/// exists. A key found beside a copy only shows the copy is consistent
/// with it: to prove who wrote it, pin the key with `--public-key`.
fn default_public_key(config: &Config, journal: Option<&Path>) -> Result<std::path::PathBuf, Refusal> {
    let beside = journal.map(|j| j.parent().unwrap_or(Path::new("")).join(PUBLIC_KEY_FILE));
    let in_state = config.state_dir.join(PUBLIC_KEY_FILE);
    let places: Vec<std::path::PathBuf> = beside.into_iter().chain([in_state]).collect();
    if let Some(found) = places.iter().find(|p| std::fs::symlink_metadata(p).is_ok()) {
        return Ok(found.clone());
    }
    let looked = places.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" or ");
    Err(Refusal::new(
        ReasonCode::JournalPublicKeyMissing,
        format!("no public key to verify against: {looked} does not exist; name the pinned key with --public-key FILE"),
    ))
}

/// Prints the journal: one line a record on a terminal, else (or with
/// `--json`) one envelope holding every record.
pub fn show(runtime: &Runtime, as_json: bool) -> Result<Answer, Refusal> {
    let records = runtime.journal().records().map_err(airlock_runtime::failure::journal_refusal)?;
    let envelope = Envelope { content: Some(json!({ "records": records })), ..Envelope::ok() };
    Ok(super::report::status(as_json, envelope, |_| {
        let mut text = String::new();
        for r in &records {
            let summary: String = serde_json::to_string(&r.body).unwrap_or_default().chars().take(160).collect();
            let id = r.invocation_id.as_deref().unwrap_or("-");
            text.push_str(&format!("{:>6} {} {:<26} {:<38} {summary}\n", r.seq, r.time, r.kind, id));
        }
        text
    }))
}

/// Copies sealed segment `segment` to `file` (created, synced, never
/// replacing anything), then marks it exported.
pub fn export(runtime: &Runtime, segment: u64, file: &Path) -> Result<Envelope, Refusal> {
    use std::io::Write;
    let journal = runtime.journal();
    let bytes = journal.sealed_segment(segment).map_err(airlock_runtime::failure::journal_refusal)?;
    let io = |e: std::io::Error| Refusal::new(ReasonCode::Usage, format!("{}: {e}", file.display()));
    let mut out = std::fs::OpenOptions::new().write(true).create_new(true).open(file).map_err(io)?;
    out.write_all(&bytes).and_then(|()| out.sync_all()).map_err(io)?;
    let sha256 = journal.mark_exported(segment, &bytes).map_err(airlock_runtime::failure::journal_refusal)?;
    Ok(Envelope {
        content: Some(json!({ "segment": segment, "bytes": bytes.len(), "sha256": sha256, "file": file })),
        ..Envelope::ok()
    })
}

/// Removes the sealed segments below `before` (see
/// [`airlock_journal::Journal::prune`]).
pub fn prune(runtime: &Runtime, before: u64, allow_unexported: bool) -> Result<Envelope, Refusal> {
    let pruned =
        runtime.journal().prune(before, allow_unexported).map_err(airlock_runtime::failure::journal_refusal)?;
    Ok(Envelope {
        content: Some(json!({ "removed": pruned.removed, "unexported": pruned.unexported })),
        ..Envelope::ok()
    })
}

/// The envelope of an inspection or recovery.
pub fn inspection(found: Inspection) -> Envelope {
    Envelope {
        invocation_id: Some(found.invocation_id.clone()),
        content: Some(serde_json::to_value(&found).unwrap_or_default()),
        ..Envelope::ok()
    }
}

/// Prints the DSSE envelope itself (what verifiers consume).
pub fn attest(runtime: &Runtime, id: &str) -> Result<Answer, Refusal> {
    let envelope = runtime.attest(id)?;
    Ok(Answer::Text(format!("{}\n", serde_json::to_string(&envelope).unwrap_or_default())))
}

/// `airlock journal push`: the records the cluster's journal stream lacks.
pub fn push(runtime: &Runtime, nats: Option<&str>) -> Result<Envelope, Refusal> {
    let pushed = runtime.push_journal(nats)?;
    let content = match pushed {
        Some((from, to)) => json!({ "pushed": { "from": from, "to": to } }),
        None => json!({ "pushed": null }),
    };
    Ok(Envelope { content: Some(content), ..Envelope::ok() })
}
