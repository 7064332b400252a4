//! Starting QEMU's `microvm` machine for one call, and finding and killing
//! the VMM processes (QEMU's or Firecracker's) of a call directory.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Accel, MicrovmSettings};
use crate::error::SandboxError;

/// The descriptor number QEMU's chardev socket has in the QEMU process.
const CHARDEV_FD: i32 = 3;

/// The kernel command line: a quiet console, no reboot on panic, the TSC
/// hints without which about one TCG boot in four hangs calibrating
/// against the PIT, and the guest init.
pub(crate) const KERNEL_CMDLINE: &str = "console=ttyS0 quiet loglevel=1 panic=-1 reboot=t \
     tsc_early_khz=2000000 no_timer_check lpj=4000000 rdinit=/airlock/airlock -- __airlock_guest_init";

/// QEMU's own seccomp filter (`-sandbox`): no obsolete calls, no privilege
/// changes, no new processes, no resource control.
const QEMU_SANDBOX: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// QEMU's arguments for one VM whose virtio-serial port is the inherited
/// socket [`CHARDEV_FD`] and whose console goes to `call_dir/console.log`.
pub(crate) fn args(s: &MicrovmSettings, accel: Accel, call_dir: &Path, extra_cmdline: &str) -> Vec<OsString> {
    let accel = match accel {
        Accel::Kvm => "kvm",
        _ => "tcg",
    };
    let mut cmdline = KERNEL_CMDLINE.to_owned();
    if !extra_cmdline.is_empty() {
        cmdline = format!("{extra_cmdline} {cmdline}");
    }
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    push("-M");
    push(&format!("microvm,accel={accel},x-option-roms=off,rtc=off"));
    push("-m");
    push(&format!("{}M", s.memory_mib));
    push("-smp");
    push(&s.vcpus.to_string());
    for flag in ["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"] {
        push(flag);
    }
    push("-nic");
    push("none");
    push("-sandbox");
    push(QEMU_SANDBOX);
    push("-serial");
    a.push(OsString::from(format!("file:{}", call_dir.join(super::CONSOLE_LOG).display())));
    let mut push = |s: &str| a.push(s.into());
    push("-device");
    push("virtio-serial-device");
    push("-chardev");
    push(&format!("socket,id=airlock,fd={CHARDEV_FD}"));
    push("-device");
    push("virtserialport,chardev=airlock,name=airlock");
    push("-kernel");
    a.push(s.kernel.clone().into_os_string());
    a.push("-initrd".into());
    a.push(s.initramfs.clone().into_os_string());
    a.push("-append".into());
    a.push(cmdline.into());
    a
}

/// Spawns QEMU with `vm_end` as its chardev socket: in its own user, network,
/// IPC and UTS namespaces (no capabilities on the host, no network), killed
/// when the spawning thread exits, stdin/stdout closed, stderr to `log`.
pub(crate) fn spawn(
    s: &MicrovmSettings,
    args: Vec<OsString>,
    vm_end: OwnedFd,
    log: &Path,
) -> Result<Child, SandboxError> {
    let unavailable = |what: String| SandboxError::Unavailable(what);
    let stderr =
        std::fs::File::create(log).map_err(|e| unavailable(format!("cannot create {}: {e}", log.display())))?;
    let mut cmd = Command::new(&s.qemu);
    cmd.env_clear().args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
    crate::sys::move_fds_at_exec(&mut cmd, vec![(vm_end.as_raw_fd(), CHARDEV_FD)])
        .map_err(|e| unavailable(format!("cannot pass the VM's socket: {e}")))?;
    crate::sys::unshare_at_exec(
        &mut cmd,
        libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS,
    );
    crate::sys::die_with_parent_at_exec(&mut cmd);
    let child = cmd.spawn().map_err(|e| unavailable(format!("cannot run {}: {e}", s.qemu.display())));
    drop(vm_end);
    child
}

/// The pids of processes whose command line names `call_dir` (the VMM of
/// that call: its console log or Firecracker's configuration is there),
/// and the jailed Firecracker its jail's pid file names.
pub(crate) fn processes_of(call_dir: &Path) -> Vec<i32> {
    let needle = call_dir.as_os_str().as_encoded_bytes().to_vec();
    let mut found: Vec<i32> = super::firecracker::jailed_pid(call_dir).into_iter().collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid == std::process::id() as i32 {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        if !found.contains(&pid) && cmdline.split(|b| *b == 0).any(|arg| names_dir(arg, &needle)) {
            found.push(pid);
        }
    }
    found
}

/// `file:DIR/console.log` or a path beneath DIR.
fn names_dir(arg: &[u8], dir: &[u8]) -> bool {
    let arg = arg.strip_prefix(b"file:").unwrap_or(arg);
    arg.starts_with(dir) && arg.get(dir.len()) == Some(&b'/')
}

/// SIGKILLs every process of `call_dir` until none is left or `grace`
/// passes; returns the pids still alive.
pub(crate) fn kill_processes(call_dir: &Path, grace: Duration) -> Vec<i32> {
    crate::call_dir::kill_listed(grace, || processes_of(call_dir))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_command_line_names_its_call_dir_by_component() {
        let dir = b"/s/calls/c1";
        assert!(super::names_dir(b"file:/s/calls/c1/console.log", dir));
        assert!(!super::names_dir(b"file:/s/calls/c10/console.log", dir));
        assert!(!super::names_dir(b"/s/calls/c1", dir));
    }
}
