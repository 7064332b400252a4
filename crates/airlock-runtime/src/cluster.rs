//! The runtime's side of scale-out (issue 23): serving calls as a worker
//! of the cluster on one of this host's tiers, and an operator's cluster
//! commands. The edge's side, a call of the `cluster` tier, is part of the
//! exec shape's run step (`transport/exec/remote.rs`).

use crate::Runtime;
use airlock_cluster::caps::WorkerCaps;
use airlock_cluster::duplicates::Answered;
use airlock_cluster::journal_stream::JournalEntry;
use airlock_cluster::worker::{Event, Served, WorkerReport, WorkerSettings};
use airlock_cluster::Role;
use airlock_cluster::Verdict;
use airlock_cluster::{Credentials, Endpoint};
use airlock_core::cluster::JournalMirror;
use airlock_core::{Config, ReasonCode, Refusal, Tier};
use airlock_hostfs::{HostAuthority, PrivateDir};
use airlock_journal::kind;
use airlock_journal::PublicKey;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::DirBuilderExt as _;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// What `airlock worker` was asked to serve; each `None` falls back on
/// `[cluster]` (and the tier on `[sandbox] tier`).
#[derive(Debug, Clone, Default)]
pub struct WorkerRequest {
    /// The cluster's NATS URL(s).
    pub nats: Option<String>,
    /// The local tier calls run on.
    pub tier: Option<Tier>,
    /// The pool served.
    pub pool: Option<String>,
}

/// Where the cluster is (`asked`, else `[cluster] nats`) and who this
/// airlock is on it: `[cluster] user` with the password read from
/// `password_file`, or the NKey whose seed is in `nkey_file`; each file a
/// control file that no group or other may read.
pub fn endpoint_of(authority: &HostAuthority, config: &Config, asked: Option<&str>) -> Result<Endpoint, Refusal> {
    let cluster = config.cluster.as_ref();
    let url = asked.map(str::to_owned).or_else(|| cluster.map(|c| c.nats.clone())).ok_or_else(|| {
        Refusal::new(
            ReasonCode::ConfigInvalid,
            "no cluster to reach: give --nats URL or a [cluster] section with nats = \"nats://…\"",
        )
    })?;
    let credentials = match cluster {
        Some(c) => match (&c.user, &c.password_file, &c.nkey_file) {
            (Some(user), Some(file), _) => {
                let password = crate::control::read_secret(authority, crate::control::CLUSTER_SECRET, file, 4096)?;
                Credentials::Password { user: user.clone(), password }
            }
            (_, _, Some(file)) => {
                let seed = crate::control::read_secret(authority, crate::control::CLUSTER_NKEY, file, 4096)?;
                Credentials::nkey(&seed).map_err(|e| {
                    Refusal::new(ReasonCode::ConfigInvalid, format!("[cluster] nkey_file {}: {e}", file.display()))
                })?
            }
            _ => Credentials::None,
        },
        None => Credentials::None,
    };
    Ok(Endpoint { url, credentials })
}

/// Writes a new user NKey's seed to `path` (a new file, mode 0600, never
/// one that exists) and answers its public key, for the server's
/// configuration (`authorization { users: [{ nkey: U… }] }`, or an
/// account's users).
pub fn new_nkey_file(path: &std::path::Path) -> Result<String, Refusal> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (seed, public) = airlock_cluster::credentials::new_user_nkey();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("creating {}: {e}", path.display())))?;
    file.write_all(format!("{seed}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing {}: {e}", path.display())))?;
    Ok(public)
}

impl Runtime {
    /// The cluster this airlock reaches (see [`endpoint_of`]).
    pub fn cluster_endpoint(&self, asked: Option<&str>) -> Result<Endpoint, Refusal> {
        endpoint_of(self.authority(), self.config(), asked)
    }

