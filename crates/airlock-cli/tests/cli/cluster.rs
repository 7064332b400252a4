//! Issue 23: calls of the `cluster` tier run on `airlock worker` processes
//! reached through a real NATS JetStream server, while the edge keeps file
//! authority: it alone reads inputs and publishes outputs, and it uses only
//! receipts signed by pinned worker keys and blobs that hash to what they
//! say. Every case is the shipping binary on real files, real processes
//! and real signals.

use crate::clusterkit::{block_on, cluster_project, edge, free_port, nats, nats3, nats_with, worker_finished, Worker};
use crate::util::{sha256_hex, Project};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A tool that waits `secs` seconds, then copies its input to its output
/// (the copy tool, renamed, its command behind a `sleep`).
pub(crate) fn slow_copy(p: &Project, secs: u32) {
    let manifest = crate::util::COPY_TOOL
        .replace("name = \"copy\"", "name = \"slowcopy\"\ntimeout_seconds = 30")
        .replace("binary = \"cp\"", "binary = \"sh\"")
        .replace(
            r#"exec = ["cp", "{input}", "{output}"]"#,
            &format!(r#"exec = ["sh", "-c", "sleep {secs}; cp \"$1\" \"$2\"", "slowcopy", "{{input}}", "{{output}}"]"#),
        );
    assert!(manifest.contains("sleep"), "the copy tool changed: {manifest}");
    p.write("tools/slowcopy.clad.toml", manifest);
}

/// `slowcopy` of data/in.txt to results/out.txt on the cluster as `id`,
/// started (its answer is taken by [`answer_of`]).
fn start_slow_call(p: &Project, id: &str) -> std::process::Child {
    p.command(&["run", "slowcopy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The envelope a started call answered with.
fn answer_of(call: std::process::Child) -> serde_json::Value {
    let out = call.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The payload of a DSSE envelope verified by OpenSSL (a third-party
/// Ed25519) under the key in `public_key_file`.
fn openssl_verified(dir: &Path, envelope: &serde_json::Value, public_key_file: &Path) -> serde_json::Value {
    let file = dir.join("receipt.json");
    std::fs::write(&file, serde_json::to_vec(envelope).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/verify-attestation.sh");
    let out = Command::new("bash").arg(&script).arg(&file).arg(public_key_file).output().unwrap();
    assert!(out.status.success(), "openssl refused the receipt: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_cluster_call_runs_on_a_worker_and_is_published_once_at_the_edge_with_a_signed_receipt() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "");
    p.write("data/in.txt", "across hosts\n");
    let w = Worker::start(&n.url, Some(&p));
    for (i, id) in ["cl-1", "cl-2", "cl-3"].iter().enumerate() {
        let out = format!("results/out-{i}.txt");
        let run = p.run(&["run", "copy", "data/in.txt", &out, "--tier", "cluster", "--invocation-id", id]);
        run.assert_ok();
        assert_eq!(std::fs::read(p.path(&out)).unwrap(), b"across hosts\n");
        assert_eq!(run.envelope["created_files"][0]["sha256"], format!("sha256:{}", sha256_hex(b"across hosts\n")));
        let finished = worker_finished(&p, id);
        let cluster = &finished["body"]["cluster"];
        assert_eq!(cluster["worker_key_id"], cluster["receipt"]["signatures"][0]["keyid"], "{finished}");
        assert_eq!(cluster["tier"], "native");
        // A small input travels in the signed order itself.
        assert_eq!((&cluster["inputs_inlined"], &cluster["inputs_uploaded"]), (&1.into(), &0.into()), "{finished}");
        let receipt = openssl_verified(p.root(), &cluster["receipt"], &w.public_key_file());
        assert_eq!(receipt["invocation_id"], *id);
        assert_eq!(receipt["order_sha256"], cluster["order_sha256"]);
        let ran = &receipt["verdict"]["ran"];
        assert_eq!(ran["exit"], serde_json::json!({ "Exited": 0 }), "{receipt}");
        assert_eq!(ran["output"]["sha256"], run.envelope["created_files"][0]["sha256"]);
        // The worker's receipt is not anyone's: the edge's own key does
        // not verify it.
        let file = p.root().join("receipt.json");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/verify-attestation.sh");
        let wrong = Command::new("bash").arg(&script).arg(&file).arg(p.path(".airlock/journal.pub")).output().unwrap();
        assert!(!wrong.status.success(), "the edge's key verified the worker's receipt");
    }
    // A larger input goes to the store once; the same bytes again are
    // found there.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    p.write("data/big.bin", &big);
    for (id, uploaded, reused) in [("big-1", 1, 0), ("big-2", 0, 1)] {
        let out = format!("results/{id}.bin");
        p.run(&["run", "copy", "data/big.bin", &out, "--tier", "cluster", "--invocation-id", id]).assert_ok();
        assert_eq!(std::fs::read(p.path(&out)).unwrap(), big);
        let cluster = &worker_finished(&p, id)["body"]["cluster"];
        assert_eq!((&cluster["inputs_uploaded"], &cluster["inputs_reused"]), (&uploaded.into(), &reused.into()));
    }
    // An id is used once, whatever the tier.
    p.run(&["run", "copy", "data/in.txt", "results/again.txt", "--tier", "cluster", "--invocation-id", "cl-1"])
        .assert_refused("invocation.duplicate", 77);
    assert!(!p.path("results/again.txt").exists());
    p.run(&["journal", "verify"]).assert_ok();
    let list = p.run(&["workers", "list", "--json"]);
    list.assert_ok();
    let workers = list.envelope["content"]["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1, "{list:#?}");
    assert_eq!(workers[0]["key_id"], worker_finished(&p, "cl-1")["body"]["cluster"]["worker_key_id"]);
    assert_eq!(workers[0]["served"]["ran"], 5, "{list:#?}");
}

#[test]
fn a_worker_killed_mid_call_is_replaced_and_the_output_is_published_once() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 30\n");
    slow_copy(&p, 2);
    p.write("data/in.txt", "survives a dead worker\n");
    let mut first = Worker::start(&n.url, Some(&p));
    let call = start_slow_call(&p, "k-1");
    first.wait_for("took k-1", Duration::from_secs(10));
    first.kill();
    assert!(!p.path("results/out.txt").exists());
    // Unacknowledged for the ack wait (2 s), the call goes to a new worker.
    let second = Worker::start(&n.url, Some(&p));
    let envelope = answer_of(call);
    assert_eq!(envelope["status"], "ok", "{envelope}\nfirst: {}\nsecond: {}", first.log(), second.log());
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"survives a dead worker\n");
    second.wait_for("answered k-1: ran", Duration::from_secs(5));
    let finished = worker_finished(&p, "k-1");
    let second_key = std::fs::read_to_string(second.dir().join(".airlock/journal.pub")).unwrap();
    let receipt = openssl_verified(p.root(), &finished["body"]["cluster"]["receipt"], &second.public_key_file());
    assert_eq!(receipt["worker"]["key_id"], finished["body"]["cluster"]["worker_key_id"], "{second_key}");
    // Published once: one PublishCommitted-or-equivalent finish, one file.
    let finishes = p.journal_kinds("k-1").iter().filter(|k| *k == "InvocationFinished").count();
    assert_eq!(finishes, 1);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_worker_stalled_past_the_ack_wait_answers_twice_and_the_second_receipt_is_journaled_once() {
    use rustix::process::Signal;
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 30\n");
    slow_copy(&p, 2);
    p.write("data/in.txt", "ran twice, published once\n");
    let stalled = Worker::start(&n.url, Some(&p));
    let call = start_slow_call(&p, "d-1");
    stalled.wait_for("took d-1", Duration::from_secs(10));
    // Stopped, it sends no progress: after the ack wait (2 s) the call goes
    // to another worker, which answers it.
    stalled.signal(Signal::STOP);
    let second = Worker::start(&n.url, Some(&p));
    let envelope = answer_of(call);
    assert_eq!(envelope["status"], "ok", "{envelope}\nsecond: {}", second.log());
    second.wait_for("answered d-1: ran", Duration::from_secs(5));
    // Resumed, the first worker finishes its run and publishes a second
    // valid receipt: nothing of it reaches the edge's files.
    stalled.signal(Signal::CONT);
    stalled.wait_for("answered d-1: ran", Duration::from_secs(15));
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"ran twice, published once\n");
    let used = worker_finished(&p, "d-1");
    let reconcile = p.run(&["cluster", "reconcile"]);
    reconcile.assert_ok();
    let done = &reconcile.envelope["content"]["reconciled"];
    assert_eq!((done["duplicates_journaled"].as_u64(), done["used"].as_u64()), (Some(1), Some(1)), "{reconcile:#?}");
    let duplicate = p
        .journal_records("d-1")
        .into_iter()
        .find(|r| r["kind"] == "ClusterResultDuplicated")
        .expect("a ClusterResultDuplicated record");
    assert_eq!(duplicate["invocation_id"], "d-1");
    let body = &duplicate["body"];
    let stalled_key = airlock_journal::PublicKey::parse(&stalled.public_key()).unwrap();
    assert_eq!(body["worker_key_id"], stalled_key.key_id(), "{body}");
    assert_ne!(body["worker_key_id"], used["body"]["cluster"]["worker_key_id"], "{body}");
    assert_eq!(body["order_sha256"], used["body"]["cluster"]["order_sha256"], "{body}");
    assert_eq!(body["verdict"]["ran"]["exit_code"], used["body"]["exit_code"], "{body}");
    // The duplicate receipt verifies with OpenSSL under the stalled worker's key.
    let receipt = openssl_verified(p.root(), &body["receipt"], &stalled.public_key_file());
    assert_eq!(receipt["invocation_id"], "d-1");
    // Once: a second reconcile journals nothing new.
    let again = p.run(&["cluster", "reconcile"]);
    let done = &again.envelope["content"]["reconciled"];
    assert_eq!(
        (done["duplicates_journaled"].as_u64(), done["duplicates_known"].as_u64()),
        (Some(0), Some(1)),
        "{again:#?}"
    );
    let finishes = p.journal_kinds("d-1").iter().filter(|k| *k == "InvocationFinished").count();
    assert_eq!(finishes, 1);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn an_edge_cut_from_the_cluster_refuses_with_a_retryable_code_and_publishes_nothing() {
    let port = free_port();
    let p = cluster_project(&format!("nats://127.0.0.1:{port}"), "");
    p.write("data/in.txt", "x\n");
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster"]);
    assert_eq!((run.status(), run.reason(), run.code), ("error", "cluster.unavailable", 75), "{run:#?}");
    assert!(!p.path("results/out.txt").exists());
    let staged = p.run(&["staging", "status", "--json"]);
    assert_eq!(staged.envelope["content"]["reserved_snapshots"], 0, "{staged:#?}");
    // A tier the configuration lacks is refused before anything is read.
    let local = Project::new();
    local.write("data/in.txt", "x\n");
    let run = local.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster"]);
    assert_eq!(run.reason(), "sandbox.tier_not_allowed", "{run:#?}");
}

#[test]
fn with_no_worker_the_call_times_out_and_a_late_worker_refuses_the_expired_order() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 1\n");
    copy_within(&p, 1);
    p.write("data/in.txt", "x\n");
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "late"]);
    assert_eq!((run.status(), run.reason(), run.code), ("error", "cluster.timeout", 75), "{run:#?}");
    assert!(!p.path("results/out.txt").exists());
    let w = Worker::start(&n.url, Some(&p));
    w.wait_for("answered late: cluster.timeout", Duration::from_secs(10));
    assert!(!p.path("results/out.txt").exists());
}

#[test]
fn a_worker_refuses_an_order_over_its_hosts_caps_and_nothing_is_published() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 5\n");
    copy_within(&p, 20);
    p.write("data/in.txt", "asks too much\n");
    // The worker host runs no call longer than 10 s, whatever a pinned
    // edge asks.
    let w = Worker::start_with(&n.url, Some(&p), "[cluster.worker]\ntimeout_seconds = 10\n", &[]);
    let run =
        p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "cap-1"]);
    assert_eq!((run.status(), run.reason(), run.code), ("refused", "cluster.refused", 77), "{run:#?}");
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cluster.over_limit") && message.contains("[cluster.worker] timeout_seconds"),
        "{message}"
    );
    w.wait_for("answered cap-1: cluster.over_limit", Duration::from_secs(5));
    assert!(!p.path("results/out.txt").exists());
    // Within the cap, the same worker runs it.
    copy_within(&p, 10);
    let run =
        p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "cap-2"]);
    run.assert_ok();
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"asks too much\n");
}

