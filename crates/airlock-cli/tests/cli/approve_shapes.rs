//! Issue 24, items 7 and 8 on the shipping binary: create-only ceilings
//! (`create`: outputs only, never read or listed) and exact-call approval
//! for every call shape (source queries, isolated submissions, `[broker]`
//! manifests).

use crate::isolated::root;
use crate::util::{Project, Run, CANARY};

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
