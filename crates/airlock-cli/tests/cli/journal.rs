//! The signed journal on the shipping binary: records of a run, standalone
//! verification against a pinned key, tamper and truncation detection,
//! SIGKILL at every step of publication followed by inspect and recover,
//! fail-stop, concurrent recoveries, and an attestation checked by OpenSSL.

use crate::util::{sha256_hex, Project, AIRLOCK};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

fn project() -> Project {
    let p = Project::new();
    p.write("data/in.txt", "publish me\n");
    p
}

#[test]
fn a_run_is_journaled_step_by_step_and_verifies_from_the_public_key_alone() {
    let p = project();
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "j-1"]);
    run.assert_ok();
    assert_eq!(
        p.journal_kinds("j-1"),
        [
            "InvocationPrepared",
            "InvocationAuthorized",
            "WorkerStarted",
            "WorkerFinished",
            "FilePublicationPrepared",
            "FilePublicationFinished",
            "InvocationFinished"
        ]
    );
    // A refusal is journaled too.
    p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "j-2"])
        .assert_refused("output.exists", 73);
    assert_eq!(p.journal_kinds("j-2"), ["InvocationRefused"]);

    // Verification needs only the bytes and the pinned key: copy both away.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::copy(p.path(".airlock/journal.jsonl"), elsewhere.path().join("j.jsonl")).unwrap();
    std::fs::copy(p.path(".airlock/journal.pub"), elsewhere.path().join("k.pub")).unwrap();
    let empty = Project::with_config("");
    let verify = empty.run(&[
        "journal",
        "verify",
        "--journal",
        elsewhere.path().join("j.jsonl").to_str().unwrap(),
        "--public-key",
        elsewhere.path().join("k.pub").to_str().unwrap(),
    ]);
    verify.assert_ok();
    assert_eq!(verify.envelope["content"]["records"], 8);
    // The key itself is never printed.
    let seed = std::fs::read(p.path(".airlock/journal.key")).unwrap();
    assert_eq!(seed.len(), 32);
    assert!(!verify.stdout.contains(&hex(&seed)) && !run.stdout.contains(&hex(&seed)));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(p.path(".airlock/journal.key")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn one_flipped_byte_fails_at_that_record_and_a_torn_tail_is_reported_then_cut_with_its_bytes_kept() {
    let p = project();
    for i in 0..3 {
        p.run(&["run", "copy", "data/in.txt", &format!("results/o{i}.txt")]).assert_ok();
    }
    let journal = p.path(".airlock/journal.jsonl");
    let clean = std::fs::read(&journal).unwrap();
    let lines: Vec<usize> =
        std::iter::once(0).chain(clean.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1)).collect();
    let count = lines.len() - 1;
    for (n, start) in lines[..count].iter().enumerate().step_by(4) {
        let mut bad = clean.clone();
        bad[start + 10] ^= 0x01;
        std::fs::write(&journal, &bad).unwrap();
        let run = p.run(&["journal", "verify"]);
        assert_eq!(
            (run.status(), run.reason(), run.code),
            ("failed", "journal.invalid", 1),
            "line {}: {run:#?}",
            n + 1
        );
        assert_eq!(run.envelope["content"]["first_bad"]["line"], n as u64 + 1, "{run:#?}");
    }
    let mut torn = clean.clone();
    torn.truncate(clean.len() - 5);
    std::fs::write(&journal, &torn).unwrap();
    let run = p.run(&["journal", "verify"]);
    assert_eq!(run.reason(), "journal.invalid", "{run:#?}");
    assert_eq!(run.envelope["content"]["truncated_tail"], true, "{run:#?}");
    assert_eq!(run.envelope["content"]["first_bad"]["line"], count as u64, "{run:#?}");
    // What a writer killed inside its write leaves: the next call cuts it
    // away, keeps its bytes, says so in a record, and runs.
    p.run(&["run", "copy", "data/in.txt", "results/late.txt", "--invocation-id", "late"]).assert_ok();
    let verified = p.run(&["journal", "verify"]);
    verified.assert_ok();
    let repair = p.run(&["journal", "show", "--json"]).envelope["content"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "JournalTailRepaired")
        .cloned()
        .expect("a JournalTailRepaired record");
    assert_eq!(repair["body"]["bytes"], (clean.len() - 5 - lines[count - 1]) as u64, "{repair}");
    let kept = p.path(&format!(".airlock/{}", repair["body"]["kept_as"].as_str().unwrap()));
    assert_eq!(std::fs::read(kept).unwrap(), clean[lines[count - 1]..clean.len() - 5]);
}

