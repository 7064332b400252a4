//! The microVM tier's own refusals (issue 20), through the shipping binary:
//! a guest of another airlock build, a guest that does not answer in time,
//! a VMM this build does not drive, and SIGKILL of airlock during a VM call. The conformance suite
//! (`conformance.rs`) runs the shared cases on this tier; the flipped-byte
//! refusal of an exported file is the frame reader's unit test
//! (`airlock-sandbox` `microvm::frame`), on real transfer bytes.
//!
//! Needs `AIRLOCK_TEST_MICROVM_DIR` (what `scripts/microvm-build.sh` wrote
//! from the airlock binary under test). Without it these tests are skipped
//! loudly, unless `AIRLOCK_CONFORMANCE_REQUIRE` names `microvm` (as CI
//! does): then they fail.

use crate::conformance::microvm_section;
use crate::runkit::*;
use crate::util::Project;
use std::process::Stdio;
use std::time::Duration;

const ROOTS: &str = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

/// The guest directory, or `None` (skip) when it is not configured and
/// not required.
fn guest_dir(case: &str) -> Option<String> {
    match std::env::var("AIRLOCK_TEST_MICROVM_DIR") {
        Ok(d) => Some(d),
        Err(_) => {
            let required = std::env::var("AIRLOCK_CONFORMANCE_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|t| t.trim() == "microvm"),
                "{case}: AIRLOCK_CONFORMANCE_REQUIRE names microvm but AIRLOCK_TEST_MICROVM_DIR is not set"
            );
            eprintln!("SKIP {case}: AIRLOCK_TEST_MICROVM_DIR is not set");
            None
        }
    }
}

fn project(microvm: &str) -> Project {
    let p = Project::with_config(&format!("{ROOTS}[sandbox]\ntier = \"microvm\"\n{microvm}"));
    p.write("data/in.txt", "granted input\n");
    p.tool("copy", &sh_tool("copy", "", IO_ARGS, "cat \"$1\" > \"$2\"", IO_FS));
    p
}

/// An answer with status `error`, `reason` and `exit`, saying why on stderr.
#[track_caller]
fn assert_error(run: &crate::util::Run, reason: &str, exit: i32) {
    assert_eq!((run.status(), run.reason(), run.code), ("error", reason, exit), "{run:#?}");
    assert!(run.stderr.contains(reason), "stderr should say why: {run:#?}");
}

fn assert_nothing_left(p: &Project) {
    let calls = p.path(".airlock/tiers/microvm/calls");
    let left: Vec<_> = std::fs::read_dir(&calls).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "call directories left: {left:?}");
    let state = p.path(".airlock").to_str().unwrap().to_owned();
    assert!(
        wait_until(Duration::from_secs(5), || procs_with(&state).is_empty()),
        "VMM processes left: {:?}",
        procs_with(&state)
    );
    assert!(!p.path("results/out.txt").exists(), "an output was published");
    assert_staging_empty(p);
}

/// A guest built from another airlock binary (its build ID differs by one
/// bit) boots, says hello, and is refused before it gets the call.
#[test]
fn a_guest_of_another_airlock_build_is_refused() {
    let Some(dir) = guest_dir("guest mismatch") else { return };
    let p = project("");
    let ours = String::from_utf8(std::fs::read(format!("{dir}/fingerprint")).unwrap()).unwrap();
    let id: Vec<u8> =
        (0..ours.trim().len() / 2).map(|i| u8::from_str_radix(&ours.trim()[2 * i..2 * i + 2], 16).unwrap()).collect();
    assert!(id.len() >= 16, "fingerprint {ours:?}");
    let mut image = std::fs::read(format!("{dir}/initramfs.cpio")).unwrap();
    let mut flipped = 0;
    let mut at = 0;
    while let Some(i) = image[at..].windows(id.len()).position(|w| w == id.as_slice()) {
        image[at + i] ^= 0x01;
        flipped += 1;
        at += i + id.len();
    }
    assert!(flipped >= 1, "the guest binary's build ID was not found in the initramfs");
    let other = p.path("other-initramfs.cpio");
    std::fs::write(&other, image).unwrap();
    let section = format!(
        "[sandbox.microvm]\nkernel = \"{dir}/vmlinuz\"\ninitramfs = \"{}\"\naccel = \"tcg\"\n",
        other.display()
    );
    let p2 = project(&section);
    let run = p2.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    run.assert_refused("sandbox.guest_mismatch", 78);
    assert!(run.stderr.contains("scripts/microvm-build.sh"), "the refusal says how to fix it: {run:#?}");
    assert!(run.stderr.contains(ours.trim()), "the refusal names the expected build: {run:#?}");
    assert_nothing_left(&p2);
}

