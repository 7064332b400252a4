//! A container tier's private per-call directory on the host.
//!
//! A container runtime binds host paths, not descriptors, so the gVisor and
//! Docker tiers lay out what one call may touch in a directory of their own
//! under airlock's state dir (mode 0700): a private copy of each staged
//! input (0444, owned by the caller — never the staging file itself, so the
//! worker never holds an inode that airlock hashed) and one empty output
//! file the worker may write. After the container is gone, [`CallDir::export`]
//! copies the output into the host staging file only if it is still the inode
//! created here, a regular file with one link, within `max_bytes`.
#![forbid(unsafe_code)]

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::SandboxError;
use crate::outcome::OutputExport;
use crate::spec::{StagedInput, StagedOutput, WorkerSpec};

/// The host uid/gid the worker runs as in container tiers.
pub(crate) const WORKER_ID: u32 = 65534;

/// The most bytes of a call directory name (an invocation id or a random name).
const MAX_CALL_NAME: usize = 64;

/// One call's private directory.
#[derive(Debug)]
pub(crate) struct CallDir {
    path: PathBuf,
    output: Option<(u64, u64)>,
}

impl CallDir {
    /// Makes `tier_root` (0700, if missing) and a fresh directory for one call
    /// in it, named `name` (see [`call_name`]).
    pub(crate) fn create(tier_root: &Path, name: &str) -> Result<CallDir, SandboxError> {
        let setup = |what: &str, e: io::Error| SandboxError::Unavailable(format!("{what}: {e}"));
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(tier_root)
            .map_err(|e| setup(&format!("cannot make the tier directory {}", tier_root.display()), e))?;
        let meta = std::fs::symlink_metadata(tier_root)
            .map_err(|e| setup(&format!("cannot inspect {}", tier_root.display()), e))?;
        if !meta.is_dir() || meta.mode() & 0o077 != 0 || meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(SandboxError::Unavailable(format!(
                "the tier directory {} must be a directory of airlock's own user with mode 0700",
                tier_root.display()
            )));
        }
        let path = tier_root.join(name);
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| setup(&format!("cannot make the call directory {}", path.display()), e))?;
        Ok(CallDir { path, output: None })
    }

    /// The directory's host path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the bytes of input number `index` into a private read-only
    /// file here and returns its host path (the bind source).
    pub(crate) fn place_input(&self, index: usize, input: &StagedInput) -> Result<PathBuf, SandboxError> {
        let path = self.path.join(format!("in-{index}"));
        // The failing step is in the message's errno; the descriptor names the input.
        let fail = |_step: &str, e: io::Error| SandboxError::StageInput {
            virtual_path: input.virtual_path.clone(),
            fd: std::os::fd::AsRawFd::as_raw_fd(&input.file),
            errno: crate::error::OsErrno::of(&e),
        };
        let copy = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| fail("open(call input copy)", e))?;
        let size = input.file.metadata().map_err(|e| fail("fstat(staged input)", e))?.len();
        let copied = crate::mounts::copy_in_kernel(&input.file, &copy, size.saturating_add(1))
            .map_err(|e| fail("sendfile(call input copy)", e))?;
        if copied != size {
            return Err(fail("sendfile(call input copy)", io::Error::other("the staged input changed size")));
        }
        copy.set_permissions(std::fs::Permissions::from_mode(0o444)).map_err(|e| fail("fchmod", e))?;
        Ok(path)
    }

    /// Makes the one empty output file the worker (uid 65534) may write and
    /// returns its host path (the bind source). As root the file is given to
    /// 65534 with mode 0600; otherwise it is 0666 inside this 0700 directory.
    pub(crate) fn create_output(&mut self) -> Result<PathBuf, SandboxError> {
        let path = self.path.join("out");
        let fail = |call: &str, e: io::Error| SandboxError::Export {
            virtual_path: "out".into(),
            call: call.into(),
            errno: crate::error::OsErrno::of(&e),
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| fail("open(call output)", e))?;
        if rustix::process::geteuid().is_root() {
            rustix::fs::fchown(
                &file,
                Some(rustix::process::Uid::from_raw(WORKER_ID)),
                Some(rustix::process::Gid::from_raw(WORKER_ID)),
            )
            .map_err(|e| fail("fchown(call output)", e.into()))?;
        } else {
            file.set_permissions(std::fs::Permissions::from_mode(0o666)).map_err(|e| fail("fchmod", e))?;
        }
        let meta = file.metadata().map_err(|e| fail("fstat(call output)", e))?;
        self.output = Some((meta.dev(), meta.ino()));
        Ok(path)
    }

    /// Copies the worker's output into `output.file` — call only after the
    /// container and every process in it are confirmed gone. Refused (and
    /// nothing copied) unless it is still the file [`CallDir::create_output`]
    /// made, a regular file with one link; over `max_bytes` copies nothing.
    pub(crate) fn export(&self, output: &StagedOutput) -> Result<OutputExport, SandboxError> {
        let refused = |why: String| Ok(OutputExport { bytes: 0, over_limit: false, refused: Some(why) });
        let Some((dev, ino)) = self.output else {
            return refused("no output file was made for this call".into());
        };
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(self.path.join("out"))
        {
            Ok(f) => f,
            Err(e) => return refused(format!("the output file is gone or not a file: {e}")),
        };
        let fail = |call: &str, e: io::Error| SandboxError::Export {
            virtual_path: output.virtual_path.clone(),
            call: call.into(),
            errno: crate::error::OsErrno::of(&e),
        };
        let meta = file.metadata().map_err(|e| fail("fstat(call output)", e))?;
        if !meta.is_file() || (meta.dev(), meta.ino()) != (dev, ino) {
            return refused("the output was replaced by another file".into());
        }
        if meta.nlink() != 1 {
            return refused(format!("the output has {} links; a linked output is not exported", meta.nlink()));
        }
        if meta.len() > output.max_bytes {
            return Ok(OutputExport { bytes: 0, over_limit: true, refused: None });
        }
        let copied = crate::mounts::copy_in_kernel(&file, &output.file, output.max_bytes.saturating_add(1))
            .map_err(|e| fail("sendfile(host output, call output)", e))?;
        if copied > output.max_bytes {
            output.file.set_len(0).map_err(|e| fail("ftruncate(host output, 0)", e))?;
            return Ok(OutputExport { bytes: 0, over_limit: true, refused: None });
        }
        output.file.set_len(copied).map_err(|e| fail("ftruncate(host output)", e))?;
        Ok(OutputExport { bytes: copied, over_limit: false, refused: None })
    }

    /// Removes the directory and everything in it.
    pub(crate) fn remove(self) -> Result<(), SandboxError> {
        remove_call_dir(&self.path)
    }
}

