//! `airlock worker`: pulls calls of one tier and pool from the shared work
//! queue, verifies each, runs it on the local tier exactly as a local call,
//! and answers with a signed receipt. A worker holds no ceiling and opens no
//! host file of the edge: what it runs is what the order's blobs hold, and
//! what it returns is only blobs and a receipt the edge checks.

use crate::bus::{from_start, read_from_start, Bus};
use crate::error::{unavailable, ClusterError};
use crate::order::Inline;
use crate::order::{now_ms, Blob, InlineSet, Order, INLINE_MAX_EACH, ORDER_TYPE};
use crate::receipt::{Ran, Receipt, Refused, Timings, Verdict, WorkerIdentity, RECEIPT_TYPE, RECEIPT_VERSION};
use crate::signed::{seal, wire, Unverified};
use crate::subjects::{self, Role};
use airlock_core::HasReason;
use airlock_journal::JournalKey;
use airlock_sandbox::{
    AnyTier, ImageMount, SandboxError, StagedInput, StagedOutput, Tier as _, Worker as _, WorkerOutcome, WorkerSpec,
};
use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// How long one pull waits for a call before the worker looks at its stop
/// flag and reports again.
const PULL_WAIT: Duration = Duration::from_secs(1);
/// How often an idle worker reports its state.
const REPORT_EVERY: Duration = Duration::from_secs(5);
/// How long a call given back to the queue waits before it is delivered
/// again.
const RETURN_DELAY: Duration = Duration::from_millis(500);
/// How long a worker retries a blob the cluster does not serve (a node
/// died and its streams elect a leader) before it gives the call back.
const BLOB_RETRY: Duration = Duration::from_secs(5);
/// How often a running call tells the server it is still in progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// What a worker serves, and where it keeps a call's files.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The cluster, and who this worker is on it.
    pub endpoint: crate::bus::Endpoint,
    /// The tier it runs (its `[sandbox]` tier's name).
    pub tier: String,
    /// The pool it serves.
    pub pool: String,
    /// Unacknowledged this long (the worker died), a call goes to another
    /// worker; a running call keeps it from expiring.
    pub ack_wait: Duration,
    /// Its host name, for receipts and `airlock workers list`.
    pub host: String,
    /// A private directory for each call's inputs and output while it runs.
    pub scratch: PathBuf,
    /// The image its workers see.
    pub image: Vec<ImageMount>,
    /// The most an order may ask of this host.
    pub caps: crate::caps::WorkerCaps,
}

/// What a worker reports as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Connected and pulling.
    Serving {
        /// Its key id.
        key_id: String,
    },
    /// Took a call.
    Took {
        /// The call.
        invocation_id: String,
    },
    /// Answered a call (`ran`, or a refusal's code), after `ms`.
    Answered {
        /// The call.
        invocation_id: String,
        /// `ran` or the refusal's code.
        verdict: String,
        /// From taking it to its receipt.
        ms: u64,
    },
    /// A call given back to the queue: the cluster failed this worker
    /// while it fetched or uploaded.
    Returned {
        /// The call.
        invocation_id: String,
        /// Why.
        reason: String,
    },
    /// A message that is not a verifiable order was dropped.
    Dropped {
        /// Why.
        reason: String,
    },
    /// The stop flag was seen: no more pulls.
    Draining,
}

/// Totals of one [`serve`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// Calls that ran.
    pub ran: u64,
    /// Calls refused with a signed receipt.
    pub refused: u64,
    /// Messages dropped unanswered (not verifiable orders).
    pub dropped: u64,
}

/// What a worker is doing, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Waiting for a call.
    Idle,
    /// A call has run for 250 ms or more.
    Busy,
    /// It exited (drained or failed).
    Stopped,
}

impl WorkerState {
    /// Its name in a report.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Idle => "idle",
            WorkerState::Busy => "busy",
            WorkerState::Stopped => "stopped",
        }
    }
}

/// How recent a report must be for its worker to count as live: three
/// idle reports (one every 5 s).
pub const LIVE_WITHIN_MS: u64 = 15_000;

/// The state a worker reports in the worker bucket (`airlock workers
/// list`, `airlock doctor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Its key id.
    pub key_id: String,
    /// The tier it serves.
    pub tier: String,
    /// The pool it serves.
    pub pool: String,
    /// Its host name.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// What it is doing.
    pub state: WorkerState,
    /// Its totals so far.
    pub served: Served,
    /// When it reported (ms since the epoch).
    pub updated_at_ms: u64,
}

