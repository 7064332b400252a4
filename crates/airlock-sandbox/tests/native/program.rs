//! `NativeTier::bind_program`: a fixed helper, bound from an open file,
//! runs inside the worker and can neither change itself nor reach beside it.

use std::fs::File;
use std::sync::Arc;

use airlock_sandbox::{Tier, Worker, WorkerSpec, PROGRAM_PATH};

use crate::util::{init_program, sh, text, tier};

#[test]
fn a_bound_program_runs_read_only_and_alone() {
    let mut t = tier();
    t.bind_program(Arc::new(File::open(init_program()).unwrap()));
    let mut spec = WorkerSpec::new([PROGRAM_PATH, "probe-program"]);
    spec.timeout = std::time::Duration::from_secs(30);
    let outcome = t.start(spec).and_then(|w| w.wait()).unwrap();
    let out = text(&outcome.stdout);
    assert!(outcome.exit.success(), "exit {:?}: {out} {}", outcome.exit, text(&outcome.stderr));
    assert!(out.contains("ran as /.airlock/program"), "{out}");
    for line in ["write-self: ", "list-dir: ", "create-beside: "] {
        let value = out.lines().find_map(|l| l.strip_prefix(line)).unwrap_or("missing");
        assert_ne!(value, "ok", "{line} was allowed:\n{out}");
    }
}

#[test]
fn without_a_bound_program_there_is_nothing_there() {
    let outcome = tier().start(sh("test -e /.airlock/program && echo present || echo absent", &[])).unwrap();
    let outcome = outcome.wait().unwrap();
    assert_eq!(text(&outcome.stdout), "absent\n");
}

#[test]
fn an_image_may_not_claim_the_program_directory() {
    let mut spec = sh("true", &[]);
    spec.image.push(airlock_sandbox::ImageMount::new("/.airlock"));
    assert!(spec.validate().is_err());
}
