//! `[mcp.schema_pin]`: the upstream tool's schema checked against a
//! SchemaPin pin before any of the call's files is staged into a worker.
//!
//! The schema is the tool object the server's `tools/list` returns for the
//! upstream tool, canonicalized as SchemaPin does (keys sorted, no
//! whitespace: `schemapin::canonicalize`); its digest is `sha256:` and the
//! hex SHA-256 of that text, and SchemaPin's signature is ECDSA P-256 over
//! the 32-byte hash (DER, base64). A pinned tool is first discovered by a
//! worker that holds none of the call's files (no snapshot, no output); the
//! call's worker starts only once that schema has the pinned digest and a
//! valid signature by the pinned key, and its own discovery must show the
//! same schema again before the `tools/call` is sent. Anything else is
//! `mcp.schema_unpinned`: no call, nothing published.

use super::client::{Client, ClientError};
use crate::failure::sandbox_refusal;
use crate::Runtime;
use airlock_core::manifest::{Manifest, McpSpec, SchemaPin};
use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::{Worker as _, WorkerOutcome, WorkerSpec};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// The file-size limit of a discovery worker, which has no output of its
/// own (its server may still write scratch files, bounded by the tmpfs).
const DISCOVERY_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The SchemaPin digest of a discovered tool object.
pub(crate) fn schema_digest(tool: &Value) -> String {
    let canonical = schemapin::canonicalize::canonicalize_schema(tool);
    format!("sha256:{}", hex::encode(Sha256::digest(canonical.as_bytes())))
}

/// Checks `tool` (as discovered) against `pin`: its digest, then the
/// signature by the pinned key. Returns the verified digest.
pub(crate) fn verify(pin: &SchemaPin, upstream: &str, tool: &Value) -> Result<String, Refusal> {
    let unpinned = |why: String| Refusal::new(ReasonCode::McpSchemaUnpinned, why);
    let digest = schema_digest(tool);
    if digest != pin.digest {
        return Err(unpinned(format!(
            "the upstream tool {upstream:?} has schema {digest}, not the pinned {} (it changed since it was pinned: \
             review it with `airlock mcp pin`, have it signed again and update [mcp.schema_pin]); no file was \
             staged and nothing was published",
            pin.digest
        )));
    }
    let hash = schemapin::canonicalize::canonicalize_and_hash(tool);
    match schemapin::crypto::verify_signature(&pin.key, &hash, &pin.signature) {
        Ok(true) => Ok(digest),
        Ok(false) => Err(unpinned(format!(
            "the schema {digest} of upstream tool {upstream:?} is not signed by the pinned key (the signature does not \
             verify); no file was staged and nothing was published"
        ))),
        Err(e) => Err(unpinned(format!(
            "the schema_pin of upstream tool {upstream:?} cannot be checked: {e} (key must be a P-256 public key in \
             PEM, signature SchemaPin's base64 DER); no file was staged and nothing was published"
        ))),
    }
}

/// What a discovery-only worker found: the tool object (or why not), and
/// the worker's outcome (for its stderr tail).
pub(crate) struct Discovery {
    /// The discovered tool object, or the failure.
    pub tool: Result<Value, Refusal>,
    /// How the discovery worker ended.
    pub outcome: WorkerOutcome,
}

impl Runtime {
    /// Starts `spec`'s server in a worker that holds none of a call's files
    /// (no snapshot, no output, no call id), runs `initialize` and
    /// `tools/list`, and kills it.
    pub(crate) fn discover_unstaged(&self, manifest: &Manifest, spec: &McpSpec) -> Result<Discovery, Refusal> {
        let tier = self.native_tier()?;
        let timeout = Duration::from_secs(manifest.tool.timeout_seconds);
        let worker_spec = WorkerSpec {
            argv: spec.server.clone(),
            env: Vec::new(),
            working_dir: self.config().working_dir.clone(),
            inputs: Vec::new(),
            output: None,
            image: self.image(),
            limits: super::super::exec::worker_limits(manifest, DISCOVERY_FILE_BYTES),
            timeout,
            stdout_limit: 0,
            stdout_sink: None,
            stderr_limit: super::super::exec::STDERR_LIMIT,
            fs_socket: None,
            start_gate: None,
            provided: Vec::new(),
            call_id: None,
        };
        let (worker, live) = tier
            .start_live(worker_spec)
            .map_err(|e| sandbox_refusal(&e, format!("the MCP server {:?}", spec.server[0])))?;
        let kill = worker.kill_handle();
        let mut client = Client::new(live.stdin, live.stdout, Instant::now() + timeout);
        let tool = client.initialize().and_then(|_| client.discover(&spec.tool)).map_err(discovery_refusal);
        let _ = kill.kill();
        client.close();
        let outcome = worker.wait().map_err(|e| sandbox_refusal(&e, "the MCP server"))?;
        Ok(Discovery { tool, outcome })
    }