    /// Serves calls of the cluster on a tier of this host until `stop` is
    /// set, signing receipts with this airlock's key.
    pub fn serve_cluster_worker(
        &self,
        request: &WorkerRequest,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Served, Refusal> {
        let endpoint = self.cluster_endpoint(request.nats.as_deref())?;
        let tier = request.tier.unwrap_or(self.config().tier);
        if tier == Tier::Cluster {
            return Err(Refusal::new(
                ReasonCode::SandboxTierUnsupported,
                "a worker runs calls on a tier of its own host: give --tier native, gvisor, docker or microvm",
            ));
        }
        if !self.config().tiers.allowed.contains(&tier) {
            return Err(Refusal::new(
                ReasonCode::SandboxTierNotAllowed,
                format!("tier {:?} is not in this host's [sandbox] tiers", tier.as_str()),
            ));
        }
        let local = self.worker_tier(&self.config().tiers.descriptor_name(tier))?;
        let cluster = self.config().cluster.as_ref();
        let pool = request.pool.clone().or_else(|| cluster.map(|c| c.pool.clone())).unwrap_or_else(|| "default".into());
        let ack_wait = Duration::from_secs(cluster.map_or(10, |c| c.ack_wait_seconds));
        let scratch = self.config().state_dir.join("cluster").join("calls");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("creating {}: {e}", scratch.display())))?;
        let settings = WorkerSettings {
            endpoint,
            tier: tier.as_str().to_owned(),
            pool,
            ack_wait,
            host: rustix::system::uname().nodename().to_string_lossy().into_owned(),
            scratch,
            image: self.image(),
            caps: self.worker_caps(),
        };
        airlock_cluster::worker::serve(&settings, self.journal().key(), &local, stop, on_event).map_err(Refusal::from)
    }

    /// The most an order may ask of this host as a worker: its `[limits]`,
    /// and `[cluster.worker]` where set.
    fn worker_caps(&self) -> WorkerCaps {
        let limits = &self.config().limits;
        let own = self.config().cluster.as_ref().map(|c| c.worker).unwrap_or_default();
        let max_timeout = own.timeout_seconds.unwrap_or(airlock_core::limits::hard::MAX_TIMEOUT_SECONDS);
        WorkerCaps {
            max_inputs: limits.max_inputs,
            max_input_bytes: limits.max_input_bytes,
            max_input_file_bytes: limits.max_input_file_bytes,
            max_file_bytes: limits.max_file_bytes,
            max_timeout_ms: max_timeout.saturating_mul(1000),
            max_memory_bytes: own.memory_bytes,
            max_pids: own.pids,
            max_cpu_seconds: own.cpu_seconds,
            max_scratch_bytes: own.scratch_bytes,
        }
    }

    /// Creates the cluster's streams and buckets and pins this airlock's key
    /// as an edge's; returns that key.
    pub fn cluster_init(&self, nats: Option<&str>) -> Result<PublicKey, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        let replicas = self.config().cluster.as_ref().map_or(1, |c| c.replicas);
        let key = self.journal().key().public_key();
        airlock_cluster::admin::init(&at, replicas, &key)?;
        Ok(key)
    }

    /// Pins `key` (`ed25519:<hex>`) for `role` on the cluster.
    pub fn cluster_trust(&self, nats: Option<&str>, role: Role, key: &str) -> Result<PublicKey, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        let key = PublicKey::parse(key).map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, e.to_string()))?;
        airlock_cluster::admin::trust(&at, role, &key)?;
        Ok(key)
    }

    /// What every worker of the cluster last reported.
    pub fn cluster_workers(&self, nats: Option<&str>) -> Result<Vec<WorkerReport>, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        Ok(airlock_cluster::admin::workers(&at)?)
    }
}

/// What `airlock cluster reconcile` found and journaled.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Reconciled {
    /// Cluster calls this journal holds a receipt for.
    pub answered: u64,
    /// Messages read from the results stream.
    pub results_read: u64,
    /// Of those, the receipts this edge used.
    pub used: u64,
    /// Second valid receipts journaled now (`ClusterResultDuplicated`).
    pub duplicates_journaled: u64,
    /// Second valid receipts journaled by an earlier reconcile.
    pub duplicates_known: u64,
    /// Messages for this edge's calls that do not verify (not journaled:
    /// nothing shows that they ran).
    pub unverifiable: u64,
}

