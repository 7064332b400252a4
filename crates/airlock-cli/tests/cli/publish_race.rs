//! ATTACKS.md 28: another local user who can write to a shared output
//! directory (here `results/`, mode 0777) swaps what airlock publishes.
//!
//! A racer running as uid 65534 polls the directory. Every new entry of
//! airlock's user that is not a published output (a named candidate) it
//! renames away, creating its own file, with its own bytes, under that
//! name; and when output `out-N.txt` appears it plants its bytes under a
//! destination name still to come (`out-(N+3).txt`). Over 1,000 runs of the
//! shipping binary (the staged output renamed from its private staging
//! directory, and named copies as on a file system without `O_TMPFILE`),
//! every run either is refused or the
//! file under the output's name is the inode the journal records, owned by
//! airlock's user, holding the receipt's bytes; the racer's bytes never
//! appear under a receipt or a confirmed publication. `journal verify`
//! passes.

use crate::runkit::*;
use crate::util::{sha256_hex, Project, Run};
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const RUNS_PER_MODE: usize = 500;
const CALLERS: usize = 4;
const TOOL_BYTES: &str = "the tool's bytes\n";
const RACER_BYTES: &str = "the racer's bytes\n";

/// Polls `sys.argv[1]` until the file `sys.argv[2]` exists. An output
/// `out-N.txt` of another user makes it plant `out-(N+3).txt`; any other
/// entry of another user (a candidate) is renamed to `moved-K` and replaced
/// by a file of its own. Its files hold `sys.argv[3]`.
const RACER: &str = r#"
import os, sys, time
d, stop, evil = sys.argv[1], sys.argv[2], sys.argv[3].encode()
me, n, seen = os.getuid(), 0, set()
def plant(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, evil)
    os.close(fd)
while not os.path.exists(stop):
    for name in os.listdir(d):
        if name.startswith('moved-') or name in seen:
            continue
        path = os.path.join(d, name)
        try:
            if os.lstat(path).st_uid == me:
                continue
            if name.startswith('out-'):
                seen.add(name)
                plant(os.path.join(d, 'out-%d.txt' % (int(name[4:-4]) + 3)))
                continue
            os.rename(path, os.path.join(d, 'moved-%d' % n))
            n += 1
            plant(path)
        except OSError:
            pass
    time.sleep(0.0002)
"#;

/// A python3 that uid 65534 can run, if there is one.
fn python_for_others() -> Option<&'static str> {
    ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| {
        let path = Path::new(p);
        std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005)
            && path.ancestors().skip(1).all(|a| std::fs::metadata(a).is_ok_and(|m| m.mode() & 0o001 != 0))
    })
}

fn start_racer(python: &str, results: &Path, stop: &Path) -> Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", RACER])
        .arg(results)
        .arg(stop)
        .arg(RACER_BYTES)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the racer")
}