/// The copy tool with a timeout of `secs`: what an edge waits for a
/// worker is the tool's timeout plus `queue_seconds`.
pub(crate) fn copy_within(p: &Project, secs: u32) {
    p.write(
        "tools/copy.clad.toml",
        crate::util::COPY_TOOL.replace("[tool]\n", &format!("[tool]\ntimeout_seconds = {secs}\n")),
    );
}

#[test]
fn results_of_an_unpinned_worker_and_orders_of_an_unpinned_edge_are_never_used() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 2\n");
    copy_within(&p, 2);
    p.write("data/in.txt", "x\n");
    // A worker nobody pinned takes the call and answers it: its receipt is
    // signed, but not by a key the edge trusts.
    let rogue = Worker::start(&n.url, None);
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "r-1"]);
    assert_eq!(run.reason(), "cluster.timeout", "{run:#?}\n{}", rogue.log());
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("1 unverifiable results ignored"), "{run:#?}");
    assert!(!p.path("results/out.txt").exists());
    drop(rogue);
    // An edge whose key is not pinned: a pinned worker drops its order.
    let w = Worker::start(&n.url, Some(&p));
    let stranger = cluster_project(&n.url, "queue_seconds = 1\n");
    copy_within(&stranger, 2);
    stranger.write("data/in.txt", "x\n");
    let run = stranger.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster"]);
    assert_eq!(run.reason(), "cluster.timeout", "{run:#?}");
    w.wait_for("dropped a message", Duration::from_secs(5));
    assert!(w.log().contains("no edge key"), "{}", w.log());
    assert!(!stranger.path("results/out.txt").exists());
}

