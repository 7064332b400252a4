//! ATTACKS.md 13: 64 concurrent `airlock run` processes name the same
//! output. Exactly one publishes; every other one is refused with
//! `output.exists` (at prepare, or at the no-replace rename); the published
//! file is exactly one caller's input and matches that caller's receipt.

use crate::runkit::*;
use crate::util::{sha256_hex, Project, Run};
use std::sync::{Arc, Barrier};

const CALLERS: usize = 64;

#[test]
fn sixty_four_calls_naming_one_output_publish_exactly_once() {
    // Room in the staging pool for every caller: this test is about the
    // output, not admission (see staging_pool.rs).
    let p = Arc::new(Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[staging]\nmax_snapshots = 64\n",
    ));
    // The pause lets most callers get past prepare before the first one publishes,
    // so that most refusals come from the no-replace rename itself.
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"sleep 0.3; cat "$1" > "$2""#, IO_FS));
    let content = |i: usize| format!("caller {i:02}: {}\n", "x".repeat(i * 7));
    for i in 0..CALLERS {
        p.write(&format!("data/in-{i:02}.txt"), content(i));
    }
    let barrier = Arc::new(Barrier::new(CALLERS));
    let threads: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (p, barrier) = (p.clone(), barrier.clone());
            std::thread::spawn(move || {
                let input = format!("data/in-{i:02}.txt");
                barrier.wait();
                p.run(&["run", "shcopy", &input, "results/same.txt"])
            })
        })
        .collect();
    let runs: Vec<Run> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let winners: Vec<usize> = (0..CALLERS).filter(|&i| runs[i].status() == "ok").collect();
    assert_eq!(winners.len(), 1, "winners {winners:?}");
    let w = winners[0];
    let mut at_prepare = 0;
    for (i, run) in runs.iter().enumerate().filter(|(i, _)| *i != w) {
        run.assert_refused("output.exists", 73);
        assert_eq!(run.envelope["created_files"].as_array().map(Vec::len), Some(0), "caller {i}");
        if run.envelope.get("exit_code").is_none() {
            at_prepare += 1;
        }
    }
    eprintln!(
        "{CALLERS} callers: one published (caller {w}), {at_prepare} refused at prepare, {} at publish",
        CALLERS - 1 - at_prepare
    );

    let published = std::fs::read(p.path("results/same.txt")).unwrap();
    assert_eq!(published, content(w).as_bytes(), "the file is not the winner's input");
    let receipt = &runs[w].envelope["created_files"][0];
    assert_eq!(receipt["path"], "results/same.txt");
    assert_eq!(receipt["bytes"], published.len() as u64);
    assert_eq!(receipt["sha256"], format!("sha256:{}", sha256_hex(&published)));
    assert_eq!(names(&p.path("results")), ["same.txt"], "{}", p.tree());
    assert_no_candidates(&p, "results");
    assert_staging_empty(&p);
    // Every call that got past prepare ran, and its snapshots are gone.
    let kept = p.invocations();
    assert_eq!(kept.len(), CALLERS - at_prepare, "{kept:?}");
    for id in kept {
        assert!(!p.path(&format!(".airlock/staging/data/{id}/inputs")).exists(), "{}", p.tree());
    }
}
