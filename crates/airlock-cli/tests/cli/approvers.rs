//! Approvals an agent cannot grant, and pending calls that are bounded
//! (ATTACKS 21), on the shipping binary: an approval is a statement signed
//! with an approver's own key, pinned in `[approval] approvers`; the agent
//! (same uid, same state directory) tries to approve its own call without
//! a key, with its own key, with a tampered or borrowed approval and after
//! expiry, and floods approval requests under one principal.

use crate::runkit::*;
use crate::util::{Project, Run, CANARY};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const ROOTS: &str = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

/// An approver key made by `airlock approver init --key` in a directory
/// of its own, outside the project.
pub struct Approver {
    _dir: tempfile::TempDir,
    pub key: PathBuf,
    pub id: String,
    pub public_key: String,
}

impl Approver {
    /// Makes a key for `id` with the project's configuration (not pinned yet).
    pub fn init(p: &Project, id: &str) -> Approver {
        let dir = tempfile::Builder::new().prefix("airlock-approver-").tempdir().unwrap();
        let key = dir.path().join("approver.key");
        let run = p.run(&["approver", "init", "--key", key.to_str().unwrap(), "--id", id]);
        run.assert_ok();
        let public_key = run.envelope["content"]["public_key"].as_str().unwrap().to_owned();
        assert!(public_key.starts_with("ed25519:") && public_key.len() == 8 + 64, "{run:#?}");
        assert!(run.envelope["content"]["config"].as_str().unwrap().contains(&public_key));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        Approver { _dir: dir, key, id: id.to_owned(), public_key }
    }

    /// Pins this approver in the project's `airlock.toml`.
    pub fn pin(&self, p: &Project) {
        pin(p, "airlock.toml", &self.id, &self.public_key);
    }

    /// `airlock approve DIGEST --key KEY` (and extra arguments).
    pub fn approve(&self, p: &Project, digest: &str, extra: &[&str]) -> Run {
        let mut args = vec!["approve", digest, "--key", self.key.to_str().unwrap()];
        args.extend_from_slice(extra);
        p.run(&args)
    }
}

fn pin(p: &Project, config: &str, id: &str, public_key: &str) {
    let mut text = std::fs::read_to_string(p.path(config)).unwrap();
    text.push_str(&format!("\n[[approval.approvers]]\nid = \"{id}\"\npublic_key = \"{public_key}\"\n"));
    p.write(config, text);
}

/// A project with a pinned approver `alice`.
pub fn approved_project(config: &str) -> (Project, Approver) {
    let p = Project::with_config(config);
    let alice = Approver::init(&p, "alice");
    alice.pin(&p);
    (p, alice)
}