impl Runtime {
    /// Journals, once each, the valid receipts on the cluster's results
    /// stream for calls this edge answered that are not the receipt it
    /// used: the call also ran elsewhere (at-least-once delivery), and
    /// the journal says so. Nothing is published.
    pub fn cluster_reconcile(&self, nats: Option<&str>) -> Result<Reconciled, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        let (answered, mut known) = journaled_answers(self.state())?;
        let scan = airlock_cluster::duplicates::scan(&at, &answered)?;
        let mut done = Reconciled {
            answered: answered.len() as u64,
            results_read: scan.read,
            used: scan.used,
            unverifiable: scan.unverifiable,
            ..Reconciled::default()
        };
        for duplicate in scan.duplicates {
            if !known.insert(duplicate.receipt_sha256.clone()) {
                done.duplicates_known += 1;
                continue;
            }
            let id = duplicate.receipt.invocation_id.clone();
            let used = answered.get(&id).map(|a| a.receipt_sha256.clone());
            self.record(kind::CLUSTER_RESULT_DUPLICATED, Some(&id), duplicate_body(&duplicate, used))?;
            done.duplicates_journaled += 1;
        }
        Ok(done)
    }
}

/// The body of a `ClusterResultDuplicated` record.
fn duplicate_body(duplicate: &airlock_cluster::duplicates::Duplicate, used: Option<String>) -> serde_json::Value {
    let r = &duplicate.receipt;
    let verdict = match &r.verdict {
        Verdict::Ran(ran) => {
            json!({ "ran": { "exit_code": crate::engine::verdict::exit_number(ran.exit), "timed_out": ran.timed_out } })
        }
        Verdict::Refused(refused) => json!({ "refused": { "code": refused.code } }),
    };
    json!({
        "receipt_sha256": duplicate.receipt_sha256,
        "used_receipt_sha256": used,
        "order_sha256": r.order_sha256,
        "worker_key_id": r.worker.key_id,
        "tier": r.worker.tier,
        "pool": r.worker.pool,
        "host": r.worker.host,
        "verdict": verdict,
        "stream_seq": duplicate.stream_seq,
        "receipt": duplicate.envelope,
    })
}

/// The cluster calls the journal in `state` holds a receipt for (by
/// invocation id), and the digests of the second receipts it journaled.
fn journaled_answers(state: &PrivateDir) -> Result<(HashMap<String, Answered>, HashSet<String>), Refusal> {
    let mut answered = HashMap::new();
    let mut known = HashSet::new();
    for line in local_lines(state)? {
        if line.kind != kind::WORKER_FINISHED && line.kind != kind::CLUSTER_RESULT_DUPLICATED {
            continue;
        }
        let record: serde_json::Value = serde_json::from_str(&line.line).unwrap_or_default();
        if line.kind == kind::CLUSTER_RESULT_DUPLICATED {
            if let Some(digest) = record["body"]["receipt_sha256"].as_str() {
                known.insert(digest.to_owned());
            }
            continue;
        }
        let Some(receipt) = record["body"]["cluster"].get("receipt") else { continue };
        let envelope: airlock_journal::DsseEnvelope = serde_json::from_value(receipt.clone()).map_err(|e| {
            Refusal::new(ReasonCode::JournalInvalid, format!("record {}: a receipt that does not parse: {e}", line.seq))
        })?;
        let call = Answered::from_journaled(&envelope)?;
        answered.insert(call.answering.invocation_id.clone(), call);
    }
    Ok((answered, known))
}

/// One local journal line: its seq, hash and kind (and the line).
struct LocalLine {
    seq: u64,
    hash: String,
    kind: String,
    line: String,
}

/// What `journal verify --against-stream` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StreamCheck {
    /// Entries the stream holds for this edge.
    pub entries: u64,
    /// Of those, entries whose record is here with the same hash.
    pub matched: u64,
    /// Entries for records pruned here (before the first kept record).
    pub pruned_here: u64,
    /// Local records the stream does not hold yet (appended since the
    /// last push).
    pub not_pushed: u64,
    /// The first disagreement: a record the stream holds that is missing
    /// here (the journal was cut) or has another hash (it was rewritten),
    /// or two entries for one seq.
    pub mismatch: Option<String>,
}

impl Runtime {
    /// After each call, when `[cluster] journal` is not `off`: this
    /// airlock's new journal records go to the cluster's journal stream.
    /// Best effort: a failure is logged, and a later push catches up.
    pub(crate) fn mirror_journal(&self) {
        let Some(cluster) = self.config().cluster.as_ref() else { return };
        if cluster.journal == JournalMirror::Off {
            return;
        }
        if let Err(e) = self.push_journal_within(None, MIRROR_WITHIN) {
            tracing::warn!(code = e.code.as_str(), error = %e.message, "the journal could not be mirrored to the cluster");
        }
    }

