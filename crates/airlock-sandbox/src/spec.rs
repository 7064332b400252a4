//! What a worker is started with: the command, its staged files, its image
//! and its limits; and the checks every tier runs on it before anything
//! starts.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// Directories the sandbox builds itself; an image or the working directory
/// may not be placed on or under them.
const RESERVED_DIRS: &[&str] = &["/proc", "/dev", "/tmp", "/etc", "/.airlock"];

/// Where a program bound with [`NativeTier::bind_program`](crate::NativeTier::bind_program)
/// appears inside the worker: read-only, executable, nothing else beside it.
pub const PROGRAM_PATH: &str = "/.airlock/program";

/// The directory under which [`ProvidedFile`]s live inside the worker.
pub const PROVIDED_DIR: &str = "/.airlock";

/// The descriptor number at which the tool finds [`WorkerSpec::fs_socket`].
pub const FS_SOCKET_FD: i32 = 3;

/// The environment variable that names [`FS_SOCKET_FD`] to the tool.
pub const FS_SOCKET_ENV: &str = "AIRLOCK_FS_FD";

/// The most [`ProvidedFile`]s a worker may be given.
pub const MAX_PROVIDED_FILES: usize = 64;

/// Upper bound on a virtual path or working directory, in bytes.
const MAX_PATH_BYTES: usize = 4096;

/// Everything a tier needs to run one tool once.
#[derive(Debug)]
pub struct WorkerSpec {
    /// The command; `argv[0]` is looked up in the worker's `PATH` unless it
    /// contains a `/`.
    pub argv: Vec<String>,
    /// The worker's environment is exactly this, plus `PATH`, `HOME` and
    /// `LANG` defaults (`/usr/local/bin:/usr/bin:/bin`, `/tmp`, `C.UTF-8`)
    /// where not given, and [`FS_SOCKET_ENV`]`=3` with an
    /// [`fs_socket`](WorkerSpec::fs_socket) (replacing any given value).
    pub env: Vec<(String, String)>,
    /// Where the worker starts and where virtual paths live, absolute
    /// (e.g. `/workspace`).
    pub working_dir: String,
    /// Read-only inputs.
    pub inputs: Vec<StagedInput>,
    /// The single writable output, if any.
    pub output: Option<StagedOutput>,
    /// Host directories shown read-only at the same path inside.
    pub image: Vec<ImageMount>,
    /// Resource limits.
    pub limits: WorkerLimits,
    /// Wall-clock budget from start to the end of cleanup.
    pub timeout: Duration,
    /// Bytes of stdout kept; the rest is drained and counted.
    pub stdout_limit: usize,
    /// Where the kept stdout goes instead of memory: the parent writes the
    /// first `stdout_limit` bytes into this file as it drains the pipe, so
    /// a large stdout costs no memory ([`crate::WorkerOutcome::stdout`]
    /// then holds only its last [`STDOUT_TAIL`] bytes). Never seen by the
    /// worker.
    pub stdout_sink: Option<std::fs::File>,
    /// Bytes of stderr kept; the rest is drained and counted.
    pub stderr_limit: usize,
    /// One end of a connected socket (e.g. from
    /// `socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC)`) that the tool gets as
    /// descriptor [`FS_SOCKET_FD`], named by the environment variable
    /// [`FS_SOCKET_ENV`]. Only the worker process (and what it starts) holds
    /// it: the init and PID 1 close their copies once the worker is forked.
    pub fs_socket: Option<OwnedFd>,
    /// The worker executes its tool only once the caller opens this gate
    /// ([`crate::start_gate`]), after the sandbox is built and the worker
    /// confined; closed unopened, the worker exits without executing
    /// anything. The time from start to the gate's opening counts against
    /// [`timeout`](WorkerSpec::timeout). Native tier only (the container
    /// tiers refuse it).
    pub start_gate: Option<crate::gate::StartGate>,
    /// Files copied into the sandbox under [`PROVIDED_DIR`], read-only.
    pub provided: Vec<ProvidedFile>,
    /// The call this worker serves (the invocation id): container tiers name
    /// and label their container and call directory with it, so that what a
    /// dead airlock left can be found and reaped. `None` (or a name that is
    /// not ASCII letters, digits, `-`, `_`, at most 64 bytes): a random name.
    pub call_id: Option<String>,
}

/// Bytes of stdout kept in memory, as a tail, when it goes to a
/// [`WorkerSpec::stdout_sink`].
pub const STDOUT_TAIL: usize = 4096;

