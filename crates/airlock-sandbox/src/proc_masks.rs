//! Masking the host's details in the worker's fresh `/proc` (ATTACKS case
//! 27), as container runtimes do with the OCI runtime spec's default
//! `maskedPaths` and `readonlyPaths`. One table, [`PROC_PATHS`]: the OCI
//! masked paths plus `cmdline`, `config.gz`, `kallsyms`, `modules`, the
//! boot id, `meminfo` and the allocator, swap and disk statistics are
//! masked; the OCI read-only paths (`/proc/sys`, `bus`, `fs`, `irq`,
//! `sysrq-trigger`) become read-only binds.
//!
//! PID 1 applies [`PROC_PATHS`] right after it mounts `/proc` in the new
//! root, before `pivot_root`: a masked file gets the tree's `/dev/null`
//! bound over it (it reads empty), a masked directory an empty read-only
//! tmpfs, and a read-only path a read-only bind of itself. Paths this
//! kernel does not have are skipped. The masks are mounts of PID 1's mount
//! namespace and move with the root; the worker cannot remove them: it has
//! no capabilities and seccomp denies `umount2`, `mount`, `move_mount` and
//! the rest of the mount API.
//!
//! Left visible on purpose: `/proc/version` (`uname(2)` returns the same
//! kernel release and version and cannot be masked; the rest is the
//! compiler's name), and `/proc/cpuinfo`, `/proc/stat`, `/proc/uptime`,
//! `/proc/loadavg` (programs size thread pools and measure time from them).
//! `/proc/meminfo` reads empty rather than a made-up file; `sysinfo(2)`
//! still reports the host's total memory.
#![forbid(unsafe_code)]

use rustix::mount::MountFlags;

use crate::error::{errno, SandboxError};
use crate::mount_calls::{bind, readonly_recursive, tmpfs};

/// What happens to one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mask {
    /// Hidden: `/dev/null` over a file, an empty read-only tmpfs over a directory.
    Hide,
    /// Bound read-only onto itself (with everything under it).
    ReadOnly,
}

/// The paths masked in the worker's root, each with why.
pub(crate) const PROC_PATHS: &[(&str, Mask)] = &[
    // OCI readonlyPaths.
    ("/proc/bus", Mask::ReadOnly),           // bus and PCI device settings
    ("/proc/fs", Mask::ReadOnly),            // file-system driver settings (e.g. nfsd)
    ("/proc/irq", Mask::ReadOnly),           // interrupt affinity settings
    ("/proc/sys", Mask::ReadOnly),           // kernel tunables; reading them stays possible
    ("/proc/sysrq-trigger", Mask::ReadOnly), // SysRq actions: crash, reboot, sync
    // OCI maskedPaths (runc, containerd, Moby defaults).
    ("/proc/acpi", Mask::Hide),          // the host's ACPI tables and events
    ("/proc/asound", Mask::Hide),        // the host's sound cards
    ("/proc/kcore", Mask::Hide),         // the host's physical memory as an ELF core
    ("/proc/keys", Mask::Hide),          // kernel keyrings the caller can view
    ("/proc/latency_stats", Mask::Hide), // kernel latency records with kernel symbols
    ("/proc/timer_list", Mask::Hide),    // every timer of the host, with task names
    ("/proc/timer_stats", Mask::Hide),   // timer usage by task (older kernels)
    ("/proc/sched_debug", Mask::Hide),   // every host task's scheduler state
    ("/proc/scsi", Mask::Hide),          // the host's SCSI devices
    ("/proc/interrupts", Mask::Hide),    // interrupt counts per CPU: a keystroke-timing side channel
    ("/sys/firmware", Mask::Hide),       // firmware tables (only if /sys is ever mounted; it is not)
    // Host details named by issue 15.
    ("/proc/cmdline", Mask::Hide), // the host kernel's command line (root device, boot options)
    ("/proc/config.gz", Mask::Hide), // the host kernel's build configuration
    ("/proc/kallsyms", Mask::Hide), // kernel symbols (and, to the privileged, addresses)
    ("/proc/modules", Mask::Hide), // loaded kernel modules
    ("/proc/sys/kernel/random/boot_id", Mask::Hide), // identifies the host's boot across calls
    ("/proc/meminfo", Mask::Hide), // the host's memory use: a side channel
    ("/proc/key-users", Mask::Hide), // key quotas in use, per uid
    ("/proc/kmsg", Mask::Hide),    // the kernel log
    ("/proc/slabinfo", Mask::Hide), // kernel allocator caches: aids heap grooming
    ("/proc/vmallocinfo", Mask::Hide), // kernel virtual address ranges
    ("/proc/zoneinfo", Mask::Hide), // physical memory zones: an allocator side channel
    ("/proc/buddyinfo", Mask::Hide), // free pages by order: an allocator side channel
    ("/proc/pagetypeinfo", Mask::Hide), // free pages by migrate type: the same
    ("/proc/kpagecount", Mask::Hide), // use count of every physical page
    ("/proc/kpageflags", Mask::Hide), // flags of every physical page
    ("/proc/kpagecgroup", Mask::Hide), // cgroup of every physical page
    ("/proc/swaps", Mask::Hide),   // the host's swap devices and files
    ("/proc/diskstats", Mask::Hide), // the host's disks and their I/O: an activity side channel
    ("/proc/partitions", Mask::Hide), // the host's disks and partitions
];