#[test]
fn a_tampered_input_blob_is_refused_by_the_worker_and_nothing_is_published() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "");
    // Over the inline bound, so the input goes through the store.
    let real: Vec<u8> = b"the real input\n".repeat(10_000);
    p.write("data/in.txt", &real);
    // Someone with access to the store plants other bytes of the same
    // length under the input's name: the edge finds the name and does not
    // upload, the worker checks the bytes against the signed order.
    let fake: Vec<u8> = b"a forged input\n".repeat(10_000);
    assert_eq!(real.len(), fake.len());
    let name = format!("sha256-{}", sha256_hex(&real));
    let url = n.url.clone();
    block_on(async move {
        let client = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let store = js.get_object_store("airlock_blobs").await.unwrap();
        store.put(name.as_str(), &mut fake.as_slice()).await.unwrap();
    });
    let w = Worker::start(&n.url, Some(&p));
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "t-1"]);
    assert_eq!((run.status(), run.reason()), ("refused", "cluster.refused"), "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("cluster.blob_mismatch"), "{run:#?}");
    assert!(!p.path("results/out.txt").exists());
    w.wait_for("answered t-1: cluster.blob_mismatch", Duration::from_secs(5));
}

#[test]
fn a_worker_drains_on_sigterm_and_says_what_it_served() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 30\n");
    slow_copy(&p, 1);
    p.write("data/in.txt", "drained\n");
    let mut w = Worker::start(&n.url, Some(&p));
    let call = start_slow_call(&p, "d-1");
    w.wait_for("took d-1", Duration::from_secs(10));
    // SIGTERM mid-call: the call in hand finishes and is answered.
    let status = w.terminate();
    assert!(status.success(), "{status:?}: {}", w.log());
    assert!(w.log().contains("answered d-1: ran"), "{}", w.log());
    let envelope = answer_of(call);
    assert_eq!(envelope["status"], "ok", "{envelope}");
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"drained\n");
    let list = p.run(&["workers", "list", "--json"]);
    assert_eq!(list.envelope["content"]["workers"][0]["state"], "stopped", "{list:#?}");
}

