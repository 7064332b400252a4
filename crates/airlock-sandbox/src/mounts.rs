//! Building the worker's root, in PID 1 of the new namespaces.
//!
//! The root is a fresh, size-bounded tmpfs. Into it go: the image
//! directories (bind-mounted read-only; symlinked image entries recreated
//! as symlinks), a minimal `/etc`, a fresh `/proc` with the host's details
//! masked ([`crate::proc_masks`]), a minimal `/dev`, a
//! private `/tmp`, the working directory holding *copies* of the inputs
//! (each then bind-mounted read-only onto itself) and the empty output, and
//! copies of the provided files under `/.airlock` (read-only binds too).
//! No host file or directory other than the image, three device nodes,
//! `/etc/ld.so.cache` and `/etc/alternatives` is ever mounted. Then
//! `pivot_root` and a detach of the old root; the root mount is made
//! read-only, so only `/tmp` and the output remain writable.
//!
//! Inputs are copied rather than bound from the caller's staging copy (a
//! departure from "bind the staged copy"): no host inode, not even a
//! private one, is mounted into the worker. The provided files of an
//! isolated submission are copies too, because their sources are sealed
//! memfds, which the kernel will not bind. With
//! [`NativeTier::worker_creates_output`](crate::NativeTier::worker_creates_output)
//! the output's parent directory gets its own recursive bind instead of an
//! output file (see the crate documentation, "Worker-created output").
#![forbid(unsafe_code)]

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use crate::error::{errno, OsErrno, SandboxError};
use crate::mount_calls::{bind, readonly_recursive, remount_bind, resize_tmpfs, tmpfs};
use crate::spec::ImageMount;
use crate::wire::InitSpec;

/// The device nodes the worker gets, bound from the host's `/dev`.
pub(crate) const DEVICES: [&str; 3] = ["null", "zero", "urandom"];

/// Where the new root's tmpfs may be mounted before `pivot_root` (any
/// directory of the private mount namespace will do; the first that no
/// bind source lies under is used).
const ROOT_MOUNTPOINTS: &[&str] = &["/mnt", "/tmp", "/run", "/var/tmp", "/media", "/srv", "/opt"];

/// Size of the `/dev` tmpfs (it holds three empty files and four links).
const DEV_TMPFS_OPTS: &str = "size=65536,nr_inodes=64,mode=0755";

/// Margin for `/etc` and the directory tree on the root tmpfs.
const ROOT_MARGIN_BYTES: u64 = 1 << 20;

pub(crate) const PASSWD: &str =
    "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\n";
pub(crate) const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";
pub(crate) const HOSTS: &str = "127.0.0.1 localhost airlock\n::1 localhost ip6-localhost\n";

/// The output file as PID 1 keeps it: an open descriptor of the inode the
/// worker writes.
pub(crate) struct RetainedOutput {
    /// Path inside the new root.
    pub path: String,
    /// Read-write descriptor of the inode at `path`; `None` when the worker
    /// creates the file itself.
    pub file: Option<File>,
    /// The inode is the host staging file itself (bound), so there is
    /// nothing to copy out; else a file on the root tmpfs.
    pub bound: bool,
}

/// The staged files PID 1 inherited for the tree: each input with its
/// detached mount (if placed that way), the output's host staging file
/// with its own.
pub(crate) struct StagedFds {
    /// The inputs, in spec order.
    pub inputs: Vec<(OwnedFd, Option<OwnedFd>)>,
    /// The output's host staging file and detached mount.
    pub output: Option<(File, Option<OwnedFd>)>,
    /// The provided files, in spec order.
    pub provided: Vec<OwnedFd>,
}

/// What [`build_root`] made.
pub(crate) struct BuiltRoot {
    /// Image entries bound as directories (for Landlock).
    pub image_dirs: Vec<String>,
    /// The retained output, when the spec has one.
    pub output: Option<RetainedOutput>,
}

fn build_err(call: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::BuildRoot { call, errno: errno(e) }
}

fn mkdir_p(path: &str) -> Result<(), SandboxError> {
    DirBuilder::new().recursive(true).mode(0o755).create(path).map_err(build_err(format!("mkdir -p {path:?} 0755")))
}

