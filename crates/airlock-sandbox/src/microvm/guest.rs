//! The guest role of the airlock binary: PID 1 of a microVM.
//!
//! The kernel starts `/airlock/airlock __airlock_guest_init` from the
//! initramfs (`rdinit=`). It mounts `/proc`, finds the virtio-serial port
//! (loading the virtio modules the build script put in
//! `/airlock/modules`) — or, started as `__airlock_guest_init vsock`
//! (Firecracker), connects to the host over AF_VSOCK (CID 2, port
//! [`frame::VSOCK_PORT`]; untested: no host here boots a Firecracker
//! guest) — then replaces `/dev` with a tmpfs holding only
//! `null`, `zero`, `random` and `urandom`. It says hello (protocol version,
//! the build ID of its own binary), receives the call, writes each input
//! (SHA-256 checked) 0444 into a tmpfs at the working directory (owned by
//! root, so the tool makes nothing beside its files), creates the one
//! output (owned by 65534) and keeps its inode, mounts a private `/tmp`,
//! remounts the root read-only, and runs the tool as 65534 with rlimits
//! (`RLIMIT_FSIZE` and the rest), no capabilities and no-new-privs. The VM
//! has no network device. When the tool exits (or at the deadline) PID 1
//! kills every other process, reaps them all, exports the output from the
//! retained inode with its SHA-256, and powers the VM off.
#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode};
use rustix::mount::{MountFlags, UnmountFlags};
use rustix::process::{Resource, Rlimit};

use super::frame::{self, FileHeader, GuestCall, GuestError, GuestOutput, GuestResult, Hello, Kind, PROTOCOL_VERSION};
use crate::outcome::ExitStatusKind;

/// The argument that makes the airlock binary the guest init.
pub const GUEST_MARKER: &str = "__airlock_guest_init";

/// Where the build script puts the kernel modules the guest loads.
const MODULES_DIR: &str = "/airlock/modules";

/// The virtio-serial port the host's VMM offers (port 1 of the first
/// virtio-serial device; the VMM names it `airlock`).
const PORT: &str = "/dev/vport0p1";

/// The worker's uid and gid.
const WORKER_ID: u32 = 65534;

/// Runs the guest init and never returns if this process is PID 1 started
/// with [`GUEST_MARKER`]; otherwise returns at once. Call first in `main`.
pub fn maybe_run_guest() {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(GUEST_MARKER)) || std::process::id() != 1 {
        return;
    }
    let vsock = args.next().as_deref() == Some(std::ffi::OsStr::new("vsock"));
    if let Err(m) = run(vsock) {
        let _ = writeln!(io::stderr(), "airlock guest: {m}");
    }
    power_off(vsock)
}

/// Powers the VM off; under Firecracker (`vsock`), which has no power-off
/// device, a reboot (`reboot=k`) ends the VMM.
fn power_off(vsock: bool) -> ! {
    rustix::fs::sync();
    let how = if vsock { rustix::system::RebootCommand::Restart } else { rustix::system::RebootCommand::PowerOff };
    let _ = rustix::system::reboot(how);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A failed step of the guest init, with the OS error where there is one.
#[derive(Debug)]
struct Fail {
    step: &'static str,
    errno: Option<i32>,
    message: String,
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.message)
    }
}

fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> Fail {
    let what = what.into();
    move |e| Fail { step: "setup", errno: e.raw_os_error(), message: format!("{what}: {e}") }
}

fn run(vsock: bool) -> Result<(), Fail> {
    mount("proc", "/proc", "proc", MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC, c"")?;
    mount("devtmpfs", "/dev", "devtmpfs", MountFlags::NOSUID | MountFlags::NOEXEC, c"")?;
    load_modules();
    let mut port = if vsock { connect_vsock()? } else { open_port()? };
    private_dev()?;
    rustix::thread::set_no_new_privs(true).map_err(|e| setup("prctl(PR_SET_NO_NEW_PRIVS)")(e.into()))?;
    let fingerprint = super::fingerprint::of_file(Path::new("/proc/self/exe"))
        .map_err(|e| setup("read the build ID of /proc/self/exe")(e))?;
    frame::write_json(&mut port, Kind::Hello, &Hello { protocol: PROTOCOL_VERSION, fingerprint })
        .map_err(setup("write(port, hello)"))?;
    let call = match serve(&mut port) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let error = GuestError { step: call.step.into(), errno: call.errno, message: call.message.clone() };
    let _ = frame::write_json(&mut port, Kind::Error, &error);
    wait_ack(&mut port);
    Err(call)
}

