//! The edge's half of a call across hosts: upload the inputs by hash,
//! publish the signed order once, wait for a receipt signed by a pinned
//! worker key, and take the worker's streams and output only as blobs that
//! hash to what the receipt says. The caller (airlock's runtime) then
//! judges and publishes the output exactly as for a local run.

use crate::bus::{read_from_start, Bus};
use crate::client::retried;
use crate::error::{unavailable, ClusterError};
use crate::order::Inline;
use crate::order::{now_ms, Blob, InlineSet, Order, INLINE_MAX_EACH, ORDER_TYPE};
use crate::receipt::{Ran, Receipt, Verdict, RECEIPT_TYPE, RECEIPT_VERSION};
use crate::signed::{seal, wire, Unverified};
use crate::subjects::{self, Role};
use airlock_journal::{DsseEnvelope, JournalKey};
use airlock_sandbox::WorkerOutcome;
use futures_util::StreamExt as _;
use std::fs::File;
use std::time::{Duration, Instant};

/// How long the edge waits for a lost connection to come back before it
/// gives up on a call.
const LOST_AFTER: Duration = Duration::from_secs(3);
/// How long a look in the results stream for a missed receipt may take.
const STORED_LOOK: Duration = Duration::from_secs(2);
/// How long a receipt's key lookup is retried while the cluster recovers.
const KEY_RETRY: Duration = Duration::from_secs(5);

/// Where an edge sends calls, and how long it waits.
#[derive(Debug, Clone)]
pub struct EdgeSettings {
    /// The cluster, and who this edge is on it.
    pub endpoint: crate::bus::Endpoint,
    /// The worker tier calls are for.
    pub tier: String,
    /// The pool of workers calls are for.
    pub pool: String,
    /// How long a call may wait for a free worker, on top of its own
    /// timeout.
    pub queue: Duration,
}

/// One call to send: its order (without its times, which are set when it
/// is signed) and the edge's files.
pub struct RemoteCall<'a> {
    /// The order; `issued_at_ms` and `expires_at_ms` are set here.
    pub order: Order,
    /// The inputs' snapshots, in the order's input order.
    pub inputs: Vec<File>,
    /// Where a file output's bytes go (an empty staged file).
    pub output: Option<&'a File>,
    /// Where a stdout output's bytes go (an empty staged file).
    pub stdout_sink: Option<&'a File>,
}

/// What came back.
#[derive(Debug)]
pub struct RemoteOutcome {
    /// The run as a local run would report it.
    pub outcome: WorkerOutcome,
    /// The worker's receipt, verified.
    pub receipt: Receipt,
    /// The receipt's envelope, for the journal.
    pub envelope: DsseEnvelope,
    /// The order's envelope, for the journal.
    pub order: DsseEnvelope,
    /// Inputs uploaded to the store.
    pub uploaded: usize,
    /// Inputs the store held already.
    pub reused: usize,
    /// Inputs small enough to travel in the order itself.
    pub inlined: usize,
    /// Results on the call's subject that did not verify and were ignored.
    pub ignored: usize,
    /// From the first byte sent to the verified outcome.
    pub elapsed: Duration,
}

/// Sends `call` to the cluster and waits for its verified outcome.
pub fn run(settings: &EdgeSettings, key: &JournalKey, call: RemoteCall<'_>) -> Result<RemoteOutcome, ClusterError> {
    crate::client::block_on(run_async(settings, key, call))
}

async fn run_async(
    settings: &EdgeSettings,
    key: &JournalKey,
    call: RemoteCall<'_>,
) -> Result<RemoteOutcome, ClusterError> {
    let began = Instant::now();
    let RemoteCall { mut order, inputs, output, stdout_sink } = call;
    subjects::check_token("tier", &settings.tier)?;
    subjects::check_token("pool", &settings.pool)?;
    let bus = Bus::connect(&settings.endpoint, "airlock-edge").await?;
    // While a cluster elects a leader (a node died), publications fail for
    // a few seconds: they are retried until the call's queue time is spent.
    let give_up = tokio::time::Instant::now() + settings.queue;
    let (inline, placed) = place_inputs(&bus, &order, &inputs, give_up).await?;
    stamp(&mut order, settings)?;
    let (envelope, order_sha256) = seal(key, ORDER_TYPE, &order);
    let body = wire(&envelope, inline)?;
    // Subscribed before the order goes out, so no receipt can be missed.
    let results = subjects::results_subject(&order.invocation_id);
    let replies = bus.client().subscribe(results).await.map_err(|e| unavailable("subscribing to results", e))?;
    publish_order(&bus, &order, body, give_up).await?;
    let wait = Duration::from_millis(order.run.timeout_ms) + settings.queue;
    let (receipt, receipt_envelope, carried, ignored) =
        await_receipt(&bus, replies, &order, &order_sha256, wait).await?;
    let outcome = match &receipt.verdict {
        Verdict::Refused(r) => return Err(r.to_error()),
        Verdict::Ran(ran) => {
            let fetch_until = tokio::time::Instant::now() + settings.queue;
            take_outcome(&bus, ran, &carried, &order, output, stdout_sink, fetch_until).await?
        }
    };
    Ok(RemoteOutcome {
        outcome,
        receipt,
        envelope: receipt_envelope,
        order: envelope,
        uploaded: placed.uploaded,
        reused: placed.reused,
        inlined: placed.inlined,
        ignored,
        elapsed: began.elapsed(),
    })
}