fn parent_of(path: &str) -> &str {
    Path::new(path).parent().and_then(Path::to_str).unwrap_or("/")
}

fn write_new_file(path: &str, mode: u32, content: &[u8]) -> Result<(), SandboxError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(build_err(format!("open({path:?}, O_CREAT|O_EXCL|O_WRONLY|O_NOFOLLOW, {mode:#o})")))?;
    f.write_all(content).map_err(build_err(format!("write({path:?})")))
}

/// Picks where to mount the new root: a directory of the (private) mount
/// namespace that no bind source lies under.
fn pick_mountpoint(image: &[ImageMount]) -> Result<&'static str, SandboxError> {
    let sources: Vec<String> = image
        .iter()
        .filter_map(|m| m.path.to_str().map(str::to_string))
        .chain(["/etc".to_string(), "/dev".to_string()])
        .collect();
    ROOT_MOUNTPOINTS
        .iter()
        .copied()
        .find(|m| {
            Path::new(m).symlink_metadata().map(|md| md.is_dir()).unwrap_or(false)
                && !sources.iter().any(|s| crate::spec::is_within(s, m) || crate::spec::is_within(m, s))
        })
        .ok_or_else(|| SandboxError::BuildRoot {
            call: format!("find a mount point for the new root among {ROOT_MOUNTPOINTS:?}"),
            errno: OsErrno(libc::ENOENT),
        })
}

/// The part of the worker's root that no call's files are in: a tmpfs at
/// `root` (not yet pivoted into) holding the image, `/etc`, `/dev` and
/// `/proc`. A cold start builds it and furnishes it at once; a warm
/// sandbox builds it ahead of its call ([`crate::warm`]).
pub(crate) struct Skeleton {
    /// Where the root tmpfs is mounted in PID 1's mount namespace.
    root: &'static str,
    /// Image entries bound as directories (for Landlock).
    image_dirs: Vec<String>,
}

/// Builds the skeleton of a worker's root from `image`. Runs in PID 1, in a
/// mount namespace of its own (already unshared).
pub(crate) fn build_skeleton(image: &[ImageMount]) -> Result<Skeleton, SandboxError> {
    rustix::mount::mount_change("/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
        .map_err(|e| SandboxError::MountPropagation { errno: errno(e) })?;

    let root = pick_mountpoint(image)?;
    // Sized for the skeleton alone; `furnish` sets the call's size.
    tmpfs(
        root,
        MountFlags::NOSUID | MountFlags::NODEV,
        "MS_NOSUID|MS_NODEV",
        &format!("size={ROOT_MARGIN_BYTES},mode=0755"),
    )?;
    let at = |p: &str| format!("{root}{p}");

    // Image: read-only binds of host directories; symlinks recreated.
    let mut image_dirs = Vec::new();
    for m in image {
        let host = m.path.to_str().ok_or_else(|| SandboxError::InvalidSpec("image path is not UTF-8".into()))?;
        let md = std::fs::symlink_metadata(host).map_err(build_err(format!("lstat({host:?})")))?;
        let inside = at(host);
        mkdir_p(parent_of(&inside))?;
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(host).map_err(build_err(format!("readlink({host:?})")))?;
            std::os::unix::fs::symlink(&target, &inside)
                .map_err(build_err(format!("symlink({target:?}, {inside:?})")))?;
        } else if md.is_dir() {
            mkdir_p(&inside)?;
            bind(host, &inside, true)?;
            readonly_recursive(&inside)?;
            image_dirs.push(host.to_string());
        } else {
            return Err(SandboxError::InvalidSpec(format!("image path {host:?} is neither a directory nor a symlink")));
        }
    }

    // /etc: our own small files; the loader cache and alternatives bound read-only.
    mkdir_p(&at("/etc"))?;
    write_new_file(&at("/etc/passwd"), 0o644, PASSWD.as_bytes())?;
    write_new_file(&at("/etc/group"), 0o644, GROUP.as_bytes())?;
    write_new_file(&at("/etc/hosts"), 0o644, HOSTS.as_bytes())?;
    write_new_file(&at("/etc/hostname"), 0o644, b"airlock\n")?;
    if std::fs::symlink_metadata("/etc/ld.so.cache").map(|m| m.is_file()).unwrap_or(false) {
        write_new_file(&at("/etc/ld.so.cache"), 0o644, b"")?;
        bind("/etc/ld.so.cache", &at("/etc/ld.so.cache"), false)?;
        readonly_recursive(&at("/etc/ld.so.cache"))?;
    }
    if std::fs::symlink_metadata("/etc/alternatives").map(|m| m.is_dir()).unwrap_or(false) {
        mkdir_p(&at("/etc/alternatives"))?;
        bind("/etc/alternatives", &at("/etc/alternatives"), true)?;
        readonly_recursive(&at("/etc/alternatives"))?;
    }

    // /dev: a tiny tmpfs with three host device nodes bound in.
    let dev = at("/dev");
    mkdir_p(&dev)?;
    tmpfs(&dev, MountFlags::NOSUID | MountFlags::NOEXEC, "MS_NOSUID|MS_NOEXEC", DEV_TMPFS_OPTS)?;
    for d in DEVICES {
        let target = format!("{dev}/{d}");
        write_new_file(&target, 0o666, b"")?;
        bind(&format!("/dev/{d}"), &target, false)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}"))
            .map_err(build_err(format!("symlink({target:?}, \"/dev/{link}\")")))?;
    }
    remount_bind(&dev, MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NOEXEC, "MS_RDONLY|MS_NOSUID|MS_NOEXEC")?;

    // /proc: a fresh instance for the new pid namespace.
    let proc_dir = at("/proc");
    mkdir_p(&proc_dir)?;
    rustix::mount::mount(
        "proc",
        proc_dir.as_str(),
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .map_err(|e| SandboxError::MountProc { target: proc_dir.clone(), errno: errno(e) })?;
    crate::proc_masks::apply(root, &format!("{dev}/null"))?;
    Ok(Skeleton { root, image_dirs })
}