impl WorkerReport {
    /// Whether it serves `tier`/`pool`, has not stopped and reported within
    /// [`LIVE_WITHIN_MS`] of `now_ms`.
    pub fn is_live_for(&self, tier: &str, pool: &str, now_ms: u64) -> bool {
        self.tier == tier
            && self.pool == pool
            && self.state != WorkerState::Stopped
            && now_ms.saturating_sub(self.updated_at_ms) < LIVE_WITHIN_MS
    }
}

/// Serves calls until `stop` is set (then finishes the call it holds and
/// returns), signing receipts with `key` and running calls on `tier`.
pub fn serve(
    settings: &WorkerSettings,
    key: &JournalKey,
    tier: &AnyTier,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Served, ClusterError> {
    subjects::check_token("tier", &settings.tier)?;
    subjects::check_token("pool", &settings.pool)?;
    let rt = crate::client::runtime()?;
    remove_dead_calls(&settings.scratch);
    let bus = rt.block_on(Bus::connect(&settings.endpoint, &format!("airlock-worker {}", settings.host)))?;
    let consumer = rt.block_on(consumer(&bus, settings))?;
    let server = Server { settings, key, tier, bus, rt };
    on_event(&Event::Serving { key_id: key.key_id() });
    let mut served = Served::default();
    let mut reported = None::<Instant>;
    while !stop.load(Ordering::SeqCst) {
        if reported.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            server.report(WorkerState::Idle, served);
            reported = Some(Instant::now());
        }
        let batch = server.rt.block_on(async {
            let mut batch = consumer
                .fetch()
                .max_messages(1)
                .expires(PULL_WAIT)
                .messages()
                .await
                .map_err(|e| unavailable("pulling a call", e))?;
            let mut got = Vec::new();
            while let Some(m) = batch.next().await {
                got.push(m.map_err(|e| unavailable("pulling a call", e))?);
            }
            Ok::<_, ClusterError>(got)
        });
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                // The cluster may be electing a leader: try again shortly.
                tracing::warn!(error = %e, "pull failed");
                std::thread::sleep(PULL_WAIT);
                continue;
            }
        };
        for message in batch {
            server.handle(message, &mut served, on_event);
            server.report(WorkerState::Idle, served);
            reported = Some(Instant::now());
        }
    }
    on_event(&Event::Draining);
    server.report(WorkerState::Stopped, served);
    Ok(served)
}

async fn consumer(bus: &Bus, settings: &WorkerSettings) -> Result<jetstream::consumer::PullConsumer, ClusterError> {
    let stream = bus
        .jetstream()
        .get_stream(subjects::CALLS_STREAM)
        .await
        .map_err(|e| unavailable("opening the calls stream (has `airlock cluster init` been run?)", e))?;
    let name = subjects::consumer_name(&settings.tier, &settings.pool);
    stream
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: subjects::calls_subject(&settings.tier, &settings.pool),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: settings.ack_wait,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| unavailable("creating the workers' consumer", e))
}

struct Server<'a> {
    settings: &'a WorkerSettings,
    key: &'a JournalKey,
    tier: &'a AnyTier,
    bus: Bus,
    rt: Runtime,
}

