//! The worker's seccomp filter, built by a pure function
//! ([`worker_filter_rules`]) and compiled with `seccompiler`.
//!
//! The policy is *default allow* with a deny list: Landlock, the namespaces
//! and the dropped capabilities are the primary walls; this filter removes
//! the kernel surfaces that have historically turned a confined process
//! into an escape (namespace calls, the mount API up to `open_tree_attr`,
//! ptrace, BPF, io_uring, keyrings, module and kexec loading, calls that
//! reach into another process, each listed with its reason below) and the
//! System V IPC and POSIX message queue calls (see `ipc.rs`). Denied
//! calls fail with `EPERM`. Sockets are the one allow-list inside it:
//! `socket(2)` and `socketpair(2)` open only the families of
//! [`ALLOWED_SOCKET_FAMILIES`] (unix, inet, inet6: the network namespace is
//! empty), any other fails with `EAFNOSUPPORT` (ATTACKS case 26; vsock, for
//! one, would share the host's port space on a VM host). `clone3` fails
//! with `ENOSYS` so the C library falls back to `clone`, whose flags (in a
//! register, unlike `clone3`'s struct) the filter can inspect. A call made
//! with a foreign architecture's convention kills the process (seccompiler's
//! architecture check); x32 system calls fail with `ENOSYS`.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::SandboxError;

/// Namespace flags a worker may not pass to `clone(2)`.
const CLONE_NAMESPACE_FLAGS: [(u64, &str); 8] = [
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (libc::CLONE_NEWTIME as u64, "CLONE_NEWTIME"),
];

/// The socket address families a worker may open; every other family
/// (vsock, netlink, packet, alg, bluetooth, key, xdp, … and numbers the
/// kernel has not assigned yet) fails with `EAFNOSUPPORT`. The family is
/// argument 0 of `socket(2)` and `socketpair(2)`, an `int`: the filter
/// compares its low 32 bits, as the kernel reads it. There is no
/// `socketcall(2)` on the supported architectures, and io_uring (whose
/// `IORING_OP_SOCKET` would bypass this) is denied below.
const ALLOWED_SOCKET_FAMILIES: [(u64, &str); 3] = [
    // Local IPC between the tool's own processes: a path socket is subject to
    // Landlock and the tree holds no host socket; abstract names live in the
    // worker's own network namespace (and are scoped by Landlock ABI 6).
    (libc::AF_UNIX as u64, "AF_UNIX"),
    // IPv4: the worker's network namespace is empty (no interface is up), so
    // a socket reaches nothing; programs open one to probe or resolve.
    (libc::AF_INET as u64, "AF_INET"),
    // IPv6: the same empty namespace.
    (libc::AF_INET6 as u64, "AF_INET6"),
];

/// System calls newer than the `libc` crate's constants. Numbers from 424 on
/// are the same on every architecture (`scripts/syscall.tbl` of the kernel;
/// checked against `arch/x86/entry/syscalls/syscall_64.tbl`).
mod nr {
    /// `cachestat(2)`, Linux 6.5.
    pub(super) const CACHESTAT: i64 = 451;
    /// `statmount(2)`, Linux 6.8.
    pub(super) const STATMOUNT: i64 = 457;
    /// `listmount(2)`, Linux 6.8.
    pub(super) const LISTMOUNT: i64 = 458;
    /// `lsm_get_self_attr(2)`, Linux 6.8.
    pub(super) const LSM_GET_SELF_ATTR: i64 = 459;
    /// `lsm_set_self_attr(2)`, Linux 6.8.
    pub(super) const LSM_SET_SELF_ATTR: i64 = 460;
    /// `lsm_list_modules(2)`, Linux 6.8.
    pub(super) const LSM_LIST_MODULES: i64 = 461;
    /// `open_tree_attr(2)`, Linux 6.15.
    pub(super) const OPEN_TREE_ATTR: i64 = 467;
}

/// `personality(0xffffffff)` only queries the persona.
const PERSONALITY_QUERY: u64 = 0xffff_ffff;