/// Furnishes `skeleton` with one call's files (the root sized for them, a
/// private `/tmp`, the working directory with the inputs and the output,
/// the bound program, the provided files) and pivots into it.
pub(crate) fn furnish(spec: &InitSpec, skeleton: Skeleton, staged: StagedFds) -> Result<BuiltRoot, SandboxError> {
    let StagedFds { inputs: input_fds, output: host_output, provided: provided_fds } = staged;
    let Skeleton { root, image_dirs } = skeleton;
    let at = |p: &str| format!("{root}{p}");
    let size = spec.files_bytes().saturating_add(spec.limits.scratch_bytes).saturating_add(ROOT_MARGIN_BYTES);
    resize_tmpfs(root, MountFlags::NOSUID | MountFlags::NODEV, "MS_NOSUID|MS_NODEV", &format!("size={size}"))?;

    // /tmp: private scratch.
    let tmp = at("/tmp");
    mkdir_p(&tmp)?;
    tmpfs(
        &tmp,
        MountFlags::NOSUID | MountFlags::NODEV,
        "MS_NOSUID|MS_NODEV",
        &format!("size={},mode=1777", spec.limits.scratch_bytes.max(4096)),
    )?;

    // The working directory, the inputs (bound or copied, each a read-only
    // mount of its own) and the output.
    let wd = at(&spec.working_dir);
    mkdir_p(&wd)?;
    for (input, (fd, mount)) in spec.inputs.iter().zip(input_fds) {
        let path = format!("{wd}/{}", input.virtual_path);
        mkdir_p(parent_of(&path))?;
        let file = File::from(fd);
        if input.placement.copies() {
            copy_input(&path, file, input.bytes, &input.virtual_path, input.fd)?;
            bind(&path, &path, false)?;
        } else {
            write_new_file(&path, 0o444, b"")?;
            match crate::placement::bind_into(&path, &input.placement, &file, mount) {
                Ok(()) => {
                    let what = format!("fstat(input {:?})", input.virtual_path);
                    let size = file.metadata().map_err(build_err(what))?.len();
                    if size != input.bytes {
                        return Err(SandboxError::StageInput {
                            virtual_path: input.virtual_path.clone(),
                            fd: input.fd,
                            errno: OsErrno(libc::EIO),
                        });
                    }
                }
                // The file could not be mounted as placed: a held host file
                // renamed, replaced or removed on the host since (an
                // unlinked file cannot be mounted, and its old path names
                // another file or none). The descriptor is still that file,
                // whose bytes are the hashed ones: they are copied instead.
                Err(_) => {
                    let _ = rustix::mount::unmount(path.as_str(), UnmountFlags::DETACH);
                    std::fs::remove_file(&path).map_err(build_err(format!("unlink({path:?})")))?;
                    copy_input(&path, file, input.bytes, &input.virtual_path, input.fd)?;
                    bind(&path, &path, false)?;
                }
            }
        }
        remount_bind(
            &path,
            MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            "MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC",
        )?;
    }
    let mut output = None;
    if let Some(o) = spec.output.as_ref().filter(|o| o.created_by_worker) {
        // The parent directory gets its own (recursive: inputs inside it stay
        // read-only binds) mount, so it stays writable when the root is made
        // read-only; PID 1 made it as the worker's own id.
        let path = format!("{wd}/{}", o.virtual_path);
        let parent = parent_of(&path);
        mkdir_p(parent)?;
        bind(parent, parent, true)?;
        output =
            Some(RetainedOutput { path: format!("{}/{}", spec.working_dir, o.virtual_path), file: None, bound: false });
    } else if let Some((o, (host, mount))) = spec.output.as_ref().filter(|o| !o.placement.copies()).zip(host_output) {
        // The host staging file itself, writable: its own mount, so it stays
        // writable when the root is made read-only, and cannot be unlinked
        // or renamed over.
        let path = format!("{wd}/{}", o.virtual_path);
        mkdir_p(parent_of(&path))?;
        write_new_file(&path, 0o644, b"")?;
        crate::placement::bind_into(&path, &o.placement, &host, mount)?;
        remount_bind(
            &path,
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            "MS_NOSUID|MS_NODEV|MS_NOEXEC",
        )?;
        output = Some(RetainedOutput {
            path: format!("{}/{}", spec.working_dir, o.virtual_path),
            file: Some(host),
            bound: true,
        });
    } else if let Some(o) = &spec.output {
        let path = format!("{wd}/{}", o.virtual_path);
        mkdir_p(parent_of(&path))?;
        write_new_file(&path, 0o644, b"")?;
        // Its own mount, so it stays writable when the root is made read-only
        // (and cannot be unlinked or renamed over: it is a mount point). The
        // retained descriptor is opened through that mount, so it holds no
        // write reference on the root mount.
        bind(&path, &path, false)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(build_err(format!("open({path:?}, O_RDWR|O_NOFOLLOW)")))?;
        output = Some(RetainedOutput {
            path: format!("{}/{}", spec.working_dir, o.virtual_path),
            file: Some(file),
            bound: false,
        });
    }

    // The bound program. Its descriptor belongs to the caller's mount
    // namespace, which the kernel will not bind from; so it is bound by the
    // path the kernel reports for it in this (copied) namespace, and then the
    // bound inode must be the descriptor's: a path swapped meanwhile is refused.
    if let Some(fd) = spec.program_fd {
        let path = at(crate::spec::PROGRAM_PATH);
        let held = format!("/proc/self/fd/{fd}");
        let want = std::fs::metadata(&held).map_err(build_err(format!("fstat({held:?})")))?;
        let source = std::fs::read_link(&held).map_err(build_err(format!("readlink({held:?})")))?;
        let source = source.to_str().ok_or_else(|| SandboxError::InvalidSpec("program path is not UTF-8".into()))?;
        mkdir_p(parent_of(&path))?;
        write_new_file(&path, 0o555, b"")?;
        bind(source, &path, false)?;
        readonly_recursive(&path)?;
        let got = std::fs::symlink_metadata(&path).map_err(build_err(format!("lstat({path:?})")))?;
        if !got.is_file() || (got.dev(), got.ino()) != (want.dev(), want.ino()) {
            return Err(SandboxError::InvalidSpec(format!(
                "the bound program {source:?} was replaced while it was bound"
            )));
        }
    }

    // Provided files: copies (a sealed memfd cannot be bound: the kernel
    // refuses binds from internal mounts), each then bound read-only onto
    // itself; only executables stay on an exec-capable mount.
    for (p, fd) in spec.provided.iter().zip(provided_fds) {
        let path = at(&p.path);
        mkdir_p(parent_of(&path))?;
        let mode = if p.executable { 0o555 } else { 0o444 };
        copy_bytes(&path, &File::from(fd), p.bytes, mode)
            .map_err(build_err(format!("copy {} bytes from fd {} to {path:?} (provided file)", p.bytes, p.fd)))?;
        bind(&path, &path, false)?;
        if p.executable {
            remount_bind(
                &path,
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
                "MS_RDONLY|MS_NOSUID|MS_NODEV",
            )?;
        } else {
            remount_bind(
                &path,
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                "MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC",
            )?;
        }
    }

    // Into the new root; the old one is detached.
    rustix::process::chdir(root).map_err(|e| SandboxError::Chdir { path: root.into(), errno: errno(e) })?;
    rustix::process::pivot_root(".", ".")
        .map_err(|e| SandboxError::PivotRoot { new_root: root.into(), errno: errno(e) })?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).map_err(|e| SandboxError::UmountOldRoot { errno: errno(e) })?;
    rustix::process::chdir("/").map_err(|e| SandboxError::Chdir { path: "/".into(), errno: errno(e) })?;
    remount_bind("/", MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV, "MS_RDONLY|MS_NOSUID|MS_NODEV")?;
    rustix::process::chdir(spec.working_dir.as_str())
        .map_err(|e| SandboxError::Chdir { path: spec.working_dir.clone(), errno: errno(e) })?;
    Ok(BuiltRoot { image_dirs, output })
}