fn mount(source: &str, target: &str, fs: &str, flags: MountFlags, data: &CStr) -> Result<(), Fail> {
    std::fs::create_dir_all(target).map_err(setup(format!("mkdir({target:?})")))?;
    rustix::mount::mount(source, target, fs, flags, data)
        .map_err(|e| setup(format!("mount({source:?}, {target:?}, {fs:?})"))(e.into()))
}

/// Loads every module in [`MODULES_DIR`], retrying those whose symbols a
/// later one provides until no more load.
fn load_modules() {
    let mut left: Vec<PathBuf> = match std::fs::read_dir(MODULES_DIR) {
        Ok(d) => d.flatten().map(|e| e.path()).collect(),
        Err(_) => return,
    };
    left.sort();
    loop {
        let before = left.len();
        left.retain(|m| {
            let Ok(f) = File::open(m) else { return false };
            match rustix::system::finit_module(&f, c"", 0) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => false,
                Err(_) => true,
            }
        });
        if left.is_empty() || left.len() == before {
            return;
        }
    }
}

fn open_port() -> Result<File, Fail> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(PORT) {
            Ok(f) => return Ok(f),
            // The node may appear before its port is registered (ENXIO).
            Err(e) if Instant::now() < until && matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(setup(format!("open({PORT:?})"))(e)),
        }
    }
}

/// Connects to the host's port [`frame::VSOCK_PORT`] (CID 2), retrying
/// while the vsock transport comes up.
fn connect_vsock() -> Result<File, Fail> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match crate::sys::vsock_connect(libc::VMADDR_CID_HOST, frame::VSOCK_PORT) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(setup(format!("connect(AF_VSOCK, 2:{})", frame::VSOCK_PORT))(e)),
        }
    }
}