/// The x32 ABI marks its system call numbers with this bit.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The rule tables of the worker filter, one per action.
#[derive(Debug)]
pub(crate) struct WorkerFilterRules {
    /// Calls (or call/argument combinations) answered with `EPERM`.
    pub eperm: BTreeMap<i64, Vec<SeccompRule>>,
    /// Socket calls with a family outside [`ALLOWED_SOCKET_FAMILIES`],
    /// answered with `EAFNOSUPPORT`.
    pub eafnosupport: BTreeMap<i64, Vec<SeccompRule>>,
    /// Calls answered with `ENOSYS`.
    pub enosys: BTreeMap<i64, Vec<SeccompRule>>,
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    // Arguments 0..=5 are valid, so this cannot fail.
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).expect("valid seccomp condition")
}

/// A condition on the low 32 bits of an argument (an `int` parameter).
fn cond32(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("valid seccomp condition")
}

fn rule(conds: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conds).expect("non-empty seccomp rule")
}

/// The worker's deny list. Pure: the same tables every time, no I/O.
pub(crate) fn worker_filter_rules() -> WorkerFilterRules {
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always: &[i64] = &[
        libc::SYS_ptrace,            // inspect or control another process
        libc::SYS_process_vm_readv,  // read another process's memory
        libc::SYS_process_vm_writev, // write another process's memory
        libc::SYS_mount,             // change the mount table
        libc::SYS_umount2,           // uncover what a mount hides
        libc::SYS_pivot_root,        // change the root mount
        libc::SYS_move_mount,        // new mount API: attach a mount
        libc::SYS_open_tree,         // new mount API: clone a mount tree
        libc::SYS_fsopen,            // new mount API: create a file system context
        libc::SYS_fsconfig,          // new mount API: configure it
        libc::SYS_fsmount,           // new mount API: make a mount of it
        libc::SYS_fspick,            // new mount API: reconfigure an existing mount
        libc::SYS_mount_setattr,     // change mount flags (e.g. drop read-only)
        libc::SYS_keyctl,            // kernel keyrings are not namespaced
        libc::SYS_add_key,           // kernel keyrings
        libc::SYS_request_key,       // kernel keyrings
        libc::SYS_bpf,               // eBPF programs and maps
        libc::SYS_perf_event_open,   // performance counters, a side channel and kernel attack surface
        libc::SYS_userfaultfd,       // stalls kernel page faults: a race-widening primitive
        libc::SYS_kexec_load,        // load a new kernel
        libc::SYS_kexec_file_load,   // load a new kernel
        libc::SYS_init_module,       // load a kernel module
        libc::SYS_finit_module,      // load a kernel module
        libc::SYS_delete_module,     // unload a kernel module
        libc::SYS_unshare,           // new namespaces (a fresh user namespace regains capabilities)
        libc::SYS_setns,             // enter another namespace
        libc::SYS_io_uring_setup,    // io_uring bypasses this filter for the calls it performs
        libc::SYS_io_uring_enter,    // io_uring
        libc::SYS_io_uring_register, // io_uring
        libc::SYS_chroot,            // change the root directory
        libc::SYS_acct,              // process accounting to a file
        libc::SYS_swapon,            // swap devices
        libc::SYS_swapoff,           // swap devices
        libc::SYS_reboot,            // reboot or kexec
        libc::SYS_open_by_handle_at, // open by file handle, around path checks (the "shocker" escape)
        libc::SYS_name_to_handle_at, // companion of open_by_handle_at
        libc::SYS_fanotify_init,     // file system wide event monitoring
        libc::SYS_quotactl,          // disk quota control
        libc::SYS_lookup_dcookie,    // kernel profiling path lookup
        libc::SYS_syslog,            // the kernel log
        libc::SYS_vhangup,           // hang up the terminal
        libc::SYS_kcmp,              // compares kernel objects of two processes (leaks kernel pointer order)
        libc::SYS_process_madvise,   // advises (e.g. pages out) another process's memory
        libc::SYS_process_mrelease,  // reaps another (dying) process's memory
        libc::SYS_quotactl_fd,       // disk quota control, by descriptor
        libc::SYS_migrate_pages,     // moves another process's pages between NUMA nodes
        libc::SYS_move_pages,        // the same, page by page
        nr::CACHESTAT,               // page-cache residency of any readable file: a side channel
        nr::STATMOUNT,               // mount details by id (a tool reads /proc/self/mountinfo)
        nr::LISTMOUNT,               // mount ids, the companion of statmount
        nr::LSM_GET_SELF_ATTR,       // the host's security-module labels
        nr::LSM_SET_SELF_ATTR,       // change the process's security-module attributes
        nr::LSM_LIST_MODULES,        // which security modules the host runs
        nr::OPEN_TREE_ATTR,          // new mount API: clone a mount tree with new attributes
    ];
    // Allowed on purpose, although recent: pidfd_getfd (it needs ptrace
    // access to the target, so it reaches only the tool's own processes, not
    // the non-dumpable PID 1; the airlock-fs client duplicates its own fd 3
    // with it), landlock_* and seccomp (they only restrict the caller), mseal and map_shadow_stack (the caller's own
    // memory), memfd_secret (private memory), {set,get,list,remove}xattrat
    // and file_{get,set}attr (the *xattr calls and FS_IOC_FS[GS]ETXATTR
    // with a directory descriptor), futex_* and fchmodat2.
    for nr in always {
        eperm.insert(*nr, Vec::new());
    }
    // System V IPC and POSIX message queues hold memory no rlimit counts (ipc.rs).
    for (nr, _) in crate::ipc::DENIED_CALLS {
        eperm.insert(*nr, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    {
        eperm.insert(libc::SYS_iopl, Vec::new()); // raise the I/O privilege level
        eperm.insert(libc::SYS_ioperm, Vec::new()); // raw I/O port access
        eperm.insert(libc::SYS_modify_ldt, Vec::new()); // 16-bit segments, a historic attack surface
        eperm.insert(libc::SYS_uselib, Vec::new()); // obsolete a.out loader
    }
    // personality(2): only PER_LINUX (0) and the query are allowed; other
    // personas change address-space layout or syscall semantics.
    eperm.insert(
        libc::SYS_personality,
        vec![rule(vec![cond(0, SeccompCmpOp::Ne, 0), cond(0, SeccompCmpOp::Ne, PERSONALITY_QUERY)])],
    );
    // clone(2): denied when any namespace flag is set (one rule per flag:
    // rules are OR-ed, conditions within a rule AND-ed). The flags are
    // argument 0 on every supported architecture.
    eperm.insert(
        libc::SYS_clone,
        CLONE_NAMESPACE_FLAGS
            .iter()
            .map(|(flag, _)| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*flag), *flag)]))
            .collect(),
    );

    // socket(2), socketpair(2): denied when the family is none of the
    // allowed ones (one rule, its conditions AND-ed).
    let foreign_family =
        || rule(ALLOWED_SOCKET_FAMILIES.iter().map(|(family, _)| cond32(0, SeccompCmpOp::Ne, *family)).collect());
    let mut eafnosupport: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    eafnosupport.insert(libc::SYS_socket, vec![foreign_family()]);
    eafnosupport.insert(libc::SYS_socketpair, vec![foreign_family()]);

    let mut enosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // clone3(2) passes its flags in memory the filter cannot read: make the
    // C library fall back to clone(2).
    enosys.insert(libc::SYS_clone3, Vec::new());
    WorkerFilterRules { eperm, eafnosupport, enosys }
}

