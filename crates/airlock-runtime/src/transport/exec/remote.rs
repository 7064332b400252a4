//! The run step of a `[command]` call on the `cluster` tier: the worker
//! spec the call would run with here becomes a signed order for a worker
//! of `[cluster]`'s tier and pool (airlock-cluster's edge), and its
//! verified receipt becomes the outcome this process judges and publishes
//! exactly as a local run's. Only this process touches host files.

use super::ExecPayload;
use crate::engine::PreparedCall;
use crate::Runtime;
use airlock_cluster::edge::{EdgeSettings, RemoteCall};
use airlock_cluster::{Blob, Order, OrderInput, OrderOutput, RunSpec};
use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::{WorkerOutcome, WorkerSpec};
use serde_json::{json, Value};
use std::time::Duration;

impl Runtime {
    /// Runs `spec` on a worker of the cluster; its outcome, and what the
    /// journal keeps of the exchange (the order's digest and the worker's
    /// signed receipt).
    pub(super) fn run_remote(
        &self,
        prepared: &PreparedCall<ExecPayload>,
        spec: WorkerSpec,
    ) -> (Result<WorkerOutcome, Refusal>, Option<Value>) {
        let Some(cluster) = self.config().cluster.as_ref() else {
            let why = "the call is for the cluster tier, but airlock.toml has no [cluster] section";
            return (Err(Refusal::new(ReasonCode::SandboxUnavailable, why)), None);
        };
        let d = prepared.descriptor();
        let fs = &d.command_boundary.filesystem;
        let inputs = prepared
            .record()
            .inputs
            .iter()
            .map(|rec| OrderInput {
                virtual_path: rec.path.clone(),
                blob: Blob { sha256: rec.sha256.clone(), bytes: rec.bytes },
            })
            .collect();
        let from_stdout = spec.stdout_sink.is_some();
        let order = Order {
            version: airlock_cluster::order::ORDER_VERSION,
            invocation_id: prepared.invocation_id().to_owned(),
            tier: String::new(),
            pool: String::new(),
            issued_at_ms: 0,
            expires_at_ms: 0,
            descriptor: d.clone(),
            descriptor_sha256: prepared.digest().to_owned(),
            run: RunSpec {
                argv: spec.argv,
                env: spec.env,
                working_dir: spec.working_dir,
                inputs,
                output: fs.create.first().map(|path| OrderOutput {
                    virtual_path: path.clone(),
                    max_bytes: fs.max_file_bytes,
                    from_stdout,
                }),
                limits: spec.limits,
                timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
                stdout_limit: spec.stdout_limit as u64,
                stderr_limit: spec.stderr_limit as u64,
            },
        };
        let endpoint = match self.cluster_endpoint(None) {
            Ok(e) => e,
            Err(refusal) => return (Err(refusal), None),
        };
        let settings = EdgeSettings {
            endpoint,
            tier: cluster.tier.clone(),
            pool: cluster.pool.clone(),
            queue: Duration::from_secs(cluster.queue_seconds),
        };
        let call = RemoteCall {
            order,
            inputs: spec.inputs.into_iter().map(|i| i.file).collect(),
            output: spec.output.as_ref().map(|o| &o.file),
            stdout_sink: spec.stdout_sink.as_ref(),
        };
        match airlock_cluster::edge::run(&settings, self.journal().key(), call) {
            Ok(remote) => {
                let r = &remote.receipt;
                tracing::debug!(
                    worker = %r.worker.key_id,
                    host = %r.worker.host,
                    uploaded = remote.uploaded,
                    reused = remote.reused,
                    elapsed_ms = remote.elapsed.as_millis() as u64,
                    "cluster call answered"
                );
                let evidence = json!({
                    "tier": r.worker.tier,
                    "pool": r.worker.pool,
                    "worker_key_id": r.worker.key_id,
                    "host": r.worker.host,
                    "order_sha256": r.order_sha256,
                    "receipt": remote.envelope,
                    "inputs_uploaded": remote.uploaded,
                    "inputs_reused": remote.reused,
                    "inputs_inlined": remote.inlined,
                    "results_ignored": remote.ignored,
                });
                (Ok(remote.outcome), Some(evidence))
            }
            Err(e) => (Err(e.into()), None),
        }
    }
}
