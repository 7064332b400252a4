//! Starting Firecracker for one call: its JSON configuration (built by a
//! pure function, [`config`]), the process (`--no-api --config-file`, its
//! own built-in seccomp filter left on), and the host end of its vsock.
//!
//! Firecracker's vsock device is backed by a Unix socket on the host
//! (`uds_path`). A connection the guest makes to the host (CID 2) on port
//! `P` is forwarded by Firecracker to the Unix socket `<uds_path>_P`: the
//! host listens there ([`VSOCK_LISTENER`]) before the VM starts and accepts
//! the guest's one connection within the boot deadline ([`accept`]). The VM
//! has no network interface and no drive: the kernel and the initramfs are
//! all it gets. With `[sandbox.microvm] jailer` Firecracker's jailer starts
//! it in a chroot under the call directory as uid 65534.
#![forbid(unsafe_code)]

use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};
use serde::Serialize;

use super::MicrovmSettings;
use crate::error::{errno, OsErrno, SandboxError};

/// The configuration file airlock writes into the call directory.
pub(crate) const CONFIG_FILE: &str = "firecracker.json";

/// Firecracker's own log (`--log-path`; it must exist before it starts).
pub(crate) const LOG: &str = "firecracker.log";

/// The vsock device's Unix socket (`uds_path`), relative to the call dir.
const VSOCK_UDS: &str = "vsock.sock";

/// The socket the host listens on for the guest's connection to port
/// [`VSOCK_PORT`] (`<uds_path>_<port>`).
pub(crate) const VSOCK_LISTENER: &str = "vsock.sock_1024";

/// The guest's vsock context id (2 is the host; 3 is the first guest's).
pub(crate) const GUEST_CID: u32 = 3;

/// The kernel command line: the QEMU driver's console and TSC flags, a
/// keyboard-controller reboot (Firecracker ends when the guest reboots),
/// no PCI probing, and the guest init told to use the vsock.
pub(crate) const KERNEL_CMDLINE: &str = "console=ttyS0 quiet loglevel=1 panic=-1 reboot=k pci=off \
     tsc_early_khz=2000000 no_timer_check lpj=4000000 rdinit=/airlock/airlock -- __airlock_guest_init vsock";

/// Firecracker's configuration file (the subset airlock sets).
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct VmConfig {
    #[serde(rename = "boot-source")]
    pub boot_source: BootSource,
    /// No block devices.
    pub drives: [(); 0],
    #[serde(rename = "machine-config")]
    pub machine_config: MachineConfig,
    /// No network interfaces.
    #[serde(rename = "network-interfaces")]
    pub network_interfaces: [(); 0],
    pub vsock: Vsock,
}

/// `boot-source`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct BootSource {
    pub kernel_image_path: PathBuf,
    pub initrd_path: PathBuf,
    pub boot_args: String,
}

/// `machine-config`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct MachineConfig {
    pub vcpu_count: u32,
    pub mem_size_mib: u32,
    pub smt: bool,
}

/// `vsock`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Vsock {
    pub guest_cid: u32,
    pub uds_path: PathBuf,
}

/// Where Firecracker finds the call's files (its view: the call directory,
/// or the root of its jail).
pub(crate) struct Paths {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub uds: PathBuf,
}

/// The configuration of one VM.
pub(crate) fn config(s: &MicrovmSettings, paths: Paths, extra_cmdline: &str) -> VmConfig {
    let boot_args =
        if extra_cmdline.is_empty() { KERNEL_CMDLINE.to_owned() } else { format!("{extra_cmdline} {KERNEL_CMDLINE}") };
    VmConfig {
        boot_source: BootSource { kernel_image_path: paths.kernel, initrd_path: paths.initrd, boot_args },
        drives: [],
        machine_config: MachineConfig { vcpu_count: s.vcpus, mem_size_mib: s.memory_mib, smt: false },
        network_interfaces: [],
        vsock: Vsock { guest_cid: GUEST_CID, uds_path: paths.uds },
    }
}

/// A started Firecracker and the socket its guest will connect to.
pub(crate) struct Started {
    pub child: Child,
    pub listener: UnixListener,
}

fn unavailable(what: String) -> SandboxError {
    SandboxError::Unavailable(what)
}

