//! The cluster as airlock uses it: one NATS connection with JetStream, the
//! streams and buckets of [`crate::subjects`], blobs moved by hash, and
//! keys pinned by role.

use crate::credentials::Credentials;
use crate::error::{unavailable, ClusterError};
use crate::order::{Blob, Inline};
use crate::subjects::{self, Role};
use airlock_journal::PublicKey;
use async_nats::jetstream::{self, kv, object_store, stream};
use sha2::{Digest, Sha256};
use std::io::{Seek, Write};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// How long a call message may wait in the queue at most; an order's own
/// expiry is shorter.
const CALLS_MAX_AGE: Duration = Duration::from_secs(3600);
/// How long receipts are kept.
const RESULTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How long blobs are kept: inputs are uploaded again if gone.
const BLOBS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Window in which a second publication of the same invocation id is
/// dropped by the server.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
/// A blob fetch that moves no byte for this long is given up on.
const FETCH_STALL: Duration = Duration::from_secs(3);
/// Connecting to one server gives up after this (a silent server of the
/// list costs this much before the next is tried).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Revisions of the policy bundle the bucket keeps.
const POLICY_HISTORY: i64 = 16;

/// Where the cluster is and who this process is on it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The NATS URL(s), comma-separated.
    pub url: String,
    /// How this process authenticates (never printed).
    pub credentials: Credentials,
}

impl Endpoint {
    /// `url` with no credentials.
    pub fn anonymous(url: &str) -> Endpoint {
        Endpoint { url: url.to_owned(), credentials: Credentials::None }
    }
}

/// A connection to the cluster, with the buckets it has opened (each
/// opening costs a round trip to the server).
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    js: jetstream::Context,
    opened: std::sync::Arc<Opened>,
}

#[derive(Default)]
struct Opened {
    blobs: tokio::sync::OnceCell<object_store::ObjectStore>,
    keys: tokio::sync::OnceCell<kv::Store>,
    workers: tokio::sync::OnceCell<kv::Store>,
    policy: tokio::sync::OnceCell<kv::Store>,
}

/// How often a connection is pinged.
const PING_EVERY: Duration = Duration::from_secs(1);

impl Bus {
    /// Connects to `url` (a NATS URL, or several separated by commas),
    /// naming the connection `name` (shown by the server's monitoring).
    pub async fn connect(at: &Endpoint, name: &str) -> Result<Bus, ClusterError> {
        Bus::connect_within(at, name, CONNECT_TIMEOUT).await
    }

    /// [`Bus::connect`], giving up after `timeout`.
    pub async fn connect_within(at: &Endpoint, name: &str, timeout: Duration) -> Result<Bus, ClusterError> {
        let url = &at.url;
        let client = at
            .credentials
            .options()
            .name(name)
            .connection_timeout(timeout)
            // A server that goes silent (a cut link sends no reset) is
            // found stale after two unanswered pings, and the client moves
            // to another server: seconds, not the default two minutes.
            .ping_interval(PING_EVERY)
            .connect(url.split(',').map(str::trim).collect::<Vec<_>>())
            .await
            .map_err(|e| unavailable(&format!("connecting to {url}"), e))?;
        let js = jetstream::new(client.clone());
        Ok(Bus { client, js, opened: Default::default() })
    }

    /// The core client (subscriptions, plain publications).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Creates what airlock needs on the cluster, each with `replicas`
    /// copies (3 on a cluster of three: a blob held once stalls workers
    /// when its node dies), keeping what exists.
    pub async fn ensure(&self, replicas: usize) -> Result<(), ClusterError> {
        let replicas = replicas.max(1);
        let make = |name: &str, subject: &str| stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            num_replicas: replicas,
            ..Default::default()
        };
        self.js
            .get_or_create_stream(stream::Config {
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: DUPLICATE_WINDOW,
                max_age: CALLS_MAX_AGE,
                ..make(subjects::CALLS_STREAM, "airlock.calls.>")
            })
            .await
            .map_err(|e| unavailable("creating the calls stream", e))?;
        self.js
            .get_or_create_stream(stream::Config {
                max_age: RESULTS_MAX_AGE,
                duplicate_window: DUPLICATE_WINDOW,
                ..make(subjects::RESULTS_STREAM, "airlock.results.>")
            })
            .await
            .map_err(|e| unavailable("creating the results stream", e))?;
        if self.js.get_object_store(subjects::BLOB_BUCKET).await.is_err() {
            self.js
                .create_object_store(object_store::Config {
                    bucket: subjects::BLOB_BUCKET.to_owned(),
                    max_age: BLOBS_MAX_AGE,
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| unavailable("creating the blob store", e))?;
        }
        for bucket in [subjects::KEY_BUCKET, subjects::WORKER_BUCKET] {
            self.ensure_kv(bucket, replicas, 1).await?;
        }
        self.ensure_kv(subjects::POLICY_BUCKET, replicas, POLICY_HISTORY).await?;
        Ok(())
    }