/// Removes a call directory (also one a dead airlock left).
pub(crate) fn remove_call_dir(path: &Path) -> Result<(), SandboxError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SandboxError::Unavailable(format!("cannot remove the call directory {}: {e}", path.display()))),
    }
}

/// The call directories in `calls` (safe names only; none when it is missing).
pub(crate) fn list_call_dirs(calls: &Path) -> Result<Vec<String>, SandboxError> {
    let entries = match std::fs::read_dir(calls) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SandboxError::Unavailable(format!("cannot list {}: {e}", calls.display()))),
    };
    Ok(entries.flatten().filter_map(|e| e.file_name().to_str().map(String::from)).filter(|n| is_safe_name(n)).collect())
}

/// SIGKILLs every process `list` names until it names none or `grace`
/// passes; returns the pids still alive.
pub(crate) fn kill_listed(grace: std::time::Duration, list: impl Fn() -> Vec<i32>) -> Vec<i32> {
    let until = std::time::Instant::now() + grace;
    loop {
        let left = list();
        if left.is_empty() || std::time::Instant::now() >= until {
            return left;
        }
        for pid in &left {
            if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
                if let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
                    let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The name of a call's directory and container: the spec's
/// [`WorkerSpec::call_id`] when it is a safe name, else a random one.
pub(crate) fn call_name(spec: &WorkerSpec) -> String {
    match &spec.call_id {
        Some(id) if is_safe_name(id) => id.clone(),
        _ => {
            let mut bytes = [0u8; 12];
            let random = File::open("/dev/urandom").and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes));
            if random.is_err() {
                let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                bytes[..8].copy_from_slice(&(nanos.as_nanos() as u64).to_le_bytes());
                bytes[8..].copy_from_slice(&std::process::id().to_le_bytes());
            }
            format!("w-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
        }
    }
}

/// Bytes of a call name kept in front of a [`scoped_name`]'s digest.
const SCOPED_PREFIX: usize = 40;

/// A call's name where the name space is the host's, not the state
/// directory's: runsc's control sockets are abstract sockets named after
/// the container id alone, and one Docker engine serves every airlock on
/// the host. Two state directories may hold calls with the same id (a
/// caller chooses `--invocation-id`), so the name is the call name's first
/// 40 bytes, `-`, and 16 hex digits of the SHA-256 of `scope` (the tier's
/// state directory), a NUL and the whole call name: at most 57 bytes, a
/// safe name, the same for the same call of the same state directory.
pub(crate) fn scoped_name(name: &str, scope: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    digest.update(scope.as_os_str().as_encoded_bytes());
    digest.update([0]);
    digest.update(name.as_bytes());
    let hex: String = digest.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    // Safe names are ASCII: any byte is a character boundary.
    format!("{}-{hex}", &name[..name.len().min(SCOPED_PREFIX)])
}

/// Refuses what only the native tier gives a worker (the filesystem
/// socket of isolated submissions, provided helper files, a start gate): a container
/// tier binds files, it does not pass descriptors.
pub(crate) fn refuse_native_only(spec: &WorkerSpec, tier: &str) -> Result<(), SandboxError> {
    let mut missing = Vec::new();
    if spec.fs_socket.is_some() {
        missing.push("the filesystem socket (fs_socket)");
    }
    if !spec.provided.is_empty() {
        missing.push("provided files");
    }
    if spec.start_gate.is_some() {
        missing.push("a start gate (start_gate)");
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(SandboxError::InvalidSpec(format!(
        "the {tier} tier does not support {}; use the native tier for this call",
        missing.join(" or ")
    )))
}

/// ASCII letters, digits, `-` and `_`, at most 64 bytes, not empty.
pub(crate) fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CALL_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_container_tier_refuses_a_start_gate() {
        let mut spec = WorkerSpec::new(["true"]);
        assert!(refuse_native_only(&spec, "docker").is_ok());
        let (gate, _opener) = crate::gate::start_gate().unwrap();
        spec.start_gate = Some(gate);
        let refused = refuse_native_only(&spec, "docker").unwrap_err();
        assert!(matches!(&refused, SandboxError::InvalidSpec(m) if m.contains("start gate")), "{refused}");
    }

    fn staged_output(dir: &Path, max_bytes: u64) -> StagedOutput {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(dir.join("staged-out")).unwrap();
        StagedOutput { virtual_path: "out.txt".into(), file, max_bytes }
    }

    #[test]
    fn an_input_copy_is_private_and_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tier");
        let call = CallDir::create(&root, "c1").unwrap();
        std::fs::write(tmp.path().join("src"), b"hello").unwrap();
        let input = StagedInput {
            virtual_path: "a.txt".into(),
            file: File::open(tmp.path().join("src")).unwrap(),
            held: false,
        };
        let copy = call.place_input(0, &input).unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), b"hello");
        assert_eq!(std::fs::metadata(&copy).unwrap().mode() & 0o777, 0o444);
        assert_ne!(std::fs::metadata(&copy).unwrap().ino(), input.file.metadata().unwrap().ino());
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        call.remove().unwrap();
        assert!(!root.join("c1").exists());
    }

    #[test]
    fn the_output_exports_only_while_it_is_the_file_made_here() {
        let tmp = tempfile::tempdir().unwrap();
        let mut call = CallDir::create(&tmp.path().join("tier"), "c2").unwrap();
        let out = call.create_output().unwrap();
        std::fs::OpenOptions::new().write(true).open(&out).unwrap().write_all(b"result").unwrap();
        let staged = staged_output(tmp.path(), 100);
        assert_eq!(call.export(&staged).unwrap(), OutputExport { bytes: 6, over_limit: false, refused: None });
        assert_eq!(std::fs::read(tmp.path().join("staged-out")).unwrap(), b"result");

        // Over the bound: nothing copied.
        let small = StagedOutput { max_bytes: 3, ..staged_output(&tmp.path().join("tier/c2"), 3) };
        assert!(call.export(&small).unwrap().over_limit);

        // Replaced by another file, or linked: refused.
        std::fs::hard_link(&out, tmp.path().join("link")).unwrap();
        assert!(call.export(&staged).unwrap().refused.unwrap().contains("links"));
        std::fs::remove_file(&out).unwrap();
        std::fs::write(&out, b"forged").unwrap();
        assert!(call.export(&staged).unwrap().refused.unwrap().contains("replaced"));
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("link"), &out).unwrap();
        assert!(call.export(&staged).unwrap().refused.is_some());
    }

    #[test]
    fn unsafe_call_ids_get_a_random_name() {
        let mut spec = WorkerSpec::new(["true"]);
        spec.call_id = Some("../etc".into());
        let name = call_name(&spec);
        assert!(name.starts_with("w-") && is_safe_name(&name), "{name}");
        spec.call_id = Some("inv-0123_abc".into());
        assert_eq!(call_name(&spec), "inv-0123_abc");
        let scoped = scoped_name(&"a".repeat(64), Path::new("/state/one"));
        assert!(is_safe_name(&scoped) && scoped.len() == 57 && scoped.starts_with(&"a".repeat(40)), "{scoped}");
        assert_ne!(scoped, scoped_name(&"a".repeat(64), Path::new("/state/two")));
        assert_ne!(scoped, scoped_name(&"a".repeat(63), Path::new("/state/one")));
        assert_eq!(scoped, scoped_name(&"a".repeat(64), Path::new("/state/one")));
    }
}