/// `FilePublicationPrepared` and `FilePublicationFinished` bodies by invocation id.
fn publication_records(p: &Project) -> (HashMap<String, Value>, HashMap<String, Value>) {
    // Read to the end while it runs: the journal of 1,000 runs is larger
    // than a pipe holds.
    let out = p.command(&["journal", "show", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let show: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (mut prepared, mut finished) = (HashMap::new(), HashMap::new());
    for r in show["content"]["records"].as_array().unwrap() {
        let id = r["invocation_id"].as_str().unwrap_or_default().to_owned();
        match r["kind"].as_str() {
            Some("FilePublicationPrepared") => prepared.insert(id, r["body"].clone()),
            Some("FilePublicationFinished") => finished.insert(id, r["body"].clone()),
            _ => None,
        };
    }
    (prepared, finished)
}

/// Runs the story with named candidates or not; returns (published, refused by code).
fn race(named: bool) -> Option<(usize, HashMap<String, usize>)> {
    if !crate::util::is_root() || !Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: needs root and setpriv to run the racer as uid 65534");
        return None;
    }
    let Some(python) = python_for_others() else {
        eprintln!("skipped: no python3 that uid 65534 can run");
        return None;
    };
    let p = Arc::new(Project::new());
    p.write("data/in.txt", TOOL_BYTES);
    std::fs::set_permissions(p.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let results = p.path("results");
    std::fs::set_permissions(&results, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stop = tempfile::tempdir().unwrap();
    let stop_file = stop.path().join("stop");
    let mut racer = start_racer(python, &results, &stop_file);

    let next = Arc::new(AtomicUsize::new(0));
    let runs: Vec<(usize, Run)> = (0..CALLERS)
        .map(|_| {
            let (p, next) = (p.clone(), next.clone());
            std::thread::spawn(move || {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= RUNS_PER_MODE {
                        return done;
                    }
                    let (id, out) = (format!("r-{i}"), format!("results/out-{i}.txt"));
                    let mut cmd = p.command(&["run", "copy", "data/in.txt", &out, "--invocation-id", &id]);
                    if named {
                        cmd.env("AIRLOCK_TEST_NAMED_CANDIDATE", "1");
                    }
                    done.push((i, run_cmd(cmd, &format!("airlock run … {id}"))));
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    // In run order: a run that blocks later ones is reported before them.
    let mut runs = runs;
    runs.sort_by_key(|(i, _)| *i);
    std::fs::write(&stop_file, "").unwrap();
    racer.wait().unwrap();

    let tool_sha = format!("sha256:{}", sha256_hex(TOOL_BYTES.as_bytes()));
    let racer_sha = format!("sha256:{}", sha256_hex(RACER_BYTES.as_bytes()));
    let (prepared, finished) = publication_records(&p);
    let mode = if named { "named" } else { "staged" };
    let (mut published, mut refused) = (0, HashMap::<String, usize>::new());
    for (i, run) in &runs {
        let id = format!("r-{i}");
        assert!(!run.stdout.contains(&racer_sha), "the racer's hash in an answer: {run:#?}");
        match run.status() {
            "ok" => {
                published += 1;
                let receipt = &run.envelope["created_files"][0];
                assert_eq!(receipt["sha256"], tool_sha, "{run:#?}");
                let intent = &prepared[&id];
                assert_eq!(intent["candidate_mode"], mode, "{intent}");
                assert_eq!(intent["sha256"], tool_sha, "{intent}");
                assert_eq!(finished[&id]["result"], "confirmed", "{id}");
                // Under the output's name: the recorded inode, airlock's,
                // with the receipt's bytes.
                let ino: u64 = intent["candidate"]["ino"].as_str().unwrap().parse().unwrap();
                let dest = results.join(format!("out-{i}.txt"));
                let meta = std::fs::symlink_metadata(&dest).unwrap();
                assert_eq!((meta.uid(), meta.ino()), (0, ino), "{id}: not the file airlock wrote");
                let bytes = std::fs::read(&dest).unwrap();
                assert_eq!(format!("sha256:{}", sha256_hex(&bytes)), receipt["sha256"].as_str().unwrap(), "{id}");
            }
            "refused" => {
                let code = run.reason().to_owned();
                if code == "journal.unconfirmed" {
                    // Which publication blocked this run, and what its own
                    // run answered and journaled.
                    let blocker = runs.iter().find(|(j, _)| run.stdout.contains(&format!("r-{j}\\\"")));
                    let records = p.command(&["journal", "show", "--json"]).output().unwrap();
                    let records: Value = serde_json::from_slice(&records.stdout).unwrap_or_default();
                    let of_blocker: Vec<&Value> = records["content"]["records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|r| blocker.is_some_and(|(j, _)| r["invocation_id"] == format!("r-{j}")))
                        .collect();
                    let pending = std::fs::read_dir(p.path(".airlock/pending"))
                        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                        .unwrap_or_default();
                    panic!("{id} was blocked: {run:#?}\nblocker: {blocker:#?}\nits records: {of_blocker:#?}\npending now: {pending:?}");
                }
                assert!(matches!(code.as_str(), "output.identity_mismatch" | "output.exists"), "{run:#?}");
                if let Some(done) = finished.get(&id) {
                    assert_ne!(done["result"], "confirmed", "{id}: a refused run's publication is confirmed");
                }
                if code == "output.identity_mismatch" {
                    // Journaled; whatever is at the output's name is the
                    // racer's and is left where it is.
                    assert_eq!(finished[&id]["code"], "output.identity_mismatch", "{id}");
                    if let Ok(left) = std::fs::symlink_metadata(results.join(format!("out-{i}.txt"))) {
                        assert_eq!(left.uid(), NOBODY, "{id}: the foreign file is left in place");
                    }
                }
                *refused.entry(code).or_default() += 1;
            }
            other => panic!("unexpected status {other}: {run:#?}"),
        }
    }
    // No confirmed publication in the whole journal states the racer's bytes.
    for (id, intent) in &prepared {
        if finished.get(id).is_some_and(|f| f["result"] == "confirmed") {
            assert_eq!(intent["sha256"], tool_sha, "{id}");
        }
    }
    let moved = names(&results).iter().filter(|n| n.starts_with("moved-")).count();
    let planted = names(&results)
        .iter()
        .filter(|n| std::fs::symlink_metadata(results.join(n)).is_ok_and(|m| m.uid() == NOBODY))
        .count();
    eprintln!("{mode}: {published} published, refused {refused:?}; the racer moved {moved}, planted {planted}");
    assert!(planted > 0, "the racer never planted anything: the race did not run");
    assert_no_candidates_of_airlock(&results);
    p.run(&["journal", "verify"]).assert_ok();
    Some((published, refused))
}

/// No candidate of airlock's user is left (the racer's own files may carry
/// a candidate's name).
#[track_caller]
fn assert_no_candidates_of_airlock(results: &Path) {
    let left: Vec<String> = names(results)
        .into_iter()
        .filter(|n| n.starts_with(".airlock-candidate-"))
        .filter(|n| std::fs::symlink_metadata(results.join(n)).is_ok_and(|m| m.uid() != NOBODY))
        .collect();
    assert!(left.is_empty(), "airlock's candidates left: {left:?}");
}

/// With the staged output renamed from the call's private staging directory
/// there is nothing in the shared directory to swap before publication; the
/// racer can only take a destination name first (`output.exists`).
#[test]
fn a_racer_in_a_shared_output_dir_never_gets_its_bytes_published_staged() {
    let Some((published, _)) = race(false) else { return };
    assert!(published > 0, "nothing was published");
}

/// With named candidates (file systems without `O_TMPFILE`) the racer swaps
/// the candidate itself; the identity check after the rename refuses those.
#[test]
fn a_racer_in_a_shared_output_dir_never_gets_its_bytes_published_named() {
    let Some((published, _)) = race(true) else { return };
    assert!(published > 0, "nothing was published");
}

/// The race behind a run once refused `journal.unconfirmed` under load: B
/// lists the pending markers while A's publication is pending; A is then
/// refused before its intent (its output's name was taken), removes its
/// marker and exits; only then does B check A's marker's owner, and finds
/// it dead. A marker its dead owner removed is not a stuck publication: B
/// runs. Both pauses are the debug build's test points.
#[test]
fn a_marker_removed_by_its_owner_before_it_died_blocks_nothing() {
    let p = Project::new();
    p.write("data/in.txt", TOOL_BYTES);
    let spawn = |id: &str, out: &str, pause: &str| {
        let mut cmd = p.command(&["run", "copy", "data/in.txt", out, "--invocation-id", id]);
        cmd.env("AIRLOCK_TEST_PAUSE_AT", pause).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let a = spawn("a", "results/a.txt", "before_candidate:1500");
    let pending = p.path(".airlock/pending");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(&pending).map_or(0, |d| d.count()) == 0 {
        assert!(std::time::Instant::now() < until, "A never marked its publication pending");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A's output name is taken while A is paused: A will be refused before
    // its intent is journaled.
    p.write("results/a.txt", RACER_BYTES);
    let b = spawn("b", "results/b.txt", "pending_listed:3000");
    let a = a.wait_with_output().unwrap();
    let a_answer: Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(a_answer["error"]["code"], "output.exists", "{a_answer}");
    let b = b.wait_with_output().unwrap();
    let b_answer: Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(b_answer["status"], "ok", "{b_answer}\n{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(std::fs::read_dir(&pending).unwrap().count(), 0);
}
