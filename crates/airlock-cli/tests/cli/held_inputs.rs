//! Large inputs held in place (issue 17, benchmark): an input over 8 MiB
//! of a call run at once on the native tier is not copied into staging
//! where the kernel grants a read lease on it; the worker reads the host
//! file through a read-only mount, and the lease keeps its bytes those
//! hashed. The attacks: a host writer during the run (it waits for the
//! call, and the call is void: `input.changed`, nothing published), a
//! file already open for writing (not held: copied), the tool writing
//! its input (a read-only mount), a file the worker could not read as it
//! stands (not held: nothing about it is changed), and the same as an
//! unprivileged caller.

use crate::runkit::{assert_staging_empty, sh_tool, Nobody};
use crate::util::{Project, Run, COPY_TOOL};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn project() -> Project {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n\
         [limits]\nmax_input_file_bytes = 67108864\nmax_file_bytes = 67108864\n",
    );
    p.write("tools/copy.clad.toml", format!("{COPY_TOOL}max_file_bytes = 67108864\n"));
    p.mkdir("results");
    p
}

/// 12 MiB of varied bytes, mode 0644.
fn big_input(p: &Project, rel: &str) -> Vec<u8> {
    let bytes: Vec<u8> = (0..12 * MIB).map(|i| (i % 251) as u8).collect();
    p.write(rel, &bytes);
    std::fs::set_permissions(p.path(rel), std::fs::Permissions::from_mode(0o644)).unwrap();
    bytes
}

/// Whether the prepared record of `run` says its input `index` was held.
fn held(p: &Project, run: &Run, index: usize) -> bool {
    let id = run.envelope["invocation_id"].as_str().expect("an invocation id");
    let record = p.path(&format!(".airlock/invocations/{id}/prepared.json"));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    record["inputs"][index]["held"].as_bool().unwrap_or(false)
}

#[test]
fn a_large_input_is_held_in_place_and_read_by_the_tool() {
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    let run = p.run(&["run", "copy", "data/big.bin", "results/big.bin"]);
    run.assert_ok();
    assert!(held(&p, &run, 0), "a 12 MiB input of a native call was not held: {run:#?}");
    assert_eq!(std::fs::read(p.path("results/big.bin")).unwrap(), bytes);
    assert_eq!(run.envelope["created_files"][0]["sha256"], format!("sha256:{}", crate::util::sha256_hex(&bytes)));
    // Nothing about the host file changed: not its mode, not its bytes.
    let md = std::fs::metadata(p.path("data/big.bin")).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o644);
    assert_staging_empty(&p);
    // `airlock doctor` says so, with the wait a host writer may face.
    let doctor = p.run(&["doctor"]);
    let leases = &doctor.envelope["content"]["host"]["input_leases"];
    assert_eq!(leases["ok"], true, "{leases:#}");
    assert!(leases["detail"].as_str().unwrap_or("").contains("held under a read lease"), "{leases:#}");
}

/// A tool that sleeps 2 s, then copies its input to its output.
fn slow_tool(p: &Project) {
    p.write(
        "tools/slow.clad.toml",
        sh_tool(
            "slow",
            "",
            &[("input", "path"), ("output", "path")],
            "sleep 2; cp \"$1\" \"$2\"",
            "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\nmax_file_bytes = 67108864\n",
        ),
    );
}

/// Starts the slow tool on `input` and returns once its worker runs.
fn start_slow(p: &Project, input: &str, output: &str) -> std::process::Child {
    let before =
        std::fs::read_to_string(p.path(".airlock/journal.jsonl")).map_or(0, |j| j.matches("WorkerStarted").count());
    let call =
        p.command(&["run", "slow", input, output]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The worker has started once its record is in the journal.
    let started = crate::runkit::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(p.path(".airlock/journal.jsonl"))
            .is_ok_and(|j| j.matches("WorkerStarted").count() > before)
    });
    assert!(started, "the slow tool never started");
    call
}

