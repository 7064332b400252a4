//! The OCI bundle of one gVisor call, written into its [`CallDir`]: an
//! empty read-only `rootfs` (only the mount points, the image's symlinks and
//! a minimal `/etc` in it) and a `config.json` made with the `oci-spec`
//! crate that mounts exactly: `/proc`, an empty read-only `/sys`, a tmpfs
//! `/tmp`, the image directories read-only at their host paths, the host's
//! `/etc/ld.so.cache` and `/etc/alternatives` read-only, a read-only tmpfs
//! working directory, each input's private copy read-only and the output
//! file read-write at their virtual paths. runsc adds its own `/dev`
//! (null, zero, full, random, urandom, tty, ptmx, pts, shm, fuse, net/tun)
//! and nothing else.
#![forbid(unsafe_code)]

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    get_default_maskedpaths, get_default_readonly_paths, Capabilities, LinuxBuilder, LinuxCapabilitiesBuilder,
    LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, LinuxResourcesBuilder, Mount, MountBuilder,
    PosixRlimit, PosixRlimitBuilder, PosixRlimitType, ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};

use crate::call_dir::{CallDir, WORKER_ID};
use crate::error::{errno, SandboxError};
use crate::spec::WorkerSpec;

/// The OCI runtime spec version written (what Debian 12's runsc speaks).
const OCI_VERSION: &str = "1.0.2";

/// A memory cgroup for the sandbox, made by runsc.
#[derive(Clone, Debug)]
pub(crate) struct SandboxCgroup {
    /// `linux.cgroupsPath`.
    pub path: String,
    /// `memory.limit_in_bytes` / `memory.max` for the whole sandbox.
    pub memory_bytes: u64,
}

fn build_err(call: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::BuildRoot { call, errno: errno(e) }
}

fn oci_err(e: oci_spec::OciSpecError) -> SandboxError {
    SandboxError::InvalidSpec(format!("OCI spec: {e}"))
}

fn mkdir_p(path: &Path) -> Result<(), SandboxError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(build_err(format!("mkdir -p {:?} 0755", path.display())))
}

/// `rootfs` joined with an absolute in-container path.
fn inside(rootfs: &Path, path: &str) -> PathBuf {
    rootfs.join(path.trim_start_matches('/'))
}

fn mount(destination: &str, typ: &str, source: &Path, options: &[&str]) -> Result<Mount, SandboxError> {
    MountBuilder::default()
        .destination(destination)
        .typ(typ)
        .source(source)
        .options(options.iter().map(|o| o.to_string()).collect::<Vec<_>>())
        .build()
        .map_err(oci_err)
}

fn bind_ro(destination: &str, source: &Path) -> Result<Mount, SandboxError> {
    mount(destination, "bind", source, &["rbind", "ro", "nosuid", "nodev"])
}

fn rlimit(typ: PosixRlimitType, soft: u64, hard: u64) -> Result<PosixRlimit, SandboxError> {
    PosixRlimitBuilder::default().typ(typ).soft(soft).hard(hard).build().map_err(oci_err)
}