/// Copies exactly `bytes` bytes from offset 0 of `src` into a new file at
/// `path`, mode 0444.
fn copy_input(path: &str, src: File, bytes: u64, virtual_path: &str, fd: i32) -> Result<(), SandboxError> {
    copy_bytes(path, &src, bytes, 0o444).map_err(|e| SandboxError::StageInput {
        virtual_path: virtual_path.into(),
        fd,
        errno: errno(e),
    })
}

/// Copies exactly `bytes` bytes from offset 0 of `src` into a new file at
/// `path` with `mode`; `EIO` if `src` holds fewer or more bytes than that
/// (it changed since it was measured).
fn copy_bytes(path: &str, src: &File, bytes: u64, mode: u32) -> std::io::Result<()> {
    let dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // One byte more than expected, so growth is seen.
    let copied = copy_in_kernel(src, &dst, bytes.saturating_add(1))?;
    if copied != bytes {
        return Err(std::io::Error::from_raw_os_error(libc::EIO)); // grew or shrank
    }
    Ok(())
}

/// Copies at most `cap` bytes from offset 0 of `src` to offset 0 of `dst`
/// (new and empty), stopping at `src`'s end; returns the count. The bytes
/// move in the kernel (`sendfile`: the worker's tmpfs and the host's
/// staging are different file systems, where `copy_file_range` gives
/// `EXDEV`), falling back to `pread`/`pwrite` where the kernel refuses.
pub(crate) fn copy_in_kernel(src: &File, dst: &File, cap: u64) -> std::io::Result<u64> {
    const STEP: u64 = 8 << 20;
    rustix::fs::seek(dst, rustix::fs::SeekFrom::Start(0))?;
    let mut buf = Vec::new();
    let mut off = 0u64;
    while off < cap {
        let want = (cap - off).min(STEP) as usize;
        let n = if buf.is_empty() {
            let mut from = off;
            match rustix::fs::sendfile(dst, src, Some(&mut from), want) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                    buf = vec![0u8; 64 << 10];
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            let n = src.read_at(&mut buf[..want.min(64 << 10)], off)?;
            dst.write_all_at(&buf[..n], off)?;
            n
        };
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(off)
}

/// The output a worker created itself, opened for export: a regular file
/// with one link at `path`, reached without following a symlink.
pub(crate) fn open_created(path: &str) -> Result<File, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err("the tool did not create its output".into()),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("the output is a symlink".into()),
        Err(e) => return Err(format!("open({path:?}, O_NOFOLLOW): {e}")),
    };
    let md = file.metadata().map_err(|e| format!("fstat({path:?}): {e}"))?;
    if !md.file_type().is_file() {
        return Err("the output is not a regular file".into());
    }
    if md.nlink() != 1 {
        return Err(format!("the output has {} links", md.nlink()));
    }
    Ok(file)
}

