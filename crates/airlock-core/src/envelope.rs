//! The answer airlock prints: one JSON object per call (DESIGN.md §3).

use crate::descriptor::Descriptor;
use crate::reason::{ReasonCode, Refusal, Status};
use serde::Serialize;

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
    /// The tool's parsed output, or a command's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// Receipts for published files.
    pub created_files: Vec<CreatedFile>,
    /// The resolved call, when it was prepared.
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
            content: None,
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