/// Replaces the devtmpfs with a tmpfs holding only the four harmless devices.
fn private_dev() -> Result<(), Fail> {
    rustix::mount::unmount("/dev", UnmountFlags::DETACH).map_err(|e| setup("umount2(/dev)")(e.into()))?;
    rustix::mount::mount("tmpfs", "/dev", "tmpfs", MountFlags::NOSUID | MountFlags::NOEXEC, c"mode=0755,size=64k")
        .map_err(|e| setup("mount(tmpfs, /dev)")(e.into()))?;
    for (name, minor) in [("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)] {
        let path = format!("/dev/{name}");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path.as_str(),
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, minor),
        )
        .map_err(|e| setup(format!("mknod({path:?})"))(e.into()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .map_err(setup(format!("chmod({path:?})")))?;
    }
    Ok(())
}

/// Receives and runs the call, exports, says `End`, and waits for the host.
fn serve(port: &mut File) -> Result<(), Fail> {
    let bad = |e: frame::FrameError| Fail { step: "setup", errno: None, message: e.to_string() };
    let (kind, payload) = frame::read_frame(port).map_err(bad)?;
    if kind != Kind::Call {
        return Err(bad(frame::FrameError::Bad(format!("expected a call, got a {kind:?} frame"))));
    }
    let call: GuestCall = frame::parse(kind, &payload).map_err(bad)?;
    let output = prepare(port, &call)?;
    let ran = run_tool(port, &call)?;
    let export = match (&call.output, output) {
        (Some((path, max)), Some(kept)) if !ran.timed_out && ran.cleanup_confirmed => {
            Some(export(&call.working_dir, path, *max, kept))
        }
        (Some(_), _) if ran.timed_out => Some((GuestOutput::Refused("the worker timed out".into()), None)),
        (Some(_), _) => Some((GuestOutput::Refused("the guest could not confirm every process gone".into()), None)),
        (None, _) => None,
    };
    let result = GuestResult {
        exit: ran.exit,
        timed_out: ran.timed_out,
        cleanup_confirmed: ran.cleanup_confirmed,
        stdout_total: ran.stdout_total,
        stderr_total: ran.stderr_total,
        output: export.as_ref().map(|(o, _)| o.clone()),
    };
    frame::write_json(port, Kind::Result, &result).map_err(setup("write(port, result)"))?;
    if let Some((GuestOutput::Exported(header), Some(mut file))) = export {
        file.rewind().map_err(setup("lseek(output)"))?;
        let sent = frame::send_file(port, &mut file, header.size).map_err(setup("write(port, output)"))?;
        if sent != header.sha256 {
            return Err(Fail { step: "setup", errno: None, message: "the output changed while it was sent".into() });
        }
    }
    frame::write_frame(port, Kind::End, &[]).map_err(setup("write(port, end)"))?;
    wait_ack(port);
    Ok(())
}

/// Waits (briefly) for the host's acknowledgement, so that the last frames
/// leave the VM before it powers off.
fn wait_ack(port: &mut File) {
    let mut fds = [rustix::event::PollFd::new(&*port, rustix::event::PollFlags::IN)];
    let two_seconds = rustix::time::Timespec { tv_sec: 2, tv_nsec: 0 };
    let _ = rustix::event::poll(&mut fds, Some(&two_seconds));
}

/// Mounts the working directory's tmpfs, writes the inputs (hash-checked,
/// 0444, root's), creates the output (65534's) and `/tmp`, and makes the
/// root read-only. Returns the output's retained descriptor.
fn prepare(port: &mut File, call: &GuestCall) -> Result<Option<File>, Fail> {
    let invalid = |m: String| Fail { step: "setup", errno: None, message: m };
    crate::spec::check_absolute_dir(&call.working_dir, "working_dir").map_err(|e| invalid(e.to_string()))?;
    for f in call.inputs.iter().map(|i| i.path.as_str()).chain(call.output.iter().map(|(p, _)| p.as_str())) {
        crate::spec::check_virtual_path(f).map_err(|e| invalid(e.to_string()))?;
    }
    let files: u64 = call.inputs.iter().map(|i| i.size).sum::<u64>() + call.output.as_ref().map_or(0, |(_, m)| *m);
    let size = format!("mode=0755,size={}", files.saturating_add(1 << 20));
    let size = std::ffi::CString::new(size).map_err(|e| invalid(e.to_string()))?;
    mount("tmpfs", &call.working_dir, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, &size)?;
    let wd = Path::new(&call.working_dir);
    for input in &call.inputs {
        let path = wd.join(&input.path);
        make_parent(&path)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(setup(format!("open({path:?})")))?;
        frame::recv_file(port, &mut file, input, u64::MAX).map_err(|e| invalid(e.to_string()))?;
    }
    let output = match &call.output {
        None => None,
        Some((p, _)) => {
            let path = wd.join(p);
            make_parent(&path)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .map_err(setup(format!("open({path:?})")))?;
            let id = rustix::process::Uid::from_raw(WORKER_ID);
            rustix::fs::fchown(&file, Some(id), Some(rustix::process::Gid::from_raw(WORKER_ID)))
                .map_err(|e| setup("fchown(output)")(e.into()))?;
            Some(file)
        }
    };
    let tmp = std::ffi::CString::new(format!("mode=1777,size={}", call.limits.scratch_bytes.max(4096)))
        .map_err(|e| invalid(e.to_string()))?;
    mount("tmpfs", "/tmp", "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, &tmp)?;
    rustix::mount::mount_remount("/", MountFlags::RDONLY, c"")
        .map_err(|e| setup("mount(/, MS_REMOUNT|MS_RDONLY)")(e.into()))?;
    Ok(output)
}

fn make_parent(path: &Path) -> Result<(), Fail> {
    match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir).map_err(setup(format!("mkdir({dir:?})"))),
        None => Ok(()),
    }
}

/// How the tool's run went.
struct Ran {
    exit: ExitStatusKind,
    timed_out: bool,
    cleanup_confirmed: bool,
    stdout_total: u64,
    stderr_total: u64,
}

enum Event {
    Chunk(Kind, Vec<u8>),
    Eof,
    Exited(std::process::ExitStatus),
}

/// The rlimits the tool gets (and PID 1 only while it spawns it).
fn tool_rlimits(call: &GuestCall) -> Vec<(Resource, Option<u64>, Option<u64>)> {
    let l = &call.limits;
    vec![
        (Resource::Fsize, Some(l.file_size), Some(l.file_size)),
        (Resource::As, l.memory_bytes, l.memory_bytes),
        (Resource::Nproc, l.pids, l.pids),
        (Resource::Nofile, l.open_files, l.open_files),
        (Resource::Cpu, l.cpu_seconds, l.cpu_seconds.map(|c| c + 1)),
    ]
}

