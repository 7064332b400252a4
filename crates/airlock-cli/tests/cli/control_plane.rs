//! The governed cannot govern (issue 14, ATTACKS 19, 20, 23): a ceiling or
//! broker root that holds airlock's own control files is refused before
//! anything runs, judged by identity (a bind mount of the project is the
//! project); control files owned by someone else, open to others' writes
//! or reached through a link are refused; and Unicode spellings of control
//! names are refused by the grammar and by the broker.

use crate::util::{is_root, Project, Run, COPY_TOOL};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXPOSED: &str = "config.control_file_exposed";
const UNSAFE: &str = "config.control_file_unsafe";

fn copy(p: &Project) -> Run {
    p.run(&["run", "copy", "data/in.txt", "results/out.txt"])
}

/// A ceiling that would be fine if it held no control file works first, so
/// the refusals below are about the control files and nothing else.
#[track_caller]
fn assert_copy_refused(p: &Project, code: &str, names: &str) {
    let run = copy(p);
    run.assert_refused(code, 78);
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert!(message.contains(names), "the message should name {names}: {run:#?}");
    assert!(!p.path("results/out.txt").exists(), "nothing ran: {run:#?}");
}

#[test]
fn a_ceiling_over_the_configuration_is_refused_at_start_up() {
    let p = Project::with_config("state_dir = \".airlock\"\n[filesystem]\nroots = [\".:.:rw\"]\n");
    p.write("data/in.txt", "in");
    let config = std::fs::read(p.path("airlock.toml")).unwrap();
    assert_copy_refused(&p, EXPOSED, "airlock.toml");
    // Every command stops at start-up, not only the ones that reach the ceiling.
    p.run(&["tools", "list"]).assert_refused(EXPOSED, 78);
    assert_eq!(std::fs::read(p.path("airlock.toml")).unwrap(), config);
    // A read-only ceiling over the project is refused the same way.
    p.write("airlock.toml", "state_dir = \".airlock\"\n[filesystem]\nroots = [\".:.:ro\", \"./results:results:rw\"]\n");
    assert_copy_refused(&p, EXPOSED, "airlock.toml");
    // The same project with ceilings beside the control files runs.
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    copy(&p).assert_ok();
}

#[test]
fn a_ceiling_over_the_tools_or_a_policy_directory_is_refused_at_start_up() {
    // The configuration lives apart; only the tools directory is under the ceiling.
    let p = Project::with_config(
        "state_dir = \".airlock\"\ntools_dir = \"ext/tools\"\n[filesystem]\nroots = [\"./data:data:ro\", \
         \"./results:results:rw\", \"./ext:ext:rw\"]\n",
    );
    p.write("ext/tools/copy.clad.toml", COPY_TOOL);
    p.write("data/in.txt", "in");
    assert_copy_refused(&p, EXPOSED, "tools directory");
    // A ceiling that is the tools directory itself.
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\ntools_dir = \"ext/tools\"\n[filesystem]\nroots = [\"./data:data:ro\", \
         \"./results:results:rw\", \"./ext/tools:t:ro\"]\n",
    );
    assert_copy_refused(&p, EXPOSED, "tools directory");

    // A ceiling over the directory a policy glob names.
    p.write("pol/allow.cedar", "permit(principal, action, resource);\n");
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\ntools_dir = \"ext/tools\"\n[filesystem]\nroots = [\"./data:data:ro\", \
         \"./results:results:rw\", \"./pol:pol:rw\"]\n[policy]\nfiles = [\"pol/*.cedar\"]\n",
    );
    assert_copy_refused(&p, EXPOSED, "policy files");
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\ntools_dir = \"ext/tools\"\n[filesystem]\nroots = [\"./data:data:ro\", \
         \"./results:results:rw\"]\n[policy]\nfiles = [\"pol/*.cedar\"]\n",
    );
    copy(&p).assert_ok();
}

