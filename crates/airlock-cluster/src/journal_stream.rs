//! The journal leaves the host: each edge appends an entry for each of its
//! journal records (its line hash, or the whole line) to
//! `airlock.journal.<edge key hex>` in a stream that denies deletes and
//! purges, so a local journal cut at a record boundary or rewritten (which
//! still verifies as a chain on its own) is found by comparing it with the
//! stream (`airlock journal verify --against-stream`).

use crate::bus::{Bus, Endpoint};
use crate::client::block_on;
use crate::error::{unavailable, ClusterError};
use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The stream of every edge's journal entries.
pub const JOURNAL_STREAM: &str = "AIRLOCK_JOURNAL";

/// A push after a call gives up connecting after this: a cluster that
/// cannot be reached must not hold up local calls.
const PUSH_CONNECT: Duration = Duration::from_secs(1);

/// How long a read of the stream waits for the next entry before it gives
/// up (the count is known before it starts).
const READ_WAIT: Duration = Duration::from_secs(5);

/// One journal record as the stream keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalEntry {
    /// The record's `seq`.
    pub seq: u64,
    /// `sha256:` of the record's line (what the next record's `prev` is).
    pub hash: String,
    /// The record's kind.
    pub kind: String,
    /// The whole line, when the edge sends whole records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

/// The subject of the edge with key id `key_id` (`sha256:<hex>`).
pub fn journal_subject(key_id: &str) -> String {
    format!("airlock.journal.{}", key_id.trim_start_matches("sha256:"))
}

/// Creates the stream (with `replicas` copies) unless it exists: kept
/// forever, no deletes, no purges.
pub(crate) async fn ensure(bus: &Bus, replicas: usize) -> Result<(), ClusterError> {
    bus.jetstream()
        .get_or_create_stream(stream_config(replicas))
        .await
        .map_err(|e| unavailable("creating the journal stream", e))?;
    Ok(())
}

fn stream_config(replicas: usize) -> stream::Config {
    stream::Config {
        name: JOURNAL_STREAM.to_owned(),
        subjects: vec!["airlock.journal.>".to_owned()],
        deny_delete: true,
        deny_purge: true,
        duplicate_window: Duration::from_secs(600),
        num_replicas: replicas,
        ..Default::default()
    }
}

async fn journal_stream(bus: &Bus) -> Result<stream::Stream<()>, ClusterError> {
    // No stream information is needed: one round trip fewer.
    bus.jetstream()
        .get_stream_no_info(JOURNAL_STREAM)
        .await
        .map_err(|e| unavailable("opening the journal stream (has `airlock cluster init` been run?)", e))
}

async fn last_seq(stream: &stream::Stream<()>, subject: &str) -> Result<u64, ClusterError> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => {
            let entry: JournalEntry = serde_json::from_slice(&m.payload)
                .map_err(|e| ClusterError::Protocol(format!("a journal entry that does not parse: {e}")))?;
            Ok(entry.seq)
        }
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(unavailable("reading the journal stream", e)),
    }
}

/// Appends the entries `after(last)` gives for the records after the last
/// seq the stream holds for `key_id`; returns the seqs sent (first, last),
/// or `None` when there was nothing new. The whole push is bounded by
/// `within` (each request of it has its own timeout, but a cluster that
/// answers slowly while it elects a leader must not hold a call up for the
/// sum of them); a push cut short is finished by the next one (each entry's
/// message id keeps one copy).
pub fn push(
    at: &Endpoint,
    key_id: &str,
    within: Duration,
    after: impl FnOnce(u64) -> Result<Vec<JournalEntry>, ClusterError>,
) -> Result<Option<(u64, u64)>, ClusterError> {
    block_on(async {
        match tokio::time::timeout(within, push_async(at, key_id, after)).await {
            Ok(pushed) => pushed,
            Err(_) => Err(ClusterError::Unavailable(format!(
                "the journal stream did not take the push within {} ms",
                within.as_millis()
            ))),
        }
    })
}

async fn push_async(
    at: &Endpoint,
    key_id: &str,
    after: impl FnOnce(u64) -> Result<Vec<JournalEntry>, ClusterError>,
) -> Result<Option<(u64, u64)>, ClusterError> {
    {
        let bus = Bus::connect_within(at, "airlock-journal", PUSH_CONNECT).await?;
        let stream = journal_stream(&bus).await?;
        let subject = journal_subject(key_id);
        let last = last_seq(&stream, &subject).await?;
        let entries = after(last)?;
        let (Some(first), Some(end)) = (entries.first().map(|e| e.seq), entries.last().map(|e| e.seq)) else {
            return Ok(None);
        };
        let mut acks = Vec::with_capacity(entries.len());
        for entry in &entries {
            let mut headers = async_nats::HeaderMap::new();
            // A retried push sends the same ids: the server keeps one.
            headers.insert("Nats-Msg-Id", format!("{}-{}", subject, entry.seq).as_str());
            let body = serde_json::to_vec(entry).map_err(|e| ClusterError::Protocol(e.to_string()))?;
            let ack = bus
                .jetstream()
                .publish_with_headers(subject.clone(), headers, body.into())
                .await
                .map_err(|e| unavailable("appending to the journal stream", e))?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await.map_err(|e| unavailable("appending to the journal stream (no acknowledgement)", e))?;
        }
        Ok(Some((first, end)))
    }
}

/// Every entry the stream holds for `key_id`, in the order appended.
pub fn entries(at: &Endpoint, key_id: &str) -> Result<Vec<JournalEntry>, ClusterError> {
    block_on(async {
        let bus = Bus::connect(at, "airlock-journal").await?;
        let stream = journal_stream(&bus).await?;
        let subject = journal_subject(key_id);
        if last_seq(&stream, &subject).await? == 0 {
            return Ok(Vec::new());
        }
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subject,
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable("reading the journal stream", e))?;
        let mut messages = consumer.messages().await.map_err(|e| unavailable("reading the journal stream", e))?;
        let mut out = Vec::new();
        loop {
            let message = match tokio::time::timeout(READ_WAIT, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(unavailable("reading the journal stream", e)),
                Ok(None) | Err(_) => {
                    return Err(ClusterError::Unavailable("the journal stream stopped answering".into()))
                }
            };
            let pending = message.info().map(|i| i.pending).map_err(|e| ClusterError::Protocol(e.to_string()))?;
            let entry: JournalEntry = serde_json::from_slice(&message.payload)
                .map_err(|e| ClusterError::Protocol(format!("a journal entry that does not parse: {e}")))?;
            out.push(entry);
            if pending == 0 {
                return Ok(out);
            }
        }
    })
}