fn gated_project(extra_config: &str) -> (Project, Approver) {
    let (p, alice) = approved_project(&format!("{ROOTS}{extra_config}"));
    p.tool("gated", &sh_tool("gated", "risk_tier = \"high\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    p.write("data/in.txt", "gated content\n");
    (p, alice)
}

fn digest_and_id(run: &Run) -> (String, String) {
    run.assert_refused("approval.required", 77);
    let digest = run.envelope["evidence"]["descriptor_sha256"].as_str().unwrap().to_owned();
    (digest, run.envelope["invocation_id"].as_str().unwrap().to_owned())
}

fn records(p: &Project) -> Vec<Value> {
    let text = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn records_of(p: &Project, kind: &str, id: &str) -> Vec<Value> {
    records(p).into_iter().filter(|r| r["kind"] == kind && r["invocation_id"] == id).collect()
}

/// Nothing of the call ran: no worker, no output.
#[track_caller]
fn assert_never_ran(p: &Project, id: &str, output: &str) {
    assert!(records_of(p, "WorkerStarted", id).is_empty(), "a worker started for {id}");
    assert_absent_path(p, output);
}

fn run_with_env(p: &Project, args: &[&str], env: &[(&str, &Path)]) -> Run {
    let mut cmd = p.command(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_cmd(cmd, &format!("airlock {args:?} with {env:?}"))
}

#[test]
fn the_agent_sees_no_command_and_cannot_approve_without_a_pinned_key() {
    let p = Project::with_config(ROOTS);
    p.tool("gated", &sh_tool("gated", "risk_tier = \"high\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    p.write("data/in.txt", "gated content\n");
    let run = p.run(&["run", "gated", "data/in.txt", "results/out.txt"]);
    let (digest, id) = digest_and_id(&run);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains(&id) && message.contains(&digest) && message.contains("approver"), "{message}");
    assert!(!run.stdout.contains("airlock approve") && !run.stderr.contains("airlock approve"), "{run:#?}");

    // No approver is configured: nobody can approve, and it says what to add.
    let nobody = p.run(&["approve", &digest]);
    nobody.assert_refused("approval.no_approvers", 78);
    assert!(nobody.stderr.contains("[[approval.approvers]]"), "{nobody:#?}");
    p.run(&["dispatch", &id]).assert_refused("approval.no_approvers", 78);

    // With an approver pinned, the agent has no key: no default key (no
    // HOME), nor one at its own config dir.
    let alice = Approver::init(&p, "alice");
    alice.pin(&p);
    p.run(&["approve", &digest]).assert_refused_error("approval.key_unusable", 78);
    let home = tempfile::tempdir().unwrap();
    run_with_env(&p, &["approve", &digest], &[("HOME", home.path())]).assert_refused_error("approval.key_unusable", 78);

    // Its own key is not pinned.
    let mallory = Approver::init(&p, "mallory");
    let own = mallory.approve(&p, &digest, &[]);
    own.assert_refused("approval.unknown_approver", 77);
    // Even a config of its own (same state directory) that pins its key
    // under alice's name only makes an approval the real config refuses.
    let evil = format!(
        "state_dir = {:?}\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
        p.path(".airlock").display()
    );
    p.write("outside/evil.toml", evil);
    pin(&p, "outside/evil.toml", "alice", &mallory.public_key);
    let evil_config = p.path("outside/evil.toml");
    let forged =
        p.run(&["--config", evil_config.to_str().unwrap(), "approve", &digest, "--key", mallory.key.to_str().unwrap()]);
    forged.assert_ok();
    p.run(&["dispatch", &id]).assert_refused("approval.unknown_approver", 77);
    assert_never_ran(&p, &id, "results/out.txt");

    // A pinned approver's approval runs it, once.
    alice.approve(&p, &digest, &[]).assert_ok();
    p.run(&["dispatch", &id]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "gated content\n");
    p.run(&["dispatch", &id]).assert_refused("invocation.duplicate", 77);
    let consumed = records_of(&p, "ApprovalConsumed", &id);
    assert_eq!(consumed.len(), 1);
    assert_eq!(consumed[0]["body"]["approver"], "alice");
    assert!(consumed[0]["body"]["key_id"].as_str().unwrap().starts_with("sha256:"));
    let granted = records_of(&p, "ApprovalGranted", &id);
    assert!(granted.iter().any(|r| r["body"]["approver"] == "alice"), "{granted:#?}");
    p.run(&["journal", "verify"]).assert_ok();
}

#[test]
fn a_tampered_or_borrowed_approval_does_not_run() {
    let (p, alice) = gated_project("");
    // Two calls with the same descriptor digest (same arguments): an
    // approval binds the invocation too.
    let (digest, a) = digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt"]));
    let (digest_b, b) = digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt"]));
    assert_eq!(digest, digest_b);
    alice.approve(&p, &digest, &[]).assert_refused("usage", 64);
    let ok = alice.approve(&p, &digest, &["--invocation", &a]);
    ok.assert_ok();
    assert_eq!(ok.envelope["content"]["invocation_id"], a.as_str());
    let approval = p.path(&format!(".airlock/approvals/{a}"));
    let original = std::fs::read(&approval).unwrap();

    // A's approval copied to B's name: for another invocation.
    std::fs::write(p.path(&format!(".airlock/approvals/{b}")), &original).unwrap();
    let borrowed = p.run(&["dispatch", &b]);
    borrowed.assert_refused("approval.invalid", 77);
    assert!(borrowed.envelope["error"]["message"].as_str().unwrap().contains(&a), "{borrowed:#?}");
    assert_never_ran(&p, &b, "results/out.txt");
    std::fs::remove_file(p.path(&format!(".airlock/approvals/{b}"))).unwrap();
    p.run(&["dispatch", &b]).assert_refused("approval.required", 77);

    // A's approval with a later expiry written in: the signature breaks.
    let mut tampered: Value = serde_json::from_slice(&original).unwrap();
    tampered["statement"]["expires_at"] = json!(tampered["statement"]["expires_at"].as_u64().unwrap() + 86_400);
    std::fs::write(&approval, serde_json::to_vec(&tampered).unwrap()).unwrap();
    p.run(&["dispatch", &a]).assert_refused("approval.invalid", 77);
    // A flipped signature byte.
    let mut flipped: Value = serde_json::from_slice(&original).unwrap();
    let sig = flipped["signature"].as_str().unwrap().to_owned();
    let last = if sig.ends_with('0') { "1" } else { "0" };
    flipped["signature"] = json!(format!("{}{last}", &sig[..sig.len() - 1]));
    std::fs::write(&approval, serde_json::to_vec(&flipped).unwrap()).unwrap();
    p.run(&["dispatch", &a]).assert_refused("approval.invalid", 77);
    // Garbage.
    std::fs::write(&approval, CANARY).unwrap();
    p.run(&["dispatch", &a]).assert_refused("approval.invalid", 77);
    assert_never_ran(&p, &a, "results/out.txt");

    // The untouched approval still serves A, exactly once; B still waits.
    std::fs::write(&approval, &original).unwrap();
    p.run(&["dispatch", &a]).assert_ok();
    p.run(&["dispatch", &a]).assert_refused("invocation.duplicate", 77);
    std::fs::write(p.path(&format!(".airlock/approvals/{a}")), &original).unwrap();
    p.run(&["dispatch", &a]).assert_refused("invocation.duplicate", 77);
    assert_eq!(records_of(&p, "WorkerStarted", &a).len(), 1);
}

#[test]
fn an_expired_call_is_refused_and_gc_releases_its_room() {
    let (p, alice) = gated_project("[approval]\nttl = 3\n");
    let (digest, id) = digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt"]));
    alice.approve(&p, &digest, &[]).assert_ok();
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["pending_reservations"], 1, "{status:#?}");
    std::thread::sleep(Duration::from_secs(4));
    p.run(&["dispatch", &id]).assert_refused("approval.expired", 77);
    assert_never_ran(&p, &id, "results/out.txt");
    alice.approve(&p, &digest, &[]).assert_refused("approval.unknown", 66);
    let list = p.run(&["approvals", "list"]);
    assert_eq!(list.envelope["content"]["waiting"], json!([]), "{list:#?}");
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reservations"][0]["expired"], true, "{status:#?}");
    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["released"], json!([id]), "{gc:#?}");
    assert_staging_empty(&p);
    p.run(&["dispatch", &id]).assert_refused("approval.expired", 77);
}

#[test]
fn an_expired_call_is_released_by_the_next_calls_admission() {
    let (p, _alice) = gated_project("[approval]\nttl = 1\n");
    digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt", "--invocation-id", "old"]));
    assert_eq!(names(&p.path(".airlock/staging/data")), vec!["old".to_owned()]);
    std::thread::sleep(Duration::from_secs(2));
    p.run(&["run", "copy", "data/in.txt", "results/copy.txt"]).assert_ok();
    assert_staging_empty(&p);
}

#[test]
fn a_denied_call_is_settled_its_room_released_and_its_dispatch_refused() {
    let (p, alice) = gated_project("");
    let (digest, id) =
        digest_and_id(&p.run(&["--principal", "agent-a", "run", "gated", "data/in.txt", "results/out.txt"]));
    let list = p.run(&["approvals", "list"]);
    list.assert_ok();
    let waiting = &list.envelope["content"]["waiting"];
    assert_eq!(waiting.as_array().unwrap().len(), 1, "{list:#?}");
    assert_eq!(waiting[0]["invocation_id"], id.as_str());
    assert_eq!(waiting[0]["tool"], "gated");
    assert_eq!(waiting[0]["descriptor_sha256"], digest.as_str());
    assert_eq!(waiting[0]["principal"], "agent-a");
    assert!(waiting[0]["prepared_at"].as_str().unwrap().ends_with('Z'));
    assert!(waiting[0]["expires_at"].as_str().unwrap().ends_with('Z'));
    let show = p.run(&["approvals", "show", &id]);
    assert_eq!(show.envelope["content"]["state"], "waiting");
    assert_eq!(show.envelope["content"]["descriptor"]["tool"], "gated");
    alice.approve(&p, &digest, &[]).assert_ok();

    let deny = p.run(&["approvals", "deny", &id, "--reason", "not today"]);
    deny.assert_ok();
    assert!(deny.envelope["content"]["released_bytes"].as_u64().unwrap() > 0, "{deny:#?}");
    assert_staging_empty(&p);
    p.run(&["dispatch", &id]).assert_refused("approval.denied", 77);
    p.run(&["approvals", "deny", &id]).assert_refused("approval.denied", 77);
    assert_eq!(p.run(&["approvals", "show", &id]).envelope["content"]["state"], "denied");
    assert_eq!(p.run(&["approvals", "list"]).envelope["content"]["waiting"], json!([]));
    assert_never_ran(&p, &id, "results/out.txt");
    let denied = records_of(&p, "ApprovalDenied", &id);
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["body"]["reason"], "not today");
    p.run(&["approvals", "deny", "no-such-call"]).assert_refused("invocation.not_found", 66);
}

/// 50 approval requests from one principal, 5 at a time: at most
/// `max_pending` are kept, the rest refused `approval.quota` before
/// anything is copied; another principal's calls and ordinary calls still
/// run, and the running pool is untouched.
#[test]
fn fifty_approval_requests_from_one_principal_never_block_other_calls() {
    const REQUESTS: usize = 50;
    let (p, alice) = gated_project("");
    let p = Arc::new(p);
    let lanes: Vec<_> = (0..5)
        .map(|lane| {
            let p = p.clone();
            std::thread::spawn(move || {
                (0..REQUESTS / 5)
                    .map(|i| {
                        let out = format!("results/flood-{lane}-{i}.txt");
                        p.run(&["--principal", "agent-a", "run", "gated", "data/in.txt", &out])
                    })
                    .collect::<Vec<Run>>()
            })
        })
        .collect();
    let runs: Vec<Run> = lanes.into_iter().flat_map(|l| l.join().unwrap()).collect();
    let (mut kept, mut quota) = (0, 0);
    for run in &runs {
        if run.reason() == "approval.required" {
            kept += 1;
        } else {
            run.assert_refused("approval.quota", 75);
            assert!(run.envelope["error"]["message"].as_str().unwrap().contains("agent-a"), "{run:#?}");
            quota += 1;
        }
    }
    eprintln!("{REQUESTS} requests from agent-a: {kept} kept, {quota} refused approval.quota");
    assert_eq!((kept, quota), (8, REQUESTS - 8));
    assert_eq!(names(&p.path(".airlock/staging/data")).len(), 8, "a refused request copied something");

    // Another principal still gets its call kept; ordinary calls run.
    let b = p.run(&["--principal", "agent-b", "run", "gated", "data/in.txt", "results/b.txt"]);
    let (digest_b, id_b) = digest_and_id(&b);
    for i in 0..3 {
        p.run(&["--principal", "agent-a", "run", "copy", "data/in.txt", &format!("results/low-{i}.txt")]).assert_ok();
    }
    let status = p.run(&["staging", "status", "--json"]);
    assert_eq!(status.envelope["content"]["reserved_snapshots"], 0, "{status:#?}");
    assert_eq!(status.envelope["content"]["pending_reservations"], 9, "{status:#?}");
    let waiting = p.run(&["approvals", "list"]).envelope["content"]["waiting"].clone();
    let principals: Vec<&str> = waiting.as_array().unwrap().iter().map(|w| w["principal"].as_str().unwrap()).collect();
    assert_eq!(principals.iter().filter(|p| **p == "agent-a").count(), 8);
    assert_eq!(principals.iter().filter(|p| **p == "agent-b").count(), 1);

    // Settling one of agent-a's calls makes room for one more of its own.
    let first = waiting.as_array().unwrap().iter().find(|w| w["principal"] == "agent-a").unwrap();
    p.run(&["approvals", "deny", first["invocation_id"].as_str().unwrap()]).assert_ok();
    digest_and_id(&p.run(&["--principal", "agent-a", "run", "gated", "data/in.txt", "results/again.txt"]));
    p.run(&["--principal", "agent-a", "run", "gated", "data/in.txt", "results/over.txt"])
        .assert_refused("approval.quota", 75);
    alice.approve(&p, &digest_b, &[]).assert_ok();
    p.run(&["dispatch", &id_b]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/b.txt")).unwrap(), "gated content\n");
}

#[test]
fn approver_init_keeps_the_key_out_of_ceilings_and_the_state_dir() {
    let p = Project::with_config(&format!("{ROOTS}[broker.roots]\nshared = \"./shared\"\n"));
    p.mkdir("shared");
    p.run(&["staging", "status", "--json"]).assert_ok();
    std::os::unix::fs::symlink(p.path("data"), p.path("outside/data-link")).unwrap();
    for place in [
        "data/approver.key",
        "results/approver.key",
        ".airlock/approver.key",
        "shared/approver.key",
        "outside/data-link/approver.key",
    ] {
        let run = p.run(&["approver", "init", "--key", place]);
        run.assert_refused_error("approval.key_unusable", 78);
        assert!(!p.path(place).exists(), "{place} was written");
    }
    // The default place: under XDG_CONFIG_HOME, 0600 in a 0700 directory.
    let home = tempfile::tempdir().unwrap();
    let config_home = home.path().join("config");
    let made = run_with_env(&p, &["approver", "init", "--id", "alice"], &[("XDG_CONFIG_HOME", &config_home)]);
    made.assert_ok();
    let key = config_home.join("airlock/approver.key");
    let mode = |path: &Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions());
    assert_eq!((mode(&key) & 0o777, mode(key.parent().unwrap()) & 0o777), (0o600, 0o700));
    assert_eq!(std::fs::read(&key).unwrap().len(), 32);
    assert_eq!(made.envelope["content"]["key_file"], key.display().to_string());
    // Never overwritten.
    let before = std::fs::read(&key).unwrap();
    run_with_env(&p, &["approver", "init"], &[("XDG_CONFIG_HOME", &config_home)])
        .assert_refused_error("approval.key_unusable", 78);
    assert_eq!(std::fs::read(&key).unwrap(), before);
    // A default place inside a ceiling is refused like any other.
    run_with_env(&p, &["approver", "init"], &[("XDG_CONFIG_HOME", &p.path("results/cfg"))])
        .assert_refused_error("approval.key_unusable", 78);

    // A key readable where calls run: doctor warns; the approver can use it.
    let doctor = run_with_env(&p, &["doctor"], &[("XDG_CONFIG_HOME", &config_home)]);
    let warnings = doctor.envelope["content"]["approval"]["warnings"].to_string();
    assert!(warnings.contains(&key.display().to_string()), "{doctor:#?}");
    let clean = run_with_env(&p, &["doctor"], &[("XDG_CONFIG_HOME", &home.path().join("none"))]);
    assert!(!clean.envelope["content"]["approval"]["warnings"].to_string().contains("readable"), "{clean:#?}");

    // A key someone else could read is refused for signing.
    let public_key = made.envelope["content"]["public_key"].as_str().unwrap().to_owned();
    pin(&p, "airlock.toml", "alice", &public_key);
    p.tool("gated", &sh_tool("gated", "risk_tier = \"high\"", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    p.write("data/in.txt", "x");
    let (digest, _) = digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt"]));
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    run_with_env(&p, &["approve", &digest], &[("XDG_CONFIG_HOME", &config_home)])
        .assert_refused_error("approval.key_unusable", 78);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    run_with_env(&p, &["approve", &digest], &[("XDG_CONFIG_HOME", &config_home)]).assert_ok();
}

trait ErrorRun {
    fn assert_refused_error(&self, reason: &str, exit: i32);
}

impl ErrorRun for Run {
    /// Like `assert_refused`, for codes whose status is `error`.
    #[track_caller]
    fn assert_refused_error(&self, reason: &str, exit: i32) {
        assert_eq!((self.status(), self.reason(), self.code), ("error", reason, exit), "{self:#?}");
        assert!(self.stderr.contains(reason), "{self:#?}");
    }
}

/// A kept call with nothing to stage holds no room while it waits, and is
/// admitted when it is dispatched; a call that ran at once and staged
/// nothing is never run again by a dispatch of its id.
#[test]
fn a_call_that_stages_nothing_holds_no_slot_and_runs_once() {
    let (p, alice) = gated_project("[approval]\nmax_pending = 1\n");
    p.tool("hello", &sh_tool("hello", "risk_tier = \"high\"", &[], "echo hi", ""));
    p.tool("plain", &sh_tool("plain", "", &[], "echo plain", ""));
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(digest_and_id(&p.run(&["run", "hello"])));
    }
    let status = p.run(&["staging", "status", "--json"]).envelope["content"].clone();
    assert_eq!((status["pending_reservations"].clone(), status["reserved_snapshots"].clone()), (json!(0), json!(0)));
    // The one pending slot is still free for a call that stages something.
    digest_and_id(&p.run(&["run", "gated", "data/in.txt", "results/out.txt"]));
    let (digest, id) = &waiting[1];
    alice.approve(&p, digest, &["--invocation", id]).assert_ok();
    let ran = p.run(&["dispatch", id]);
    ran.assert_ok();
    assert_eq!(ran.envelope["content"]["raw_output"], "hi\n");
    p.run(&["dispatch", id]).assert_refused("invocation.duplicate", 77);
    assert_eq!(records_of(&p, "WorkerStarted", id).len(), 1);

    p.run(&["run", "plain", "--invocation-id", "plain-1"]).assert_ok();
    p.run(&["dispatch", "plain-1"]).assert_refused("staging.not_reserved", 66);
    assert_eq!(records_of(&p, "WorkerStarted", "plain-1").len(), 1);
    p.run(&["approvals", "deny", "plain-1"]).assert_refused("invocation.not_found", 66);
}