#[test]
fn a_journal_cut_at_a_record_boundary_verifies_alone_and_fails_against_the_stream() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "");
    p.write("data/in.txt", "x\n");
    // Local calls too: every record goes to the stream after each call.
    p.run(&["run", "copy", "data/in.txt", "results/a.txt"]).assert_ok();
    p.run(&["run", "copy", "data/in.txt", "results/b.txt"]).assert_ok();
    let checked = p.run(&["journal", "verify", "--against-stream"]);
    checked.assert_ok();
    let stream = &checked.envelope["content"]["stream"];
    assert_eq!(stream["matched"], checked.envelope["content"]["records"], "{checked:#?}");
    assert_eq!(stream["not_pushed"], 0, "{checked:#?}");
    assert_eq!(p.run(&["journal", "push"]).envelope["content"]["pushed"], serde_json::Value::Null);
    // Cut the journal after the first call's records: still a valid chain
    // on its own, but the stream holds what was removed.
    let file = p.path(".airlock/journal.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let keep = lines.iter().position(|l| l.contains("results/b.txt")).expect("the second call's records");
    assert!(keep > 0 && keep < lines.len());
    std::fs::write(&file, lines[..keep].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    p.run(&["journal", "verify"]).assert_ok();
    let cut = p.run(&["journal", "verify", "--against-stream"]);
    assert_eq!((cut.status(), cut.reason()), ("failed", "journal.stream_mismatch"), "{cut:#?}");
    assert!(cut.envelope["error"]["message"].as_str().unwrap().contains("cut"), "{cut:#?}");
}

#[test]
fn the_stream_leader_killed_mid_run_loses_no_call_and_publishes_none_twice() {
    let Some(mut nodes) = nats3() else { return };
    let p = cluster_project(&nodes.urls, "replicas = 3\nack_wait_seconds = 2\nqueue_seconds = 8\n");
    // What the edge waits at most (timeout + queue, then the fetches'
    // retries) stays under the harness's 30 s bound.
    copy_within(&p, 5);
    // Right after the election the cluster may still refuse a stream of
    // three replicas: init is retried.
    let mut last = None;
    let initialized = crate::runkit::wait_until(Duration::from_secs(45), || {
        let run = p.run(&["cluster", "init"]);
        let ok = run.code == 0;
        last = Some(run);
        ok
    });
    assert!(initialized, "cluster init never succeeded: {last:#?}");
    p.write("data/in.txt", "replicated\n");
    let big: Vec<u8> = (0..150_000u32).map(|i| (i % 241) as u8).collect();
    p.write("data/big.bin", &big);
    let _a = Worker::start(&nodes.urls, Some(&p));
    let _b = Worker::start(&nodes.urls, Some(&p));
    let mut killed = None;
    let mut retries = 0;
    for i in 0..12 {
        if i == 4 {
            let leader = nodes.leader_of("AIRLOCK_CALLS").expect("a leader of the calls stream");
            nodes.kill(leader);
            killed = Some(leader);
        }
        // Half the calls move an input through the (replicated) store.
        let (input, expected) =
            if i % 2 == 0 { ("data/in.txt", b"replicated\n".to_vec()) } else { ("data/big.bin", big.clone()) };
        let out = format!("results/out-{i}");
        // A call the cluster could not take during the election answers a
        // retryable code and published nothing: the caller tries again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let id = format!("lead-{i}-{attempts}");
            let run = p.run(&["run", "copy", input, &out, "--tier", "cluster", "--invocation-id", &id]);
            if run.code == 0 {
                break;
            }
            retries += 1;
            eprintln!(
                "call {i} attempt {attempts}: {} after {} ms: {}",
                run.reason(),
                run.envelope["duration_ms"],
                run.envelope["error"]["message"]
            );
            assert!(
                ["cluster.unavailable", "cluster.timeout"].contains(&run.reason()) && attempts < 5,
                "call {i} attempt {attempts}: {run:#?}"
            );
            assert!(!p.path(&out).exists(), "a failed attempt published: {run:#?}");
        }
        assert_eq!(std::fs::read(p.path(&out)).unwrap(), expected, "call {i}");
    }
    eprintln!("stream leader n{} killed before call 4; {retries} attempts were retried", killed.unwrap_or(9));
    assert!(killed.is_some());
    // Every output once: twelve files, twelve published finishes.
    let files = std::fs::read_dir(p.path("results")).unwrap().count();
    assert_eq!(files, 12);
    let records = p.run(&["journal", "show", "--json"]).envelope["content"]["records"].clone();
    let published = records
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "InvocationFinished" && r["body"]["status"] == "ok")
        .count();
    assert_eq!(published, 12);
    p.run(&["journal", "verify"]).assert_ok();
}

