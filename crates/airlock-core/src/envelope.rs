//! The answer airlock prints: one JSON object per call (DESIGN.md §3).
//!
//! One shape for every call kind (a tool, an `[mcp]` tool, a source or Git
//! query, an isolated submission), success and failure alike: `content` is
//! the tool's parsed output whenever there is one (a failure never replaces
//! it with the raw streams), the streams' last bytes are beside it
//! (`stdout_tail`, `stderr_tail`, at most [`TAIL_BYTES`] each), and
//! `evidence` binds the answer to the call (descriptor digest, policies,
//! principal, the journal's key and the seq range of the call's records).
//! The descriptor itself is in an answer only at stage `prepared` (`airlock
//! prepare`, `approval.required`): a finished call names it by digest. Its
//! JSON Schema is [`crate::envelope_schema::schema`] (`airlock schema
//! envelope`).

use crate::descriptor::Descriptor;
use crate::reason::{ReasonCode, Refusal, Status};
use serde::Serialize;

/// Most bytes of a stream an answer keeps ([`stream_tail`]): 4 KiB.
pub const TAIL_BYTES: usize = 4096;

/// The last [`TAIL_BYTES`] of `bytes` as text: the cut moves forward past
/// any UTF-8 continuation bytes so no character is split at the start, and
/// what is still not valid UTF-8 is replaced (U+FFFD). `None` when `bytes`
/// is empty.
pub fn stream_tail(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() {
        return None;
    }
    let mut start = bytes.len().saturating_sub(TAIL_BYTES);
    // At most three continuation bytes begin a cut character.
    for _ in 0..3 {
        match bytes.get(start) {
            Some(b) if start > 0 && b & 0xC0 == 0x80 => start += 1,
            _ => break,
        }
    }
    Some(String::from_utf8_lossy(&bytes[start..]).into_owned())
}

/// `error` of an envelope whose status is not `ok`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// Stable dotted code.
    pub code: ReasonCode,
    /// What happened, for people.
    pub message: String,
}

/// A receipt for one published file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CreatedFile {
    /// Path relative to the working directory.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// `sha256:` and hex digest.
    pub sha256: String,
}

/// Evidence binding the answer to the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Evidence {
    /// `sha256:` digest of the canonical descriptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptor_sha256: Option<String>,
    /// Ids of the policies that permitted the call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_ids: Vec<String>,
    /// Who made the call (`Airlock::Agent` id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// How the worker's resources were bounded, for every call that ran one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsEvidence>,
    /// The journal that holds the call's records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalEvidence>,
    /// The seq range of the call's records in that journal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<RecordRange>,
}

/// `evidence.journal`: which journal holds the call's records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalEvidence {
    /// The `key_id` every record is signed with: `sha256:` and the hex
    /// SHA-256 of the journal's Ed25519 public key (`journal.pub`).
    pub key_id: String,
}

/// `evidence.records`: the first and last `seq` of the records this answer's
/// process wrote for the call (its `InvocationFinished` or
/// `InvocationRefused` is the last). Records of other calls may lie between
/// them; the call's own carry its `invocation_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecordRange {
    /// The first record's seq.
    pub first: u64,
    /// The last record's seq.
    pub last: u64,
}

/// `evidence.limits`: how the sandbox bounded a worker's resources, as it
/// reported them after the run (DESIGN.md §6, "Resource limits").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitsEvidence {
    /// `cgroup` (`memory.max` over every process of the sandbox, shared
    /// memory included) or `rlimit` (`RLIMIT_AS`, each process's address
    /// space only).
    pub memory: &'static str,
    /// `cgroup` (`pids.max`) or `rlimit` (`RLIMIT_NPROC`).
    pub pids: &'static str,
    /// System V IPC and POSIX message queues: `seccomp-denied`.
    pub ipc: &'static str,
    /// `cgroup` (charged to `memory.max`) or `file-size` (each memfd at most
    /// `RLIMIT_FSIZE`; their sum is not bounded by the memory limit).
    pub memfd: &'static str,
    /// Isolated submissions: how the broker is bounded together with the
    /// worker, `cgroup` (one cgroup for both) or `rlimit` (each its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<&'static str>,
    /// Why no cgroup held the limits, when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_unavailable: Option<String>,
    /// The worker started in a warm sandbox (built before the call, used
    /// by it alone); absent for a sandbox built for the call.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warm_sandbox: bool,
}

/// One envelope.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Envelope {
    /// ok, failed, refused or error.
    pub status: Status,
    /// The invocation this answers, when one was assigned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The tool's name, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Which pipeline step produced this answer (`prepared`, `finished`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<&'static str>,
    /// The tool's exit code, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall-clock milliseconds the call took, from its start to its answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The tool's parsed output, or a command's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// The last bytes of the worker's standard output ([`stream_tail`]),
    /// absent when it wrote none or when its stdout is the output file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_tail: Option<String>,
    /// The last bytes of the worker's standard error ([`stream_tail`]),
    /// absent when it wrote none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// Receipts for published files.
    pub created_files: Vec<CreatedFile>,
    /// The resolved call, only in answers of stage `prepared` (a finished
    /// call names it by `evidence.descriptor_sha256`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptor: Option<Descriptor>,
    /// Evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Why, when the status is not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Envelope {
    /// An `ok` envelope with nothing in it yet.
    pub fn ok() -> Envelope {
        Envelope {
            status: Status::Ok,
            invocation_id: None,
            tool: None,
            stage: None,
            exit_code: None,
            duration_ms: None,
            content: None,
            stdout_tail: None,
            stderr_tail: None,
            created_files: Vec::new(),
            descriptor: None,
            evidence: None,
            error: None,
        }
    }

    /// The envelope of a refusal or error; its status comes from the code.
    pub fn from_refusal(refusal: &Refusal) -> Envelope {
        Envelope {
            status: refusal.code.status(),
            error: Some(ErrorBody { code: refusal.code, message: refusal.message.clone() }),
            ..Envelope::ok()
        }
    }

    /// The process exit code for this envelope.
    pub fn exit_code_for_process(&self) -> i32 {
        match &self.error {
            Some(e) => e.code.exit_code(),
            None => crate::reason::exit::OK,
        }
    }

    /// The envelope as one line of JSON, or indented with `pretty`.
    pub fn to_json(&self, pretty: bool) -> String {
        let r = if pretty { serde_json::to_string_pretty(self) } else { serde_json::to_string(self) };
        r.expect("envelopes always serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_the_last_bytes_and_never_splits_a_character() {
        assert_eq!(stream_tail(b""), None);
        assert_eq!(stream_tail(b"short\n").as_deref(), Some("short\n"));
        let mut long = "é".repeat(TAIL_BYTES); // two bytes each
        long.push('!');
        let tail = stream_tail(long.as_bytes()).unwrap();
        assert!(tail.len() <= TAIL_BYTES && tail.ends_with('!'), "{}", tail.len());
        assert!(!tail.contains('\u{FFFD}'), "the cut moved past the split character");
        assert_eq!(stream_tail(b"a\xffb").as_deref(), Some("a\u{FFFD}b"));
    }
}