    /// `airlock mcp pin TOOL`: discovers the upstream tool of the `[mcp]`
    /// tool `tool` (with none of a call's files) and answers its canonical
    /// schema, digest and the signature request for an operator.
    pub fn mcp_pin(&self, tool: &str) -> Result<Value, Refusal> {
        let loaded = self.load_tool(tool)?;
        let manifest = &loaded.manifest;
        let spec = manifest.mcp_spec()?.ok_or_else(|| {
            Refusal::new(
                ReasonCode::Usage,
                format!("{tool:?} is not an [mcp] tool: there is no upstream schema to pin"),
            )
        })?;
        let found = self.discover_unstaged(manifest, &spec)?.tool?;
        let canonical = schemapin::canonicalize::canonicalize_schema(&found);
        let digest = schema_digest(&found);
        let pinned = spec.schema_pin.as_ref().map(|pin| match verify(pin, &spec.tool, &found) {
            Ok(_) => json!({ "ok": true }),
            Err(r) => json!({ "ok": false, "code": r.code, "message": r.message }),
        });
        Ok(json!({
            "tool": manifest.tool.name,
            "upstream_tool": spec.tool,
            "schema": found,
            "canonical_schema": canonical,
            "digest": digest,
            "signature_request": {
                "format": "SchemaPin: ECDSA P-256 with SHA-256 over the SHA-256 of canonical_schema, DER, base64",
                "sign": "with SchemaPin's tools, e.g. Python: schemapin.core.SchemaPinCore.canonicalize_and_hash(schema) \
                         then schemapin.crypto.SignatureManager.sign_schema_hash(hash, private_key)",
                "config": format!(
                    "[mcp.schema_pin]\nkey = '''<the signer's public key, PEM>'''\ndigest = \"{digest}\"\nsignature = \
                     \"<SchemaPin's base64 signature>\"\n"
                ),
            },
            "pinned": pinned,
        }))
    }
}

/// A discovery failure as the call's refusal.
pub(crate) fn discovery_refusal(e: ClientError) -> Refusal {
    match e {
        ClientError::Deadline(step) => {
            Refusal::new(ReasonCode::ToolTimeout, format!("the MCP server ran past timeout_seconds during {step}"))
        }
        ClientError::ToolMissing(tool) => {
            Refusal::new(ReasonCode::McpToolMissing, format!("the MCP server offers no tool named {tool:?}"))
        }
        ClientError::Protocol(why) => Refusal::new(ReasonCode::McpProtocol, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_of_the_canonical_schema_and_a_signature_must_verify() {
        let tool = json!({"name": "upper", "inputSchema": {"type": "object", "properties": {}}});
        let reordered = json!({"inputSchema": {"properties": {}, "type": "object"}, "name": "upper"});
        assert_eq!(schema_digest(&tool), schema_digest(&reordered));
        let canonical = r#"{"inputSchema":{"properties":{},"type":"object"},"name":"upper"}"#;
        assert_eq!(schema_digest(&tool), format!("sha256:{}", hex::encode(Sha256::digest(canonical))));

        let keys = schemapin::crypto::generate_key_pair().unwrap();
        let hash = schemapin::canonicalize::canonicalize_and_hash(&tool);
        let signature = schemapin::crypto::sign_data(&keys.private_key_pem, &hash).unwrap();
        let pin = SchemaPin { key: keys.public_key_pem.clone(), digest: schema_digest(&tool), signature };
        assert_eq!(verify(&pin, "upper", &tool).unwrap(), pin.digest);

        let changed = json!({"name": "upper", "inputSchema": {"type": "object"}});
        assert_eq!(verify(&pin, "upper", &changed).unwrap_err().code, ReasonCode::McpSchemaUnpinned);
        let other = schemapin::crypto::generate_key_pair().unwrap();
        let wrong_key = SchemaPin { key: other.public_key_pem, ..pin.clone() };
        assert_eq!(verify(&wrong_key, "upper", &tool).unwrap_err().code, ReasonCode::McpSchemaUnpinned);
        let garbage = SchemaPin { signature: "not base64!".into(), ..pin };
        assert_eq!(verify(&garbage, "upper", &tool).unwrap_err().code, ReasonCode::McpSchemaUnpinned);
    }
}
