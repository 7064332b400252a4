//! Numbers bounded where they enter (ATTACKS 29): an absurd deadline in a
//! manifest or on the command line is refused before anything runs, never
//! a panic.

use crate::util::Project;

const SLOW: &str = r#"
[tool]
name = "slow"
version = "1.0.0"
binary = "true"
description = "does nothing for a very long time"
timeout_seconds = 9223372036854775807

[command]
exec = ["true"]
"#;

#[test]
fn a_huge_timeout_is_refused_by_validate_run_and_isolated() {
    let p = Project::new();
    p.write("tools/slow.clad.toml", SLOW);
    let validate = p.run(&["tools", "validate", "slow"]);
    assert_ne!(validate.status(), "ok", "{validate:#?}");
    assert!(validate.stdout.contains("24 h"), "{validate:#?}");
    let run = p.run(&["run", "slow"]);
    run.assert_refused("manifest.invalid", 65);
    assert!(!run.stderr.contains("panicked"), "{run:#?}");
    let isolated = p.run(&["isolated", "--root", "d=data:r", "--timeout", "9223372036854775807", "--", "true"]);
    isolated.assert_refused("usage", 64);
    let journal = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap_or_default();
    assert!(!journal.contains("WorkerStarted"), "nothing may start: {journal}");
}