    /// A key-value bucket made as its stream directly: the client's own
    /// `create_key_value` cannot read the answer of a 2.9 server (Debian
    /// 12's), so the stream is declared with the settings a KV bucket has.
    async fn ensure_kv(&self, bucket: &str, replicas: usize, history: i64) -> Result<(), ClusterError> {
        self.js
            .get_or_create_stream(stream::Config {
                name: format!("KV_{bucket}"),
                subjects: vec![format!("$KV.{bucket}.>")],
                max_messages_per_subject: history,
                allow_rollup: true,
                deny_delete: true,
                allow_direct: true,
                discard: stream::DiscardPolicy::New,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable(&format!("creating the {bucket} bucket"), e))?;
        Ok(())
    }

    async fn kv(&self, bucket: &str) -> Result<&kv::Store, ClusterError> {
        let cell = match bucket {
            subjects::KEY_BUCKET => &self.opened.keys,
            subjects::POLICY_BUCKET => &self.opened.policy,
            _ => &self.opened.workers,
        };
        cell.get_or_try_init(|| async {
            self.js.get_key_value(bucket).await.map_err(|e| {
                unavailable(&format!("opening the {bucket} bucket (has `airlock cluster init` been run?)"), e)
            })
        })
        .await
    }

    async fn blobs(&self) -> Result<&object_store::ObjectStore, ClusterError> {
        self.opened
            .blobs
            .get_or_try_init(|| async {
                self.js
                    .get_object_store(subjects::BLOB_BUCKET)
                    .await
                    .map_err(|e| unavailable("opening the blob store (has `airlock cluster init` been run?)", e))
            })
            .await
    }

    /// Pins `key` for `role`.
    pub async fn pin_key(&self, role: Role, key: &PublicKey) -> Result<(), ClusterError> {
        let entry = role.entry(&key.key_id())?;
        self.kv(subjects::KEY_BUCKET)
            .await?
            .put(entry, key.to_text().into())
            .await
            .map_err(|e| unavailable("pinning a key", e))?;
        Ok(())
    }

    /// The key pinned for `role` under `key_id`; `cluster.untrusted` if none
    /// is, or the entry's key has another id.
    pub async fn pinned_key(&self, role: Role, key_id: &str) -> Result<PublicKey, ClusterError> {
        let entry = role.entry(key_id)?;
        let value = self
            .kv(subjects::KEY_BUCKET)
            .await?
            .get(&entry)
            .await
            .map_err(|e| unavailable("reading the key bucket", e))?
            .ok_or_else(|| ClusterError::Untrusted(format!("no {} key {key_id} is pinned", role.as_str())))?;
        let text = std::str::from_utf8(&value).unwrap_or_default();
        let key = PublicKey::parse(text)
            .map_err(|e| ClusterError::Untrusted(format!("the pinned {} key {key_id}: {e}", role.as_str())))?;
        if key.key_id() != key_id {
            return Err(ClusterError::Untrusted(format!("the key pinned as {entry} has another id")));
        }
        Ok(key)
    }

    /// Stores `bundle` as the policy bundle; its revision.
    pub async fn put_policy(&self, bundle: Vec<u8>) -> Result<u64, ClusterError> {
        self.kv(subjects::POLICY_BUCKET)
            .await?
            .put(subjects::POLICY_ENTRY, bundle.into())
            .await
            .map_err(|e| unavailable("storing the policy bundle", e))
    }

    /// The policy bundle and its revision, if one was stored.
    pub async fn policy(&self) -> Result<Option<(u64, Vec<u8>)>, ClusterError> {
        let entry = self
            .kv(subjects::POLICY_BUCKET)
            .await?
            .entry(subjects::POLICY_ENTRY)
            .await
            .map_err(|e| unavailable("reading the policy bundle", e))?;
        Ok(entry.filter(|e| e.operation == kv::Operation::Put).map(|e| (e.revision, e.value.to_vec())))
    }

    /// Uploads `file`'s bytes (read from its start) as `blob` unless a blob
    /// of that name is stored already; whether it uploaded.
    pub async fn put_blob(&self, blob: &Blob, file: &std::fs::File) -> Result<bool, ClusterError> {
        let store = self.blobs().await?;
        let name = subjects::blob_name(&blob.sha256);
        if store.info(&name).await.is_ok_and(|info| info.size as u64 == blob.bytes) {
            return Ok(false);
        }
        let mut reader = tokio::fs::File::from_std(from_start(file)?);
        store.put(name.as_str(), &mut reader).await.map_err(|e| unavailable("uploading a blob", e))?;
        Ok(true)
    }

    /// Uploads `bytes` as a blob; returns its name and size.
    pub async fn put_bytes(&self, bytes: &[u8]) -> Result<Blob, ClusterError> {
        let blob = Blob { sha256: airlock_core::sha256_tagged(bytes), bytes: bytes.len() as u64 };
        let store = self.blobs().await?;
        let name = subjects::blob_name(&blob.sha256);
        if !store.info(&name).await.is_ok_and(|info| info.size as u64 == blob.bytes) {
            store.put(name.as_str(), &mut &*bytes).await.map_err(|e| unavailable("uploading a blob", e))?;
        }
        Ok(blob)
    }

    /// [`Bus::fetch_blob`], taking the bytes from `inline` when they are
    /// there (checked the same way).
    pub async fn fetch(&self, blob: &Blob, inline: &[Inline], out: &mut impl Write) -> Result<(), ClusterError> {
        let Some(carried) = inline.iter().find(|i| i.sha256 == blob.sha256) else {
            return self.fetch_blob(blob, out).await;
        };
        let bytes = carried.bytes_of(blob)?;
        out.write_all(&bytes).map_err(|e| ClusterError::Io(format!("writing an inline blob: {e}")))
    }

    /// [`Bus::fetch`] into `file` from its start, emptied first (so a
    /// retried fetch writes it again, never after a torn attempt).
    pub async fn fetch_into(&self, blob: &Blob, inline: &[Inline], file: &std::fs::File) -> Result<(), ClusterError> {
        let mut out = file;
        out.set_len(0)
            .and_then(|()| out.rewind())
            .map_err(|e| ClusterError::Io(format!("a fetched blob's file: {e}")))?;
        self.fetch(blob, inline, &mut out).await
    }

    /// Writes `blob`'s bytes into `out` (at its current offset), refusing
    /// (`cluster.blob_mismatch`) bytes past its size or that do not hash to
    /// its name; what was written before a refusal is not to be used.
    pub async fn fetch_blob(&self, blob: &Blob, out: &mut impl Write) -> Result<(), ClusterError> {
        // A fetch that stalls (its consumer was on a node that died) is
        // given up on, so the caller can try again on a fresh one.
        tokio::time::timeout(FETCH_STALL, self.fetch_blob_once(blob, out))
            .await
            .unwrap_or_else(|_| Err(ClusterError::Unavailable(format!("fetching blob {} stalled", blob.sha256))))
    }

    async fn fetch_blob_once(&self, blob: &Blob, out: &mut impl Write) -> Result<(), ClusterError> {
        let store = self.blobs().await?;
        let name = subjects::blob_name(&blob.sha256);
        let mut object = store.get(&name).await.map_err(|e| match e.kind() {
            object_store::GetErrorKind::NotFound => {
                ClusterError::BlobMismatch(format!("blob {} is not in the store", blob.sha256))
            }
            _ => unavailable("fetching a blob", e),
        })?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 128 << 10];
        let mut total = 0u64;
        loop {
            let n = object.read(&mut buf).await.map_err(|e| unavailable("fetching a blob", e))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > blob.bytes {
                return Err(ClusterError::BlobMismatch(format!(
                    "blob {} holds more than its {} bytes",
                    blob.sha256, blob.bytes
                )));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| ClusterError::Io(format!("writing a fetched blob: {e}")))?;
        }
        let got = format!("sha256:{}", hex::encode(hasher.finalize()));
        if total != blob.bytes || got != blob.sha256 {
            return Err(ClusterError::BlobMismatch(format!(
                "blob {} holds {total} bytes hashing to {got}, not its {} bytes",
                blob.sha256, blob.bytes
            )));
        }
        Ok(())
    }