impl Server<'_> {
    fn report(&self, state: WorkerState, served: Served) {
        let key_id = self.key.key_id();
        let entry = key_id.trim_start_matches("sha256:").to_owned();
        let report = WorkerReport {
            key_id,
            tier: self.settings.tier.clone(),
            pool: self.settings.pool.clone(),
            host: self.settings.host.clone(),
            pid: std::process::id(),
            state,
            served,
            updated_at_ms: now_ms(),
        };
        let value = serde_json::to_vec(&report).unwrap_or_default();
        if let Err(e) = self.rt.block_on(self.bus.report_worker(&entry, value)) {
            tracing::warn!(error = %e, "could not report the worker's state");
        }
    }

    /// Verifies, runs and answers one message; acknowledges it once its
    /// receipt is stored (or drops it if it is no verifiable order).
    fn handle(&self, message: jetstream::Message, served: &mut Served, on_event: &mut dyn FnMut(&Event)) {
        let taken = Instant::now();
        let started_at_ms = now_ms();
        let (order, order_sha256, carried) = match self.rt.block_on(self.verify(&message.payload)) {
            Ok(v) => v,
            // The key bucket could not be read: nothing is known about the
            // message yet, so it goes back to the queue.
            Err(e @ ClusterError::Unavailable(_)) => {
                on_event(&Event::Returned { invocation_id: "(unverified)".into(), reason: e.to_string() });
                let _ = self.rt.block_on(message.ack_with(AckKind::Nak(Some(RETURN_DELAY))));
                return;
            }
            Err(e) => {
                // Nobody can be answered for a message that is not a
                // verifiable order: it is removed, never redelivered.
                served.dropped += 1;
                on_event(&Event::Dropped { reason: e.to_string() });
                let _ = self.rt.block_on(message.ack_with(AckKind::Term));
                return;
            }
        };
        on_event(&Event::Took { invocation_id: order.invocation_id.clone() });
        let mut inline = Vec::new();
        let verdict = match self.run(&order, &carried, &message, *served) {
            Ok((ran, small)) => {
                served.ran += 1;
                inline = small;
                Verdict::Ran(Box::new(ran))
            }
            // The cluster failed this worker, not the call: the call goes
            // back to the queue (to this worker or another) while its order
            // is still valid, and nobody is told it was refused.
            Err(e @ ClusterError::Unavailable(_)) => {
                on_event(&Event::Returned { invocation_id: order.invocation_id.clone(), reason: e.to_string() });
                let _ = self.rt.block_on(message.ack_with(AckKind::Nak(Some(RETURN_DELAY))));
                return;
            }
            Err(e) => {
                served.refused += 1;
                Verdict::Refused(Refused { code: e.reason().as_str().to_owned(), message: e.to_string() })
            }
        };
        let answered = match &verdict {
            Verdict::Ran(_) => "ran".to_owned(),
            Verdict::Refused(r) => r.code.clone(),
        };
        let receipt = Receipt {
            version: RECEIPT_VERSION,
            invocation_id: order.invocation_id.clone(),
            order_sha256,
            descriptor_sha256: order.descriptor_sha256.clone(),
            worker: WorkerIdentity {
                key_id: self.key.key_id(),
                tier: self.settings.tier.clone(),
                pool: self.settings.pool.clone(),
                host: self.settings.host.clone(),
            },
            started_at_ms,
            finished_at_ms: now_ms(),
            verdict,
        };
        let (envelope, _) = seal(self.key, RECEIPT_TYPE, &receipt);
        let published = self.rt.block_on(async {
            let body = wire(&envelope, inline)?;
            // Retried while the cluster elects a leader, within the ack
            // wait (past it, the call goes to another worker anyway).
            let give_up = tokio::time::Instant::now() + self.settings.ack_wait;
            crate::client::retried(give_up, || async {
                self.bus
                    .jetstream()
                    .publish(subjects::results_subject(&order.invocation_id), body.clone().into())
                    .await
                    .map_err(|e| unavailable("publishing a receipt", e))?
                    .await
                    .map_err(|e| unavailable("publishing a receipt (no acknowledgement)", e))
            })
            .await?;
            message.double_ack().await.map_err(|e| unavailable("acknowledging a call", e))
        });
        if let Err(e) = published {
            // Not acknowledged: the call goes to a worker again after the
            // ack wait; the edge takes the first receipt it can verify.
            tracing::warn!(invocation_id = %order.invocation_id, error = %e, "receipt not delivered");
        }
        let ms = u64::try_from(taken.elapsed().as_millis()).unwrap_or(u64::MAX);
        on_event(&Event::Answered { invocation_id: order.invocation_id, verdict: answered, ms });
    }

    /// The order in `bytes`, if a pinned edge key signed it, it is well
    /// formed, for this worker's tier and pool, and not expired.
    async fn verify(&self, bytes: &[u8]) -> Result<(Order, String, Vec<Inline>), ClusterError> {
        let unverified = Unverified::parse(bytes)?;
        let key = self.bus.pinned_key(Role::Edge, unverified.key_id()?).await?;
        let opened = unverified.open::<Order>(&key, ORDER_TYPE)?;
        opened.value.check()?;
        Ok((opened.value, opened.digest, opened.inline))
    }

    /// Runs a verified order: fetches its inputs, runs it on the tier while
    /// telling the server it is in progress, and keeps or uploads what came
    /// of it; the receipt's account of the run, and the small blobs that go
    /// beside it.
    fn run(
        &self,
        order: &Order,
        carried: &[Inline],
        message: &jetstream::Message,
        served: Served,
    ) -> Result<(Ran, Vec<Inline>), ClusterError> {
        self.admit(order)?;
        let fetch = Instant::now();
        let call_dir = tempfile::Builder::new()
            .prefix(&format!("call-{}-", std::process::id()))
            .tempdir_in(&self.settings.scratch)
            .map_err(|e| ClusterError::Io(format!("a call directory in {}: {e}", self.settings.scratch.display())))?;
        let mut inputs = Vec::with_capacity(order.run.inputs.len());
        for (i, input) in order.run.inputs.iter().enumerate() {
            let file = self.fetch_input(&input.blob, carried, &call_dir.path().join(format!("input-{i}")))?;
            inputs.push(StagedInput { virtual_path: input.virtual_path.clone(), file, held: false });
        }
        let (spec, out_file) = self.spec_of(order, inputs, &call_dir.path().join("output"))?;
        let fetch_ms = elapsed_ms(fetch);
        let run = Instant::now();
        let outcome = self.run_with_progress(spec, message, served).map_err(|e| ClusterError::Refused {
            code: e.kind().as_str().to_owned(),
            message: format!("the worker's sandbox: {e}"),
        })?;
        let run_ms = elapsed_ms(run);
        let upload = Instant::now();
        let mut inline = InlineSet::default();
        let stdout = self.store(&outcome.stdout, &mut inline)?;
        let stderr = self.store(&outcome.stderr, &mut inline)?;
        let exported = match (&order.run.output, &outcome.output) {
            (Some(o), _) if o.from_stdout => true,
            (Some(_), Some(export)) => export.exported(),
            _ => false,
        };
        let output = match out_file.filter(|_| exported) {
            Some(file) => Some(self.store_file(&file, &mut inline)?),
            None => None,
        };
        let ran = Ran {
            exit: outcome.exit,
            timed_out: outcome.timed_out,
            stdout,
            stdout_truncated: outcome.stdout_truncated,
            stderr,
            stderr_truncated: outcome.stderr_truncated,
            output_export: outcome.output,
            output,
            cleanup_confirmed: outcome.cleanup_confirmed,
            limits: outcome.limits,
            timings: Timings { fetch_ms, run_ms, upload_ms: elapsed_ms(upload) },
        };
        Ok((ran, inline.into_vec()))
    }

    /// Refuses an order for another tier or pool, one that waited in the
    /// queue past its expiry, or one over this host's caps.
    fn admit(&self, order: &Order) -> Result<(), ClusterError> {
        if order.tier != self.settings.tier || order.pool != self.settings.pool {
            return Err(ClusterError::Refused {
                code: "cluster.refused".into(),
                message: format!(
                    "the order is for {}/{}, this worker serves {}/{}",
                    order.tier, order.pool, self.settings.tier, self.settings.pool
                ),
            });
        }
        if now_ms() > order.expires_at_ms {
            return Err(ClusterError::Timeout(format!(
                "the order expired {} ms ago: it waited in the queue longer than its edge's queue time",
                now_ms() - order.expires_at_ms
            )));
        }
        self.settings.caps.admit(&order.run)
    }

    /// `blob` (beside the order, or from the store, retried while the
    /// cluster recovers) in a new private file at `path`, reopened
    /// read-only for the sandbox.
    fn fetch_input(&self, blob: &Blob, carried: &[Inline], path: &std::path::Path) -> Result<File, ClusterError> {
        let file = create(path)?;
        let give_up = tokio::time::Instant::now() + BLOB_RETRY;
        self.rt.block_on(crate::client::retried(give_up, || self.bus.fetch_into(blob, carried, &file)))?;
        File::open(path).map_err(|e| ClusterError::Io(format!("reopening an input: {e}")))
    }

    /// The sandbox's spec for `order` with `inputs`, the call's own parts
    /// from the order and the host's (image) from the settings; and the
    /// output's file at `out_path`, if the call has one (written by the
    /// tool, or its stdout).
    fn spec_of(
        &self,
        order: &Order,
        inputs: Vec<StagedInput>,
        out_path: &std::path::Path,
    ) -> Result<(WorkerSpec, Option<File>), ClusterError> {
        let (output, stdout_sink, out_file) = match &order.run.output {
            None => (None, None, None),
            Some(o) => {
                let file = create(out_path)?;
                let dup = file.try_clone().map_err(|e| ClusterError::Io(format!("dup: {e}")))?;
                if o.from_stdout {
                    (None, Some(dup), Some(file))
                } else {
                    let staged =
                        StagedOutput { virtual_path: o.virtual_path.clone(), file: dup, max_bytes: o.max_bytes };
                    (Some(staged), None, Some(file))
                }
            }
        };
        let spec = WorkerSpec {
            argv: order.run.argv.clone(),
            env: order.run.env.clone(),
            working_dir: order.run.working_dir.clone(),
            inputs,
            output,
            image: self.settings.image.clone(),
            limits: order.run.limits.clone(),
            timeout: Duration::from_millis(order.run.timeout_ms),
            stdout_limit: usize::try_from(order.run.stdout_limit).unwrap_or(usize::MAX),
            stdout_sink,
            stderr_limit: usize::try_from(order.run.stderr_limit).unwrap_or(usize::MAX),
            fs_socket: None,
            start_gate: None,
            provided: Vec::new(),
            call_id: Some(order.invocation_id.clone()),
        };
        Ok((spec, out_file))
    }

    /// The output's file as a blob: beside the receipt if it fits, else
    /// uploaded.
    fn store_file(&self, file: &File, inline: &mut InlineSet) -> Result<Blob, ClusterError> {
        // A small output is read once; a large one is hashed, then streamed.
        let small = read_from_start(file, INLINE_MAX_EACH)?;
        if small.len() as u64 <= INLINE_MAX_EACH {
            return self.store(&small, inline);
        }
        let blob = hash_file(file)?;
        self.rt.block_on(self.bus.put_blob(&blob, file))?;
        Ok(blob)
    }

    /// `bytes` as a blob: inline if it fits, else uploaded.
    fn store(&self, bytes: &[u8], inline: &mut InlineSet) -> Result<Blob, ClusterError> {
        if inline.offer(bytes) {
            return Ok(Blob { sha256: airlock_core::sha256_tagged(bytes), bytes: bytes.len() as u64 });
        }
        self.rt.block_on(self.bus.put_bytes(bytes))
    }

    /// Runs `spec` on the tier on a thread of its own while this one tells
    /// the server, a few times a second, that the call is in progress (so a
    /// long call is not given to another worker, and a dead worker's is).
    /// A call still running at the first report says so in the worker
    /// bucket (a short call is not held up by a report).
    fn run_with_progress(
        &self,
        spec: WorkerSpec,
        message: &jetstream::Message,
        served: Served,
    ) -> Result<WorkerOutcome, SandboxError> {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let runner = s.spawn(move || {
                let outcome = self.tier.start(spec).and_then(|w| w.wait());
                let _ = done.send(());
                outcome
            });
            let mut reported = false;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(PROGRESS_EVERY) {
                let _ = self.rt.block_on(message.ack_with(AckKind::Progress));
                if !std::mem::replace(&mut reported, true) {
                    self.report(WorkerState::Busy, served);
                }
            }
            runner.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

/// Removes the call directories (`call-PID-…`) of workers that are gone
/// (killed mid-call): best effort, logged.
fn remove_dead_calls(scratch: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("call-")).and_then(|n| n.split('-').next());
        let alive = pid.is_some_and(|pid| std::path::Path::new("/proc").join(pid).exists());
        if pid.is_some() && !alive {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), error = %e, "could not remove a dead call's directory");
            }
        }
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A new private file (`0600`, never an existing one).
fn create(path: &std::path::Path) -> Result<File, ClusterError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ClusterError::Io(format!("creating {}: {e}", path.display())))
}

