//! Issue 17 benchmark: the staged output published as itself.
//!
//! Where the call's staged output can be moved into the output's parent —
//! same mount, no set-group-ID bit or default ACL there — it is the
//! publication candidate: no copy, one inode from the staging pool to the
//! published name, with the journal saying so (`candidate_origin`
//! `staged`). A file the worker writes is named in the call's staging
//! directory and renamed from there (`candidate_mode` `staged`); a standard
//! output that is the output is streamed into an unnamed file, linked
//! (`tmpfile`). Elsewhere a copy is made beside the destination, as before
//! (`copy`, `tmpfile`). Either way the receipt's hash is of the published
//! bytes, the file has one link, the staging pool is left empty, and a
//! crash between the record and the rename leaves nothing published.

use crate::runkit::*;
use crate::util::{is_root, sha256_hex, Project, Run};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const BYTES: &str = "the bytes the copy tool copies, 7c1d\n";

fn project(extra_config: &str) -> Project {
    let p = Project::with_config(&format!(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n{extra_config}"
    ));
    p.write("data/in.txt", BYTES);
    p
}

fn intent(p: &Project, id: &str) -> Value {
    let records = p.run(&["journal", "show", "--json"]).envelope["content"]["records"].clone();
    let found = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "FilePublicationPrepared" && r["invocation_id"] == id)
        .unwrap_or_else(|| panic!("no FilePublicationPrepared for {id}"))
        .clone();
    found["body"].clone()
}

/// The call published `rel` from a candidate of `origin` kept as `mode`:
/// the receipt, the journaled intent and the file agree on bytes, hash and
/// inode; the file has one link; nothing is left in staging or beside the
/// output.
#[track_caller]
fn assert_published(p: &Project, run: &Run, rel: &str, origin: &str, mode: &str) -> std::fs::Metadata {
    run.assert_ok();
    let id = run.envelope["invocation_id"].as_str().unwrap();
    let bytes = std::fs::read(p.path(rel)).unwrap();
    assert_eq!(bytes, BYTES.as_bytes());
    let sha = format!("sha256:{}", sha256_hex(&bytes));
    assert_eq!(run.envelope["created_files"][0]["sha256"], sha.as_str(), "{run:#?}");
    let intent = intent(p, id);
    assert_eq!(intent["candidate_origin"], origin, "{intent}");
    assert_eq!(intent["candidate_mode"], mode, "{intent}");
    assert_eq!(intent["candidate_name"], Value::Null, "{intent}");
    assert_eq!(intent["sha256"], sha.as_str(), "{intent}");
    let meta = std::fs::symlink_metadata(p.path(rel)).unwrap();
    assert_eq!(intent["candidate"]["ino"], meta.ino().to_string(), "the published inode is the recorded one");
    assert_eq!(meta.nlink(), 1, "{rel} has another name");
    assert_staging_empty(p);
    assert_no_candidates(p, "results");
    meta
}

#[test]
fn a_staged_output_on_the_same_mount_is_published_as_itself() {
    let p = project("");
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    assert_published(&p, &run, "results/out.txt", "staged", "staged");
    // Nothing of the call is left in the state directory.
    p.assert_state_free_of(BYTES.trim_end());
    p.run(&["journal", "verify"]).assert_ok();
}

/// The standard output streamed into the output's staging file: unnamed
/// there, so linked from its descriptor.
#[test]
fn a_stdout_output_is_linked_as_itself() {
    let p = project("");
    let rest = "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\n[output]\nformat = \"text\"\nstdout_file = \"{output}\"\n";
    p.tool("cat-out", &manifest("cat-out", "", IO_ARGS, &["cat", "{input}"], rest));
    let run = p.run(&["run", "cat-out", "data/in.txt", "results/out.txt"]);
    assert_published(&p, &run, "results/out.txt", "staged", "tmpfile");
}

#[test]
fn a_renamed_output_gets_the_configured_mode_and_made_parents() {
    let p = project("output_mode = \"0640\"\n");
    let rest = "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\ncreate_parents = true\n";
    p.tool("nest", &manifest("nest", "", IO_ARGS, &["cp", "{input}", "{output}"], rest));
    let run = p.run(&["run", "nest", "data/in.txt", "results/a/b/out.txt"]);
    let meta = assert_published(&p, &run, "results/a/b/out.txt", "staged", "staged");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
}