fn create(path: &Path) -> Result<std::fs::File, SandboxError> {
    std::fs::File::create(path).map_err(|e| unavailable(format!("cannot create {}: {e}", path.display())))
}

/// Writes the configuration, listens on the guest's port and starts
/// Firecracker — jailed when `[sandbox.microvm] jailer` is set
/// ([`start_jailed`]), else itself: in its own user, network, IPC and UTS
/// namespaces (no host capabilities, no network), killed when the spawning
/// thread exits. The guest console (its stdout) goes to `console.log`, its
/// stderr to `vmm.log`, its log to [`LOG`].
pub(crate) fn start(s: &MicrovmSettings, call_dir: &Path, extra_cmdline: &str) -> Result<Started, SandboxError> {
    if let Some(jailer) = &s.jailer {
        return start_jailed(s, jailer, call_dir, extra_cmdline);
    }
    // The vsock path is relative to Firecracker's working directory, the
    // call directory: a deep state dir would not fit in `sun_path`.
    let paths = Paths { kernel: s.kernel.clone(), initrd: s.initramfs.clone(), uds: PathBuf::from(VSOCK_UDS) };
    let listener = prepare(s, call_dir, paths, extra_cmdline, None)?;
    let mut cmd = Command::new(&s.firecracker);
    cmd.env_clear().current_dir(call_dir).args(vmm_args(&call_dir.join(CONFIG_FILE), &call_dir.join(LOG)));
    outputs(&mut cmd, call_dir)?;
    crate::sys::unshare_at_exec(
        &mut cmd,
        libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS,
    );
    crate::sys::die_with_parent_at_exec(&mut cmd);
    let child = cmd.spawn().map_err(|e| unavailable(format!("cannot run {}: {e}", s.firecracker.display())))?;
    Ok(Started { child, listener })
}

/// The uid and gid the jailer runs Firecracker as.
const JAILED_ID: u32 = 65534;

/// The jailer's `--id` for a call directory: its name with anything but
/// letters and digits as `-` (the jailer takes letters, digits and `-`, at
/// most 64).
fn jail_id(call_dir: &Path) -> String {
    let name = call_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(64).collect()
}

/// The jail's root: `CALL/jail/<exec file name>/<id>/root` (the jailer's
/// layout under `--chroot-base-dir CALL/jail`).
pub(crate) fn jail_root(s: &MicrovmSettings, call_dir: &Path) -> PathBuf {
    let exec = s.firecracker.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("firecracker"));
    call_dir.join("jail").join(exec).join(jail_id(call_dir)).join("root")
}

/// Starts Firecracker through its jailer (which must run as root): the
/// jail's root is made first with the kernel and the initramfs hard-linked
/// in (copied when the state dir is on another filesystem), the listener
/// and the log owned by uid 65534; the jailer then makes its device nodes,
/// pivots into the jail in a new mount namespace, drops to 65534:65534 and
/// execs Firecracker. airlock adds network, IPC and UTS namespaces.
/// `PR_SET_PDEATHSIG` does not survive the jailer's uid change: a dead
/// airlock's jailed Firecracker is found through the jail's
/// `firecracker.pid` ([`jailed_pid`]) and killed by `staging gc`.
fn start_jailed(
    s: &MicrovmSettings,
    jailer: &Path,
    call_dir: &Path,
    extra_cmdline: &str,
) -> Result<Started, SandboxError> {
    let root = jail_root(s, call_dir);
    std::fs::create_dir_all(&root).map_err(|e| unavailable(format!("cannot create {}: {e}", root.display())))?;
    for (from, to) in [(&s.kernel, "vmlinux"), (&s.initramfs, "initramfs.cpio")] {
        let dest = root.join(to);
        if std::fs::hard_link(from, &dest).is_err() {
            std::fs::copy(from, &dest)
                .map_err(|e| unavailable(format!("cannot put {} into the jail: {e}", from.display())))?;
        }
    }
    let paths = Paths {
        kernel: PathBuf::from("/vmlinux"),
        initrd: PathBuf::from("/initramfs.cpio"),
        uds: Path::new("/").join(VSOCK_UDS),
    };
    let listener = prepare(s, &root, paths, extra_cmdline, Some(JAILED_ID))?;
    let mut cmd = Command::new(jailer);
    cmd.env_clear()
        .arg("--id")
        .arg(jail_id(call_dir))
        .arg("--exec-file")
        .arg(&s.firecracker)
        .arg("--uid")
        .arg(JAILED_ID.to_string())
        .arg("--gid")
        .arg(JAILED_ID.to_string())
        .arg("--chroot-base-dir")
        .arg(call_dir.join("jail"))
        .arg("--")
        .args(vmm_args(&Path::new("/").join(CONFIG_FILE), &Path::new("/").join(LOG)));
    outputs(&mut cmd, call_dir)?;
    crate::sys::unshare_at_exec(&mut cmd, libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS);
    crate::sys::die_with_parent_at_exec(&mut cmd);
    let child = cmd.spawn().map_err(|e| unavailable(format!("cannot run {}: {e}", jailer.display())))?;
    Ok(Started { child, listener })
}

