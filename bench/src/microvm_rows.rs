//! Issue 20 row: the microVM tier's start-up beside a bare QEMU boot of the
//! same kernel and initramfs that runs the same `cp` and ends (its init
//! exits, the kernel panics, `-no-reboot` stops QEMU). airlock additionally
//! loads the virtio modules, says hello, transfers the input and output with
//! their SHA-256 and kills and reaps before export. Target (issue 20): the
//! microvm p50 at most 1.2× the bare boot's under TCG.
//!
//! `AIRLOCK_BENCH_MICROVM_DIR` names what `scripts/microvm-build.sh` wrote
//! (from the airlock binary beside this one).

use crate::harness::{compare, Report, Target};
use crate::run_rows::{check, setup_with};
use std::process::Command;

/// The kernel command line of the bare boot: the tier's TSC hints, then
/// `cp` as init.
const BARE_CMDLINE: &str = "console=ttyS0 quiet loglevel=1 panic=-1 tsc_early_khz=2000000 no_timer_check \
                            lpj=4000000 rdinit=/usr/bin/cp -- /airlock/fingerprint /tmp/copied";

fn samples(quick: bool) -> usize {
    if quick {
        3
    } else {
        9
    }
}

/// `airlock run --tier microvm` (TCG) vs a bare `qemu-system-x86_64 -M microvm` boot.
pub fn microvm_vs_bare_qemu(quick: bool) -> Result<Report, String> {
    let dir = std::env::var("AIRLOCK_BENCH_MICROVM_DIR")
        .map_err(|_| "AIRLOCK_BENCH_MICROVM_DIR is not set (scripts/microvm-build.sh writes the guest)".to_owned())?;
    let (kernel, initramfs) = (format!("{dir}/vmlinuz"), format!("{dir}/initramfs.cpio"));
    let s =
        setup_with(&format!("[sandbox.microvm]\nkernel = {kernel:?}\ninitramfs = {initramfs:?}\naccel = \"tcg\"\n"))?;
    let bare = || {
        let mut cmd = Command::new("/usr/bin/qemu-system-x86_64");
        cmd.args(["-M", "microvm,accel=tcg,x-option-roms=off,rtc=off", "-m", "512M", "-smp", "1"])
            .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-nic", "none", "-serial", "none"])
            .args(["-kernel", &kernel, "-initrd", &initramfs, "-append", BARE_CMDLINE]);
        check(cmd.output(), "bare qemu boot")
    };
    let samples = samples(quick);
    let (candidate, baseline) = compare(samples, || s.airlock_with(&["--tier", "microvm"]), bare)?;
    Ok(Report {
        name: "tier microvm: airlock run vs bare qemu boot",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.2),
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}