/// A host process opening the held input for writing while the tool runs
/// waits until the call is over, and the call is void.
#[test]
fn a_host_writer_during_the_run_waits_and_voids_the_call() {
    let p = project();
    let before = big_input(&p, "data/big.bin");
    slow_tool(&p);
    let mut call = start_slow(&p, "data/big.bin", "results/out.bin");
    let opened = Instant::now();
    let mut writer = std::fs::OpenOptions::new().write(true).open(p.path("data/big.bin")).unwrap();
    let waited = opened.elapsed();
    let ended = call.try_wait().unwrap();
    writer.write_all(b"changed").unwrap();
    drop(writer);
    let out = call.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(ended.is_some() || waited >= Duration::from_millis(500), "the writer did not wait ({waited:?})");
    assert_eq!(envelope["error"]["code"], "input.changed", "{envelope:#}");
    assert_eq!(envelope["created_files"], serde_json::json!([]));
    assert!(!p.path("results/out.bin").exists(), "an output of a void call was published");
    // The writer's bytes went in after the call.
    let now = std::fs::read(p.path("data/big.bin")).unwrap();
    assert_eq!(&now[..7], b"changed");
    assert_eq!(now[7..], before[7..]);
    assert_staging_empty(&p);
}

/// Attack 11 against a held input: truncated by path during the run (the
/// truncation waits and the call is void), or replaced by a rename (the
/// worker still reads the held inode, whose hash the descriptor names).
#[test]
fn a_held_input_truncated_or_replaced_during_the_run() {
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    slow_tool(&p);
    let call = start_slow(&p, "data/big.bin", "results/cut.bin");
    // truncate(2) by path (coreutils' truncate opens O_NONBLOCK and is
    // refused at once, which breaks the lease all the same).
    let truncated = Command::new("python3")
        .args(["-c", "import os, sys; os.truncate(sys.argv[1], 0)"])
        .arg(p.path("data/big.bin"))
        .status()
        .unwrap();
    assert!(truncated.success());
    let out = call.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["error"]["code"], "input.changed", "{envelope:#}");
    assert!(!p.path("results/cut.bin").exists());
    assert_eq!(std::fs::metadata(p.path("data/big.bin")).unwrap().len(), 0);

    p.write("data/big.bin", &bytes);
    let call = start_slow(&p, "data/big.bin", "results/kept.bin");
    p.write("data/new.bin", b"a different file");
    std::fs::rename(p.path("data/new.bin"), p.path("data/big.bin")).unwrap();
    let out = call.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["status"], "ok", "{envelope:#}");
    assert_eq!(std::fs::read(p.path("results/kept.bin")).unwrap(), bytes);
    assert_eq!(envelope["created_files"][0]["sha256"], format!("sha256:{}", crate::util::sha256_hex(&bytes)));
    assert_staging_empty(&p);
}

/// A file someone has open for writing cannot be leased: it is copied as
/// before, and the call goes through.
#[test]
fn an_input_open_for_writing_elsewhere_is_copied_not_held() {
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    let writer = std::fs::OpenOptions::new().append(true).open(p.path("data/big.bin")).unwrap();
    let run = p.run(&["run", "copy", "data/big.bin", "results/big.bin"]);
    drop(writer);
    run.assert_ok();
    assert!(!held(&p, &run, 0), "a file open for writing was held");
    assert_eq!(std::fs::read(p.path("results/big.bin")).unwrap(), bytes);
    assert_staging_empty(&p);
}

/// The held file is the host's own: the tool's writes, mode changes and
/// truncation of it all fail, and it is unchanged after the call.
#[test]
fn the_tool_cannot_change_a_held_input() {
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    std::fs::set_permissions(p.path("data/big.bin"), std::fs::Permissions::from_mode(0o666)).unwrap();
    p.write(
        "tools/spoil.clad.toml",
        sh_tool(
            "spoil",
            "",
            &[("input", "path")],
            "(printf x >> \"$1\") && echo appended; (: > \"$1\") && echo truncated; \
             (chmod 0777 \"$1\") && echo chmodded; (touch \"$1\") && echo touched; echo done",
            "[filesystem]\nread = [\"{input}\"]\n",
        ),
    );
    let run = p.run(&["run", "spoil", "data/big.bin"]);
    assert!(held(&p, &run, 0), "a world-readable 12 MiB input was not held: {run:#?}");
    let said = run.stdout.clone() + &run.stderr;
    for verb in ["appended", "truncated", "chmodded", "touched"] {
        assert!(!said.contains(verb), "the tool {verb} its held input: {said}");
    }
    assert!(said.contains("done"), "{run:#?}");
    assert_eq!(std::fs::read(p.path("data/big.bin")).unwrap(), bytes);
    assert_eq!(std::fs::metadata(p.path("data/big.bin")).unwrap().permissions().mode() & 0o7777, 0o666);
}