fn set_rlimits(limits: &[(Resource, Option<u64>, Option<u64>)]) -> Result<(), Fail> {
    for (res, cur, max) in limits {
        rustix::process::setrlimit(*res, Rlimit { current: *cur, maximum: *max })
            .map_err(|e| setup(format!("setrlimit({res:?})"))(e.into()))?;
    }
    Ok(())
}

/// A pseudo-terminal of a private devpts instance: (master, slave).
fn open_terminal() -> Result<(File, File), Fail> {
    mount(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0600,mode=0600",
    )?;
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC;
    let master =
        rustix::fs::open("/dev/pts/ptmx", flags, Mode::empty()).map_err(|e| setup("open(/dev/pts/ptmx)")(e.into()))?;
    rustix::pty::unlockpt(&master).map_err(|e| setup("unlockpt(master)")(e.into()))?;
    let name = rustix::pty::ptsname(&master, Vec::new()).map_err(|e| setup("ptsname(master)")(e.into()))?;
    let slave = rustix::fs::open(name.as_c_str(), flags, Mode::empty())
        .map_err(|e| setup(format!("open({name:?})"))(e.into()))?;
    Ok((File::from(master), File::from(slave)))
}

/// Copies the host's [`Kind::Stdin`] chunks to the terminal `master` until
/// [`Kind::Hangup`] (then `SIGHUP` to the tool's process group `tool`) or
/// the port ends.
fn type_into(mut port: File, mut master: File, tool: u32) {
    while let Ok((kind, payload)) = frame::read_frame(&mut port) {
        match kind {
            Kind::Stdin => {
                if master.write_all(&payload).is_err() {
                    return;
                }
            }
            Kind::Hangup => {
                if let Some(pgid) = rustix::process::Pid::from_raw(tool as i32) {
                    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::HUP);
                }
                return;
            }
            _ => return,
        }
    }
}