/// Firecracker's own arguments.
fn vmm_args(config: &Path, log: &Path) -> Vec<std::ffi::OsString> {
    let mut a: Vec<std::ffi::OsString> = vec!["--no-api".into(), "--config-file".into(), config.into()];
    a.extend(["--log-path".into(), log.into(), "--level".into(), "Info".into()]);
    a
}

/// stdin closed, stdout (the guest console) to `console.log`, stderr to
/// `vmm.log`, both in the call directory.
fn outputs(cmd: &mut Command, call_dir: &Path) -> Result<(), SandboxError> {
    let console = create(&call_dir.join(super::CONSOLE_LOG))?;
    let stderr = create(&call_dir.join(super::VMM_LOG))?;
    cmd.stdin(Stdio::null()).stdout(console).stderr(stderr);
    Ok(())
}

/// In `dir` (the call directory, or the jail's root): listens on the
/// guest's port, writes the configuration and creates the log, owned by
/// `owner` when Firecracker runs as another uid.
fn prepare(
    s: &MicrovmSettings,
    dir: &Path,
    paths: Paths,
    extra_cmdline: &str,
    owner: Option<u32>,
) -> Result<UnixListener, SandboxError> {
    let listener_path = dir.join(VSOCK_LISTENER);
    let listener = bind_in(dir, VSOCK_LISTENER)
        .map_err(|e| unavailable(format!("cannot listen on {}: {e}", listener_path.display())))?;
    let json = serde_json::to_vec_pretty(&config(s, paths, extra_cmdline))
        .map_err(|e| unavailable(format!("cannot encode the Firecracker configuration: {e}")))?;
    let config_path = dir.join(CONFIG_FILE);
    std::fs::write(&config_path, json)
        .map_err(|e| unavailable(format!("cannot write {}: {e}", config_path.display())))?;
    let log = dir.join(LOG);
    create(&log)?;
    if let Some(id) = owner {
        for p in [&listener_path, &log] {
            std::os::unix::fs::chown(p, Some(id), Some(id))
                .map_err(|e| unavailable(format!("cannot chown {} to {id}: {e}", p.display())))?;
        }
    }
    Ok(listener)
}

/// Binds a Unix socket `name` in `dir` through `/proc/self/fd/<dir>/name`,
/// so that a state directory deeper than `sun_path`'s 108 bytes still works.
fn bind_in(dir: &Path, name: &str) -> std::io::Result<UnixListener> {
    let handle = std::fs::File::open(dir)?;
    UnixListener::bind(format!("/proc/self/fd/{}/{name}", std::os::fd::AsRawFd::as_raw_fd(&handle)))
}

/// The jails' `<exec>/<id>/root` directories of a call (one at most).
fn jail_roots(call_dir: &Path) -> Vec<PathBuf> {
    let id = jail_id(call_dir);
    let Ok(execs) = std::fs::read_dir(call_dir.join("jail")) else { return Vec::new() };
    execs.flatten().map(|e| e.path().join(&id).join("root")).collect()
}

/// Firecracker's log of a call (in the call directory, or in its jail).
pub(crate) fn log_of(call_dir: &Path) -> Option<PathBuf> {
    std::iter::once(call_dir.join(LOG))
        .chain(jail_roots(call_dir).into_iter().map(|r| r.join(LOG)))
        .find(|p| p.exists())
}