/// A root caller's worker runs as 65534 and reads an input as "other":
/// a 0600 input is copied (and made readable in staging), never changed.
#[test]
fn an_input_the_worker_could_not_read_as_it_stands_is_copied() {
    if !crate::util::is_root() {
        eprintln!("skipped: the worker reads as 65534 only for a root caller");
        return;
    }
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    std::fs::set_permissions(p.path("data/big.bin"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = p.run(&["run", "copy", "data/big.bin", "results/big.bin"]);
    run.assert_ok();
    assert!(!held(&p, &run, 0), "a 0600 input was held for a worker running as 65534");
    assert_eq!(std::fs::read(p.path("results/big.bin")).unwrap(), bytes);
    assert_eq!(std::fs::metadata(p.path("data/big.bin")).unwrap().permissions().mode() & 0o7777, 0o600);
}

/// An unprivileged caller holds its own file (the lease needs its owner),
/// and a host writer during the run still voids the call.
#[test]
fn an_unprivileged_caller_holds_its_own_large_input() {
    let nobody = match Nobody::new() {
        Ok(n) => n,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let p = project();
    let bytes = big_input(&p, "data/big.bin");
    std::fs::set_permissions(p.path("data/big.bin"), std::fs::Permissions::from_mode(0o600)).unwrap();
    nobody.adopt(&p);
    let run = nobody.run(p.root(), &["run", "copy", "data/big.bin", "results/big.bin"]);
    run.assert_ok();
    assert!(held(&p, &run, 0), "the caller's own 0600 input was not held: {run:#?}");
    assert_eq!(std::fs::read(p.path("results/big.bin")).unwrap(), bytes);
    assert_eq!(std::fs::metadata(p.path("data/big.bin")).unwrap().permissions().mode() & 0o7777, 0o600);
}

/// A small input of a call run at once is copied into a sealed memory file,
/// not into staging: while the tool runs, the call's staging data holds no
/// snapshot; the host file rewritten meanwhile changes nothing the tool
/// reads (attack 11), and the record says where the copy was.
#[test]
fn a_small_input_of_a_call_run_at_once_is_snapshotted_in_memory() {
    let p = project();
    p.write("data/small.txt", "the bytes that were hashed\n");
    slow_tool(&p);
    let call = start_slow(&p, "data/small.txt", "results/small.txt");
    let data = p.path(".airlock/staging/data");
    let staged: Vec<String> = crate::runkit::names(&data)
        .iter()
        .flat_map(|id| crate::runkit::names(&data.join(id)).into_iter().map(move |n| format!("{id}/{n}")))
        .collect();
    p.write("data/small.txt", "REWRITTEN DURING THE RUN\n");
    let out = call.wait_with_output().unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(envelope["status"], "ok", "{envelope:#}");
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(staged[0].ends_with("/output"), "a snapshot was staged on disk: {staged:?}");
    assert_eq!(std::fs::read_to_string(p.path("results/small.txt")).unwrap(), "the bytes that were hashed\n");
    let id = envelope["invocation_id"].as_str().unwrap();
    let record = std::fs::read(p.path(&format!(".airlock/invocations/{id}/prepared.json"))).unwrap();
    let record: serde_json::Value = serde_json::from_slice(&record).unwrap();
    assert_eq!(record["inputs"][0]["in_memory"], true, "{record:#}");
    assert_staging_empty(&p);
    // A call kept for dispatch keeps its snapshot on disk.
    p.run(&["prepare", "copy", "data/small.txt", "results/later.txt", "--invocation-id", "later"]).assert_ok();
    assert!(p.path(".airlock/staging/data/later/0").is_file());
}