/// Lays out the rootfs, places the inputs and the output in `call`, and
/// writes `config.json`. Returns nothing: the bundle is `call.path()`.
/// With `terminal`, the tool's standard streams are a terminal runsc makes
/// (the OCI `process.terminal`; its master comes on the console socket).
pub(crate) fn write_bundle(
    call: &mut CallDir,
    spec: &WorkerSpec,
    cgroup: Option<&SandboxCgroup>,
    terminal: bool,
) -> Result<(), SandboxError> {
    let rootfs = call.path().join("rootfs");
    let mut mounts = vec![
        mount("/proc", "proc", Path::new("proc"), &["nosuid", "noexec", "nodev"])?,
        mount("/sys", "tmpfs", Path::new("tmpfs"), &["ro", "nosuid", "noexec", "nodev", "size=4096"])?,
        mount(
            "/tmp",
            "tmpfs",
            Path::new("tmpfs"),
            &["nosuid", "nodev", "mode=1777", &format!("size={}", spec.limits.scratch_bytes)],
        )?,
    ];
    for dir in ["/proc", "/sys", "/tmp", "/etc", "/dev"] {
        mkdir_p(&inside(&rootfs, dir))?;
    }

    // The image: read-only binds at the host paths; symlinks recreated.
    for m in &spec.image {
        let host = m.path.to_str().ok_or_else(|| SandboxError::InvalidSpec("image path is not UTF-8".into()))?;
        let md = std::fs::symlink_metadata(host).map_err(build_err(format!("lstat({host:?})")))?;
        let at = inside(&rootfs, host);
        if let Some(parent) = at.parent() {
            mkdir_p(parent)?;
        }
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(host).map_err(build_err(format!("readlink({host:?})")))?;
            std::os::unix::fs::symlink(&target, &at)
                .map_err(build_err(format!("symlink({target:?}, {:?})", at.display())))?;
        } else if md.is_dir() {
            mkdir_p(&at)?;
            mounts.push(bind_ro(host, &m.path)?);
        } else {
            return Err(SandboxError::InvalidSpec(format!("image path {host:?} is neither a directory nor a symlink")));
        }
    }

    // /etc: our own small files, the loader cache and alternatives read-only.
    for (name, content) in [
        ("passwd", crate::mounts::PASSWD),
        ("group", crate::mounts::GROUP),
        ("hosts", crate::mounts::HOSTS),
        ("hostname", "airlock\n"),
    ] {
        let path = inside(&rootfs, &format!("/etc/{name}"));
        std::fs::write(&path, content).map_err(build_err(format!("write({:?})", path.display())))?;
    }
    if std::fs::symlink_metadata("/etc/ld.so.cache").is_ok_and(|m| m.is_file()) {
        let path = inside(&rootfs, "/etc/ld.so.cache");
        std::fs::write(&path, b"").map_err(build_err(format!("write({:?})", path.display())))?;
        mounts.push(bind_ro("/etc/ld.so.cache", Path::new("/etc/ld.so.cache"))?);
    }
    if std::fs::symlink_metadata("/etc/alternatives").is_ok_and(|m| m.is_dir()) {
        mkdir_p(&inside(&rootfs, "/etc/alternatives"))?;
        mounts.push(bind_ro("/etc/alternatives", Path::new("/etc/alternatives"))?);
    }

    // The working directory: a read-only tmpfs holding only the call's files.
    let wd = spec.working_dir.as_str();
    mkdir_p(&inside(&rootfs, wd))?;
    mounts.push(mount(wd, "tmpfs", Path::new("tmpfs"), &["ro", "nosuid", "nodev", "mode=0755", "size=65536"])?);
    for (i, input) in spec.inputs.iter().enumerate() {
        let copy = call.place_input(i, input)?;
        mounts.push(mount(
            &format!("{wd}/{}", input.virtual_path),
            "bind",
            &copy,
            &["bind", "ro", "nosuid", "nodev", "noexec"],
        )?);
    }
    if let Some(output) = &spec.output {
        let file = call.create_output()?;
        mounts.push(mount(
            &format!("{wd}/{}", output.virtual_path),
            "bind",
            &file,
            &["bind", "rw", "nosuid", "nodev", "noexec"],
        )?);
    }

    let config = config(spec, mounts, cgroup, terminal)?;
    config.save(call.path().join("config.json")).map_err(|e| SandboxError::BuildRoot {
        call: format!("write OCI config.json: {e}"),
        errno: crate::error::OsErrno(libc::EIO),
    })
}

/// The `config.json` of a call.
fn config(
    spec: &WorkerSpec,
    mounts: Vec<Mount>,
    cgroup: Option<&SandboxCgroup>,
    terminal: bool,
) -> Result<Spec, SandboxError> {
    let none = Capabilities::new();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(none.clone())
        .effective(none.clone())
        .inheritable(none.clone())
        .permitted(none.clone())
        .ambient(none)
        .build()
        .map_err(oci_err)?;
    let limits = &spec.limits;
    let mut rlimits = vec![rlimit(PosixRlimitType::RlimitFsize, limits.file_size, limits.file_size)?];
    if let Some(n) = limits.open_files {
        rlimits.push(rlimit(PosixRlimitType::RlimitNofile, n, n)?);
    }
    if let Some(n) = limits.pids {
        rlimits.push(rlimit(PosixRlimitType::RlimitNproc, n, n)?);
    }
    if let Some(n) = limits.memory_bytes {
        rlimits.push(rlimit(PosixRlimitType::RlimitAs, n, n)?);
    }
    if let Some(n) = limits.cpu_seconds {
        rlimits.push(rlimit(PosixRlimitType::RlimitCpu, n, n.saturating_add(1))?);
    }
    let env: Vec<String> =
        crate::worker_exec::worker_env(&spec.env, false).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let process = ProcessBuilder::default()
        .terminal(terminal)
        .user(
            UserBuilder::default()
                .uid(WORKER_ID)
                .gid(WORKER_ID)
                .additional_gids(Vec::<u32>::new())
                .build()
                .map_err(oci_err)?,
        )
        .args(spec.argv.clone())
        .env(env)
        .cwd(&spec.working_dir)
        .capabilities(capabilities)
        .rlimits(rlimits)
        .no_new_privileges(true)
        .build()
        .map_err(oci_err)?;
    let namespaces = [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ]
    .into_iter()
    .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build().map_err(oci_err))
    .collect::<Result<Vec<_>, _>>()?;
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .masked_paths(get_default_maskedpaths())
        .readonly_paths(get_default_readonly_paths());
    if let Some(cg) = cgroup {
        let memory = LinuxMemoryBuilder::default().limit(cg.memory_bytes as i64).build().map_err(oci_err)?;
        linux = linux
            .cgroups_path(PathBuf::from(&cg.path))
            .resources(LinuxResourcesBuilder::default().memory(memory).build().map_err(oci_err)?);
    }
    SpecBuilder::default()
        .version(OCI_VERSION)
        .root(RootBuilder::default().path("rootfs").readonly(true).build().map_err(oci_err)?)
        .hostname("airlock")
        .process(process)
        .mounts(mounts)
        .linux(linux.build().map_err(oci_err)?)
        .build()
        .map_err(oci_err)
}