/// Why the output at `path` may not be exported, if it may not: it must
/// still be the very inode PID 1 created (same device and inode, a regular
/// file with one link, reached without following a symlink).
pub(crate) fn verify_retained(path: &str, retained: &File) -> Result<(), String> {
    let kept = retained.metadata().map_err(|e| format!("fstat(retained output): {e}"))?;
    let fresh = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err("the output was deleted".into()),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("the output was replaced by a symlink".into()),
        Err(e) => return Err(format!("open({path:?}, O_NOFOLLOW): {e}")),
    };
    let now = fresh.metadata().map_err(|e| format!("fstat({path:?}): {e}"))?;
    if !now.file_type().is_file() {
        return Err("the output is no longer a regular file".into());
    }
    if (now.dev(), now.ino()) != (kept.dev(), kept.ino()) {
        return Err("the output was replaced by another file".into());
    }
    if kept.nlink() != 1 {
        return Err(format!("the output has {} links", kept.nlink()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, String, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out").to_str().unwrap().to_string();
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        (dir, path, file)
    }

    #[test]
    fn retained_output_is_accepted() {
        let (_d, path, file) = setup();
        verify_retained(&path, &file).unwrap();
    }

    #[test]
    fn deleted_output_is_refused() {
        let (_d, path, file) = setup();
        std::fs::remove_file(&path).unwrap();
        assert!(verify_retained(&path, &file).unwrap_err().contains("deleted"));
    }

    #[test]
    fn replaced_output_is_refused() {
        let (_d, path, file) = setup();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"evil").unwrap();
        assert!(verify_retained(&path, &file).unwrap_err().contains("replaced"));
    }

    #[test]
    fn symlinked_output_is_refused() {
        let (d, path, file) = setup();
        let other = d.path().join("other");
        std::fs::rename(&path, &other).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        assert!(verify_retained(&path, &file).unwrap_err().contains("symlink"));
    }

    #[test]
    fn hard_linked_output_is_refused() {
        let (d, path, file) = setup();
        std::fs::hard_link(&path, d.path().join("alias")).unwrap();
        assert!(verify_retained(&path, &file).unwrap_err().contains("links"));
    }
}

