//! ATTACKS.md cases 1–9 on the shipping binary. Each case asserts status,
//! reason code and exit code, that a refused file's canary content appears
//! nowhere in stdout, stderr or the state directory, and that a refusal
//! leaves no prepared invocation behind.

use crate::util::{is_root, Project, CANARY};
use std::os::unix::fs::symlink;

/// One hostile request.
pub struct Case {
    pub name: &'static str,
    pub setup: fn(&Project),
    pub input: String,
    pub output: String,
    /// `None` for success, else (reason, exit code).
    pub refusal: Option<(&'static str, i32)>,
}

fn case(
    name: &'static str,
    setup: fn(&Project),
    input: &str,
    output: &str,
    refusal: Option<(&'static str, i32)>,
) -> Case {
    Case { name, setup, input: input.to_owned(), output: output.to_owned(), refusal }
}

fn plain(p: &Project) {
    p.write("data/in.txt", "hello\n");
}

/// The matrix; shared with the resolver-equivalence test.
pub fn cases() -> Vec<Case> {
    let long_component = format!("data/{}", "a".repeat(256));
    let long_path = format!("data/{}", vec!["abcdefgh"; 520].join("/"));
    let mut v = vec![
        case("ok", plain, "data/in.txt", "results/out.txt", None),
        // 1. containment by component, never by string prefix
        case("1 traversal to sibling", plain, "../p-evil/x", "results/out.txt", Some(("path.traversal", 77))),
        case(
            "1 string-prefix sibling",
            |p| {
                plain(p);
                p.write("data-evil/secret.txt", CANARY);
            },
            "data-evil/secret.txt",
            "results/out.txt",
            Some(("grant.no_ceiling", 77)),
        ),
        // 2. grammar
        case("2 inner traversal", plain, "data/../outside/secret.txt", "results/out.txt", Some(("path.traversal", 77))),
        case("2 empty component", plain, "data//in.txt", "results/out.txt", Some(("path.empty_component", 77))),
        case("2 dot component", plain, "./data/in.txt", "results/out.txt", Some(("path.dot_component", 77))),
        case("2 rooted", plain, "/etc/passwd", "results/out.txt", Some(("path.absolute", 77))),
        case("2 backslash", plain, "data\\..\\x", "results/out.txt", Some(("path.backslash", 77))),
        case("2 drive", plain, "C:x", "results/out.txt", Some(("path.mount_delimiter", 77))),
        case("2 CR", plain, "data/in\r.txt", "results/out.txt", Some(("path.control_char", 77))),
        case("2 LF", plain, "data/in\n.txt", "results/out.txt", Some(("path.control_char", 77))),
        case("2 long component", plain, &long_component, "results/out.txt", Some(("path.component_too_long", 77))),
        case("2 long path", plain, &long_path, "results/out.txt", Some(("path.too_long", 77))),
        // 3. device names as outputs
        case("3 CON", plain, "data/in.txt", "results/CON", Some(("path.device_name", 77))),
        case("3 nul.txt", plain, "data/in.txt", "results/nul.txt", Some(("path.device_name", 77))),
        case("3 COM1", plain, "data/in.txt", "results/COM1", Some(("path.device_name", 77))),
        case("3 LPT1.log", plain, "data/in.txt", "results/LPT1.log", Some(("path.device_name", 77))),
        // 4. control directories
        case(
            "4 .git",
            |p| {
                plain(p);
                p.write("data/.git/config", CANARY);
            },
            "data/.git/config",
            "results/out.txt",
            Some(("path.control_dir", 77)),
        ),
        case("4 .AIRLOCK output", plain, "data/in.txt", "results/.AIRLOCK/x", Some(("path.control_dir", 77))),
        // 5. input symlink
        case(
            "5 input symlink",
            |p| symlink(p.path("outside/secret.txt"), p.path("data/in.txt")).unwrap(),
            "data/in.txt",
            "results/out.txt",
            Some(("path.symlink", 77)),
        ),
        case(
            "5 input symlink to /etc/passwd",
            |p| symlink("/etc/passwd", p.path("data/passwd")).unwrap(),
            "data/passwd",
            "results/out.txt",
            Some(("path.symlink", 77)),
        ),
        case(
            "5 relative symlink staying inside",
            |p| {
                plain(p);
                symlink("in.txt", p.path("data/alias.txt")).unwrap();
            },
            "data/alias.txt",
            "results/out.txt",
            Some(("path.symlink", 77)),
        ),
        // 6. a directory on the way is a symlink
        case(
            "6 directory symlink",
            |p| symlink(p.path("outside"), p.path("data/sub")).unwrap(),
            "data/sub/secret.txt",
            "results/out.txt",
            Some(("path.symlink", 77)),
        ),
        case(
            "6 ceiling itself swapped for a symlink",
            |p| {
                std::fs::remove_dir(p.path("data")).unwrap();
                symlink(p.path("outside"), p.path("data")).unwrap();
            },
            "data/secret.txt",
            "results/out.txt",
            Some(("path.symlink", 77)),
        ),
        case(
            "6 output parent symlink",
            |p| {
                plain(p);
                symlink(p.path("outside"), p.path("results/sub")).unwrap();
            },
            "data/in.txt",
            "results/sub/out.txt",
            Some(("path.symlink", 77)),
        ),
        // 7. hard link to a file outside the ceiling
        case(
            "7 hard link",
            |p| std::fs::hard_link(p.path("outside/secret.txt"), p.path("data/in.txt")).unwrap(),
            "data/in.txt",
            "results/out.txt",
            Some(("input.hardlink", 77)),
        ),
        // 8. special files, refused without blocking
        case(
            "8 FIFO",
            |p| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    p.path("data/in.txt").as_path(),
                    rustix::fs::FileType::Fifo,
                    0o644.into(),
                    0,
                )
                .unwrap()
            },
            "data/in.txt",
            "results/out.txt",
            Some(("input.not_regular", 77)),
        ),
        case(
            "8 socket",
            |p| {
                let l = std::os::unix::net::UnixListener::bind(p.path("data/in.txt")).unwrap();
                std::mem::forget(l);
            },
            "data/in.txt",
            "results/out.txt",
            Some(("input.not_regular", 77)),
        ),
        case(
            "8 directory",
            |p| p.mkdir("data/in.txt"),
            "data/in.txt",
            "results/out.txt",
            Some(("input.not_regular", 77)),
        ),
        // 9. existing outputs of every kind
        case(
            "9 output file exists",
            |p| {
                plain(p);
                p.write("results/out.txt", "precious");
            },
            "data/in.txt",
            "results/out.txt",
            Some(("output.exists", 73)),
        ),
        case(
            "9 output directory exists",
            |p| {
                plain(p);
                p.mkdir("results/out.txt");
            },
            "data/in.txt",
            "results/out.txt",
            Some(("output.exists", 73)),
        ),
        case(
            "9 output symlink exists",
            |p| {
                plain(p);
                symlink(p.path("outside/secret.txt"), p.path("results/out.txt")).unwrap();
            },
            "data/in.txt",
            "results/out.txt",
            Some(("output.exists", 73)),
        ),
        case(
            "9 output dangling symlink",
            |p| {
                plain(p);
                symlink(p.path("outside/nothing"), p.path("results/out.txt")).unwrap();
            },
            "data/in.txt",
            "results/out.txt",
            Some(("output.exists", 73)),
        ),
        // grants
        case("output under a read-only ceiling", plain, "data/in.txt", "data/new.txt", Some(("grant.read_only", 77))),
        case("missing input", |_| {}, "data/none.txt", "results/out.txt", Some(("input.missing", 66))),
        case("missing output parent", plain, "data/in.txt", "results/no/out.txt", Some(("output.parent_missing", 66))),
    ];
    if is_root() {
        v.push(case(
            "8 character device",
            |p| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    p.path("data/in.txt").as_path(),
                    rustix::fs::FileType::CharacterDevice,
                    0o644.into(),
                    rustix::fs::makedev(1, 3),
                )
                .unwrap()
            },
            "data/in.txt",
            "results/out.txt",
            Some(("input.not_regular", 77)),
        ));
    }
    v
}