impl WorkerSpec {
    /// A spec for `argv` with the defaults: working directory `/workspace`,
    /// no files, [`ImageMount::default_image`], [`WorkerLimits::default`],
    /// a 60 s timeout and 1 MiB stdout/stderr bounds.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        WorkerSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            working_dir: "/workspace".to_string(),
            inputs: Vec::new(),
            output: None,
            image: ImageMount::default_image(),
            limits: WorkerLimits::default(),
            timeout: Duration::from_secs(60),
            stdout_limit: 1 << 20,
            stdout_sink: None,
            stderr_limit: 1 << 20,
            fs_socket: None,
            start_gate: None,
            provided: Vec::new(),
            call_id: None,
        }
    }
}

/// A file the sandbox provides to the tool (a helper program or a library),
/// not one of the call's inputs: its bytes are copied into the sandbox's own
/// tmpfs at `path` and made read-only (a read-only bind onto itself and a
/// Landlock rule). Its directory may be listed.
#[derive(Debug)]
pub struct ProvidedFile {
    /// Absolute path inside the worker, strictly beneath [`PROVIDED_DIR`]
    /// (e.g. `/.airlock/bin/airlock-fs`), not at or beneath [`PROGRAM_PATH`].
    pub path: String,
    /// An open readable descriptor of the bytes, read from offset 0 to its
    /// end (a sealed memfd will do: it is copied, never bound).
    pub file: std::fs::File,
    /// Mode 0555 and executable by the tool (Landlock read + execute), else
    /// mode 0444, on a `noexec` bind, readable only.
    pub executable: bool,
}

/// One read-only input: the worker sees the file's bytes at
/// `working_dir/virtual_path`: a copy on its tmpfs, or, over 8 MiB and
/// where the file has a name, the native tier mounts this very inode there,
/// read-only (for a root caller it first adds read for "other": the file
/// must be private to the caller, in a directory nobody else can reach),
/// unless it is `held`.
#[derive(Debug)]
pub struct StagedInput {
    /// Relative to the working directory, already validated (e.g. `data/in.txt`).
    pub virtual_path: String,
    /// An open read-only descriptor of the private staged copy, or of a
    /// held host file; read from offset 0 to its end.
    pub file: std::fs::File,
    /// `file` is a host file held by a [`crate::HeldInput`], not a staged
    /// copy: it is placed as it stands (its mode is never changed).
    pub held: bool,
}

/// The single output: an empty file the worker may write; after the worker
/// and all its descendants are gone, its bytes are copied into `file`. With
/// a `max_bytes` over 8 MiB, where `file` has a name, the native tier
/// mounts `file` itself for the worker to write instead (for a root caller
/// after lending it to the worker's id, taken back after the run; `file`
/// must be private to the caller), and removes its `user.*` and ACL
/// attributes after the run.
#[derive(Debug)]
pub struct StagedOutput {
    /// Relative to the working directory, already validated.
    pub virtual_path: String,
    /// An open read-write descriptor of the private host staging file, empty.
    pub file: std::fs::File,
    /// More than this many bytes → nothing is exported and the outcome says `over_limit`.
    pub max_bytes: u64,
}

/// A host directory shown read-only at the same path inside the worker.
///
/// If the host path is a symbolic link (`/bin -> usr/bin` on usrmerge
/// systems) the link itself is recreated inside; nothing is followed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageMount {
    /// Absolute host path, also the path inside.
    pub path: PathBuf,
}

impl ImageMount {
    /// An image entry for `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ImageMount { path: path.into() }
    }

    /// `/usr`, `/bin`, `/lib`, `/lib64`, `/lib32`, `/sbin`: those that exist on this host.
    pub fn default_image() -> Vec<ImageMount> {
        ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"]
            .iter()
            .filter(|p| Path::new(p).symlink_metadata().is_ok())
            .map(|p| ImageMount::new(*p))
            .collect()
    }
}

/// Resource limits for the worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerLimits {
    /// `RLIMIT_FSIZE`: no file the worker writes may grow past this.
    pub file_size: u64,
    /// Memory: `RLIMIT_AS`, and cgroup `memory.max` where delegated (there
    /// plus the bytes of the call's files on the worker's tmpfs, which the
    /// cgroup is charged for).
    pub memory_bytes: Option<u64>,
    /// Processes: cgroup `pids.max` where delegated, and `RLIMIT_NPROC`.
    pub pids: Option<u64>,
    /// `RLIMIT_CPU` in seconds (soft; the hard limit is one more).
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// Size of the private `/tmp` tmpfs.
    pub scratch_bytes: u64,
}

