//! ATTACKS.md 10: a racer swaps an input's parent directory for a symlink
//! to a canary directory, in a loop, while 5,000 prepares run. No prepare
//! may return the canary's content or hash, and no snapshot may hold it.

use crate::util::{sha256_hex, Project, CANARY};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const PREPARES: usize = 5000;
const CALLERS: usize = 2;

#[test]
fn parent_swap_race_never_escapes() {
    let p = Arc::new(Project::new());
    p.write("data/dir/in.txt", "the real input\n");
    p.write("outside/canary/in.txt", CANARY);
    let canary_hash = format!("sha256:{}", sha256_hex(CANARY.as_bytes()));
    let real_hash = format!("sha256:{}", sha256_hex(b"the real input\n"));

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (p, stop, swaps) = (p.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            let (dir, aside, canary) = (p.path("data/dir"), p.path("data/dir.aside"), p.path("outside/canary"));
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&dir, &aside).unwrap();
                std::os::unix::fs::symlink(&canary, &dir).unwrap();
                std::thread::yield_now();
                std::fs::remove_file(&dir).unwrap();
                std::fs::rename(&aside, &dir).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
                // Leave the real directory in place for a moment too, so both
                // outcomes (prepared, refused) keep occurring.
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };

    let outcomes: Vec<(usize, usize)> = (0..CALLERS)
        .map(|_| {
            let (p, canary_hash, real_hash) = (p.clone(), canary_hash.clone(), real_hash.clone());
            std::thread::spawn(move || {
                let (mut ok, mut refused) = (0, 0);
                for _ in 0..PREPARES / CALLERS {
                    let run = p.prepare("data/dir/in.txt", "results/out.txt");
                    assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{run:#?}");
                    assert!(!run.stdout.contains(&canary_hash), "canary hash returned: {run:#?}");
                    match run.status() {
                        "ok" => {
                            let got =
                                &run.envelope["descriptor"]["command_boundary"]["filesystem"]["reads"][0]["sha256"];
                            assert_eq!(got.as_str(), Some(real_hash.as_str()), "{run:#?}");
                            ok += 1;
                            // A prepared call keeps its staging reservation
                            // until dispatch; give the room back.
                            let id = run.envelope["invocation_id"].as_str().unwrap();
                            p.run(&["staging", "release", id]).assert_ok();
                        }
                        "refused" => {
                            let allowed = ["path.symlink", "input.missing", "path.race", "input.changed"];
                            assert!(allowed.contains(&run.reason()), "unexpected refusal: {run:#?}");
                            refused += 1;
                        }
                        other => panic!("unexpected status {other}: {run:#?}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();

    let ok: usize = outcomes.iter().map(|o| o.0).sum();
    let refused: usize = outcomes.iter().map(|o| o.1).sum();
    eprintln!("race: {ok} prepared, {refused} refused, {} swaps", swaps.load(Ordering::Relaxed));
    assert_eq!(ok + refused, PREPARES);
    assert!(swaps.load(Ordering::Relaxed) > 100, "the racer barely ran");
    assert!(ok > 0 && refused > 0, "the race never hit both outcomes: {ok} ok, {refused} refused");
    p.assert_state_free_of(CANARY);
}