/// Runs the tool, forwards its stdout/stderr (or its terminal), kills and
/// reaps everything.
fn run_tool(port: &mut File, call: &GuestCall) -> Result<Ran, Fail> {
    let limits = tool_rlimits(call);
    let terminal = if call.tty { Some(open_terminal()?) } else { None };
    let mut cmd = Command::new(&call.argv[0]);
    cmd.args(&call.argv[1..])
        .env_clear()
        .envs(call.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&call.working_dir)
        .uid(WORKER_ID)
        .gid(WORKER_ID);
    match &terminal {
        // Its own process group, so a hangup reaches what it started too.
        Some((_, slave)) => {
            let end = || slave.try_clone().map(Stdio::from).map_err(setup("dup(pty slave)"));
            cmd.stdin(end()?).stdout(end()?).stderr(end()?).process_group(0);
        }
        None => {
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let own: Vec<_> = limits
        .iter()
        .map(|(r, _, _)| {
            let l = rustix::process::getrlimit(*r);
            (*r, l.current, l.maximum)
        })
        .collect();
    set_rlimits(&limits)?;
    let spawned = cmd.spawn();
    // The command keeps its copies of a terminal's slave: closed now, so the
    // master reads end-of-file once the tool's side is gone.
    drop(cmd);
    // PID 1 keeps none of the tool's limits (it reads the output, hashes, sends).
    set_rlimits(&own)?;
    let mut child = spawned.map_err(|e| Fail {
        step: "exec",
        errno: e.raw_os_error(),
        message: format!("execve({:?}): {e}", call.argv[0]),
    })?;
    let started = Instant::now();
    let (tx, rx) = mpsc::channel();
    // The terminal's output is the tool's stdout; PID 1 keeps no slave, so
    // the master reads end-of-file (EIO) once the tool's side is gone.
    let mut streams: Vec<(Kind, Option<Box<dyn Read + Send>>)> = match terminal {
        Some((master, slave)) => {
            drop(slave);
            let typing = (port.try_clone(), master.try_clone());
            if let (Ok(port), Ok(typed)) = typing {
                let tool = child.id();
                std::thread::spawn(move || type_into(port, typed, tool));
            }
            vec![(Kind::Stdout, Some(Box::new(master)))]
        }
        None => vec![
            (Kind::Stdout, child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
            (Kind::Stderr, child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
        ],
    };
    let expected_eofs = streams.len();
    for (kind, pipe) in streams.drain(..) {
        let (tx, Some(mut pipe)) = (tx.clone(), pipe) else { continue };
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(Event::Chunk(kind, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(Event::Eof);
        });
    }
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send(Event::Exited(status));
            }
        });
    }
    drop(tx);
    let deadline = started + Duration::from_millis(call.timeout_ms);
    let (mut out_total, mut err_total) = (0u64, 0u64);
    let (mut eofs, mut exit, mut timed_out, mut killed) = (0, None, false, false);
    while eofs < expected_eofs || exit.is_none() {
        let wait = if killed { Duration::from_secs(5) } else { deadline.saturating_duration_since(Instant::now()) };
        match rx.recv_timeout(wait) {
            Ok(Event::Chunk(kind, bytes)) => {
                let (total, limit) = match kind {
                    Kind::Stdout => (&mut out_total, call.stdout_limit),
                    _ => (&mut err_total, call.stderr_limit),
                };
                let room = (limit + 1).saturating_sub(*total);
                let take = &bytes[..usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len())];
                *total += bytes.len() as u64;
                if !take.is_empty() {
                    frame::write_frame(port, kind, take).map_err(setup("write(port, stream)"))?;
                }
            }
            Ok(Event::Eof) => eofs += 1,
            Ok(Event::Exited(status)) => {
                exit = Some(status);
                if !killed {
                    // The tool is done: nothing it left behind runs on.
                    let _ = crate::sys::kill_all_but_self();
                    killed = true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !killed => {
                let _ = crate::sys::kill_all_but_self();
                killed = true;
                timed_out = true;
            }
            Err(_) => break,
        }
    }
    let cleanup_confirmed = reap_all() && eofs == expected_eofs && exit.is_some();
    let exit = match exit {
        Some(s) if timed_out => ExitStatusKind::Signaled(s.signal().unwrap_or(libc::SIGKILL)),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitStatusKind::Exited(c),
            (None, Some(sig)) => ExitStatusKind::Signaled(sig),
            _ => ExitStatusKind::Signaled(libc::SIGKILL),
        },
        None => ExitStatusKind::Signaled(libc::SIGKILL),
    };
    Ok(Ran { exit, timed_out, cleanup_confirmed, stdout_total: out_total, stderr_total: err_total })
}

/// Kills and reaps every process but this one; `true` once none is left.
fn reap_all() -> bool {
    let _ = crate::sys::kill_all_but_self();
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some(_)) => continue,
            Ok(None) => continue,
            Err(rustix::io::Errno::CHILD) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// Judges the retained output: still the inode made for it, one link,
/// within `max` bytes. Returns the answer and, when exported, the file.
fn export(working_dir: &str, path: &str, max: u64, mut kept: File) -> (GuestOutput, Option<File>) {
    let refused = |why: String| (GuestOutput::Refused(why), None);
    let Ok(meta) = kept.metadata() else { return refused("cannot stat the output".into()) };
    match std::fs::symlink_metadata(Path::new(working_dir).join(path)) {
        Ok(m) if m.is_file() && (m.dev(), m.ino()) == (meta.dev(), meta.ino()) => {}
        _ => return refused("the output was replaced by another file".into()),
    }
    if meta.nlink() != 1 {
        return refused(format!("the output has {} links; a linked output is not exported", meta.nlink()));
    }
    if meta.len() > max {
        return (GuestOutput::OverLimit, None);
    }
    let mut hash = sha2::Sha256::default();
    let mut buf = vec![0u8; frame::CHUNK];
    let mut size = 0u64;
    loop {
        match kept.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                sha2::Digest::update(&mut hash, &buf[..n]);
                size += n as u64;
            }
            Err(e) => return refused(format!("cannot read the output: {e}")),
        }
    }
    if size > max {
        return (GuestOutput::OverLimit, None);
    }
    let sha256 = hex::encode(sha2::Digest::finalize(hash));
    (GuestOutput::Exported(FileHeader { path: path.to_owned(), size, sha256 }), Some(kept))
}
