//! The cluster across hosts (issue 23): a lab of network namespaces —
//! nats-1..3, worker-a, worker-b and the edge, each with an address of its
//! own on one bridge — and faults of a real network: a host whose link goes
//! down is not reset, it goes silent. A blob planted from another host and a
//! journal cut are checked across the lab too. One lab for the run, the cases in
//! sequence (each bounded; the lab's set-up is the slow part).

use crate::clusterkit::{cluster_project, nats3_in, worker_finished, Worker};
use crate::netlab::Lab;
use crate::runkit::wait_until;
use crate::util::{Project, Run, AIRLOCK};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const HOSTS: [&str; 6] = ["nats-1", "nats-2", "nats-3", "worker-a", "worker-b", "edge"];

/// `airlock ARGS` in the project `p`, run on the lab's edge host.
fn on_edge(lab: &Lab, p: &Project, args: &[&str]) -> Run {
    p.run_command(edge_command(lab, p, args), args)
}

fn edge_command(lab: &Lab, p: &Project, args: &[&str]) -> std::process::Command {
    let ns = lab.ns("edge");
    let mut full = vec!["netns", "exec", &ns, AIRLOCK];
    full.extend_from_slice(args);
    p.command_of(Path::new("ip"), &full)
}

/// A `slowcopy` call started on the edge (answered by [`answer_of`]).
fn start_on_edge(lab: &Lab, p: &Project, id: &str) -> Child {
    let args = ["run", "slowcopy", "data/in.txt", &format!("results/{id}"), "--tier", "cluster", "--invocation-id", id];
    edge_command(lab, p, &args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap()
}

fn answer_of(call: Child) -> serde_json::Value {
    let out = call.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A `copy` of `input` to `results/ID` on the cluster, tried again while
/// it answers a retryable code (see [`answered`]); it must succeed. The
/// attempts made.
fn copy_until_done(lab: &Lab, p: &Project, input: &str, id: &str) -> u32 {
    let (run, attempts) = answered(lab, p, input, id, 8);
    run.assert_ok();
    attempts
}

/// The first answer that is not retryable to a `copy` of `input` to
/// `results/ID` (each attempt its own invocation id), within `tries`
/// attempts; a retryable answer must have published nothing. The answer
/// and the attempts made.
fn answered(lab: &Lab, p: &Project, input: &str, id: &str, tries: u32) -> (Run, u32) {
    let out = format!("results/{id}");
    for attempt in 1..=tries {
        let run = on_edge(
            lab,
            p,
            &["run", "copy", input, &out, "--tier", "cluster", "--invocation-id", &format!("{id}-{attempt}")],
        );
        if !["cluster.unavailable", "cluster.timeout"].contains(&run.reason()) {
            return (run, attempt);
        }
        assert!(!p.path(&out).exists(), "a failed attempt published: {run:#?}");
        eprintln!("{id} attempt {attempt}: {} ({})", run.reason(), run.envelope["error"]["message"]);
    }
    panic!("{id}: {tries} attempts answered a retryable code");
}

#[test]
fn across_a_network_of_namespaces_calls_survive_a_silent_worker_a_silent_node_and_an_edge_cut_off() {
    let Some(lab) = Lab::new(&HOSTS) else { return };
    let Some(nodes) = nats3_in(&lab, ["nats-1", "nats-2", "nats-3"]) else { return };
    // What an edge may wait in all (its connect, the queue time for the
    // upload and the publication, the tool's timeout plus the queue time,
    // then the fetches) stays under the harness's 30 s bound for a command.
    let p = cluster_project(&nodes.urls, "replicas = 3\nqueue_seconds = 5\n");
    crate::cluster::slow_copy(&p, 2);
    crate::cluster::copy_within(&p, 3);
    let initialized = wait_until(Duration::from_secs(45), || on_edge(&lab, &p, &["cluster", "init"]).code == 0);
    assert!(initialized, "cluster init never succeeded: {:#?}", on_edge(&lab, &p, &["cluster", "init"]));
    p.write("data/in.txt", "across hosts\n");
    let pin = |key: &str| {
        on_edge(&lab, &p, &["cluster", "trust", "worker", key]).assert_ok();
    };
    let workers = [
        ("worker-a", Worker::start_on(&lab, "worker-a", &nodes.urls, pin)),
        ("worker-b", Worker::start_on(&lab, "worker-b", &nodes.urls, pin)),
    ];

    // 1. The golden path across hosts: each output published once, each
    //    receipt a pinned worker's.
    for i in 0..4 {
        let id = format!("g{i}");
        assert_eq!(copy_until_done(&lab, &p, "data/in.txt", &id), 1, "a call failed on a healthy lab");
        assert_eq!(std::fs::read(p.path(&format!("results/{id}"))).unwrap(), b"across hosts\n");
    }
    let listed = on_edge(&lab, &p, &["workers", "list", "--json"]);
    let hosts: Vec<&str> = listed.envelope["content"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["state"] != "stopped")
        .map(|w| w["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 2, "{listed:#?}");

    // 2. The worker holding a call goes silent (its link down): after the
    //    ack wait the call goes to the other worker, published once.
    let call = start_on_edge(&lab, &p, "silent-worker");
    let taken =
        wait_until(Duration::from_secs(10), || workers.iter().any(|(_, w)| w.log().contains("took silent-worker")));
    assert!(taken, "no worker took the call");
    let (cut, _) = workers.iter().find(|(_, w)| w.log().contains("took silent-worker")).unwrap();
    lab.cut(cut);
    let envelope = answer_of(call);
    lab.mend(cut);
    assert_eq!(envelope["status"], "ok", "{envelope}");
    let (_, other) = workers.iter().find(|(h, _)| h != cut).unwrap();
    let finished = worker_finished(&p, "silent-worker");
    let other_key = airlock_journal::PublicKey::parse(&other.public_key()).unwrap();
    assert_eq!(finished["body"]["cluster"]["worker_key_id"], other_key.key_id(), "{finished}");
    assert_eq!(std::fs::read(p.path("results/silent-worker")).unwrap(), b"across hosts\n");

    // 3. The edge cut off mid-call: a retryable answer within seconds (not
    //    the call's whole wait), nothing published, no reservation left.
    let call = start_on_edge(&lab, &p, "edge-cut");
    let taken = wait_until(Duration::from_secs(10), || workers.iter().any(|(_, w)| w.log().contains("took edge-cut")));
    assert!(taken, "no worker took the call");
    let began = Instant::now();
    lab.cut("edge");
    let envelope = answer_of(call);
    let waited = began.elapsed();
    lab.mend("edge");
    assert_eq!(
        (envelope["status"].as_str(), envelope["error"]["code"].as_str()),
        (Some("error"), Some("cluster.unavailable")),
        "{envelope}"
    );
    assert!(waited < Duration::from_secs(15), "the edge noticed the cut after {waited:?}");
    assert!(!p.path("results/edge-cut").exists());
    let staged = on_edge(&lab, &p, &["staging", "status", "--json"]);
    assert_eq!(staged.envelope["content"]["reserved_snapshots"], 0, "{staged:#?}");
    // Joined again, it calls as before.
    copy_until_done(&lab, &p, "data/in.txt", "after-edge-cut");

    // 4. Other bytes planted in the store (from worker-b's host) under an
    //    input's name: the worker that takes the call refuses them.
    let real: Vec<u8> = b"the real input\n".repeat(10_000);
    let fake: Vec<u8> = b"a forged input\n".repeat(10_000);
    p.write("data/big.txt", &real);
    let name = format!("sha256-{}", crate::util::sha256_hex(&real));
    let url = nodes.urls.clone();
    // (retried: the cluster may still be settling after the cuts above)
    let planted = lab.within("worker-b", move || {
        crate::clusterkit::block_on(async move {
            let servers: Vec<async_nats::ServerAddr> = url.split(',').map(|u| u.parse().unwrap()).collect();
            let js = async_nats::jetstream::new(async_nats::connect(servers).await.unwrap());
            for _ in 0..20 {
                if let Ok(store) = js.get_object_store("airlock_blobs").await {
                    if store.put(name.as_str(), &mut fake.as_slice()).await.is_ok() {
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            false
        })
    });
    assert!(planted, "the blob could not be planted");
    let (run, _) = answered(&lab, &p, "data/big.txt", "tampered", 8);
    assert_eq!(run.reason(), "cluster.refused", "{run:#?}");
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("cluster.blob_mismatch"), "{run:#?}");
    assert!(!p.path("results/tampered").exists());

    // 5. The journal cut at a record boundary verifies alone and fails
    //    against the stream the edge pushed to across the lab.
    on_edge(&lab, &p, &["journal", "push"]).assert_ok();
    let whole = on_edge(&lab, &p, &["journal", "verify", "--against-stream"]);
    whole.assert_ok();
    assert_eq!(whole.envelope["content"]["stream"]["not_pushed"], 0, "{whole:#?}");
    let file = p.path(".airlock/journal.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&file, lines[..lines.len() - 3].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    on_edge(&lab, &p, &["journal", "verify"]).assert_ok();
    let cut = on_edge(&lab, &p, &["journal", "verify", "--against-stream"]);
    assert_eq!((cut.status(), cut.reason()), ("failed", "journal.stream_mismatch"), "{cut:#?}");
    // (put back for what follows)
    std::fs::write(&file, &text).unwrap();
    on_edge(&lab, &p, &["journal", "verify", "--against-stream"]).assert_ok();

    // 6. The calls stream's leader goes silent: the others elect a new one;
    //    every call is published once (a call may answer a retryable code
    //    while they do, and is tried again).
    let leader = nodes.leader_of("AIRLOCK_CALLS").expect("a leader of the calls stream");
    let leader_host = ["nats-1", "nats-2", "nats-3"][leader];
    lab.cut(leader_host);
    let mut attempts = 0;
    for i in 0..4 {
        attempts += copy_until_done(&lab, &p, "data/in.txt", &format!("l{i}"));
    }
    lab.mend(leader_host);
    eprintln!("{leader_host} (leading the calls stream) cut: 4 calls in {attempts} attempts");
    // A node that went silent while it led takes the cluster up to half a
    // minute to take back (nats-server 2.9): calls answer retryable codes
    // meanwhile.
    let (run, _) = answered(&lab, &p, "data/in.txt", "after-node-cut", 8);
    run.assert_ok();

    // Every output once; the journal verifies.
    let ids = ["g0", "g1", "g2", "g3", "silent-worker", "after-edge-cut", "l0", "l1", "l2", "l3", "after-node-cut"];
    assert!(!p.path("results/tampered").exists());
    for id in ids {
        assert!(p.path(&format!("results/{id}")).exists(), "{id}");
    }
    let files = std::fs::read_dir(p.path("results")).unwrap().count();
    assert_eq!(files, ids.len());
    on_edge(&lab, &p, &["journal", "verify"]).assert_ok();
}