fn target_arch() -> Result<TargetArch, SandboxError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SandboxError::Seccomp(format!("unsupported arch: {e:?}")))
}

/// Compiles [`worker_filter_rules`] to the BPF programs to install, in order.
pub(crate) fn compile_worker_filters() -> Result<Vec<BpfProgram>, SandboxError> {
    let rules = worker_filter_rules();
    let arch = target_arch()?;
    let compile = |table, errno: i32| -> Result<BpfProgram, SandboxError> {
        let filter = SeccompFilter::new(table, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch)
            .map_err(|e| SandboxError::Seccomp(format!("filter: {e}")))?;
        BpfProgram::try_from(filter).map_err(|e| SandboxError::Seccomp(format!("compile: {e}")))
    };
    let mut programs = vec![
        compile(rules.eperm, libc::EPERM)?,
        compile(rules.eafnosupport, libc::EAFNOSUPPORT)?,
        compile(rules.enosys, libc::ENOSYS)?,
    ];
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_filter());
    Ok(programs)
}

// Classic BPF opcodes used by the hand-written x32 program.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// x86_64 only: `ENOSYS` for x32-ABI system call numbers (bit 30 set),
/// which would otherwise reach the kernel under numbers the deny list does
/// not name.
#[cfg(target_arch = "x86_64")]
fn x32_filter() -> BpfProgram {
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    let f = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        f(BPF_LD_W_ABS, 0, 0, 4),                                    // A = seccomp_data.arch
        f(BPF_JMP_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),                   // x86_64? go on : allow (checked elsewhere)
        f(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),                       //
        f(BPF_LD_W_ABS, 0, 0, 0),                                    // A = seccomp_data.nr
        f(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),                     // x32 number?
        f(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32), // yes: ENOSYS
        f(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),                       // no: allow
    ]
}

