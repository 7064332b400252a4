//! The microVM tier (`tier = "microvm"`): each worker runs in its own
//! virtual machine, on its own kernel, with airlock's guest init as PID 1.
//!
//! The host never mounts anything into the guest: it copies bytes. Per
//! call the tier makes a private directory `STATE/tiers/microvm/calls/<call>`
//! (0700; the console log and the call id live there), starts QEMU's
//! `microvm` machine ([`qemu`]: no network device, one virtio-serial port
//! on a socket pair, QEMU's own seccomp filter, its own user, network, IPC
//! and UTS namespaces, killed with the spawning thread) on the configured
//! Debian cloud kernel and the initramfs `scripts/microvm-build.sh` built
//! (the stripped airlock binary, the virtio modules, a small read-only tool
//! image) — or Firecracker ([`firecracker`]: KVM only, the ELF `vmlinux`,
//! no drive or network device, the guest's vsock connection accepted on a
//! Unix socket in the call directory, optionally its jailer) — and speaks
//! the byte protocol of [`frame`] with the guest init ([`guest`]). The
//! guest's hello must come within the boot deadline
//! (`sandbox.boot_timeout`) and carry protocol version
//! [`frame::PROTOCOL_VERSION`] and the host binary's own build ID
//! ([`fingerprint`]), else the VM is killed (`sandbox.guest_mismatch`).
//! Inputs go in with their SHA-256; the output comes back with its SHA-256
//! and is verified into the host staging file — a truncated, oversized or
//! mismatched transfer leaves it empty and publishes nothing.
//!
//! The tool image is the initramfs's, not the spec's `image` (the host's
//! directories are never shown to the guest). A session's worker runs on a
//! pty in the guest ([`MicrovmTier::start_tty`], [`terminal`]). Not
//! supported here (refused
//! with [`SandboxError::InvalidSpec`]): the filesystem socket, provided
//! files, live stdio.
#![forbid(unsafe_code)]

pub mod fingerprint;
mod firecracker;
pub mod frame;
pub mod guest;
mod probe;
mod qemu;
mod terminal;
mod worker;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::call_dir::{call_name, CallDir};
use crate::error::SandboxError;
use crate::spec::WorkerSpec;
use crate::worker::Tier;

pub use probe::{leftovers, probe, reap};
pub use terminal::MicrovmTerminal;
pub use worker::MicrovmWorker;

/// The virtual machine monitor that runs the guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vmm {
    /// QEMU's `microvm` machine (KVM or TCG).
    #[default]
    Qemu,
    /// Firecracker (KVM only; its vsock over a host Unix socket).
    Firecracker,
}

/// How the guest's CPU is provided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// KVM if a guest boots with it here, TCG otherwise (probed once,
    /// remembered in the tier's state dir).
    #[default]
    Auto,
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's software emulation (slow, runs everywhere).
    Tcg,
}

impl Accel {
    /// `auto`, `kvm` or `tcg`.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Auto => "auto",
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// Where the VMM, the guest kernel and the initramfs are, and the VM's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MicrovmSettings {
    /// The VMM.
    pub vmm: Vmm,
    /// The QEMU binary (`qemu-system-x86_64`).
    pub qemu: PathBuf,
    /// The Firecracker binary.
    pub firecracker: PathBuf,
    /// Firecracker's jailer (`None`: Firecracker runs without it).
    pub jailer: Option<PathBuf>,
    /// The guest kernel (`vmlinuz` for QEMU, the uncompressed ELF `vmlinux`
    /// for Firecracker).
    pub kernel: PathBuf,
    /// The initramfs `scripts/microvm-build.sh` built.
    pub initramfs: PathBuf,
    /// Guest RAM in MiB (charged to the host, not to the staging pool).
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// The accelerator.
    pub accel: Accel,
    /// How long the guest may take to say hello.
    pub boot_timeout: Duration,
    /// The tier's own directory (`STATE/tiers/microvm`).
    pub state_dir: PathBuf,
}

impl MicrovmSettings {
    /// Where the call directories are.
    pub fn calls_dir(&self) -> PathBuf {
        self.state_dir.join("calls")
    }
}

/// The file in a call directory that gets the VMM's stderr.
pub(crate) const VMM_LOG: &str = "vmm.log";

/// The console log of a call (the kernel's and the guest init's messages).
pub(crate) const CONSOLE_LOG: &str = "console.log";

/// The microVM tier.
#[derive(Debug)]
pub struct MicrovmTier {
    settings: MicrovmSettings,
    cancel: Option<crate::Cancel>,
    accel: OnceLock<Result<(Accel, String), SandboxError>>,
}

impl MicrovmTier {
    /// A tier with these settings (nothing is checked until a worker starts;
    /// [`probe`] checks everything).
    pub fn new(settings: MicrovmSettings) -> Self {
        MicrovmTier { settings, cancel: None, accel: OnceLock::new() }
    }

    /// Every worker this tier starts is killed when `cancel` is cancelled.
    pub fn cancel_with(&mut self, cancel: crate::Cancel) -> &mut Self {
        self.cancel = Some(cancel);
        self
    }

    /// The settings.
    pub fn settings(&self) -> &MicrovmSettings {
        &self.settings
    }