/// How the crashed run keeps its candidate: the staged output itself,
/// renamed from the call's staging directory (the default here), or a named
/// copy beside the destination (as on a file system without `O_TMPFILE`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Candidate {
    Staged,
    Named,
}

/// Runs `airlock run` with the test-only crash point `point`; it must die of SIGKILL.
fn crash_at(p: &Project, point: &str, id: &str, mode: Candidate) {
    let mut cmd = p.command(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", id]);
    cmd.env("AIRLOCK_TEST_CRASH_AT", point);
    if mode == Candidate::Named {
        cmd.env("AIRLOCK_TEST_NAMED_CANDIDATE", "1");
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.signal(), Some(9), "{point}: airlock should have been SIGKILLed: {out:?}");
}

fn state(p: &Project, id: &str) -> String {
    let run = p.run(&["invocation", "inspect", id]);
    run.assert_ok();
    run.envelope["content"]["state"].as_str().unwrap().to_owned()
}

fn candidates(p: &Project) -> Vec<String> {
    crate::runkit::names(&p.path("results")).into_iter().filter(|n| n.starts_with(".airlock-candidate-")).collect()
}

/// With the staged output as the candidate, a crash before the rename leaves
/// nothing at the destination: the candidate is still in the dead call's
/// staging directory, and recovery settles on "nothing published" by
/// itself; after the rename the published file's identity and hash decide.
#[test]
fn sigkill_at_each_publication_step_then_inspect_and_recover_converge() {
    // (point, state after the crash, published after recovery)
    let cases = [
        ("before_candidate", "no_publication", false),
        ("before_prepared", "no_publication", false),
        ("after_prepared", "never_linked", false),
        ("after_publish", "published", true),
        ("after_finished", "settled", true),
    ];
    crash_story(Candidate::Staged, &cases);
}

/// The same with a named candidate (file systems without `O_TMPFILE`): the
/// synced candidate survives the crash and recovery publishes it.
#[test]
fn sigkill_at_each_publication_step_with_a_named_candidate_then_recover_converges() {
    let cases = [
        ("before_candidate", "no_publication", false),
        ("before_prepared", "unannounced", false),
        ("after_prepared", "ready_to_publish", true),
        ("after_publish", "published", true),
        ("after_finished", "settled", true),
    ];
    crash_story(Candidate::Named, &cases);
}

fn crash_story(mode: Candidate, cases: &[(&str, &str, bool)]) {
    for &(point, want_state, published) in cases {
        let p = project();
        let id = format!("crash-{}", point.replace('_', "-"));
        crash_at(&p, point, &id, mode);
        assert_eq!(state(&p, &id), want_state, "{mode:?} {point}");
        if point != "after_finished" {
            // Fail-stop: another call's effect waits for the operator.
            let blocked = p.run(&["run", "copy", "data/in.txt", "results/other.txt"]);
            assert_eq!(blocked.reason(), "journal.unconfirmed", "{point}: {blocked:#?}");
            assert!(!p.path("results/other.txt").exists());
        }
        let rec = p.run(&["invocation", "recover", &id]);
        rec.assert_ok();
        assert_eq!(rec.envelope["content"]["state"], "settled", "{point}: {rec:#?}");
        assert_eq!(p.path("results/out.txt").exists(), published, "{point}");
        assert!(candidates(&p).is_empty(), "{point}: candidates left {:?}", candidates(&p));
        if published {
            let bytes = std::fs::read(p.path("results/out.txt")).unwrap();
            assert_eq!(bytes, b"publish me\n");
            let records = p.run(&["journal", "show", "--json"]).envelope["content"]["records"].clone();
            let intent = records
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["kind"] == "FilePublicationPrepared" && r["invocation_id"] == id.as_str())
                .unwrap()
                .clone();
            assert_eq!(intent["body"]["sha256"], format!("sha256:{}", sha256_hex(&bytes)), "{point}");
            let want_mode = if mode == Candidate::Named { "named" } else { "staged" };
            assert_eq!(intent["body"]["candidate_mode"], want_mode, "{point}");
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p.path("results/out.txt")).unwrap());
            assert_eq!(intent["body"]["candidate"]["ino"], ino.to_string(), "{point}: the published inode");
        }
        // A second recovery is a no-op; a retry with the same id is refused;
        // the journal verifies; new effects go again.
        p.run(&["invocation", "recover", &id]).assert_ok();
        p.run(&["run", "copy", "data/in.txt", "results/retry.txt", "--invocation-id", &id])
            .assert_refused("invocation.duplicate", 77);
        p.run(&["journal", "verify"]).assert_ok();
        p.run(&["run", "copy", "data/in.txt", "results/next.txt"]).assert_ok();
    }
}

