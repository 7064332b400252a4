//! The static-pie build of airlock's programs (`scripts/static-airlock.sh
//! DIR`; CI sets `AIRLOCK_TEST_STATIC_DIR` to it): each has no program
//! interpreter, they pair with each other and with an init of the same
//! sources, and every kind of call runs on them: a tool, a Git query
//! (through the static driver), an isolated submission (through the static
//! broker and client), and a host name resolved without the host's glibc.

use std::path::{Path, PathBuf};

use crate::git::{busy, in_process};
use crate::init_program::link_or_copy;
use crate::isolated::root;
use crate::runkit::*;
use crate::util::{Project, Run, AIRLOCK};

/// What `scripts/static-airlock.sh` installs.
const PROGRAMS: [&str; 4] = ["airlock", "airlock-broker", "airlock-fs", "airlock-git-driver"];

/// True when the ELF program at `path` names a program interpreter
/// (`PT_INTERP`): a dynamically linked program.
fn has_interpreter(path: &Path) -> bool {
    use std::io::Read;
    // The ELF header and the program headers after it: the first page.
    let mut elf = Vec::new();
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.take(4096).read_to_end(&mut elf).unwrap();
    assert!(elf.starts_with(b"\x7fELF\x02\x01"), "{}: not a 64-bit little-endian ELF file", path.display());
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    assert!(phoff + phnum * phentsize <= elf.len(), "{}: program headers past the first page", path.display());
    const PT_INTERP: u32 = 3;
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == PT_INTERP
    })
}

/// A directory of links to the static programs in `dir`, with the init
/// beside them (the static one when CI built it, else this build's).
fn static_bin(dir: &Path) -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    for program in PROGRAMS {
        link_or_copy(&dir.join(program), &bin.path().join(program));
    }
    let init = std::env::var_os("AIRLOCK_TEST_STATIC_INIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(AIRLOCK).with_file_name("airlock-sandbox-init"));
    link_or_copy(&init, &bin.path().join("airlock-sandbox-init"));
    bin
}

#[test]
fn static_programs_of_the_same_sources_run_every_kind_of_call() {
    let Some(dir) = std::env::var_os("AIRLOCK_TEST_STATIC_DIR") else {
        eprintln!("skipped: AIRLOCK_TEST_STATIC_DIR is not set (scripts/static-airlock.sh DIR builds one)");
        return;
    };
    let dir = PathBuf::from(dir);
    for program in PROGRAMS {
        assert!(!has_interpreter(&dir.join(program)), "{program} names a dynamic loader: not a static build");
    }
    assert!(has_interpreter(Path::new(AIRLOCK)), "the check itself: this test's debug airlock is dynamic");
    let bin = static_bin(&dir);
    let airlock = bin.path().join("airlock");
    let p = Project::new();
    let run = |args: &[&str]| -> Run { p.run_command(p.command_of(&airlock, args), args) };

    // `doctor` finds the init and the driver beside it and pairs with both,
    // and reads from its own auxiliary vector that it runs without a loader
    // (this test's debug airlock says the opposite).
    let doctor = run(&["doctor"]);
    for helper in ["sandbox_init", "git_driver", "linking"] {
        assert_eq!(doctor.envelope["content"]["host"][helper]["ok"], true, "{helper}: {:#}", doctor.envelope);
    }
    let linking = doctor.envelope["content"]["host"]["linking"]["detail"].as_str().unwrap();
    assert!(linking.contains("static-pie") && linking.contains("DNS only"), "{linking}");
    let dynamic = p.run(&["doctor"]);
    assert_eq!(dynamic.envelope["content"]["host"]["linking"]["ok"], false, "{:#}", dynamic.envelope);

    // A tool.
    p.write("data/in.txt", "static line\n");
    p.tool("shcopy", &sh_tool("shcopy", "", IO_ARGS, r#"cat "$1" > "$2""#, IO_FS));
    run(&["run", "shcopy", "data/in.txt", "results/static.txt"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/static.txt")).unwrap(), "static line\n");

    // A Git query, answered by the static driver as in-process.
    let repo = busy(&p);
    let query = run(&["query", "git_status", "path=data/repo"]);
    query.assert_ok();
    assert_eq!(query.envelope["content"], in_process(&repo, serde_json::json!({ "operation": "git_status" })));

    // An isolated submission: the static broker, and the static client in the worker.
    p.write("data/message.txt", "through the static broker");
    let mut args = vec!["isolated".to_owned(), "--root".into(), root(&p, "data", "data", "r")];
    args.extend(["--root".into(), root(&p, "out", "results", "wl")]);
    args.extend(["--".into(), "sh".into(), "-c".into()]);
    args.push("airlock-fs read data message.txt | airlock-fs write out relayed.txt".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/relayed.txt")).unwrap(), "through the static broker");

    // A host name resolved with glibc's built-in `files` source: the
    // connection, not the lookup, is what fails (nothing listens there).
    let listed = run(&["workers", "list", "--nats", "nats://localhost:1"]);
    assert_eq!(listed.reason(), "cluster.unavailable", "{listed:#?}");
    let said = listed.envelope["error"]["message"].as_str().unwrap();
    assert!(said.contains("Connection refused") && !said.contains("DNS error"), "{said}");

    p.run_command(p.command_of(&airlock, &["journal", "verify"]), &["journal", "verify"]).assert_ok();
}
