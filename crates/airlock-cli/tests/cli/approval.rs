//! Exact-call approval: a high-risk call stops after prepare; an approval
//! (signed by a pinned approver, see approvers.rs) binds one descriptor
//! digest and invocation; dispatch runs the snapshot once.

use crate::approvers::{approved_project, Approver};
use crate::util::{Project, CANARY, COPY_TOOL};

fn project(risk: &str) -> Project {
    project_with_approver(risk).0
}

fn project_with_approver(risk: &str) -> (Project, Approver) {
    let (p, alice) = approved_project(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    p.write(
        "tools/copy.clad.toml",
        COPY_TOOL.replace(
            "description = \"Copy one file to a new one\"",
            &format!("description = \"Copy one file to a new one\"\nrisk_tier = \"{risk}\""),
        ),
    );
    p.write("data/in.txt", "approved content\n");
    (p, alice)
}

fn field(run: &crate::util::Run, path: &[&str]) -> String {
    let mut v = &run.envelope;
    for k in path {
        v = &v[*k];
    }
    v.as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_high_risk_call_waits_for_an_approval_of_its_exact_digest_and_runs_its_snapshot_once() {
    let (p, alice) = project_with_approver("high");
    let first = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    first.assert_refused("approval.required", 77);
    assert_eq!(first.envelope["stage"], "prepared");
    assert!(first.envelope["descriptor"]["command_boundary"].is_object());
    let digest = field(&first, &["evidence", "descriptor_sha256"]);
    let id = field(&first, &["invocation_id"]);
    assert!(!p.path("results/out.txt").exists());

    // Not approved yet: dispatch is refused and the call stays dispatchable.
    p.run(&["dispatch", &id]).assert_refused("approval.required", 77);

    // The host input changes after prepare; the approval is for the snapshot.
    p.write("data/in.txt", "CHANGED AFTER APPROVAL\n");
    // Another call to the same tool has another digest: not covered.
    let other = p.run(&["run", "copy", "data/in.txt", "results/other.txt"]);
    other.assert_refused("approval.required", 77);
    assert_ne!(field(&other, &["evidence", "descriptor_sha256"]), digest);

    let approve = alice.approve(&p, &digest, &[]);
    approve.assert_ok();
    assert_eq!(approve.envelope["content"]["invocation_id"], id.as_str());
    assert_eq!(approve.envelope["content"]["approver"], "alice");
    p.run(&["dispatch", &field(&other, &["invocation_id"])]).assert_refused("approval.required", 77);
    let ran = p.run(&["dispatch", &id]);
    ran.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "approved content\n");

    // Replay is refused, and the used approval cannot be granted again.
    p.run(&["dispatch", &id]).assert_refused("invocation.duplicate", 77);
    alice.approve(&p, &digest, &[]).assert_refused("approval.unknown", 66);
    let journal = p.run(&["journal", "show", "--json"]);
    let kinds: Vec<String> = journal.envelope["content"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.iter().any(|k| k == "ApprovalGranted") && kinds.iter().any(|k| k == "ApprovalConsumed"), "{kinds:?}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_low_risk_call_prepared_alone_dispatches_without_approval_from_its_snapshot() {
    let p = project("low");
    let prepared = p.run(&["prepare", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "later"]);
    prepared.assert_ok();
    p.write("data/in.txt", CANARY);
    p.run(&["dispatch", "later"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "approved content\n");
    p.run(&["dispatch", "later"]).assert_refused("invocation.duplicate", 77);
}

/// Earlier builds kept a call's snapshots in `inputs/` beneath its staging
/// data; such a call still dispatches from them (and is still checked).
#[test]
fn a_call_kept_with_the_earlier_snapshot_layout_dispatches_from_it() {
    use std::os::unix::fs::DirBuilderExt;
    let p = project("low");
    for id in ["old1", "old2"] {
        p.run(&["prepare", "copy", "data/in.txt", &format!("results/{id}.txt"), "--invocation-id", id]).assert_ok();
        let data = p.path(&format!(".airlock/staging/data/{id}"));
        std::fs::DirBuilder::new().mode(0o700).create(data.join("inputs")).unwrap();
        std::fs::rename(data.join("0"), data.join("inputs/0")).unwrap();
    }
    p.write("data/in.txt", CANARY);
    p.run(&["dispatch", "old1"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/old1.txt")).unwrap(), "approved content\n");
    std::fs::write(p.path(".airlock/staging/data/old2/inputs/0"), "tampered").unwrap();
    assert_eq!(p.run(&["dispatch", "old2"]).reason(), "input.changed");
}

#[test]
fn a_tampered_snapshot_or_a_taken_output_stops_dispatch() {
    let p = project("low");
    p.run(&["prepare", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "t1"]).assert_ok();
    std::fs::write(p.path(".airlock/staging/data/t1/0"), "tampered").unwrap();
    let run = p.run(&["dispatch", "t1"]);
    assert_eq!(run.reason(), "input.changed", "{run:#?}");
    p.run(&["prepare", "copy", "data/in.txt", "results/out2.txt", "--invocation-id", "t2"]).assert_ok();
    p.write("results/out2.txt", "someone else's");
    p.run(&["dispatch", "t2"]).assert_refused("output.exists", 73);
    assert_eq!(std::fs::read_to_string(p.path("results/out2.txt")).unwrap(), "someone else's");
}