/// A guest that does not answer within the boot deadline is killed and the
/// call refused with `sandbox.boot_timeout`; nothing is left behind.
#[test]
fn a_guest_that_does_not_answer_in_time_is_a_boot_timeout() {
    let Some(section) = guest_dir("boot timeout").and(microvm_section()) else { return };
    let p = project(&format!("{section}boot_timeout_ms = 1\n"));
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    assert_error(&run, "sandbox.boot_timeout", 75);
    assert!(run.stderr.contains("boot_timeout_ms"), "the refusal says what to raise: {run:#?}");
    assert_nothing_left(&p);
}

/// The Firecracker driver is not in this build: a call is refused cleanly
/// (no VMM started), and `doctor` says why.
#[test]
fn firecracker_is_refused_cleanly() {
    let Some(section) = guest_dir("firecracker").and(microvm_section()) else { return };
    let p = project(&format!("{section}vmm = \"firecracker\"\n"));
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    assert_error(&run, "sandbox.unavailable", 78);
    assert!(run.stderr.contains("use vmm = \"qemu\""), "{run:#?}");
    assert_nothing_left(&p);
}

/// SIGKILL of `airlock` while its guest runs the tool: the VMM dies with
/// it (no QEMU process is left; its port is a socket pair, so no socket
/// path exists), `staging gc` releases the dead call and reaps its call
/// directory, and nothing is published.
#[test]
fn sigkill_of_airlock_during_a_vm_call_leaves_nothing_after_staging_gc() {
    let Some(section) = guest_dir("sigkill").and(microvm_section()) else { return };
    let p = project(&section);
    let args = [("seconds", "string"), ("output", "path")];
    let fs = "[filesystem]\ncreate = [\"{output}\"]\n";
    p.tool("nap", &sh_tool("nap", "timeout_seconds = 120", &args, r#"echo partial > "$2"; sleep "$1""#, fs));
    let state = p.path(".airlock").to_str().unwrap().to_owned();
    let mut child = p
        .command(&["run", "nap", "60", "results/out.txt", "--invocation-id", "vm-crash"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let vmm_started = wait_until(Duration::from_secs(30), || !procs_with(&state).is_empty());
    // The guest boots in about 2.3 s under TCG here; by 8 s it runs the tool.
    std::thread::sleep(Duration::from_secs(8));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(vmm_started, "no VMM process ever named the state dir");
    assert!(
        wait_until(Duration::from_secs(5), || procs_with(&state).is_empty()),
        "5 s after SIGKILL of airlock its VMM still runs: {:?}",
        procs_with(&state)
    );
    let gc = p.run(&["staging", "gc"]);
    gc.assert_ok();
    assert_eq!(gc.envelope["content"]["released"], serde_json::json!(["vm-crash"]), "{gc:#?}");
    assert_nothing_left(&p);
}

/// A malformed `[sandbox.microvm]` is a configuration error.
#[test]
fn a_relative_kernel_path_is_refused() {
    let p = Project::with_config(&format!("{ROOTS}[sandbox.microvm]\nkernel = \"vmlinuz\"\n"));
    let run = p.run(&["doctor"]);
    assert_error(&run, "config.invalid", 78);
    assert!(run.stderr.contains("must be an absolute path"), "{run:#?}");
}