impl Default for WorkerLimits {
    /// 8 MiB files, 1 GiB memory, 128 processes, no CPU limit, 256 open
    /// files, 64 MiB scratch.
    fn default() -> Self {
        WorkerLimits {
            file_size: 8 << 20,
            memory_bytes: Some(1 << 30),
            pids: Some(128),
            cpu_seconds: None,
            open_files: Some(256),
            scratch_bytes: 64 << 20,
        }
    }
}

/// Checks a relative virtual path: non-empty normal components only, no NUL,
/// bounded length.
pub(crate) fn check_virtual_path(p: &str) -> Result<(), SandboxError> {
    let bad = |why: &str| Err(SandboxError::InvalidSpec(format!("virtual path {p:?}: {why}")));
    if p.is_empty() || p.len() > MAX_PATH_BYTES {
        return bad("empty or too long");
    }
    if p.contains('\0') {
        return bad("contains NUL");
    }
    if p.starts_with('/') {
        return bad("absolute");
    }
    for c in p.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return bad("has an empty, `.` or `..` component");
        }
        if c.len() > 255 {
            return bad("component over 255 bytes");
        }
    }
    Ok(())
}

/// Checks an absolute directory path: normal components only, not `/`.
pub(crate) fn check_absolute_dir(p: &str, what: &str) -> Result<(), SandboxError> {
    let Some(rest) = p.strip_prefix('/') else {
        return Err(SandboxError::InvalidSpec(format!("{what} {p:?} is not absolute")));
    };
    if rest.is_empty() {
        return Err(SandboxError::InvalidSpec(format!("{what} may not be `/`")));
    }
    check_virtual_path(rest).map_err(|_| SandboxError::InvalidSpec(format!("{what} {p:?} is not a normal path")))
}

/// Checks the paths of provided files: absolute, normal, strictly beneath
/// [`PROVIDED_DIR`], clear of [`PROGRAM_PATH`] and of each other.
pub(crate) fn check_provided_paths(paths: &[&str]) -> Result<(), SandboxError> {
    let invalid = |m: String| Err(SandboxError::InvalidSpec(m));
    if paths.len() > MAX_PROVIDED_FILES {
        return invalid(format!("{} provided files (at most {MAX_PROVIDED_FILES})", paths.len()));
    }
    for p in paths {
        check_absolute_dir(p, "provided file")?;
        if *p == PROVIDED_DIR || !is_within(p, PROVIDED_DIR) {
            return invalid(format!("provided file {p:?} is not beneath {PROVIDED_DIR}"));
        }
        if is_within(p, PROGRAM_PATH) || is_within(PROGRAM_PATH, p) {
            return invalid(format!("provided file {p:?} collides with {PROGRAM_PATH}"));
        }
    }
    for (i, a) in paths.iter().enumerate() {
        for b in &paths[i + 1..] {
            if is_within(a, b) || is_within(b, a) {
                return invalid(format!("provided files {a:?} and {b:?} collide"));
            }
        }
    }
    Ok(())
}

/// Does `path` equal `dir` or lie beneath it (by component)?
pub(crate) fn is_within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The checks every tier runs on a spec's shape (not on host files).
pub(crate) struct SpecShape<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub working_dir: &'a str,
    pub image: Vec<&'a str>,
    pub files: Vec<&'a str>,
    pub provided: Vec<&'a str>,
    pub file_size: u64,
}

impl SpecShape<'_> {
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        let invalid = |m: String| Err(SandboxError::InvalidSpec(m));
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return invalid("argv is empty".into());
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return invalid("an argv element contains NUL".into());
        }
        for (k, v) in self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return invalid(format!("bad environment variable name or value: {k:?}"));
            }
        }
        if self.file_size == 0 {
            return invalid("limits.file_size must be at least 1".into());
        }
        check_absolute_dir(self.working_dir, "working_dir")?;
        for r in RESERVED_DIRS {
            if is_within(self.working_dir, r) || is_within(r, self.working_dir) {
                return invalid(format!("working_dir {:?} overlaps {r}, which the sandbox builds", self.working_dir));
            }
        }
        for img in &self.image {
            check_absolute_dir(img, "image path")?;
            for r in RESERVED_DIRS {
                if is_within(img, r) || is_within(r, img) {
                    return invalid(format!("image path {img:?} overlaps {r}, which the sandbox builds"));
                }
            }
            if is_within(self.working_dir, img) || is_within(img, self.working_dir) {
                return invalid(format!("image path {img:?} overlaps working_dir"));
            }
        }
        for (i, a) in self.image.iter().enumerate() {
            for b in &self.image[i + 1..] {
                if is_within(a, b) || is_within(b, a) {
                    return invalid(format!("image paths {a:?} and {b:?} overlap"));
                }
            }
        }
        for f in &self.files {
            check_virtual_path(f)?;
        }
        for (i, a) in self.files.iter().enumerate() {
            for b in &self.files[i + 1..] {
                if is_within(a, b) || is_within(b, a) {
                    return invalid(format!("staged paths {a:?} and {b:?} collide"));
                }
            }
        }
        check_provided_paths(&self.provided)
    }
}

