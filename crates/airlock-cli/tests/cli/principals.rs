//! Principals everywhere (ATTACKS 21, issue 14 item 6): every journal
//! record of a call names who made it, as do the envelope's evidence and the
//! attestation; a dispatched call stays its preparer's.

use crate::util::{Project, COPY_TOOL};
use serde_json::Value;

fn records(p: &Project) -> Vec<Value> {
    let text = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn of(records: &[Value], id: &str) -> Vec<Value> {
    records.iter().filter(|r| r["invocation_id"] == id).cloned().collect()
}

#[test]
fn every_record_of_a_call_and_its_attestation_name_the_principal() {
    let p = Project::new();
    p.write("data/in.txt", "hello\n");
    let ok =
        p.run(&["--principal", "agent-7", "run", "copy", "data/in.txt", "results/o.txt", "--invocation-id", "p-1"]);
    ok.assert_ok();
    assert_eq!(ok.envelope["evidence"]["principal"], "agent-7", "{ok:#?}");
    let refused =
        p.run(&["--principal", "agent-8", "run", "copy", "data/in.txt", "results/o.txt", "--invocation-id", "p-2"]);
    refused.assert_refused("output.exists", 73);
    let query = p.run(&["--principal", "agent-9", "query", "read_file", "path=data/in.txt", "--invocation-id", "p-3"]);
    query.assert_ok();
    assert_eq!(query.envelope["evidence"]["principal"], "agent-9");

    let all = records(&p);
    for (id, who, least) in [("p-1", "agent-7", 6), ("p-2", "agent-8", 1), ("p-3", "agent-9", 3)] {
        let mine = of(&all, id);
        assert!(mine.len() >= least, "{id}: {mine:#?}");
        for r in &mine {
            assert_eq!(r["body"]["principal"], who, "{id} record {} lacks its principal", r["kind"]);
        }
    }
    let out = p.command(&["attest", "p-1"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let env: Value = serde_json::from_slice(&out.stdout).unwrap();
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD.decode(env["payload"].as_str().unwrap()).unwrap();
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(statement["predicate"]["principal"], "agent-7", "{statement:#}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_dispatched_call_stays_its_preparers_and_cedar_judges_that_principal() {
    let p = Project::with_config(
        "[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[policy]\nfiles = [\"policy/*.cedar\"]\n",
    );
    p.write("tools/copy.clad.toml", COPY_TOOL);
    p.write(
        "policy/p.cedar",
        "@id(\"alice-only\")\npermit(principal == Airlock::Agent::\"alice\", action, resource);\n",
    );
    p.write("data/in.txt", "x\n");
    p.run(&["--principal", "mallory", "prepare", "copy", "data/in.txt", "results/a.txt", "--invocation-id", "d-1"])
        .assert_ok();
    // Dispatching someone else's call does not borrow the dispatcher's grants.
    p.run(&["--principal", "alice", "dispatch", "d-1"]).assert_refused("policy.denied", 77);
    p.run(&["--principal", "alice", "prepare", "copy", "data/in.txt", "results/b.txt", "--invocation-id", "d-2"])
        .assert_ok();
    let ran = p.run(&["--principal", "mallory", "dispatch", "d-2"]);
    ran.assert_ok();
    assert_eq!(ran.envelope["evidence"]["principal"], "alice");
    for r in of(&records(&p), "d-2") {
        assert_eq!(r["body"]["principal"], "alice", "{r:#}");
    }
}