/// Users of the test server: airlock's processes connect without
/// credentials (`no_auth_user`) and may do everything; `rogue` may not
/// publish receipts or pin keys.
const ROGUE_DENIED: &str = r#"
no_auth_user: airlock
authorization {
  users = [
    { user: airlock, password: "airlock-test" }
    { user: rogue, password: "rogue-test",
      permissions: { publish: { deny: ["airlock.results.>", "$KV.airlock_keys.>"] } } }
  ]
}
"#;

#[test]
fn a_client_without_the_right_can_neither_forge_a_receipt_nor_pin_a_key() {
    let Some(n) = nats_with(ROGUE_DENIED) else { return };
    let p = edge(&n.url, "queue_seconds = 5\n");
    p.write("data/in.txt", "only the genuine worker\n");
    // The rogue tries, before the call and while it waits, to pin a key of
    // its own and to answer the call with bytes of its own.
    let rogue_url = n.url.clone();
    let entry = format!("$KV.airlock_keys.worker.{}", "ab".repeat(32));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let until = std::sync::Arc::clone(&stop);
    let forge = move |url: String, entry: String| {
        std::thread::spawn(move || {
            block_on(async move {
                let client = async_nats::ConnectOptions::with_user_and_password("rogue".into(), "rogue-test".into())
                    .connect(url)
                    .await
                    .unwrap();
                // Until the call has answered: every moment of it is tried.
                while !until.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = client.publish(entry.clone(), "ed25519:00".into()).await;
                    let _ = client.publish("airlock.results.g-1", "{\"envelope\":{}}".into()).await;
                    let _ = client.flush().await;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            })
        })
    };
    let rogue = forge(rogue_url, entry.clone());
    let w = Worker::start(&n.url, Some(&p));
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "g-1"]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    rogue.join().unwrap();
    run.assert_ok();
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"only the genuine worker\n");
    // The edge saw no forged result: the server never delivered one.
    assert_eq!(worker_finished(&p, "g-1")["body"]["cluster"]["results_ignored"], 0);
    w.wait_for("answered g-1: ran", Duration::from_secs(5));
    // Neither the stream of results nor the key bucket holds the rogue's.
    let url = n.url.clone();
    let (results, pinned) = block_on(async move {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        let mut results = js.get_stream("AIRLOCK_RESULTS").await.unwrap();
        let count = results.info().await.unwrap().state.messages;
        let keys = js.get_key_value("airlock_keys").await.unwrap();
        (count, keys.get(format!("worker.{}", "ab".repeat(32))).await.unwrap())
    });
    assert_eq!(results, 1, "only the genuine receipt is stored");
    assert_eq!(pinned, None, "the rogue pinned a key");
    // The same publication by a client with the right does land: the
    // denial above is the server's, not a malformed request.
    let url = n.url.clone();
    let landed = block_on(async move {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        js.publish("airlock.results.g-1", "{}".into()).await.unwrap().await.is_ok()
    });
    assert!(landed);
}

