//! `WorkerSpec::provided`: files copied under `/.airlock`, read-only, the
//! executables executable, from ordinary files or sealed memfds.

use std::fs::File;
use std::io::Write;

use airlock_sandbox::{ProvidedFile, SandboxErrorKind, Tier, WorkerSpec};
use rustix::fs::{MemfdFlags, SealFlags};

use crate::util::{run, sh, show, text, Dir};

/// A sealed memfd holding `bytes` (what airlock provides its own helpers from).
fn sealed(bytes: &[u8]) -> File {
    let fd =
        rustix::fs::memfd_create("airlock-test-provided", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    let mut file = File::from(fd);
    file.write_all(bytes).unwrap();
    rustix::fs::fcntl_add_seals(&file, SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .unwrap();
    file
}

fn with_helpers(mut spec: WorkerSpec, dir: &Dir) -> WorkerSpec {
    dir.write("data.py", b"GREETING = 'provided module'\n");
    spec.provided.push(ProvidedFile {
        path: "/.airlock/bin/hello".into(),
        file: sealed(b"#!/bin/sh\necho \"hello from $0: $*\"\n"),
        executable: true,
    });
    spec.provided.push(ProvidedFile {
        path: "/.airlock/python/data.py".into(),
        file: File::open(dir.path("data.py")).unwrap(),
        executable: false,
    });
    spec
}

#[test]
fn a_provided_executable_runs_from_path_and_a_data_file_reads() {
    let dir = Dir::new();
    let script = r#"
        PATH="/.airlock/bin:$PATH" hello one
        python3 -c 'import sys; sys.path.insert(0, "/.airlock/python"); import data; print(data.GREETING)'
        stat -c '%a %n' /.airlock/bin/hello /.airlock/python/data.py
    "#;
    let o = run(with_helpers(sh(script, &[]), &dir));
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(
        text(&o.stdout),
        "hello from /.airlock/bin/hello: one\nprovided module\n555 /.airlock/bin/hello\n444 /.airlock/python/data.py\n",
        "{}",
        show(&o)
    );
}

#[test]
fn provided_files_cannot_be_changed_or_added_to() {
    let dir = Dir::new();
    let script = r#"
        echo x >> /.airlock/bin/hello && echo WROTE-EXEC
        echo x >> /.airlock/python/data.py && echo WROTE-DATA
        chmod 777 /.airlock/bin/hello 2>/dev/null && echo CHMOD
        rm -f /.airlock/bin/hello 2>/dev/null && echo REMOVED
        mv /.airlock/python/data.py /tmp/ 2>/dev/null && echo MOVED
        touch /.airlock/bin/new 2>/dev/null && echo CREATED
        /.airlock/python/data.py 2>/dev/null && echo EXECUTED-DATA
        cat /.airlock/bin/hello | head -1
        ls /.airlock/bin
        true
    "#;
    let o = run(with_helpers(sh(script, &[]), &dir));
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    for bad in ["WROTE", "CHMOD", "REMOVED", "MOVED", "CREATED", "EXECUTED"] {
        assert!(!out.contains(bad), "{bad}: {}", show(&o));
    }
    assert_eq!(out, "#!/bin/sh\nhello\n", "{}", show(&o));
}

#[test]
fn provided_paths_stay_beneath_the_airlock_dir() {
    for path in ["/.airlock/program", "/usr/bin/evil", "/.airlock", "/.airlock/../etc/x", "relative"] {
        let mut spec = sh("true", &[]);
        spec.provided.push(ProvidedFile { path: path.into(), file: sealed(b"x"), executable: false });
        let err = crate::util::tier().start(spec).map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), SandboxErrorKind::InvalidSpec, "{path}: {err}");
    }
}