/// Where the inputs went.
#[derive(Default)]
struct Placed {
    uploaded: usize,
    reused: usize,
    inlined: usize,
}

/// Each input beside the order when small, else in the store (unless a
/// blob of its name and size is there already).
async fn place_inputs(
    bus: &Bus,
    order: &Order,
    inputs: &[File],
    give_up: tokio::time::Instant,
) -> Result<(Vec<Inline>, Placed), ClusterError> {
    let mut placed = Placed::default();
    let mut inline = InlineSet::default();
    for (input, file) in order.run.inputs.iter().zip(inputs) {
        if input.blob.bytes <= INLINE_MAX_EACH && inline.offer(&read_from_start(file, input.blob.bytes)?) {
            placed.inlined += 1;
        } else if retried(give_up, || bus.put_blob(&input.blob, file)).await? {
            placed.uploaded += 1;
        } else {
            placed.reused += 1;
        }
    }
    Ok((inline.into_vec(), placed))
}

/// Addresses and dates the order (it expires when the edge stops waiting
/// for a worker), then checks it as a worker will.
fn stamp(order: &mut Order, settings: &EdgeSettings) -> Result<(), ClusterError> {
    order.tier.clone_from(&settings.tier);
    order.pool.clone_from(&settings.pool);
    order.issued_at_ms = now_ms();
    let queue_ms = u64::try_from(settings.queue.as_millis()).unwrap_or(u64::MAX);
    order.expires_at_ms = order.issued_at_ms.saturating_add(queue_ms);
    order.check()
}

/// Publishes the order on its tier and pool's subject, once: the
/// invocation id is the message id, so a retry of a publication that did
/// land is dropped by the server.
async fn publish_order(
    bus: &Bus,
    order: &Order,
    body: Vec<u8>,
    give_up: tokio::time::Instant,
) -> Result<(), ClusterError> {
    retried(give_up, || async {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", order.invocation_id.as_str());
        bus.jetstream()
            .publish_with_headers(subjects::calls_subject(&order.tier, &order.pool), headers, body.clone().into())
            .await
            .map_err(|e| unavailable("publishing the call", e))?
            .await
            .map_err(|e| unavailable("publishing the call (no acknowledgement)", e))
    })
    .await?;
    Ok(())
}