/// A server that knows only users with passwords.
const USERS_ONLY: &str = r#"
authorization {
  users = [
    { user: edge, password: "edge-secret" }
    { user: worker, password: "worker-secret" }
  ]
}
"#;

#[test]
fn airlock_connects_as_its_user_with_a_password_file_only_it_may_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(n) = nats_with(USERS_ONLY) else { return };
    let creds = "user = \"edge\"\npassword_file = \"edge.password\"\n";
    let p = cluster_project(&n.url, creds);
    p.write("data/in.txt", "with credentials\n");
    // Readable by others: refused before anything is sent.
    p.write("edge.password", "edge-secret\n");
    std::fs::set_permissions(p.path("edge.password"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = p.run(&["cluster", "init"]);
    assert_eq!(run.reason(), "config.control_file_unsafe", "{run:#?}");
    std::fs::set_permissions(p.path("edge.password"), std::fs::Permissions::from_mode(0o600)).unwrap();
    p.run(&["cluster", "init"]).assert_ok();
    let w = Worker::start_with(
        &n.url,
        Some(&p),
        "user = \"worker\"\npassword_file = \"worker.password\"\n",
        &[("worker.password", "worker-secret", 0o600)],
    );
    p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster"]).assert_ok();
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"with credentials\n");
    drop(w);
    // A wrong password: the server refuses the connection, nothing is published.
    p.write("edge.password", "not-the-secret\n");
    let run = p.run(&["run", "copy", "data/in.txt", "results/other.txt", "--tier", "cluster"]);
    assert_eq!((run.reason(), run.code), ("cluster.unavailable", 75), "{run:#?}");
    assert!(!p.path("results/other.txt").exists());
    // Without credentials at all, the server says no.
    let anonymous = cluster_project(&n.url, "");
    assert_eq!(anonymous.run(&["cluster", "init"]).reason(), "cluster.unavailable");
}