/// `airlock isolated` with a root over the project: refused before the
/// command runs; the configuration is unchanged and the script's marker
/// (written through a legitimate root) never appears.
#[test]
fn a_broker_root_over_the_project_cannot_rewrite_the_configuration() {
    let p = Project::new();
    let config = std::fs::read(p.path("airlock.toml")).unwrap();
    let out = format!("out={}:w", p.path("results").display());
    let script = "printf ran | airlock-fs write out ran.txt; \
                  printf '[filesystem]\\nroots = [\"/etc:etc:rw\"]\\n' | airlock-fs write p airlock.toml";
    // Without the project root the marker is written: the script runs.
    let ok = p.run(&["isolated", "--root", &out, "--", "sh", "-c", "printf ran | airlock-fs write out ran.txt"]);
    ok.assert_ok();
    std::fs::remove_file(p.path("results/ran.txt")).unwrap();

    let project = format!("p={}:rw", p.root().display());
    let run = p.run(&["isolated", "--root", &out, "--root", &project, "--", "sh", "-c", script]);
    run.assert_refused(EXPOSED, 78);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("airlock.toml"), "{run:#?}");
    assert!(!p.path("results/ran.txt").exists(), "the command ran: {run:#?}");
    assert_eq!(std::fs::read(p.path("airlock.toml")).unwrap(), config);

    // The parent of the project (the temporary directory) holds it too.
    let parent = format!("t={}:rw", p.root().parent().unwrap().display());
    p.run(&["isolated", "--root", &parent, "--", "true"]).assert_refused(EXPOSED, 78);
}