/// The first result on the call's subject that verifies, within `wait`;
/// and how many did not (never used: the real one may still come).
async fn await_receipt(
    bus: &Bus,
    mut replies: async_nats::Subscriber,
    order: &Order,
    order_sha256: &str,
    wait: Duration,
) -> Result<(Receipt, DsseEnvelope, Vec<Inline>, usize), ClusterError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut ignored = 0;
    let mut cut_since = None::<tokio::time::Instant>;
    // Results whose worker key could not be looked up (the key bucket was
    // electing a leader): not forged, not yet verified; tried again.
    let mut unconfirmed: Vec<Vec<u8>> = Vec::new();
    loop {
        // Looked at every second: a connection lost for LOST_AFTER (no
        // server of the cluster answers) ends the wait; the call's worker
        // may still run, but nothing it returns is taken any more.
        let tick = deadline.min(tokio::time::Instant::now() + Duration::from_secs(1));
        let message = match tokio::time::timeout_at(tick, replies.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ClusterError::Unavailable("the connection closed while waiting".into())),
            Err(_) if tokio::time::Instant::now() < deadline => {
                if bus.client().connection_state() == async_nats::connection::State::Connected {
                    if let Ok(Some(found)) =
                        tokio::time::timeout(STORED_LOOK, confirm(bus, &mut unconfirmed, order, order_sha256)).await
                    {
                        return Ok((found.0, found.1, found.2, ignored));
                    }
                    // A receipt published while the connection was down
                    // never reached the subscription: the results stream
                    // keeps it.
                    if cut_since.take().is_some() {
                        if let Some(found) = stored_receipt(bus, order, order_sha256).await {
                            return Ok((found.0, found.1, found.2, ignored));
                        }
                    }
                } else if cut_since.get_or_insert_with(tokio::time::Instant::now).elapsed() >= LOST_AFTER {
                    return Err(ClusterError::Unavailable(format!(
                        "lost the cluster for {} s while waiting for a worker's answer",
                        LOST_AFTER.as_secs()
                    )));
                }
                continue;
            }
            Err(_) => {
                if let Ok(Some(found)) =
                    tokio::time::timeout(STORED_LOOK, confirm(bus, &mut unconfirmed, order, order_sha256)).await
                {
                    return Ok((found.0, found.1, found.2, ignored));
                }
                // A last look in the stream: a receipt published while a
                // reconnect was too brief to be seen is kept there.
                if let Some(found) = stored_receipt(bus, order, order_sha256).await {
                    return Ok((found.0, found.1, found.2, ignored));
                }
                ignored += unconfirmed.len();
                let unverifiable =
                    if ignored > 0 { format!(" ({ignored} unverifiable results ignored)") } else { String::new() };
                return Err(ClusterError::Timeout(format!(
                    "no worker of tier {:?} in pool {:?} answered within {} s{unverifiable}",
                    order.tier,
                    order.pool,
                    wait.as_secs()
                )));
            }
        };
        match verify_receipt(bus, &message.payload, order, order_sha256).await {
            Ok((receipt, envelope, carried)) => return Ok((receipt, envelope, carried, ignored)),
            Err(e @ ClusterError::Unavailable(_)) => {
                tracing::debug!(invocation_id = %order.invocation_id, error = %e, "a result to verify again");
                unconfirmed.push(message.payload.to_vec());
            }
            Err(e) => {
                tracing::warn!(invocation_id = %order.invocation_id, error = %e, "ignored a result that does not verify");
                ignored += 1;
            }
        }
    }
}

/// The first of `unconfirmed` that verifies now; those that still cannot
/// be looked up are kept, those that fail are dropped (and logged). Each
/// is removed only once it is decided, so a look cut short by a timeout
/// loses none.
async fn confirm(
    bus: &Bus,
    unconfirmed: &mut Vec<Vec<u8>>,
    order: &Order,
    order_sha256: &str,
) -> Option<(Receipt, DsseEnvelope, Vec<Inline>)> {
    let mut i = 0;
    while i < unconfirmed.len() {
        match verify_receipt(bus, &unconfirmed[i], order, order_sha256).await {
            Ok(verified) => {
                unconfirmed.remove(i);
                return Some(verified);
            }
            Err(ClusterError::Unavailable(_)) => i += 1,
            Err(e) => {
                tracing::warn!(invocation_id = %order.invocation_id, error = %e, "ignored a result that does not verify");
                unconfirmed.remove(i);
            }
        }
    }
    None
}

/// The last receipt the results stream holds for this order, if it
/// verifies.
async fn stored_receipt(bus: &Bus, order: &Order, order_sha256: &str) -> Option<(Receipt, DsseEnvelope, Vec<Inline>)> {
    // A look, not a wait: bounded, so a call's whole wait stays its
    // timeout plus the queue time and the fetches.
    let look = async {
        let stream = bus.jetstream().get_stream_no_info(subjects::RESULTS_STREAM).await.ok()?;
        let stored =
            stream.get_last_raw_message_by_subject(&subjects::results_subject(&order.invocation_id)).await.ok()?;
        verify_receipt(bus, &stored.payload, order, order_sha256).await.ok()
    };
    tokio::time::timeout(STORED_LOOK, look).await.ok().flatten()
}

/// What a receipt must answer: one invocation, one signed order, one
/// descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answering {
    /// The invocation id.
    pub invocation_id: String,
    /// `sha256:` of the order's signed payload.
    pub order_sha256: String,
    /// The descriptor digest the order carries.
    pub descriptor_sha256: String,
}