#[test]
fn tenants_connect_by_nkey_into_accounts_of_their_own_and_never_see_each_others_calls() {
    use std::os::unix::fs::PermissionsExt as _;
    // The keys first (the server's configuration names their public
    // halves), made by `airlock cluster nkey`.
    let keys = Project::new();
    let nkey = |name: &str| {
        let made = keys.run(&["cluster", "nkey", name]);
        made.assert_ok();
        let public = made.envelope["content"]["public_key"].as_str().unwrap().to_owned();
        let seed = std::fs::read_to_string(keys.path(name)).unwrap();
        let mode = std::fs::metadata(keys.path(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name}");
        assert!(public.starts_with('U') && seed.starts_with("SU") && !made.stdout.contains(seed.trim()), "{made:#?}");
        (keys.path(name), seed, public)
    };
    let (edge_a, _, edge_a_public) = nkey("edge-a.nk");
    let (_, worker_a_seed, worker_a_public) = nkey("worker-a.nk");
    let (edge_b, _, edge_b_public) = nkey("edge-b.nk");
    let (stranger, _, _) = nkey("stranger.nk");
    // A seed file is never overwritten.
    let again = keys.run(&["cluster", "nkey", "edge-a.nk"]);
    assert_eq!(again.reason(), "config.invalid", "{again:#?}");
    let accounts = format!(
        "accounts {{\n  A: {{ jetstream: enabled, users: [{{ nkey: {edge_a_public} }}, {{ nkey: {worker_a_public} }}] }}\n  \
         B: {{ jetstream: enabled, users: [{{ nkey: {edge_b_public} }}] }}\n}}\n"
    );
    let Some(n) = nats_with(&accounts) else { return };
    let with_key = |file: &Path, extra: &str| cluster_project(&n.url, &format!("nkey_file = {file:?}\n{extra}"));

    // Tenant A: its edge and its worker, by NKey.
    let a = with_key(&edge_a, "");
    a.run(&["cluster", "init"]).assert_ok();
    let w = Worker::start_with(&n.url, Some(&a), "nkey_file = \"w.nk\"\n", &[("w.nk", &worker_a_seed, 0o600)]);
    a.write("data/in.txt", "tenant a\n");
    a.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "a-1"])
        .assert_ok();
    assert_eq!(std::fs::read(a.path("results/out.txt")).unwrap(), b"tenant a\n");

    // Tenant B: streams and buckets of its own account; A's worker is not
    // among its workers and never sees its call.
    let b = with_key(&edge_b, "queue_seconds = 1\n");
    copy_within(&b, 1);
    b.run(&["cluster", "init"]).assert_ok();
    let listed = b.run(&["workers", "list", "--json"]);
    assert_eq!(listed.envelope["content"]["workers"], serde_json::json!([]), "{listed:#?}");
    b.write("data/in.txt", "tenant b\n");
    let run = b.run(&["run", "copy", "data/in.txt", "results/out.txt", "--tier", "cluster", "--invocation-id", "b-1"]);
    assert_eq!(run.reason(), "cluster.timeout", "{run:#?}");
    assert!(!w.log().contains("b-1"), "{}", w.log());
    assert!(!b.path("results/out.txt").exists());
    // And A's results are not B's to read: its reconcile finds none.
    let reconciled = a.run(&["cluster", "reconcile"]);
    assert_eq!(reconciled.envelope["content"]["reconciled"]["used"], 1, "{reconciled:#?}");

    // A key the server does not know is refused; a seed readable by others
    // is refused before anything is sent.
    let c = with_key(&stranger, "");
    assert_eq!(c.run(&["cluster", "init"]).reason(), "cluster.unavailable");
    std::fs::set_permissions(&edge_b, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(b.run(&["cluster", "init"]).reason(), "config.control_file_unsafe");
}