/// The empty tmpfs laid over a masked directory (read-only: nothing can be added).
const EMPTY_DIR_OPTS: &str = "size=4096,nr_inodes=2,mode=0555";

/// Applies [`PROC_PATHS`] under `root` (the new root before `pivot_root`),
/// hiding files with `dev_null` (a `/dev/null` of the new tree). Read-only
/// binds go first, so a mask beneath one (`/proc/sys/...`) lies on top.
pub(crate) fn apply(root: &str, dev_null: &str) -> Result<(), SandboxError> {
    for pass in [Mask::ReadOnly, Mask::Hide] {
        for (path, _) in PROC_PATHS.iter().filter(|(_, m)| *m == pass) {
            let target = format!("{root}{path}");
            let md = match std::fs::symlink_metadata(&target) {
                Ok(md) => md,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue, // not on this kernel
                Err(e) => return Err(SandboxError::BuildRoot { call: format!("lstat({target:?})"), errno: errno(e) }),
            };
            if md.file_type().is_symlink() {
                return Err(SandboxError::InvalidSpec(format!("{path} is a symlink: it cannot be masked")));
            }
            match (pass, md.is_dir()) {
                (Mask::ReadOnly, _) => {
                    bind(&target, &target, true)?;
                    readonly_recursive(&target)?;
                }
                (Mask::Hide, true) => tmpfs(
                    &target,
                    MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                    "MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC",
                    EMPTY_DIR_OPTS,
                )?,
                (Mask::Hide, false) => bind(dev_null, &target, false)?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths the OCI runtime spec's defaults and issue 15 name: each is
    /// in the table with the expected treatment.
    #[test]
    fn the_table_holds_the_oci_defaults_and_the_issue_paths() {
        let find = |p: &str| PROC_PATHS.iter().find(|(q, _)| *q == p).map(|(_, m)| *m);
        for p in ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"] {
            assert_eq!(find(p), Some(Mask::ReadOnly), "{p}");
        }
        for p in [
            "/proc/acpi",
            "/proc/asound",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/proc/scsi",
            "/proc/interrupts",
            "/sys/firmware",
            "/proc/cmdline",
            "/proc/config.gz",
            "/proc/kallsyms",
            "/proc/sys/kernel/random/boot_id",
            "/proc/meminfo",
        ] {
            assert_eq!(find(p), Some(Mask::Hide), "{p}");
        }
    }

    #[test]
    fn paths_are_absolute_unique_and_never_cover_process_entries() {
        let mut seen = std::collections::BTreeSet::new();
        for (p, _) in PROC_PATHS {
            assert!(p.starts_with("/proc/") || p.starts_with("/sys/"), "{p}");
            assert!(seen.insert(*p), "{p} twice");
            let first = p.split('/').nth(2).unwrap();
            assert!(
                !["self", "thread-self", "mounts", "net"].contains(&first) && first.parse::<u32>().is_err(),
                "{p} would hide a process's own entries"
            );
        }
    }
}
