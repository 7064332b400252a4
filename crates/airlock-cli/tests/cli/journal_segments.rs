//! The journal never stops a healthy host (issue 15, item 6), on the
//! shipping binary: calls with 32 KB arguments run on across sealed
//! segments with small `WorkerStarted` records, `journal verify` checks the
//! whole chain and finds a byte flipped in an old segment, and old segments
//! are pruned only once exported or explicitly allowed.

use crate::util::{sha256_hex, Project};

/// The smallest segment bound, so a few calls fill several segments.
const SEGMENT_BYTES: u64 = 256 * 1024;

const NOTE_TOOL: &str = r#"
[tool]
name = "note"
version = "1.0.0"
binary = "true"
description = "Take a long note and do nothing with it"

[args.text]
position = 1
required = true
type = "string"
description = "the note"

[command]
exec = ["true", "{text}"]

[output]
format = "text"
"#;

fn project() -> Project {
    let p = Project::with_config(&format!("state_dir = \".airlock\"\n[journal]\nsegment_bytes = {SEGMENT_BYTES}\n"));
    p.write("tools/note.clad.toml", NOTE_TOOL);
    p
}

fn sealed(p: &Project) -> Vec<u64> {
    let mut n: Vec<u64> = std::fs::read_dir(p.path(".airlock/journal.d"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl")?.parse().ok()).collect())
        .unwrap_or_default();
    n.sort_unstable();
    n
}

fn segment(p: &Project, n: u64) -> std::path::PathBuf {
    p.path(&format!(".airlock/journal.d/{n:06}.jsonl"))
}

#[test]
fn calls_with_32_kb_arguments_run_on_across_segments_and_the_chain_verifies() {
    let p = project();
    let note = |i: usize| format!("{i:05}{}", "n".repeat(32 * 1024 - 5));
    let mut calls = 0;
    // At least four segments sealed; ~37 calls fill one.
    while sealed(&p).len() < 4 {
        p.run(&["run", "note", &note(calls), "--invocation-id", &format!("seg-{calls}")]).assert_ok();
        calls += 1;
        assert!(calls < 400, "no segment was sealed after {calls} calls");
    }
    // Every sealed segment stays within the bound; the live one too.
    for n in sealed(&p) {
        assert!(std::fs::metadata(segment(&p, n)).unwrap().len() <= SEGMENT_BYTES);
    }
    assert!(std::fs::metadata(p.path(".airlock/journal.jsonl")).unwrap().len() <= SEGMENT_BYTES);

    // WorkerStarted keeps a 4 KiB prefix, the digest of the whole argv and
    // the flag, not the 32 KB argument.
    // Read while it runs: the records are larger than a pipe holds.
    let show = p.command(&["journal", "show", "--json"]).output().unwrap();
    let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let records = show["content"]["records"].as_array().unwrap().clone();
    let started: Vec<_> = records.iter().filter(|r| r["kind"] == "WorkerStarted").collect();
    assert_eq!(started.len(), calls, "journal show reads every segment");
    let first = started.iter().find(|r| r["invocation_id"] == "seg-0").unwrap();
    let argv = format!("true\0{}\0", note(0));
    assert_eq!(first["body"]["argv_sha256"], format!("sha256:{}", sha256_hex(argv.as_bytes())));
    assert_eq!(first["body"]["argv_truncated"], true);
    assert_eq!(first["body"]["argv_bytes"], argv.len());
    assert!(serde_json::to_string(&first["body"]["argv"]).unwrap().len() < 4200);
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>(), "one sequence across segments");
    assert_eq!(records.iter().filter(|r| r["kind"] == "JournalSegmentStarted").count(), sealed(&p).len());

    let verify = p.run(&["journal", "verify"]);
    verify.assert_ok();
    assert_eq!(verify.envelope["content"]["records"], records.len());
    assert_eq!(verify.envelope["content"]["segments"], sealed(&p).len() + 1);

    // Calls go on after verification, and one old segment is checked alone.
    p.run(&["run", "note", "short", "--invocation-id", "after"]).assert_ok();
    let alone = p.run(&["journal", "verify", "--journal", segment(&p, 2).to_str().unwrap()]);
    alone.assert_ok();
    assert_eq!(alone.envelope["content"]["starts_after"]["segment"], 2);

    // A flipped byte in the oldest segment is found, and named.
    let mut bytes = std::fs::read(segment(&p, 1)).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x01;
    std::fs::write(segment(&p, 1), &bytes).unwrap();
    let verify = p.run(&["journal", "verify"]);
    assert_eq!((verify.status(), verify.reason(), verify.code), ("failed", "journal.invalid", 1), "{verify:#?}");
    assert_eq!(verify.envelope["content"]["first_bad"]["segment"], 1);
    bytes[at] ^= 0x01;
    std::fs::write(segment(&p, 1), &bytes).unwrap();
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn old_segments_are_pruned_only_once_exported_or_allowed() {
    let p = project();
    let long = "x".repeat(32 * 1024);
    let mut i = 0;
    while sealed(&p).len() < 3 {
        p.run(&["run", "note", &long, "--invocation-id", &format!("pr-{i}")]).assert_ok();
        i += 1;
        assert!(i < 300);
    }
    // Nothing exported: refused, nothing removed.
    p.run(&["journal", "prune", "--before", "2"]).assert_refused("journal.not_exported", 77);
    assert_eq!(sealed(&p)[0], 1);
    // The live segment is never exported.
    let live = sealed(&p).len() as u64 + 1;
    let out = p.path("outside/live.jsonl");
    let run = p.run(&["journal", "export", "--segment", &live.to_string(), out.to_str().unwrap()]);
    assert_ne!(run.status(), "ok", "{run:#?}");
    // Exported, then pruned; the copy verifies alone and names the head the
    // kept chain starts after.
    let copy = p.path("outside/000001.jsonl");
    let run = p.run(&["journal", "export", "--segment", "1", copy.to_str().unwrap()]);
    run.assert_ok();
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(segment(&p, 1)).unwrap());
    let again = p.run(&["journal", "export", "--segment", "1", copy.to_str().unwrap()]);
    assert_ne!(again.status(), "ok", "an export never replaces a file");
    let pruned = p.run(&["journal", "prune", "--before", "2"]);
    pruned.assert_ok();
    assert_eq!(pruned.envelope["content"]["removed"], serde_json::json!([1]));
    assert!(!segment(&p, 1).exists());
    let exported = p.run(&["journal", "verify", "--journal", copy.to_str().unwrap()]);
    exported.assert_ok();
    let verify = p.run(&["journal", "verify"]);
    verify.assert_ok();
    assert_eq!(verify.envelope["content"]["starts_after"]["segment"], 2);
    assert_eq!(verify.envelope["content"]["starts_after"]["head"], exported.envelope["content"]["head"]);
    // Unexported only when allowed; calls go on; the chain still verifies.
    p.run(&["journal", "prune", "--before", "3", "--allow-unexported"]).assert_ok();
    p.run(&["run", "note", "after", "--invocation-id", "pr-after"]).assert_ok();
    p.run(&["journal", "verify"]).assert_ok();
    // A segment removed by hand, with no JournalPruned record, is caught.
    std::fs::remove_file(segment(&p, 3)).unwrap();
    let verify = p.run(&["journal", "verify"]);
    assert_eq!(verify.reason(), "journal.invalid", "{verify:#?}");
}

#[test]
fn a_segment_bound_below_the_floor_is_refused() {
    let p = Project::with_config("state_dir = \".airlock\"\n[journal]\nsegment_bytes = 4096\n");
    let run = p.run(&["journal", "show"]);
    assert_eq!((run.status(), run.reason()), ("error", "config.invalid"), "{run:#?}");
}