#[test]
fn edges_authorize_with_the_clusters_policy_bundle_and_each_call_is_bound_to_its_revision() {
    let Some(n) = nats() else { return };
    let p = edge(&n.url, "policy_bundle = true\n");
    p.write("data/in.txt", "by the bundle\n");
    // No bundle pushed yet: refused before any file is read.
    let run = p.run(&["run", "copy", "data/in.txt", "results/none.txt"]);
    assert_eq!(run.reason(), "policy.invalid", "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("policy push"), "{run:#?}");

    // Revision 1 permits everything; a call on any tier is authorized by it
    // and its descriptor and authorization record name it.
    p.write("policy/permit.cedar", "@id(\"permit-all\")\npermit(principal, action, resource);\n");
    let pushed = p.run(&["cluster", "policy", "push", "policy/permit.cedar"]);
    pushed.assert_ok();
    let first = pushed.envelope["content"]["policy_bundle"].clone();
    let shown = p.run(&["cluster", "policy", "show"]);
    assert_eq!(shown.envelope["content"]["policy_bundle"], first, "{shown:#?}");
    p.run(&["run", "copy", "data/in.txt", "results/one.txt", "--invocation-id", "b-1"]).assert_ok();
    let records = p.journal_records("b-1");
    let prepared = records.iter().find(|r| r["kind"] == "InvocationPrepared").unwrap();
    let authorized = records.iter().find(|r| r["kind"] == "InvocationAuthorized").unwrap();
    assert_eq!(prepared["body"]["policy_bundle"], first, "{prepared}");
    assert_eq!(authorized["body"]["policy_bundle"], first, "{authorized}");
    assert_eq!(authorized["body"]["policy_ids"], serde_json::json!(["permit-all"]), "{authorized}");
    // A call kept under revision 1 ...
    let kept = p.run(&["prepare", "copy", "data/in.txt", "results/kept.txt", "--invocation-id", "kept"]);
    kept.assert_ok();
    // (the revision is part of the descriptor, and so of its digest)
    assert_eq!(kept.envelope["descriptor"]["policy_bundle"], first, "{kept:#?}");

    // ... and revision 2 forbids the copy tool: refused on every edge from
    // its next call, and the kept call is not dispatched under it.
    p.write(
        "policy/no-copy.cedar",
        "@id(\"no-copy\")\nforbid(principal, action, resource) when { resource.name == \"copy\" };\n",
    );
    let second = p.run(&["cluster", "policy", "push", "policy/permit.cedar", "policy/no-copy.cedar"]);
    second.assert_ok();
    let revision = |v: &serde_json::Value| v["policy_bundle"]["revision"].as_u64().unwrap();
    assert!(revision(&second.envelope["content"]) > revision(&pushed.envelope["content"]));
    let denied = p.run(&["run", "copy", "data/in.txt", "results/two.txt"]);
    denied.assert_refused("policy.denied", 77);
    assert!(denied.envelope["error"]["message"].as_str().unwrap().contains("no-copy"), "{denied:#?}");
    let stale = p.run(&["dispatch", "kept"]);
    stale.assert_refused("policy.changed", 77);
    assert!(!p.path("results/kept.txt").exists() && !p.path("results/two.txt").exists());

    // A bundle that does not validate against the tools here is never stored.
    p.write("policy/bad.cedar", "permit(principal, action, resource) when { resource.no_such_field == 1 };\n");
    let bad = p.run(&["cluster", "policy", "push", "policy/bad.cedar"]);
    assert_eq!(bad.reason(), "policy.invalid", "{bad:#?}");
    let shown = p.run(&["cluster", "policy", "show"]);
    assert_eq!(shown.envelope["content"]["policy_bundle"], second.envelope["content"]["policy_bundle"]);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn the_same_invocation_published_twice_is_one_call_on_the_cluster() {
    let Some(n) = nats() else { return };
    let _p = edge(&n.url, "");
    // What an edge's retry does: the same order under the same message id.
    let url = n.url.clone();
    let (first, second, stored) = block_on(async move {
        let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
        let publish = || async {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", "inv-twice");
            js.publish_with_headers("airlock.calls.native.nobody", headers, "order".into())
                .await
                .unwrap()
                .await
                .unwrap()
        };
        let (a, b) = (publish().await, publish().await);
        let mut calls = js.get_stream("AIRLOCK_CALLS").await.unwrap();
        (a.duplicate, b.duplicate, calls.info().await.unwrap().state.messages)
    });
    assert_eq!((first, second, stored), (false, true, 1), "the calls stream must drop a second publication");
}

#[test]
fn an_edge_whose_cluster_goes_away_mid_call_answers_a_retryable_code_and_publishes_nothing() {
    let Some(mut n) = nats() else { return };
    let p = edge(&n.url, "queue_seconds = 3\n");
    slow_copy(&p, 2);
    p.write("data/in.txt", "never half-published\n");
    let w = Worker::start(&n.url, Some(&p));
    let call = start_slow_call(&p, "gone-1");
    w.wait_for("took gone-1", Duration::from_secs(10));
    // The whole cluster goes while the tool runs.
    n.kill();
    let envelope = answer_of(call);
    let code = envelope["error"]["code"].as_str().unwrap_or_default().to_owned();
    assert!(["cluster.unavailable", "cluster.timeout"].contains(&code.as_str()), "{envelope}");
    assert!(!p.path("results/out.txt").exists());
    let staged = p.run(&["staging", "status", "--json"]);
    assert_eq!(staged.envelope["content"]["reserved_snapshots"], 0, "{staged:#?}");
    p.run(&["journal", "verify"]).assert_ok();
}