    /// The accelerator workers use and why.
    pub fn accel(&self) -> Result<(Accel, String), SandboxError> {
        self.accel.get_or_init(|| probe::resolve_accel(&self.settings)).clone()
    }

    fn check(&self) -> Result<(), SandboxError> {
        let s = &self.settings;
        if !s.state_dir.is_absolute() {
            return Err(SandboxError::InvalidSpec(format!(
                "the microvm state directory {} is not absolute",
                s.state_dir.display()
            )));
        }
        for (what, path) in [("kernel", &s.kernel), ("initramfs", &s.initramfs)] {
            if !path.is_file() {
                return Err(SandboxError::Unavailable(format!(
                    "the guest {what} {} is missing; build the guest with scripts/microvm-build.sh and set \
                     [sandbox.microvm] kernel and initramfs",
                    path.display()
                )));
            }
        }
        if s.vmm == Vmm::Firecracker {
            check_firecracker(s)?;
        }
        Ok(())
    }

    /// Like [`Tier::start`], but the tool's standard streams are a terminal
    /// in the guest, carried over the frame protocol to one end of a socket
    /// pair whose other end the caller gets, as it would a pty's master
    /// ([`terminal`]). The caller must still call [`Worker::wait`] on the
    /// worker (or kill it).
    ///
    /// [`Worker::wait`]: crate::Worker::wait
    pub fn start_tty(&self, mut spec: WorkerSpec) -> Result<(MicrovmTerminal, std::fs::File), SandboxError> {
        // A session's terminal output is its conversation, not a bounded
        // answer: it all reaches the caller, who bounds each interaction.
        spec.stdout_limit = usize::MAX >> 2;
        let worker = self.start_with(spec, "", true)?;
        terminal::attach(worker)
    }

    /// Starts one worker, adding `extra_cmdline` to the kernel command line.
    pub(crate) fn start_with(
        &self,
        mut spec: WorkerSpec,
        extra_cmdline: &str,
        tty: bool,
    ) -> Result<MicrovmWorker, SandboxError> {
        spec.validate()?;
        crate::call_dir::refuse_native_only(&spec, "microvm")?;
        self.check()?;
        let (accel, _) = self.accel()?;
        let name = call_name(&spec);
        let call = CallDir::create(&self.settings.calls_dir(), &name)?;
        if let Some(id) = spec.call_id.as_deref().filter(|id| *id == name) {
            if let Err(e) = std::fs::write(call.path().join(probe::CALL_ID_FILE), id) {
                let _ = call.remove();
                return Err(SandboxError::Unavailable(format!("cannot record the call id: {e}")));
            }
        }
        let worker = MicrovmWorker::boot(worker::Start {
            settings: &self.settings,
            accel,
            call,
            spec: &mut spec,
            extra_cmdline,
            expect: None,
            tty,
        })?;
        Ok(match &self.cancel {
            Some(c) => worker.with_cancel(c),
            None => worker,
        })
    }
}

/// Firecracker's own requirements: its binary, KVM, and an ELF kernel.
fn check_firecracker(s: &MicrovmSettings) -> Result<(), SandboxError> {
    if !s.firecracker.is_absolute() || !s.firecracker.is_file() {
        return Err(SandboxError::Unavailable(format!(
            "the Firecracker binary {} is missing; install Firecracker (scripts/firecracker-fetch.sh DIR) and set \
             [sandbox.microvm] firecracker to its absolute path",
            s.firecracker.display()
        )));
    }
    if let Some(jailer) = s.jailer.as_ref().filter(|j| !j.is_absolute() || !j.is_file()) {
        return Err(SandboxError::Unavailable(format!(
            "Firecracker's jailer {} is missing; set [sandbox.microvm] jailer to its absolute path or remove the key",
            jailer.display()
        )));
    }
    if s.jailer.is_some() && !rustix::process::geteuid().is_root() {
        return Err(SandboxError::Unavailable(
            "Firecracker's jailer must be started as root (it makes a chroot and device nodes, then drops to uid \
             65534); run airlock as root or remove [sandbox.microvm] jailer"
                .into(),
        ));
    }
    if s.accel == Accel::Tcg {
        return Err(SandboxError::Unavailable(
            "Firecracker runs on KVM only; accel = \"tcg\" needs vmm = \"qemu\"".into(),
        ));
    }
    let mut magic = [0u8; 4];
    let elf = std::fs::File::open(&s.kernel).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic));
    if elf.is_err() || &magic != b"\x7fELF" {
        return Err(SandboxError::Unavailable(format!(
            "the guest kernel {} is not an uncompressed ELF vmlinux, which Firecracker needs; point \
             [sandbox.microvm] kernel at the vmlinux scripts/microvm-build.sh writes beside vmlinuz",
            s.kernel.display()
        )));
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        return Err(SandboxError::Unavailable(format!("Firecracker needs /dev/kvm, which cannot be opened: {e}")));
    }
    Ok(())
}

impl Tier for MicrovmTier {
    type Worker = MicrovmWorker;

    fn name(&self) -> &'static str {
        "microvm"
    }

    fn start(&self, spec: WorkerSpec) -> Result<MicrovmWorker, SandboxError> {
        self.start_with(spec, "", false)
    }
}