    /// Appends to the cluster's journal stream every local record after
    /// the last one it holds for this airlock's key; the seqs sent. A
    /// cluster that is electing a leader is tried again for up to
    /// [`PUSH_WITHIN`].
    pub fn push_journal(&self, nats: Option<&str>) -> Result<Option<(u64, u64)>, Refusal> {
        while_recovering(|| self.push_journal_within(nats, PUSH_ATTEMPT))
    }

    /// One push, bounded by `within`.
    fn push_journal_within(&self, nats: Option<&str>, within: Duration) -> Result<Option<(u64, u64)>, Refusal> {
        let at = self.cluster_endpoint(nats)?;
        let whole = self.config().cluster.as_ref().is_some_and(|c| c.journal == JournalMirror::Records);
        let key_id = self.journal().key().key_id();
        let pushed = airlock_cluster::journal_stream::push(&at, &key_id, within, |last| {
            let lines = lines_after(self.state(), last).map_err(|r| airlock_cluster::ClusterError::Io(r.message))?;
            Ok(lines
                .into_iter()
                .filter(|l| l.seq > last)
                .map(|l| JournalEntry { seq: l.seq, hash: l.hash, kind: l.kind, line: whole.then_some(l.line) })
                .collect())
        })?;
        Ok(pushed)
    }
}

/// The mirror after a call gives up after this: best effort, and never the
/// call's delay.
const MIRROR_WITHIN: Duration = Duration::from_secs(2);
/// One attempt of `airlock journal push`.
const PUSH_ATTEMPT: Duration = Duration::from_secs(5);
/// How long `airlock journal push` keeps trying while the cluster recovers.
const PUSH_WITHIN: Duration = Duration::from_secs(20);

/// Bytes of the live segment's end read first when only the records after
/// the stream's last are wanted (a call appends a few kilobytes).
const TAIL_FIRST: u64 = 256 << 10;

/// The kept journal lines of `state` with a seq after `last`: read from
/// the live segment's end when they are all there (the usual case after a
/// call), else from every segment. A push after each call must not read
/// the whole journal.
fn lines_after(state: &PrivateDir, last: u64) -> Result<Vec<LocalLine>, Refusal> {
    if let Some(lines) = tail_lines(state, last, TAIL_FIRST) {
        return Ok(lines);
    }
    Ok(local_lines(state)?.into_iter().filter(|l| l.seq > last).collect())
}

/// The lines after `last` from the last `bytes` of the live segment, if
/// that tail reaches back to the record right after `last` (`None`: read
/// everything). A line torn by an append in progress is left for later.
fn tail_lines(state: &PrivateDir, last: u64, bytes: u64) -> Option<Vec<LocalLine>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = state.open_nofollow(airlock_journal::JOURNAL_FILE).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(bytes);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    file.take(bytes).read_to_end(&mut tail).ok()?;
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    // The last piece is after the final newline: empty, or a torn append.
    lines.pop();
    if start > 0 {
        // The first piece may be the end of a line that began earlier.
        lines.remove(0);
    }
    let parsed: Vec<LocalLine> = lines.into_iter().filter(|l| !l.is_empty()).map(parse_line).collect();
    // Only when the tail starts at or before the first record wanted is it
    // enough: records after `last` may sit in a segment sealed since.
    let reaches = parsed.first().is_some_and(|first| first.seq <= last.saturating_add(1));
    reaches.then(|| parsed.into_iter().filter(|l| l.seq > last).collect())
}

fn parse_line(raw: &[u8]) -> LocalLine {
    let record: serde_json::Value = serde_json::from_slice(raw).unwrap_or_default();
    LocalLine {
        seq: record["seq"].as_u64().unwrap_or(0),
        hash: airlock_core::sha256_tagged(raw),
        kind: record["kind"].as_str().unwrap_or_default().to_owned(),
        line: String::from_utf8_lossy(raw).into_owned(),
    }
}

/// Compares the journal in `state` with what the cluster at `url` holds
/// for the edge whose key is `key` (`journal verify --against-stream`).
/// A cluster electing a leader is asked again for up to [`PUSH_WITHIN`].
pub fn check_against_stream(at: &Endpoint, key: &PublicKey, state: &PrivateDir) -> Result<StreamCheck, Refusal> {
    let remote = while_recovering(|| Ok(airlock_cluster::journal_stream::entries(at, &key.key_id())?))?;
    Ok(compare_with_stream(&local_lines(state)?, &remote))
}

