//! Second results. Delivery is at least once: a worker that stalls past
//! the ack wait (stopped, partitioned, swapped out) loses its call to
//! another worker, and may still finish and publish a valid receipt after
//! the edge took the first one and published. Nothing of it reaches a host
//! file (only the edge publishes, once per invocation), but the edge's
//! journal should say that the call ran twice: [`scan`] reads the results
//! stream for receipts of calls the edge answered that verify and are not
//! the receipt it journaled.

use crate::bus::{Bus, Endpoint};
use crate::client::block_on;
use crate::edge::{verify_answer, Answering};
use crate::error::{unavailable, ClusterError};
use crate::receipt::Receipt;
use crate::subjects;
use airlock_journal::DsseEnvelope;
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures_util::StreamExt as _;
use std::collections::HashMap;
use std::time::Duration;

/// How long one read of the stream may wait for its next message.
const READ_WAIT: Duration = Duration::from_secs(5);

/// A call the edge answered, as its journal has it.
#[derive(Debug, Clone)]
pub struct Answered {
    /// What every receipt of the call must answer.
    pub answering: Answering,
    /// `sha256:` of the payload of the receipt the edge used.
    pub receipt_sha256: String,
}

impl Answered {
    /// The call whose journaled receipt is `envelope`. The envelope was
    /// verified when it was journaled (and the journal's own signatures
    /// cover it since), so its payload is only decoded here.
    pub fn from_journaled(envelope: &DsseEnvelope) -> Result<Answered, ClusterError> {
        let payload = BASE64
            .decode(&envelope.payload)
            .map_err(|e| ClusterError::Protocol(format!("a journaled receipt that is not base64: {e}")))?;
        let receipt: Receipt = serde_json::from_slice(&payload)
            .map_err(|e| ClusterError::Protocol(format!("a journaled receipt that does not parse: {e}")))?;
        Ok(Answered {
            answering: Answering {
                invocation_id: receipt.invocation_id,
                order_sha256: receipt.order_sha256,
                descriptor_sha256: receipt.descriptor_sha256,
            },
            receipt_sha256: airlock_core::sha256_tagged(&payload),
        })
    }
}

/// A valid receipt that is not the one the edge used.
#[derive(Debug, Clone)]
pub struct Duplicate {
    /// `sha256:` of its payload.
    pub receipt_sha256: String,
    /// The receipt.
    pub receipt: Receipt,
    /// Its envelope, for the journal.
    pub envelope: DsseEnvelope,
    /// Its sequence in the results stream.
    pub stream_seq: u64,
}

/// What a [`scan`] read.
#[derive(Debug, Default)]
pub struct Scan {
    /// Messages read from the results stream.
    pub read: u64,
    /// Receipts of calls the edge did not answer (other edges' calls, or
    /// calls that ended without a receipt).
    pub not_answered: u64,
    /// Receipts the edge used.
    pub used: u64,
    /// Messages for an answered call that do not verify (never counted as
    /// a run).
    pub unverifiable: u64,
    /// Valid receipts that are not the one the edge used, in stream order.
    pub duplicates: Vec<Duplicate>,
}

/// Reads every receipt the results stream holds and sorts out the ones for
/// the calls in `answered` (by invocation id).
pub fn scan(at: &Endpoint, answered: &HashMap<String, Answered>) -> Result<Scan, ClusterError> {
    block_on(async {
        let bus = Bus::connect(at, "airlock-reconcile").await?;
        let mut stream = bus
            .jetstream()
            .get_stream(subjects::RESULTS_STREAM)
            .await
            .map_err(|e| unavailable("opening the results stream", e))?;
        let mut scan = Scan::default();
        let held = stream.info().await.map_err(|e| unavailable("reading the results stream", e))?.state.messages;
        if held == 0 || answered.is_empty() {
            return Ok(scan);
        }
        let consumer = stream
            .create_consumer(pull::OrderedConfig { deliver_policy: DeliverPolicy::All, ..Default::default() })
            .await
            .map_err(|e| unavailable("reading the results stream", e))?;
        let mut messages = consumer.messages().await.map_err(|e| unavailable("reading the results stream", e))?;
        loop {
            let message = match tokio::time::timeout(READ_WAIT, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(unavailable("reading the results stream", e)),
                Ok(None) | Err(_) => {
                    return Err(ClusterError::Unavailable("the results stream stopped answering".into()))
                }
            };
            let info = message.info().map_err(|e| ClusterError::Protocol(e.to_string()))?;
            let (seq, pending) = (info.stream_sequence, info.pending);
            scan.read += 1;
            sort(&bus, &mut scan, answered, &message.subject, &message.payload, seq).await;
            if pending == 0 {
                return Ok(scan);
            }
        }
    })
}

/// Counts one message of the results stream into `scan`.
async fn sort(
    bus: &Bus,
    scan: &mut Scan,
    answered: &HashMap<String, Answered>,
    subject: &str,
    payload: &[u8],
    stream_seq: u64,
) {
    let id = subject.strip_prefix("airlock.results.").unwrap_or_default();
    let Some(call) = answered.get(id) else {
        scan.not_answered += 1;
        return;
    };
    match verify_answer(bus, payload, &call.answering).await {
        Ok(opened) if opened.digest == call.receipt_sha256 => scan.used += 1,
        Ok(opened) => scan.duplicates.push(Duplicate {
            receipt_sha256: opened.digest,
            receipt: opened.value,
            envelope: opened.envelope,
            stream_seq,
        }),
        Err(e) => {
            tracing::warn!(invocation_id = %id, error = %e, "a result that does not verify");
            scan.unverifiable += 1;
        }
    }
}