/// The pid the jailer of `call_dir` recorded (`firecracker.pid` in its
/// jail), if that process still runs with the call's `--id`: a jailed
/// Firecracker's command line does not name the call directory.
pub(crate) fn jailed_pid(call_dir: &Path) -> Option<i32> {
    let id = jail_id(call_dir);
    jail_roots(call_dir).into_iter().find_map(|root| {
        let pid: i32 = std::fs::read_to_string(root.join("firecracker.pid")).ok()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.windows(2).any(|w| w[0] == b"--id" && w[1] == id.as_bytes()).then_some(pid)
    })
}

/// How [`accept`] ended without a connection.
pub(crate) enum NoGuest {
    /// The deadline passed.
    Timeout,
    /// The VMM process exited.
    VmmExited,
    /// A system call failed.
    Failed(SandboxError),
}

/// Accepts the guest's connection on `listener` before `deadline`, unless
/// the VMM (`pidfd`) exits first.
pub(crate) fn accept(listener: &UnixListener, pidfd: &OwnedFd, deadline: Instant) -> Result<UnixStream, NoGuest> {
    let failed = |call: &str, e: std::io::Error| {
        NoGuest::Failed(SandboxError::Descriptor { call: call.into(), errno: OsErrno::of(&e) })
    };
    listener.set_nonblocking(true).map_err(|e| failed("fcntl(listener, O_NONBLOCK)", e))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(|e| failed("fcntl(vsock, ~O_NONBLOCK)", e))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed("accept(vsock listener)", e)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NoGuest::Timeout);
        }
        let mut fds = [PollFd::new(listener, PollFlags::IN), PollFd::new(pidfd, PollFlags::IN)];
        let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(NoGuest::Failed(SandboxError::Wait { call: "poll(vsock, pidfd)".into(), errno: errno(e) }))
            }
        }
        if fds[1].revents().contains(PollFlags::IN) && !fds[0].revents().contains(PollFlags::IN) {
            return Err(NoGuest::VmmExited);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::microvm::frame::VSOCK_PORT;
    use crate::microvm::{Accel, Vmm};
    use std::time::Duration;

    fn settings() -> MicrovmSettings {
        MicrovmSettings {
            vmm: Vmm::Firecracker,
            qemu: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            firecracker: PathBuf::from("/opt/fc/firecracker"),
            jailer: None,
            kernel: PathBuf::from("/g/vmlinux"),
            initramfs: PathBuf::from("/g/initramfs.cpio"),
            memory_mib: 256,
            vcpus: 2,
            accel: Accel::Kvm,
            boot_timeout: Duration::from_millis(1500),
            state_dir: PathBuf::from("/s"),
        }
    }

    fn paths() -> Paths {
        Paths {
            kernel: PathBuf::from("/g/vmlinux"),
            initrd: PathBuf::from("/g/initramfs.cpio"),
            uds: PathBuf::from("vsock.sock"),
        }
    }

    #[test]
    fn the_configuration_has_no_network_no_drive_and_one_vsock() {
        let json = serde_json::to_value(config(&settings(), paths(), "")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "boot-source": {
                    "kernel_image_path": "/g/vmlinux",
                    "initrd_path": "/g/initramfs.cpio",
                    "boot_args": KERNEL_CMDLINE,
                },
                "drives": [],
                "machine-config": { "vcpu_count": 2, "mem_size_mib": 256, "smt": false },
                "network-interfaces": [],
                "vsock": { "guest_cid": 3, "uds_path": "vsock.sock" },
            })
        );
    }

    #[test]
    fn the_command_line_starts_the_guest_init_on_the_vsock() {
        let c = config(&settings(), paths(), "airlock.probe=1");
        let args = &c.boot_source.boot_args;
        assert!(args.starts_with("airlock.probe=1 console=ttyS0 "), "{args}");
        assert!(args.ends_with("rdinit=/airlock/airlock -- __airlock_guest_init vsock"), "{args}");
        assert!(args.contains("tsc_early_khz=2000000 no_timer_check lpj=4000000"), "{args}");
    }

    #[test]
    fn the_jail_is_under_the_call_dir_and_its_id_is_a_plain_name() {
        let root = jail_root(&settings(), Path::new("/s/calls/inv_1.x"));
        assert_eq!(root, PathBuf::from("/s/calls/inv_1.x/jail/firecracker/inv-1-x/root"));
    }

    #[test]
    fn the_listener_is_the_uds_path_and_the_guest_port() {
        assert_eq!(VSOCK_LISTENER, format!("{VSOCK_UDS}_{VSOCK_PORT}"));
    }
}