/// After a crash past the link, the published file's identity and bytes
/// decide: the recorded inode with other bytes is a conflict, not a
/// confirmation.
#[test]
fn a_published_file_whose_bytes_changed_is_not_confirmed_by_recovery() {
    let p = project();
    crash_at(&p, "after_publish", "changed", Candidate::Staged);
    assert_eq!(state(&p, "changed"), "published");
    // Same inode, other bytes.
    std::fs::write(p.path("results/out.txt"), "publish ME\n").unwrap();
    assert_eq!(state(&p, "changed"), "conflict");
    let rec = p.run(&["invocation", "recover", "changed"]);
    assert_eq!(rec.reason(), "recovery.conflict", "{rec:#?}");
    let rec = p.run(&["invocation", "recover", "changed", "--discard"]);
    rec.assert_ok();
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"publish ME\n", "nothing is removed");
    let records = p.run(&["journal", "show", "--json"]).envelope["content"]["records"].clone();
    let finished: Vec<_> = records
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "FilePublicationFinished" && r["invocation_id"] == "changed")
        .map(|r| r["body"]["result"].clone())
        .collect();
    assert_eq!(finished, ["discarded_by_recovery"]);
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn two_recoveries_at_once_publish_exactly_once() {
    let p = project();
    crash_at(&p, "after_prepared", "twice", Candidate::Named);
    let spawn = || {
        p.command(&["invocation", "recover", "twice"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let records = p.run(&["journal", "show", "--json"]).envelope["content"]["records"].clone();
    let recoveries = records.as_array().unwrap().iter().filter(|r| r["kind"] == "RecoveryFinished").count();
    assert_eq!(recoveries, 1);
    assert_eq!(std::fs::read(p.path("results/out.txt")).unwrap(), b"publish me\n");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn an_attestation_verifies_with_openssl_and_names_the_published_file() {
    let p = project();
    p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "att-1"]).assert_ok();
    let out = p.command(&["attest", "att-1"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(p.path("att.json"), &out.stdout).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/verify-attestation.sh");
    let checked =
        Command::new("bash").arg(&script).arg(p.path("att.json")).arg(p.path(".airlock/journal.pub")).output().unwrap();
    assert!(checked.status.success(), "openssl refused: {checked:?}");
    let statement: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(statement["subject"][0]["name"], "results/out.txt");
    assert_eq!(statement["subject"][0]["digest"]["sha256"], sha256_hex(b"publish me\n"));
    // A changed payload fails the same third-party check.
    let mut env: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    env["payloadType"] = "application/json".into();
    std::fs::write(p.path("bad.json"), serde_json::to_vec(&env).unwrap()).unwrap();
    let bad =
        Command::new("bash").arg(&script).arg(p.path("bad.json")).arg(p.path(".airlock/journal.pub")).output().unwrap();
    assert!(!bad.status.success());
    // Nothing published: nothing to attest.
    p.run(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "att-2"])
        .assert_refused("output.exists", 73);
    let none = p.run(&["attest", "att-2"]);
    assert_eq!(none.reason(), "attest.nothing_published", "{none:#?}");
    let _ = AIRLOCK;
}

#[test]
fn an_id_the_journal_has_seen_is_never_used_again_even_after_a_refusal() {
    let p = project();
    p.write("results/exists.txt", "x");
    p.run(&["run", "copy", "data/in.txt", "results/exists.txt", "--invocation-id", "seen-1"])
        .assert_refused("output.exists", 73);
    p.run(&["run", "copy", "data/in.txt", "results/fresh.txt", "--invocation-id", "seen-1"])
        .assert_refused("invocation.duplicate", 77);
    assert!(!p.path("results/fresh.txt").exists());
    p.run(&["prepare", "copy", "data/in.txt", "results/fresh.txt", "--invocation-id", "seen-1"])
        .assert_refused("invocation.duplicate", 77);
}
