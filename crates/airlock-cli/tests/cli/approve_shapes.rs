//! Issue 24, items 7 and 8 on the shipping binary: create-only ceilings
//! (`create`: outputs only, never read or listed) and exact-call approval
//! for every call shape (source queries, isolated submissions, `[broker]`
//! manifests).

use crate::isolated::root;
use crate::util::{Project, Run, CANARY};
use serde_json::json;

/// `data/` read-only, `results/` create-only; `results/old.txt` already
/// exists there and must never be read.
fn create_only_project() -> Project {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:create\"]\n",
    );
    p.write("data/in.txt", "input bytes\n");
    p.write("results/old.txt", CANARY);
    p
}

#[track_caller]
fn assert_create_only(p: &Project, run: &Run) {
    run.assert_refused("grant.create_only", 77);
    p.assert_absent(run, CANARY);
}

#[test]
fn a_create_only_ceiling_takes_new_outputs_and_refuses_every_read_and_listing() {
    let p = create_only_project();
    // A new output is still created there.
    p.run(&["run", "copy", "data/in.txt", "results/new.txt"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/new.txt")).unwrap(), "input bytes\n");

    // A declared read of a file inside it, a source read, a listing and a
    // search are refused, and none of them reads a byte.
    assert_create_only(&p, &p.run(&["run", "copy", "results/old.txt", "results/copy.txt"]));
    assert!(!p.path("results/copy.txt").exists());
    assert_create_only(&p, &p.run(&["query", "read_file", "path=results/old.txt"]));
    assert_create_only(&p, &p.run(&["query", "list_files", "path=results"]));
    assert_create_only(&p, &p.run(&["query", "grep_files", "pattern=CANARY", "path=results"]));

    // A listing of the working directory shows the ceiling's name but not
    // its content, and says it is partial.
    let all = p.run(&["query", "list_files"]);
    all.assert_ok();
    assert!(!all.stdout.contains("old.txt") && !all.stdout.contains("new.txt"), "{all:#?}");
    assert!(all.stdout.contains("\"results\""), "the ceiling's name is listed: {all:#?}");
    assert_eq!(all.envelope["content"]["partial"], true, "{all:#?}");
    let search = p.run(&["query", "grep_files", "pattern=CANARY"]);
    search.assert_ok();
    p.assert_absent(&search, CANARY);

    // A broker root with read or list rights on it is refused; write-only is not.
    for rights in ["r", "l", "rw"] {
        let r = root(&p, "out", "results", rights);
        let run = p.run(&["isolated", "--root", &r, "--", "true"]);
        run.assert_refused("grant.create_only", 77);
    }
    let r = root(&p, "out", "results", "w");
    p.run(&["isolated", "--root", &r, "--", "true"]).assert_ok();
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn wo_is_create_and_rw_keeps_reading() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:rw\", \"./results:results:wo\"]\n",
    );
    p.write("data/in.txt", "rw stays readable\n");
    p.run(&["run", "copy", "data/in.txt", "data/copy.txt"]).assert_ok();
    p.run(&["query", "read_file", "path=data/copy.txt"]).assert_ok();
    p.run(&["run", "copy", "data/copy.txt", "results/out.txt"]).assert_ok();
    p.run(&["query", "read_file", "path=results/out.txt"]).assert_refused("grant.create_only", 77);
}

const APPROVAL_ROOTS: &str =
    "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

/// The invocation id and descriptor digest of a call that waits for approval.
fn waiting(run: &Run) -> (String, String) {
    run.assert_refused("approval.required", 77);
    assert_eq!(run.envelope["stage"], "prepared", "{run:#?}");
    let digest = run.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    (run.envelope["invocation_id"].as_str().unwrap().to_owned(), digest)
}

#[test]
fn an_approval_required_read_file_is_released_only_after_approval_and_dispatch() {
    let (p, alice) = crate::approvers::approved_project(APPROVAL_ROOTS);
    // An operator's copy of the bundled read_file, made high risk.
    p.write(
        "tools/read_file.clad.toml",
        "[tool]\nname = \"read_file\"\nversion = \"1.0.0\"\ndescription = \"Read a file\"\nrisk_tier = \
         \"high\"\n[source]\noperation = \"read_file\"\n[args.path]\ntype = \"path\"\nrequired = true\n\
         description = \"the file\"\n[output]\nformat = \"json\"\n",
    );
    p.write("data/secret.txt", "sensitive line\n");
    let asked = p.run(&["query", "read_file", "path=data/secret.txt"]);
    let (id, digest) = waiting(&asked);
    assert!(!asked.stdout.contains("sensitive line"), "nothing is released before approval: {asked:#?}");
    // The descriptor binds the bytes read.
    assert!(asked.stdout.contains("\"source\""), "{asked:#?}");

    // Not approved yet: dispatch releases nothing.
    let early = p.run(&["dispatch", &id]);
    early.assert_refused("approval.required", 77);
    assert!(!early.stdout.contains("sensitive line"), "{early:#?}");

    // The file changes after approval was asked: the approved result is the
    // one that was read and sealed.
    p.write("data/secret.txt", "CHANGED LATER\n");
    alice.approve(&p, &digest, &[]).assert_ok();
    let ran = p.run(&["dispatch", &id]);
    ran.assert_ok();
    assert_eq!(ran.envelope["content"]["content"], "sensitive line\n", "{ran:#?}");
    p.run(&["dispatch", &id]).assert_refused("invocation.duplicate", 77);
    let kinds = p.journal_kinds(&id);
    for k in ["InvocationPrepared", "ApprovalGranted", "ApprovalConsumed", "InvocationAuthorized", "InvocationFinished"]
    {
        assert!(kinds.iter().any(|have| have == k), "{k} missing: {kinds:?}");
    }
    p.run(&["journal", "verify"]).assert_ok();
}

/// A high-risk `[broker]` tool that writes `results/made.txt` through root `out`.
fn broker_project() -> (Project, crate::approvers::Approver) {
    let (p, alice) =
        crate::approvers::approved_project(&format!("{APPROVAL_ROOTS}[broker.roots]\nout = \"./results\"\n"));
    p.write(
        "tools/maker.clad.toml",
        "[tool]\nname = \"maker\"\nversion = \"1\"\ndescription = \"writes one file\"\nrisk_tier = \"high\"\n\
         [broker]\nroots = [\"out:w\"]\n[command]\nexec = [\"sh\", \"-c\", \"printf approved | airlock-fs write out \
         made.txt\"]\n[output]\nformat = \"text\"\n",
    );
    (p, alice)
}

#[test]
fn an_isolated_submission_runs_only_after_approval() {
    let (p, alice) = broker_project();
    let (id, digest) = waiting(&p.run(&["run", "maker"]));
    assert!(!p.path("results/made.txt").exists(), "nothing ran before approval");
    p.run(&["dispatch", &id]).assert_refused("approval.required", 77);
    assert!(!p.path("results/made.txt").exists());
    // The descriptor the approver signs binds the root, its rights and identity, and both helpers.
    let prepared: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(p.path(&format!(".airlock/invocations/{id}/prepared.json"))).unwrap(),
    )
    .unwrap();
    let broker = &prepared["descriptor"]["command_boundary"]["filesystem"]["broker"];
    assert_eq!(
        (&broker["roots"][0]["name"], &broker["roots"][0]["rights"]),
        (&json!("out"), &json!("w")),
        "{broker:#}"
    );
    assert!(
        broker["roots"][0]["ino"].is_string()
            && broker["broker_sha256"].is_string()
            && broker["client_sha256"].is_string()
    );
    alice.approve(&p, &digest, &[]).assert_ok();
    p.run(&["dispatch", &id]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/made.txt")).unwrap(), "approved");
    p.run(&["dispatch", &id]).assert_refused("invocation.duplicate", 77);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_root_swapped_after_approval_is_refused_at_dispatch() {
    let (p, alice) = broker_project();
    let (id, digest) = waiting(&p.run(&["run", "maker"]));
    alice.approve(&p, &digest, &[]).assert_ok();
    // Another directory now answers to the approved root's path.
    std::fs::rename(p.path("results"), p.path("results-approved")).unwrap();
    p.mkdir("results");
    let run = p.run(&["dispatch", &id]);
    run.assert_refused("approval.call_changed", 77);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains("root \"out\" is another directory"), "{run:#?}");
    assert!(!p.path("results/made.txt").exists() && !p.path("results-approved/made.txt").exists(), "nothing ran");
    assert!(!p.journal_kinds(&id).iter().any(|k| k == "WorkerStarted"), "no worker started");
}