    /// Sets `entry` of the worker bucket to `value`.
    pub async fn report_worker(&self, entry: &str, value: Vec<u8>) -> Result<(), ClusterError> {
        self.kv(subjects::WORKER_BUCKET)
            .await?
            .put(entry, value.into())
            .await
            .map_err(|e| unavailable("reporting to the worker bucket", e))?;
        Ok(())
    }

    /// Every entry of the worker bucket.
    pub async fn workers(&self) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        use futures_util::StreamExt as _;
        let store = self.kv(subjects::WORKER_BUCKET).await?;
        let mut keys = store.keys().await.map_err(|e| unavailable("listing workers", e))?;
        let mut names = Vec::new();
        while let Some(k) = keys.next().await {
            names.push(k.map_err(|e| unavailable("listing workers", e))?);
        }
        let mut out = Vec::new();
        for name in names {
            if let Some(v) = store.get(&name).await.map_err(|e| unavailable("reading a worker", e))? {
                out.push((name, v.to_vec()));
            }
        }
        Ok(out)
    }
}

/// A descriptor of `file` of its own, at offset 0 (the caller's offset is
/// left alone).
pub(crate) fn from_start(file: &std::fs::File) -> Result<std::fs::File, ClusterError> {
    let mut copy = file.try_clone().map_err(|e| ClusterError::Io(format!("dup: {e}")))?;
    copy.rewind().map_err(|e| ClusterError::Io(format!("seek: {e}")))?;
    Ok(copy)
}

/// At most `max` + 1 bytes of `file` from its start (one more than `max`
/// tells the caller it is larger).
pub(crate) fn read_from_start(file: &std::fs::File, max: u64) -> Result<Vec<u8>, ClusterError> {
    use std::io::Read as _;
    let mut out = Vec::new();
    from_start(file)?
        .take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| ClusterError::Io(format!("reading a blob's file: {e}")))?;
    Ok(out)
}