#[cfg(test)]
mod copy_tests {
    use super::*;

    /// A 9 MiB source (more than one kernel step) and where to copy it.
    fn source(len: usize) -> (tempfile::TempDir, Vec<u8>, File, String) {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("src"), &content).unwrap();
        let src = File::open(dir.path().join("src")).unwrap();
        let dst = dir.path().join("dst").to_str().unwrap().to_string();
        (dir, content, src, dst)
    }

    #[test]
    fn an_input_of_the_declared_size_is_copied_whole() {
        let (_d, content, src, dst) = source(9 << 20);
        copy_bytes(&dst, &src, content.len() as u64, 0o444).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), content);
    }

    #[test]
    fn an_input_that_grew_since_it_was_measured_is_refused() {
        let (_d, content, src, dst) = source(9 << 20);
        let err = copy_bytes(&dst, &src, content.len() as u64 - 1, 0o444).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn an_input_that_shrank_since_it_was_measured_is_refused() {
        let (_d, content, src, dst) = source(9 << 20);
        let err = copy_bytes(&dst, &src, content.len() as u64 + 1, 0o444).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn a_kernel_copy_stops_at_its_cap() {
        let (_d, content, src, dst) = source(100);
        let out = OpenOptions::new().read(true).write(true).create_new(true).open(&dst).unwrap();
        assert_eq!(copy_in_kernel(&src, &out, 41).unwrap(), 41);
        assert_eq!(std::fs::read(&dst).unwrap(), &content[..41]);
    }
}