/// Runs one case in a fresh project; returns the project and the run.
pub fn run_case(c: &Case, resolver: Option<&'static str>) -> (Project, crate::util::Run) {
    let mut p = Project::new();
    if let Some(r) = resolver {
        p = p.resolver(r);
    }
    (c.setup)(&p);
    let before_out = std::fs::symlink_metadata(p.path(&c.output)).ok().map(|m| (m.len(), m.file_type()));
    let run = p.prepare(&c.input, &c.output);
    match c.refusal {
        None => {
            run.assert_ok();
        }
        Some((reason, exit)) => {
            run.assert_refused(reason, exit);
            assert!(p.invocations().is_empty(), "{}: a refusal left {:?}", c.name, p.invocations());
        }
    }
    p.assert_absent(&run, CANARY);
    let after_out = std::fs::symlink_metadata(p.path(&c.output)).ok().map(|m| (m.len(), m.file_type()));
    assert_eq!(before_out, after_out, "{}: prepare touched the output", c.name);
    (p, run)
}

#[test]
fn attack_matrix() {
    for c in cases() {
        run_case(&c, None);
    }
}

#[test]
fn manifest_literal_with_nul_is_refused() {
    let p = Project::new();
    p.write(
        "tools/nul.clad.toml",
        r#"
[tool]
name = "nul"
version = "1"
binary = "cat"
description = "reads a path holding NUL"
[command]
exec = ["cat", "data/a"]
[filesystem]
read = ["data/a\u0000b"]
"#,
    );
    p.run(&["prepare", "nul"]).assert_refused("path.control_char", 77);
}

#[test]
fn mount_crossing_is_refused() {
    if !is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let p = Project::new();
    p.mkdir("data/mnt");
    let ok = std::process::Command::new("mount")
        .args(["--bind", p.path("outside").to_str().unwrap(), p.path("data/mnt").to_str().unwrap()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: mount --bind is not permitted here");
        return;
    }
    let run = p.prepare("data/mnt/secret.txt", "results/out.txt");
    let _ = std::process::Command::new("umount").arg(p.path("data/mnt")).status();
    run.assert_refused("path.mount_crossing", 77);
    p.assert_absent(&run, CANARY);
}
