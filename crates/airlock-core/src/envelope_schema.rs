//! The JSON Schema (draft 2020-12) of the envelope ([`crate::Envelope`]),
//! written by hand beside the types it describes and printed by `airlock
//! schema envelope`; MCP's `outputSchema` is the same value
//! ([`with_content`] embeds a manifest's `[output] schema`). The CLI tests
//! validate real envelopes of every call kind against it, so a field added
//! to the types without its schema fails them.

use crate::reason::ReasonCode;
use serde_json::{json, Value};

/// `$id` of the envelope schema.
pub const SCHEMA_ID: &str = "urn:airlock:schema:envelope";

/// The envelope's JSON Schema: every field of [`crate::Envelope`], the
/// status and reason codes as closed enums, nothing else allowed.
pub fn schema() -> Value {
    let codes: Vec<&str> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
    let digest = json!({ "type": "string", "pattern": "^sha256:[0-9a-f]{64}$" });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "airlock envelope",
        "description": "The one JSON object airlock answers every call with (DESIGN.md §3, Envelope).",
        "type": "object",
        "required": ["status", "created_files"],
        "additionalProperties": false,
        "properties": {
            "status": {
                "enum": ["ok", "failed", "refused", "error"],
                "description": "ok; failed (the tool ran and failed); refused (nothing ran); error (airlock failed)"
            },
            "invocation_id": { "type": "string" },
            "tool": { "type": "string" },
            "stage": { "type": "string", "description": "the step that answered: prepared or finished" },
            "exit_code": { "type": "integer", "description": "the worker's exit status (128 + signal when killed)" },
            "duration_ms": { "type": "integer", "minimum": 0, "description": "wall-clock milliseconds of the call" },
            "content": { "description": "the tool's parsed output, or a command's data" },
            "stdout_tail": {
                "type": "string",
                "maxLength": crate::envelope::TAIL_BYTES,
                "description": "the last bytes (at most 4 KiB) of the worker's standard output; absent when empty or when stdout is the output file"
            },
            "stderr_tail": {
                "type": "string",
                "maxLength": crate::envelope::TAIL_BYTES,
                "description": "the last bytes (at most 4 KiB) of the worker's standard error; absent when empty"
            },
            "created_files": {
                "type": "array",
                "description": "receipts of the files published",
                "items": {
                    "type": "object",
                    "required": ["path", "bytes", "sha256"],
                    "additionalProperties": false,
                    "properties": {
                        "path": { "type": "string" },
                        "bytes": { "type": "integer", "minimum": 0 },
                        "sha256": digest
                    }
                }
            },
            "descriptor": {
                "type": "object",
                "description": "the resolved call, only at stage prepared; a finished call names it by evidence.descriptor_sha256"
            },
            "evidence": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "descriptor_sha256": digest,
                    "policy_ids": { "type": "array", "items": { "type": "string" } },
                    "principal": { "type": "string" },
                    "limits": {
                        "type": "object",
                        "required": ["memory", "pids", "ipc", "memfd"],
                        "additionalProperties": false,
                        "properties": {
                            "memory": { "enum": ["cgroup", "rlimit"] },
                            "pids": { "enum": ["cgroup", "rlimit"] },
                            "ipc": { "const": "seccomp-denied" },
                            "memfd": { "enum": ["cgroup", "file-size"] },
                            "broker": { "enum": ["cgroup", "rlimit"] },
                            "cgroup_unavailable": { "type": "string" },
                            "warm_sandbox": { "const": true }
                        }
                    },
                    "journal": {
                        "type": "object",
                        "required": ["key_id"],
                        "additionalProperties": false,
                        "properties": { "key_id": digest }
                    },
                    "records": {
                        "type": "object",
                        "required": ["first", "last"],
                        "additionalProperties": false,
                        "properties": {
                            "first": { "type": "integer", "minimum": 1 },
                            "last": { "type": "integer", "minimum": 1 }
                        }
                    }
                }
            },
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "additionalProperties": false,
                "properties": {
                    "code": { "enum": codes },
                    "message": { "type": "string" }
                }
            }
        },
        "if": { "properties": { "status": { "const": "ok" } } },
        "then": { "not": { "required": ["error"] } },
        "else": { "required": ["error"] }
    })
}

/// [`schema`] with `content` described by `content` (a manifest's `[output]
/// schema`), for a tool whose output has one.
pub fn with_content(content: Value) -> Value {
    let mut s = schema();
    s["properties"]["content"] = content;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_is_in_the_schema() {
        let s = schema();
        let codes = s["properties"]["error"]["properties"]["code"]["enum"].as_array().unwrap();
        assert_eq!(codes.len(), ReasonCode::ALL.len());
    }

    #[test]
    fn a_manifest_schema_describes_content() {
        let s = with_content(json!({ "type": "object" }));
        assert_eq!(s["properties"]["content"], json!({ "type": "object" }));
        assert_eq!(s["properties"]["status"], schema()["properties"]["status"]);
    }
}