#[test]
fn a_set_group_id_parent_gets_a_copy_that_takes_the_directory_group() {
    let p = project("");
    let results = p.path("results");
    // Root can hand the directory to another group; anyone can mark it.
    let group = if is_root() {
        std::os::unix::fs::chown(&results, None, Some(65534)).unwrap();
        65534
    } else {
        std::fs::metadata(&results).unwrap().gid()
    };
    let mode = std::fs::metadata(&results).unwrap().permissions().mode();
    std::fs::set_permissions(&results, std::fs::Permissions::from_mode(mode | 0o2000)).unwrap();
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    let meta = assert_published(&p, &run, "results/out.txt", "copy", "tmpfile");
    assert_eq!(meta.gid(), group, "a file made in a set-group-ID directory takes its group");
}

/// A mount over `results` for the life of the guard (root only).
struct Mounted(std::path::PathBuf);

impl Mounted {
    /// `mount ARGS… results`; `None` (said loudly) where this process may not mount.
    fn over(p: &Project, args: &[&str], what: &str) -> Option<Mounted> {
        if !is_root() {
            eprintln!("SKIPPED: {what} needs root to mount over the output directory");
            return None;
        }
        let target = p.path("results");
        let out = Command::new("mount").args(args).arg(&target).output().unwrap();
        if !out.status.success() {
            eprintln!("SKIPPED: {what}: mount {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        Some(Mounted(target))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn an_output_directory_on_another_file_system_gets_a_copy() {
    let p = project("");
    let Some(_tmpfs) = Mounted::over(&p, &["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs"], "a tmpfs output") else {
        return;
    };
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    assert_published(&p, &run, "results/out.txt", "copy", "tmpfile");
}

/// A bind mount of the same file system is another mount, where `linkat`
/// fails with `EXDEV`: it is seen before anything is recorded.
#[test]
fn an_output_directory_bound_from_the_same_file_system_gets_a_copy() {
    let p = project("");
    let source = p.path("elsewhere");
    std::fs::create_dir(&source).unwrap();
    let Some(_bind) = Mounted::over(&p, &["--bind", source.to_str().unwrap()], "a bind-mounted output") else {
        return;
    };
    assert_eq!(
        std::fs::metadata(p.path("results")).unwrap().dev(),
        std::fs::metadata(p.path("data")).unwrap().dev(),
        "the same file system"
    );
    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    assert_published(&p, &run, "results/out.txt", "copy", "tmpfile");
    assert!(source.join("out.txt").exists());
}

/// A crash after the record and before the rename: the staged output is
/// left in the dead call's staging directory, nothing has the output's
/// name, and recovery settles on nothing published (the staging is reaped
/// by `staging gc`); a crash after the rename is recovered as the recorded
/// inode with the recorded bytes, with one link.
#[test]
fn a_crash_around_the_rename_of_a_staged_output_recovers_old_or_new() {
    for (point, state, published) in [("after_prepared", "never_linked", false), ("after_publish", "published", true)] {
        let p = project("");
        let id = format!("crash-{}", point.replace('_', "-"));
        let mut cmd = p.command(&["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", &id]);
        let out = cmd.env("AIRLOCK_TEST_CRASH_AT", point).output().unwrap();
        assert_eq!(out.status.signal(), Some(9), "{point}: airlock should have been SIGKILLed: {out:?}");
        let recorded = intent(&p, &id);
        assert_eq!(recorded["candidate_origin"], "staged", "{point}: {recorded}");
        assert_eq!(recorded["candidate_mode"], "staged", "{point}: {recorded}");
        let inspect = p.run(&["invocation", "inspect", &id]);
        assert_eq!(inspect.envelope["content"]["state"], state, "{point}: {inspect:#?}");
        p.run(&["invocation", "recover", &id]).assert_ok();
        assert_no_candidates(&p, "results");
        if published {
            let meta = std::fs::symlink_metadata(p.path("results/out.txt")).unwrap();
            assert_eq!(recorded["candidate"]["ino"], meta.ino().to_string(), "{point}");
            assert_eq!(meta.nlink(), 1, "{point}");
            let bytes = std::fs::read(p.path("results/out.txt")).unwrap();
            assert_eq!(recorded["sha256"], format!("sha256:{}", sha256_hex(&bytes)), "{point}");
        } else {
            assert_absent_path(&p, "results/out.txt");
        }
        // The killed call's staging is reaped, and new effects go again.
        p.run(&["staging", "gc"]).assert_ok();
        assert_staging_empty(&p);
        p.run(&["run", "copy", "data/in.txt", "results/next.txt"]).assert_ok();
        p.run(&["journal", "verify"]).assert_ok();
    }
}