/// `attempt` until it answers anything but `cluster.unavailable`, or
/// [`PUSH_WITHIN`] has passed: an operator's command rides over a cluster
/// electing a leader (a call's own steps are bounded by the call instead).
fn while_recovering<T>(mut attempt: impl FnMut() -> Result<T, Refusal>) -> Result<T, Refusal> {
    let give_up = std::time::Instant::now() + PUSH_WITHIN;
    loop {
        match attempt() {
            Err(r) if r.code == ReasonCode::ClusterUnavailable && std::time::Instant::now() < give_up => {
                tracing::debug!(error = %r.message, "the cluster is asked again");
                std::thread::sleep(Duration::from_millis(500));
            }
            done => return done,
        }
    }
}

/// Every kept journal line in `state`, in order.
fn local_lines(state: &PrivateDir) -> Result<Vec<LocalLine>, Refusal> {
    let mut lines = Vec::new();
    airlock_journal::JournalReader::new(state)
        .and_then(|reader| {
            reader.for_each_segment(|segment| {
                lines.extend(segment.bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(parse_line));
                Ok(true)
            })
        })
        .map_err(crate::failure::journal_refusal)?;
    Ok(lines)
}

/// The stream's entries against the local lines (see [`StreamCheck`]).
fn compare_with_stream(local: &[LocalLine], remote: &[JournalEntry]) -> StreamCheck {
    let mut check = StreamCheck { entries: remote.len() as u64, ..StreamCheck::default() };
    let first_local = local.first().map_or(u64::MAX, |l| l.seq);
    let by_seq: std::collections::HashMap<u64, &LocalLine> = local.iter().map(|l| (l.seq, l)).collect();
    let mut seen = std::collections::HashMap::new();
    for entry in remote {
        if let Some(earlier) = seen.insert(entry.seq, &entry.hash) {
            if earlier != &entry.hash && check.mismatch.is_none() {
                check.mismatch = Some(format!("the stream holds two hashes for record {}", entry.seq));
            }
            continue;
        }
        match by_seq.get(&entry.seq) {
            Some(line) if line.hash == entry.hash => check.matched += 1,
            Some(_) if check.mismatch.is_none() => {
                check.mismatch = Some(format!(
                    "record {} here is not the record the stream holds ({}): the journal was rewritten",
                    entry.seq, entry.hash
                ))
            }
            None if entry.seq < first_local => check.pruned_here += 1,
            None if check.mismatch.is_none() => {
                check.mismatch = Some(format!(
                    "record {} ({}) is in the stream but not here: the journal was cut",
                    entry.seq, entry.kind
                ))
            }
            _ => {}
        }
    }
    let last_remote = remote.iter().map(|e| e.seq).max().unwrap_or(0);
    check.not_pushed = local.iter().filter(|l| l.seq > last_remote).count() as u64;
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64) -> String {
        format!("{{\"seq\":{seq},\"kind\":\"K\"}}")
    }

    #[test]
    fn a_push_reads_the_live_segments_end_only_when_it_holds_every_record_wanted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let state = PrivateDir::open_or_create(&HostAuthority::ambient(), &dir).unwrap();
        let text: String = (1..=100).map(|i| format!("{}\n", line(i))).collect();
        std::fs::write(dir.join(airlock_journal::JOURNAL_FILE), format!("{text}{{\"seq\":101")).unwrap();
        // Records 91..=100 are in the last 300 bytes; the torn 101 is not a record yet.
        let got = tail_lines(&state, 90, 300).unwrap();
        assert_eq!(got.iter().map(|l| l.seq).collect::<Vec<_>>(), (91..=100).collect::<Vec<_>>());
        assert_eq!(got[0].hash, airlock_core::sha256_tagged(line(91).as_bytes()));
        // A tail that starts after the first record wanted is not enough.
        assert!(tail_lines(&state, 10, 300).is_none());
        // lines_after falls back to every segment then.
        let all = lines_after(&state, 10).unwrap();
        assert_eq!(all.first().map(|l| l.seq), Some(11));
        assert_eq!(all.last().map(|l| l.seq), Some(100));
    }
}