impl WorkerSpec {
    /// Checks the spec's shape: a non-empty argv without NUL bytes, valid
    /// environment names, an absolute normal working directory and image
    /// paths that do not overlap each other or the directories the sandbox
    /// builds (`/proc`, `/dev`, `/tmp`, `/etc`, `/.airlock`), relative
    /// normal virtual paths that do not collide, and provided files strictly
    /// beneath `/.airlock` that collide neither with each other nor with
    /// [`PROGRAM_PATH`].
    pub fn validate(&self) -> Result<(), SandboxError> {
        let image: Vec<&str> = self
            .image
            .iter()
            .map(|m| {
                m.path
                    .to_str()
                    .ok_or_else(|| SandboxError::InvalidSpec(format!("image path {:?} is not UTF-8", m.path)))
            })
            .collect::<Result<_, _>>()?;
        let mut files: Vec<&str> = self.inputs.iter().map(|i| i.virtual_path.as_str()).collect();
        if let Some(o) = &self.output {
            files.push(&o.virtual_path);
        }
        SpecShape {
            argv: &self.argv,
            env: &self.env,
            working_dir: &self.working_dir,
            image,
            files,
            provided: self.provided.iter().map(|p| p.path.as_str()).collect(),
            file_size: self.limits.file_size,
        }
        .check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape<'a>(wd: &'a str, image: Vec<&'a str>, files: Vec<&'a str>, argv: &'a [String]) -> SpecShape<'a> {
        SpecShape { argv, env: &[], working_dir: wd, image, files, provided: Vec::new(), file_size: 1 }
    }

    #[test]
    fn virtual_paths_are_normal_and_relative() {
        for ok in ["a", "data/in.txt", "a/b/c"] {
            check_virtual_path(ok).unwrap();
        }
        for bad in ["", "/etc/passwd", "a//b", "./x", "data/../x", "..", "a/", "a\0b"] {
            assert!(check_virtual_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn containment_is_by_component() {
        assert!(is_within("/usr/lib", "/usr"));
        assert!(is_within("/usr", "/usr"));
        assert!(!is_within("/usrx", "/usr"));
        assert!(!is_within("/us", "/usr"));
    }

    #[test]
    fn shape_rejects_collisions_and_reserved_dirs() {
        let argv = vec!["true".to_string()];
        shape("/workspace", vec!["/usr"], vec!["a", "b/c"], &argv).check().unwrap();
        assert!(shape("/tmp/w", vec![], vec![], &argv).check().is_err());
        assert!(shape("/", vec![], vec![], &argv).check().is_err());
        assert!(shape("/workspace", vec!["/etc"], vec![], &argv).check().is_err());
        assert!(shape("/workspace", vec!["/usr", "/usr/lib"], vec![], &argv).check().is_err());
        assert!(shape("/workspace", vec!["/workspace/x"], vec![], &argv).check().is_err());
        assert!(shape("/workspace", vec![], vec!["a", "a/b"], &argv).check().is_err());
        assert!(shape("/workspace", vec![], vec!["a", "a"], &argv).check().is_err());
        assert!(shape("/workspace", vec![], vec![], &[]).check().is_err());
    }

    #[test]
    fn provided_files_live_strictly_beneath_the_airlock_dir() {
        check_provided_paths(&["/.airlock/bin/airlock-fs", "/.airlock/python/airlock_fs.py", "/.airlock/x"]).unwrap();
        for bad in [
            "/.airlock",
            "/.airlock/",
            "/.airlockx/a",
            "/etc/a",
            "relative/a",
            "/.airlock/../etc/passwd",
            "/.airlock/./a",
            "/.airlock//a",
            "/.airlock/program",
            "/.airlock/program/x",
            "/.airlock/a\0b",
        ] {
            assert!(check_provided_paths(&[bad]).is_err(), "{bad:?} accepted");
        }
        assert!(check_provided_paths(&["/.airlock/bin", "/.airlock/bin/a"]).is_err());
        assert!(check_provided_paths(&["/.airlock/a", "/.airlock/a"]).is_err());
        let many: Vec<String> = (0..=MAX_PROVIDED_FILES).map(|i| format!("/.airlock/f{i}")).collect();
        assert!(check_provided_paths(&many.iter().map(String::as_str).collect::<Vec<_>>()).is_err());
    }
}