/// `file`'s SHA-256 and length, read from its start.
fn hash_file(file: &File) -> Result<Blob, ClusterError> {
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut from_start(file)?, &mut hasher)
        .map_err(|e| ClusterError::Io(format!("reading the output: {e}")))?;
    Ok(Blob { sha256: format!("sha256:{}", hex::encode(hasher.finalize())), bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_live_for_its_own_tier_and_pool_while_recent_and_not_stopped() {
        let report = WorkerReport {
            key_id: "sha256:00".into(),
            tier: "native".into(),
            pool: "default".into(),
            host: "h".into(),
            pid: 1,
            state: WorkerState::Idle,
            served: Served::default(),
            updated_at_ms: 100_000,
        };
        assert!(report.is_live_for("native", "default", 100_000 + LIVE_WITHIN_MS - 1));
        assert!(!report.is_live_for("native", "default", 100_000 + LIVE_WITHIN_MS));
        assert!(!report.is_live_for("gvisor", "default", 100_000));
        assert!(!report.is_live_for("native", "other", 100_000));
        let stopped = WorkerReport { state: WorkerState::Stopped, ..report.clone() };
        assert!(!stopped.is_live_for("native", "default", 100_000));
        // The wire form is the one `airlock workers list --json` prints.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["state"], "idle");
        assert_eq!(serde_json::from_value::<WorkerReport>(json).unwrap(), report);
    }
}
