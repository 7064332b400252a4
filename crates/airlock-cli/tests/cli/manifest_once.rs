//! One read of the manifest per call (ATTACKS 24, issue 14 item 2): a racer
//! flipping a tool's risk tier between "low" and "high" while calls run
//! never gets a high-risk run without approval, because whether a call
//! needs approval, what Cedar sees and what runs come from the same bytes.

use crate::util::{sha256_hex, Project};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn manifest(risk: &str) -> String {
    format!(
        "[tool]\nname = \"flip\"\nversion = \"1.0.0\"\nbinary = \"echo\"\ndescription = \"prints\"\nrisk_tier = \
         \"{risk}\"\n\n[command]\nexec = [\"echo\", \"ran\"]\n\n[output]\nformat = \"text\"\n"
    )
}

#[test]
fn a_risk_tier_flipped_while_calls_run_never_runs_high_risk_without_approval() {
    // Cedar permits everything it is asked about: only the approval stop
    // stands between a high-risk manifest and a run.
    let p = Project::with_config(
        "[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[policy]\nfiles = \
         [\"policy/*.cedar\"]\n[staging]\nmax_snapshots = 512\n",
    );
    p.write("policy/all.cedar", "@id(\"permit-all\")\npermit(principal, action, resource);\n");
    let (low, high) = (manifest("low"), manifest("high"));
    let low_sha = format!("sha256:{}", sha256_hex(low.as_bytes()));
    p.write("tools/flip.clad.toml", &low);

    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, dir) = (Arc::clone(&stop), p.path("tools"));
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for text in [&high, &low] {
                    // Whole-file swaps, as an agent with write access would.
                    std::fs::write(dir.join(".flip.tmp"), text).unwrap();
                    std::fs::rename(dir.join(".flip.tmp"), dir.join("flip.clad.toml")).unwrap();
                    flips += 1;
                }
            }
            flips
        })
    };
    let mut outcomes: HashMap<String, u32> = HashMap::new();
    let mut ran = Vec::new();
    for i in 0..500 {
        let id = format!("flip-{i}");
        let run = p.run(&["run", "flip", "--invocation-id", &id]);
        match run.status() {
            "ok" => ran.push(id),
            _ => {
                let code = run.reason().to_owned();
                assert!(code.starts_with("approval."), "unexpected answer {run:#?}");
                assert_eq!(run.envelope["descriptor"]["risk_tier"], "high", "{run:#?}");
            }
        }
        *outcomes.entry(run.reason().to_owned()).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let flips = racer.join().unwrap();
    eprintln!("outcomes {outcomes:?}, racer flips {flips}");
    assert!(!ran.is_empty() && ran.len() < 500, "the race must produce both kinds: {outcomes:?}");

    // Every call that ran was prepared, authorized and run from the
    // low-risk bytes.
    let text = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap();
    let prepared: HashMap<String, String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "InvocationPrepared")
        .map(|r| {
            (r["invocation_id"].as_str().unwrap().to_owned(), r["body"]["manifest_sha256"].as_str().unwrap().to_owned())
        })
        .collect();
    for id in &ran {
        assert_eq!(prepared.get(id), Some(&low_sha), "{id} ran from other bytes than the low-risk manifest");
    }
}