/// Installs the programs on the calling thread (no-new-privs must be set).
pub(crate) fn install(programs: &[BpfProgram]) -> Result<(), SandboxError> {
    for p in programs {
        seccompiler::apply_filter(p)
            .map_err(|e| SandboxError::Seccomp(format!("seccomp(SECCOMP_SET_MODE_FILTER): {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the instructions seccompiler emits, so
    /// the compiled filter is tested without installing it.
    fn run(prog: &[sock_filter], nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&(nr as i32).to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let ins = &prog[pc];
            pc += 1;
            match ins.code {
                0x20 => a = u32::from_le_bytes(data[ins.k as usize..ins.k as usize + 4].try_into().unwrap()),
                0x54 => a &= ins.k, // ALU AND K
                0x05 => pc += ins.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let hit = match ins.code {
                        0x15 => a == ins.k,
                        0x25 => a > ins.k,
                        0x35 => a >= ins.k,
                        _ => a & ins.k != 0,
                    };
                    pc += if hit { ins.jt } else { ins.jf } as usize;
                }
                0x06 => return ins.k,
                other => panic!("unhandled BPF opcode {other:#x}"),
            }
        }
    }

    fn arch() -> u32 {
        match std::env::consts::ARCH {
            "x86_64" => 62 | 0x8000_0000 | 0x4000_0000,
            "aarch64" => 183 | 0x8000_0000 | 0x4000_0000,
            other => panic!("no test arch for {other}"),
        }
    }

    /// The combined verdict of all programs, as the kernel takes it: the
    /// lowest action value compared as `s32` wins (KILL_PROCESS < … < ERRNO < ALLOW).
    fn verdict(nr: i64, args: [u64; 6]) -> u32 {
        let progs = compile_worker_filters().unwrap();
        progs.iter().map(|p| run(p, nr, arch(), args)).min_by_key(|r| (*r & 0xffff_0000) as i32).unwrap()
    }

    const EPERM: u32 = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const EAFNOSUPPORT: u32 = SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;

    /// Families the kernel has assigned (AF_MAX is 46 in Linux 6.x) and a
    /// few it has not.
    const FAMILIES: std::ops::Range<u64> = 0..64;

    #[test]
    fn rules_name_every_required_call() {
        let r = worker_filter_rules();
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_move_mount,
            libc::SYS_open_tree,
            libc::SYS_fsopen,
            libc::SYS_fsconfig,
            libc::SYS_fsmount,
            libc::SYS_fspick,
            libc::SYS_mount_setattr,
            libc::SYS_keyctl,
            libc::SYS_add_key,
            libc::SYS_request_key,
            libc::SYS_bpf,
            libc::SYS_perf_event_open,
            libc::SYS_userfaultfd,
            libc::SYS_kexec_load,
            libc::SYS_kexec_file_load,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_chroot,
            libc::SYS_acct,
            libc::SYS_swapon,
            libc::SYS_swapoff,
            libc::SYS_reboot,
            libc::SYS_open_by_handle_at,
            libc::SYS_name_to_handle_at,
            libc::SYS_fanotify_init,
            libc::SYS_quotactl,
            libc::SYS_lookup_dcookie,
            libc::SYS_kcmp,
            libc::SYS_process_madvise,
            libc::SYS_process_mrelease,
            libc::SYS_quotactl_fd,
            libc::SYS_migrate_pages,
            libc::SYS_move_pages,
            nr::CACHESTAT,
            nr::STATMOUNT,
            nr::LISTMOUNT,
            nr::LSM_GET_SELF_ATTR,
            nr::LSM_SET_SELF_ATTR,
            nr::LSM_LIST_MODULES,
            nr::OPEN_TREE_ATTR,
        ] {
            assert_eq!(r.eperm.get(&nr).map(Vec::len), Some(0), "syscall {nr} must be denied unconditionally");
        }
        assert_eq!(r.eperm[&libc::SYS_clone].len(), CLONE_NAMESPACE_FLAGS.len());
        assert_eq!(r.eperm[&libc::SYS_personality].len(), 1);
        assert!(r.enosys.contains_key(&libc::SYS_clone3));
        assert_eq!(r.eafnosupport.keys().copied().collect::<Vec<_>>(), [libc::SYS_socket, libc::SYS_socketpair]);
        for rules in r.eafnosupport.values() {
            assert_eq!(rules.len(), 1, "one rule: the family is none of the allowed ones");
        }
        let allowed_new: [i64; 13] = [
            libc::SYS_pidfd_getfd, // the airlock-fs client takes its own fd 3 with it
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
            libc::SYS_seccomp,
            libc::SYS_mseal,
            libc::SYS_memfd_secret,
            libc::SYS_fchmodat2,
            libc::SYS_futex_waitv,
            463, // setxattrat
            464, // getxattrat
            468, // file_getattr
            469, // file_setattr
        ];
        let common = [libc::SYS_read, libc::SYS_write, libc::SYS_execve, libc::SYS_openat, libc::SYS_exit_group];
        for nr in common.into_iter().chain(allowed_new) {
            assert!(
                !r.eperm.contains_key(&nr) && !r.enosys.contains_key(&nr) && !r.eafnosupport.contains_key(&nr),
                "syscall {nr} must stay allowed"
            );
        }
    }

    #[test]
    fn rules_are_deterministic() {
        let (a, b) = (worker_filter_rules(), worker_filter_rules());
        assert_eq!(a.eperm, b.eperm);
        assert_eq!(a.enosys, b.enosys);
        assert_eq!(a.eafnosupport, b.eafnosupport);
    }

    #[test]
    fn compiled_filter_denies_and_allows() {
        assert_eq!(verdict(libc::SYS_ptrace, [0; 6]), EPERM);
        assert_eq!(verdict(libc::SYS_unshare, [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]), EPERM);
        assert_eq!(verdict(libc::SYS_mount, [0; 6]), EPERM);
        assert_eq!(verdict(libc::SYS_io_uring_setup, [0; 6]), EPERM);
        assert_eq!(verdict(libc::SYS_read, [0; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_execve, [0; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_clone3, [0; 6]), ENOSYS);
    }

    #[test]
    fn clone_is_denied_only_with_namespace_flags() {
        // What fork() and pthread_create() pass.
        let fork_flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        let thread_flags = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        assert_eq!(verdict(libc::SYS_clone, [fork_flags, 0, 0, 0, 0, 0]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_clone, [thread_flags, 0, 0, 0, 0, 0]), SECCOMP_RET_ALLOW);
        for (flag, name) in CLONE_NAMESPACE_FLAGS {
            assert_eq!(verdict(libc::SYS_clone, [fork_flags | flag, 0, 0, 0, 0, 0]), EPERM, "{name}");
        }
    }

    /// ATTACKS case 26: only unix, inet and inet6 sockets open.
    #[test]
    fn socket_families_outside_the_allow_list_get_eafnosupport() {
        let allowed: Vec<u64> = ALLOWED_SOCKET_FAMILIES.iter().map(|(f, _)| *f).collect();
        assert_eq!(allowed, [libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64]);
        for call in [libc::SYS_socket, libc::SYS_socketpair] {
            for family in FAMILIES {
                let want = if allowed.contains(&family) { SECCOMP_RET_ALLOW } else { EAFNOSUPPORT };
                let args = [family, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
                assert_eq!(verdict(call, args), want, "syscall {call}, family {family}");
            }
            for family in [
                libc::AF_VSOCK,
                libc::AF_NETLINK,
                libc::AF_PACKET,
                libc::AF_ALG,
                libc::AF_BLUETOOTH,
                libc::AF_KEY,
                libc::AF_XDP,
                libc::AF_TIPC,
                libc::AF_RDS,
                libc::AF_CAN,
            ] {
                assert_eq!(verdict(call, [family as u64, 0, 0, 0, 0, 0]), EAFNOSUPPORT, "family {family}");
            }
            assert_eq!(verdict(call, [u32::MAX as u64, 0, 0, 0, 0, 0]), EAFNOSUPPORT);
        }
    }

    /// The kernel reads the family as an `int`: bits above 31 neither open
    /// a denied family nor close an allowed one.
    #[test]
    fn socket_family_is_compared_on_its_low_32_bits() {
        let high = 0xdead_beef_0000_0000u64;
        assert_eq!(verdict(libc::SYS_socket, [high | libc::AF_VSOCK as u64, 1, 0, 0, 0, 0]), EAFNOSUPPORT);
        assert_eq!(verdict(libc::SYS_socket, [high | libc::AF_NETLINK as u64, 3, 0, 0, 0, 0]), EAFNOSUPPORT);
        assert_eq!(verdict(libc::SYS_socket, [high | libc::AF_UNIX as u64, 1, 0, 0, 0, 0]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_socketpair, [high | libc::AF_INET as u64, 1, 0, 0, 0, 0]), SECCOMP_RET_ALLOW);
    }

    #[test]
    fn socket_rules_touch_no_other_call() {
        for nr in [libc::SYS_connect, libc::SYS_bind, libc::SYS_sendto, libc::SYS_accept4] {
            assert_eq!(verdict(nr, [libc::AF_VSOCK as u64, 0, 0, 0, 0, 0]), SECCOMP_RET_ALLOW, "syscall {nr}");
        }
    }

    #[test]
    fn recent_calls_are_denied_by_number() {
        for nr in [
            nr::OPEN_TREE_ATTR,
            nr::STATMOUNT,
            nr::LISTMOUNT,
            nr::LSM_SET_SELF_ATTR,
            nr::CACHESTAT,
            libc::SYS_mount_setattr,
            libc::SYS_fsconfig,
            libc::SYS_move_mount,
            libc::SYS_process_madvise,
            libc::SYS_kcmp,
        ] {
            assert_eq!(verdict(nr, [0; 6]), EPERM, "syscall {nr}");
        }
        assert_eq!(verdict(libc::SYS_mseal, [0; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_landlock_create_ruleset, [0; 6]), SECCOMP_RET_ALLOW);
    }

    #[test]
    fn personality_allows_only_linux_and_query() {
        assert_eq!(verdict(libc::SYS_personality, [0; 6]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_personality, [PERSONALITY_QUERY, 0, 0, 0, 0, 0]), SECCOMP_RET_ALLOW);
        assert_eq!(verdict(libc::SYS_personality, [0x0040000, 0, 0, 0, 0, 0]), EPERM);
        // ADDR_NO_RANDOMIZE
    }

    #[test]
    fn foreign_arch_is_killed() {
        let progs = compile_worker_filters().unwrap();
        const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
        assert_eq!(run(&progs[0], libc::SYS_read, AUDIT_ARCH_I386, [0; 6]), 0x8000_0000);
        // KILL_PROCESS
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_get_enosys() {
        assert_eq!(verdict(X32_SYSCALL_BIT as i64 + 101, [0; 6]), ENOSYS);
    }
}