#[test]
fn a_configured_broker_root_over_the_project_is_refused_at_start_up() {
    let p = Project::with_config("state_dir = \".airlock\"\n[broker.roots]\nproj = \".\"\nout = \"./results\"\n");
    p.write(
        "tools/plant.clad.toml",
        "[tool]\nname = \"plant\"\nversion = \"1\"\ndescription = \"plants a manifest\"\nrisk_tier = \"low\"\n\
         [broker]\nroots = [\"proj:w\"]\n[command]\nexec = [\"sh\", \"-c\", \"printf x | airlock-fs write proj \
         tools/evil.clad.toml\"]\n[output]\nformat = \"text\"\n",
    );
    let run = p.run(&["run", "plant"]);
    run.assert_refused(EXPOSED, 78);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("[broker.roots] proj"), "{run:#?}");
    assert!(!p.path("tools/evil.clad.toml").exists());
    p.run(&["tools", "list"]).assert_refused(EXPOSED, 78);
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct BindMount(PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> Option<BindMount> {
        let ok = Command::new("mount").arg("--bind").arg(from).arg(to).status().is_ok_and(|s| s.success());
        ok.then(|| BindMount(to.to_path_buf()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The project bind-mounted at another path, and that path used as a
/// ceiling or a root: the same directory by `(dev, ino)`, so refused.
#[test]
fn a_ceiling_that_reaches_the_project_through_a_bind_mount_is_refused() {
    if !is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let p = Project::new();
    p.write("data/in.txt", "in");
    let elsewhere = tempfile::Builder::new().prefix("airlock-bind-").tempdir().unwrap();
    let Some(mount) = BindMount::new(p.root(), elsewhere.path()) else {
        eprintln!("skipped: mount --bind is not permitted here");
        return;
    };
    assert!(mount.0.join("airlock.toml").exists(), "the bind mount shows the project");
    p.write(
        "airlock.toml",
        format!(
            "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"{}:results:rw\"]\n",
            mount.0.display()
        ),
    );
    assert_copy_refused(&p, EXPOSED, "airlock.toml");
    p.write(
        "airlock.toml",
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    let root = format!("m={}:rw", mount.0.display());
    p.run(&["isolated", "--root", &root, "--", "true"]).assert_refused(EXPOSED, 78);
    copy(&p).assert_ok();
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Configuration, manifest and policy owned by uid 65534: refused for root.
#[test]
fn control_files_owned_by_another_user_are_refused() {
    if !is_root() {
        eprintln!("skipped: chown to uid 65534 needs root");
        return;
    }
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n\
         [policy]\nfiles = [\"pol/*.cedar\"]\n",
    );
    p.write("pol/allow.cedar", "permit(principal, action, resource);\n");
    p.write("data/in.txt", "in");
    copy(&p).assert_ok();
    std::fs::remove_file(p.path("results/out.txt")).unwrap();
    for file in ["airlock.toml", "tools/copy.clad.toml", "pol/allow.cedar"] {
        chown_nobody(&p.path(file));
        assert_copy_refused(&p, UNSAFE, file);
        std::os::unix::fs::lchown(p.path(file), Some(0), Some(0)).unwrap();
    }
    // The directory holding a control file counts too.
    chown_nobody(&p.path("tools"));
    assert_copy_refused(&p, UNSAFE, "tools");
    std::os::unix::fs::lchown(p.path("tools"), Some(0), Some(0)).unwrap();
    copy(&p).assert_ok();
}

#[test]
fn control_files_open_to_others_writes_are_refused() {
    let p = Project::new();
    p.write("data/in.txt", "in");
    chmod(&p.path("tools/copy.clad.toml"), 0o664);
    assert_copy_refused(&p, UNSAFE, "copy.clad.toml");
    chmod(&p.path("tools/copy.clad.toml"), 0o644);
    chmod(&p.path("tools"), 0o777);
    assert_copy_refused(&p, UNSAFE, "tools");
    chmod(&p.path("tools"), 0o755);
    chmod(&p.path("airlock.toml"), 0o646);
    assert_copy_refused(&p, UNSAFE, "airlock.toml");
    chmod(&p.path("airlock.toml"), 0o644);
    copy(&p).assert_ok();
}

#[test]
fn control_files_reached_through_a_symbolic_link_are_refused() {
    let p = Project::new();
    p.write("data/in.txt", "in");
    std::fs::rename(p.path("airlock.toml"), p.path("real.toml")).unwrap();
    std::os::unix::fs::symlink("real.toml", p.path("airlock.toml")).unwrap();
    assert_copy_refused(&p, UNSAFE, "symbolic link");
    p.run(&["--config", "airlock.toml", "tools", "list"]).assert_refused(UNSAFE, 78);
    std::fs::remove_file(p.path("airlock.toml")).unwrap();
    std::fs::rename(p.path("real.toml"), p.path("airlock.toml")).unwrap();

    std::fs::rename(p.path("tools/copy.clad.toml"), p.path("outside/copy.clad.toml")).unwrap();
    std::os::unix::fs::symlink(p.path("outside/copy.clad.toml"), p.path("tools/copy.clad.toml")).unwrap();
    assert_copy_refused(&p, UNSAFE, "symbolic link");
}

/// ATTACKS 23: `.airloc` + KELVIN SIGN folds to `.airlock` on a
/// case-insensitive file system, so the grammar refuses it as a declared
/// path and the broker refuses it as an operation's path.
#[test]
fn a_kelvin_sign_spelling_of_the_control_directory_is_refused() {
    let p = Project::new();
    let kelvin = "data/.airloc\u{212A}/x";
    p.write(kelvin, "hidden");
    let run = p.run(&["run", "copy", kelvin, "results/out.txt"]);
    run.assert_refused("path.control_dir", 77);
    assert!(!p.path("results/out.txt").exists());

    let data = format!("data={}:rl", p.path("data").display());
    for (script, code) in [
        ("airlock-fs read data .airloc\u{212A}/x", "path.control_dir"),
        ("airlock-fs read data .g\u{0131}t/config", "path.control_dir"),
        ("airlock-fs read data .airlock-\u{017F}tage-0", "broker.path_reserved"),
    ] {
        let run = p.run(&["isolated", "--root", &data, "--", "sh", "-c", script]);
        assert_eq!(
            (run.status(), run.reason(), run.envelope["content"]["broker"]["failure"]["code"].as_str()),
            ("failed", "broker.operation_failed", Some(code)),
            "{script}: {run:#?}"
        );
        assert!(!run.stdout.contains("hidden"), "{run:#?}");
    }
    // A name that merely contains a non-ASCII letter is still a name.
    p.write("data/\u{017F}ecret.txt", "plain");
    let run = p.run(&["isolated", "--root", &data, "--", "sh", "-c", "airlock-fs read data \u{017F}ecret.txt"]);
    run.assert_ok();
}

/// `airlock init` under a permissive umask still makes control files that
/// pass the ownership and mode rules, and ceilings that hold none.
#[test]
fn airlock_init_makes_a_project_that_passes_the_control_file_rules() {
    let dir = tempfile::Builder::new().prefix("airlock-init-").tempdir().unwrap();
    let init = Command::new("sh")
        .args(["-c", "umask 000 && exec \"$0\" init"])
        .arg(crate::util::AIRLOCK)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let mode = |rel: &str| std::fs::metadata(dir.path().join(rel)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("airlock.toml"), mode("tools"), mode("tools/wordcount.clad.toml")), (0o644, 0o755, 0o644));
    let run = crate::runkit::airlock_in(dir.path(), &["run", "wordcount", "data/example.txt", "results/count.json"]);
    run.assert_ok();
}