impl Answering {
    fn of(order: &Order, order_sha256: &str) -> Answering {
        Answering {
            invocation_id: order.invocation_id.clone(),
            order_sha256: order_sha256.to_owned(),
            descriptor_sha256: order.descriptor_sha256.clone(),
        }
    }
}

/// The receipt in `bytes`, if a pinned worker key signed it and it answers
/// this very order.
async fn verify_receipt(
    bus: &Bus,
    bytes: &[u8],
    order: &Order,
    order_sha256: &str,
) -> Result<(Receipt, DsseEnvelope, Vec<Inline>), ClusterError> {
    let opened = verify_answer(bus, bytes, &Answering::of(order, order_sha256)).await?;
    Ok((opened.value, opened.envelope, opened.inline))
}

/// The receipt in `bytes`, opened, if a pinned worker key signed it and it
/// answers `answering`.
pub(crate) async fn verify_answer(
    bus: &Bus,
    bytes: &[u8],
    answering: &Answering,
) -> Result<crate::signed::Opened<Receipt>, ClusterError> {
    let unverified = Unverified::parse(bytes)?;
    // A key bucket the cluster cannot serve for a moment is asked again: a
    // genuine receipt must not be taken for a forged one.
    let key_id = unverified.key_id()?;
    let give_up = tokio::time::Instant::now() + KEY_RETRY;
    let key = retried(give_up, || bus.pinned_key(Role::Worker, key_id)).await?;
    let opened = unverified.open::<Receipt>(&key, RECEIPT_TYPE)?;
    let receipt = &opened.value;
    if receipt.version != RECEIPT_VERSION
        || receipt.invocation_id != answering.invocation_id
        || receipt.order_sha256 != answering.order_sha256
        || receipt.descriptor_sha256 != answering.descriptor_sha256
        || receipt.worker.key_id != key.key_id()
    {
        return Err(ClusterError::Untrusted(format!(
            "a receipt signed by {} does not answer order {}",
            key.key_id(),
            answering.order_sha256
        )));
    }
    Ok(opened)
}

/// The worker's run as a local [`WorkerOutcome`], with its output's bytes
/// in `output` (or `stdout_sink`), each blob checked against the receipt
/// and the order's bounds.
async fn take_outcome(
    bus: &Bus,
    ran: &Ran,
    inline: &[Inline],
    order: &Order,
    output: Option<&File>,
    stdout_sink: Option<&File>,
    give_up: tokio::time::Instant,
) -> Result<WorkerOutcome, ClusterError> {
    let within = |blob: &Blob, limit: u64, what: &str| {
        if blob.bytes > limit {
            Err(ClusterError::BlobMismatch(format!("the receipt's {what} is {} bytes, over its {limit}", blob.bytes)))
        } else {
            Ok(())
        }
    };
    within(&ran.stdout, order.run.stdout_limit.max(airlock_sandbox::STDOUT_TAIL as u64), "stdout")?;
    within(&ran.stderr, order.run.stderr_limit, "stderr")?;
    // Each fetch is retried from the start while the cluster recovers.
    let fetch_all = |blob: &Blob| {
        let blob = blob.clone();
        retried(give_up, move || {
            let blob = blob.clone();
            async move {
                let mut bytes = Vec::new();
                bus.fetch(&blob, inline, &mut bytes).await.map(|()| bytes)
            }
        })
    };
    let stdout = fetch_all(&ran.stdout).await?;
    let stderr = fetch_all(&ran.stderr).await?;
    match (&order.run.output, &ran.output) {
        (_, None) => {}
        (Some(o), Some(blob)) => {
            // One byte over the bound is how a local export reports it.
            within(blob, o.max_bytes, "output")?;
            let target = if o.from_stdout { stdout_sink } else { output };
            let file = target.ok_or_else(|| ClusterError::Protocol("no staged file for the output".into()))?;
            retried(give_up, || bus.fetch_into(blob, inline, file)).await?;
        }
        (None, Some(_)) => return Err(ClusterError::Protocol("a receipt with an output the order has none of".into())),
    }
    Ok(WorkerOutcome {
        exit: ran.exit,
        timed_out: ran.timed_out,
        stdout,
        stdout_truncated: ran.stdout_truncated,
        stderr,
        stderr_truncated: ran.stderr_truncated,
        output: ran.output_export.clone(),
        cleanup_confirmed: ran.cleanup_confirmed,
        cgroup_limits_applied: ran.limits.cgroup_limits_applied,
        limits: ran.limits.clone(),
    })
}
