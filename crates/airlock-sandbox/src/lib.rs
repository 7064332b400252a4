//! airlock-sandbox: run one tool with exactly the files it was granted.
//!
//! A [`Tier`] starts a [`Worker`] from a [`WorkerSpec`]: a command, its
//! staged inputs (read-only), at most one staged output (writable, bounded),
//! a read-only image of host directories, limits and a deadline.
//! [`Worker::wait`] collects bounded stdout/stderr, kills everything at the
//! deadline, reaps every descendant, and returns a [`WorkerOutcome`] that
//! says how the tool ended, what was exported, which limits were in force
//! and whether cleanup is confirmed.
//!
//! The native tier ([`NativeTier`]) re-executes the caller's own binary as
//! the sandbox init (see [`init::maybe_run_init`]), which builds the worker
//! with Linux primitives only: user, pid, mount, network, IPC, UTS and
//! cgroup namespaces; a fresh tmpfs root with `pivot_root`; Landlock;
//! seccomp; capabilities dropped; no-new-privs; rlimits; and a delegated
//! cgroup v2 where the host offers one. A long-lived caller can keep a
//! [`WarmPool`] of single-use skeletons of such sandboxes, built before
//! their calls ([`NativeTier::warm_pool`]; DESIGN.md §3 "Warm sandboxes"):
//! the same guarantees, from the same code once the call's files arrive.
//!
//! The gVisor tier ([`GvisorTier`], module [`gvisor`]) runs each worker in
//! its own `runsc` sandbox from an OCI bundle with the same files, identity
//! and limits; its promises and what it trusts are in that module and in
//! DESIGN.md §3 "gVisor tier". Its tests are `tests/gvisor.rs`.
//!
//! The microVM tier ([`MicrovmTier`], module [`microvm`]) runs each worker
//! in its own QEMU `microvm` VM on its own kernel, with the airlock binary
//! as the guest's PID 1 ([`microvm::guest`]) and bytes (never mounts)
//! crossing a virtio-serial port in the framed protocol of
//! [`microvm::frame`]; see DESIGN.md §3 "microVM tier". Its tests are the
//! CLI's `conformance.rs` and `microvm.rs`.
//!
//! # What the native tier guarantees
//!
//! - The worker sees no host file or directory but the read-only image
//!   (default `/usr`, `/bin`, `/sbin`, `/lib*`), `/etc/ld.so.cache`,
//!   `/etc/alternatives`, and `/dev/{null,zero,urandom}`. Inputs are private
//!   copies, read-only twice over (a read-only bind and a Landlock rule);
//!   the output is a fresh file on the sandbox's own tmpfs, copied out only
//!   after every sandbox process is gone, only if it is still the inode the
//!   sandbox created, and only up to `max_bytes`.
//! - It runs as uid/gid 65534 in a new user namespace with only that id
//!   mapped: to the caller's own uid/gid for an unprivileged caller, and to
//!   host uid/gid 65534 with no supplementary groups for a root caller (never
//!   to host root). It has no capabilities, no new privileges, its own pid
//!   namespace (whose PID 1 is non-dumpable: `/proc/1` cannot be inspected),
//!   an empty network namespace (plus Landlock TCP rules, ABI ≥ 4), signals
//!   and abstract sockets scoped to the sandbox (ABI ≥ 6), and a seccomp deny
//!   list for namespace, mount, ptrace, BPF, io_uring, keyring and module calls
//!   and calls that reach into another process. Only unix, inet and inet6
//!   sockets open; any other family (vsock, netlink, packet, …) fails with
//!   `EAFNOSUPPORT`.
//! - Its `/proc` is a fresh instance with the OCI runtime spec's default
//!   masked paths hidden and its read-only paths (`/proc/sys`, …) read-only,
//!   plus the host's kernel command line and configuration, symbols, modules,
//!   boot id, memory and disk statistics hidden.
//! - `RLIMIT_FSIZE` stops any file (write, truncate, fallocate) growing past
//!   `file_size`; `RLIMIT_NPROC`, `RLIMIT_AS`, `RLIMIT_NOFILE`, `RLIMIT_CPU`
//!   apply as given; a delegated cgroup v2 adds `memory.max`/`pids.max`
//!   ([`NativeTier::require_cgroup`] refuses to run without one). System V
//!   IPC and POSIX message queues are denied (their memory is counted by no
//!   rlimit). The stdout/stderr pipes are drained so the worker never blocks
//!   on them; only the first N bytes are kept.
//! - Nothing outlives the call: when the tool exits, PID 1 kills and reaps
//!   everything left in the namespace before it exports; on timeout or kill
//!   the init dies and the kernel tears the namespace down.
//!   [`WorkerOutcome::cleanup_confirmed`] is set only when that is verified.
//! - Every limit the host could not apply is reported in
//!   [`WorkerOutcome::limits`], never dropped silently.
//!
//! # What it does not do
//!
//! - It is not a defence against kernel bugs: the worker shares the host
//!   kernel (a gVisor or microVM tier is for that).
//! - It does not hide the image: whatever the image directories hold is
//!   readable (and executable) by the tool. `/proc` still shows the CPUs,
//!   load, uptime and kernel version, and `sysinfo(2)` the host's memory.
//! - An unprivileged caller's supplementary groups stay attached to the
//!   worker (unmapped, shown as `nogroup`): the kernel does not let an
//!   unprivileged process drop them. All root callers' workers share host
//!   id 65534; they are kept apart by namespaces and Landlock, not by uid.
//! - There is no loopback interface: the worker has no network at all.
//! - A descendant that writes to the output in the microseconds between the
//!   tool's exit and PID 1's `kill(-1)` is not distinguished from the tool.
//! - Without a delegated cgroup, memory is bounded per process
//!   (`RLIMIT_AS`) and processes per user (`RLIMIT_NPROC`): memfd contents
//!   (each at most `RLIMIT_FSIZE`, as many as `RLIMIT_NOFILE` allows), pipe
//!   and socket buffers and kernel memory are not bounded by `memory_bytes`.
//!   [`AppliedLimits::memory`] and [`AppliedLimits::memfd`] say which held.
//! - CPU time is bounded only when `cpu_seconds` is set; disk and I/O
//!   bandwidth are not bounded (the tmpfs sizes bound space).
//! - The caller must call [`init::maybe_run_init`] first in `main()`. If the
//!   *caller* dies, the worker is killed by the init's own deadline
//!   (timeout + 3 s), not at once.
//!
//! # How the native tier builds a worker
//!
//! The caller never forks without exec: the `airlock` binary re-executes itself
//! as the sandbox init (a hidden marker argument, checked first in `main`) and
//! passes the spec on a pipe and the staged files as inherited descriptors. The
//! init unshares the user, pid, network, IPC, UTS and cgroup namespaces; PID 1
//! unshares the mount namespace and builds a size-bounded tmpfs root (image
//! directories bound read-only, a minimal `/etc` and `/dev`, a fresh `/proc`,
//! a private `/tmp`). It **copies each input's bytes into the tmpfs and binds
//! the copy read-only onto itself**, so no host inode, not even a private one,
//! is mounted into the worker; it creates the output file and keeps its inode,
//! then `pivot_root`s and detaches the old root. A staged file over 8 MiB
//! (an output whose bound is; only raised `[limits]` allow one) is the
//! exception: the caller's private staged inode itself is mounted, read-only
//! for an input, so a large file is neither copied again nor held in memory,
//! and the worker can read that file's host path in its mount table
//! (`placement.rs` says how, for root and unprivileged callers;
//! `bound_output.rs` what PID 1 checks after the run). The worker runs as 65534 with
//! no capabilities, `no_new_privs`, rlimits (`RLIMIT_FSIZE` = the output's
//! `max_file_bytes`), Landlock (the kernel's ABI) and a seccomp deny-list. PID 1
//! is non-dumpable, reaps everything, kills the namespace when the tool exits
//! and only then exports at most `max_bytes` (the call's `max_file_bytes`)
//! from the retained inode to the
//! host staging file. When the caller is killed, `PR_SET_PDEATHSIG` takes the
//! init, and PID 1's own death signal takes the namespace. The caller's private
//! copies (staged inputs, the exported output) live in the call's staging-pool
//! reservation.
//!
//! # Live stdio
//!
//! [`NativeTier::start_live`]: a fresh pipe's read end is inherited by the init
//! (`InitSpec.stdin_fd`) and `dup2`ed to the worker's fd 0 instead of
//! `/dev/null`; the caller keeps its write end and the stdout pipe's read end
//! ([`LiveStdio`]); `wait` then drains only stderr and the status records.
//! Same confinement, same deadline. Used by `[mcp]` tools, whose server speaks over
//! stdio.
//!
//! # Worker-created output
//!
//! [`NativeTier::worker_creates_output`], used for `[mcp]` tools: the reference
//! filesystem server writes with `O_EXCL` and, if the file exists, a temp file
//! plus `rename`; neither works on a retained, pre-created output inode. With
//! the option, PID 1 does not create the output; the output's parent directory
//! gets its own recursive bind (inputs inside stay read-only binds) so it stays
//! writable when the root goes read-only, and Landlock grants it read, write,
//! truncate, list and make-regular only (no remove, symlink, directory, FIFO,
//! link or refer). After every process is gone, PID 1 opens the output path
//! with `O_NOFOLLOW`, requires a regular file with one link within `max_bytes`,
//! and exports it; a missing output is refused. Other files made there stay in
//! the private tmpfs and are discarded. This is weaker than the retained inode
//! in one way only: the worker may create scratch files beside its output.
//!
//! # A bound program
//!
//! [`NativeTier::bind_program`] (the Git driver): the open executable is bound
//! read-only at [`PROGRAM_PATH`] (`/.airlock/program`), and Landlock grants read
//! and execute on that file only. The descriptor belongs to the caller's mount
//! namespace, from which the kernel will not bind, so PID 1 binds the path
//! `/proc/self/fd/N` names in its copied namespace and then requires the bound
//! inode to equal the descriptor's.
//!
//! # Promises and the tests that hold them (`tests/native/`)
//!
//! | promise | test |
//! |---|---|
//! | uid 65534, no capabilities, no-new-privs, seccomp on | `worker_runs_as_65534_without_capabilities` |
//! | only fds 0, 1, 2 reach the tool | `only_stdio_descriptors_reach_the_worker` |
//! | only the expected mounts; no staging path visible | `mountinfo_shows_only_the_expected_mounts` |
//! | no file beside an input, no host secret, no network | `a_file_beside_the_input_…`, `the_network_is_unreachable` |
//! | no namespaces, mounts, ptrace; PID 1 opaque | `namespaces_mounts_and_ptrace_are_denied`, `pid_1_cannot_be_inspected` |
//! | only unix, inet, inet6 sockets (ATTACKS 26) | `surface::attacks_26_only_unix_inet_and_inet6_sockets_open_in_the_worker` |
//! | host details in `/proc` masked, tunables read-only (ATTACKS 27) | `surface::attacks_27_*` |
//! | inputs immutable; output not deletable or replaceable | `the_input_cannot_be_changed…`, `the_output_cannot_be_deleted_or_replaced` |
//! | write/truncate/fallocate past `file_size` fail; over `max_bytes` not exported | `*_past_the_file_size_limit_fails`, `an_output_over_max_bytes_is_not_exported` |
//! | nothing written late; nothing survives | `a_detached_child_does_not_write_late`, `a_timeout_kills_everything` |
//! | bounded stdout never hangs | `stdout_is_bounded_and_drained` |
//! | System V IPC and POSIX queues denied; a memfd stops at `file_size`; a required cgroup refuses | `limits::*` |
//! | live stdio ([`NativeTier::start_live`]): answers flow while the worker runs, same files and fds, deadline holds | `live::*` |
//! | same confinement for an unprivileged caller | `unprivileged::*` (the whole suite re-run as uid 65534) |
//! | a bound program runs, cannot be written, nothing beside it | `program::a_bound_program_runs_read_only_and_alone` |
//! | the fs socket is fd 3 of the worker alone (`AIRLOCK_FS_FD=3`); nothing else is added | `fs_socket::*` |
//! | provided files are read-only copies; executables run, data does not | `provided::*` |
//!
//! # The filesystem broker
//!
//! [`broker_jail`] starts the broker from a [`SealedProgram`] (a hashed,
//! sealed in-memory copy: the bytes that were approved are the bytes that
//! run) with only a socket and its root handles, and [`confine_broker`] is
//! what the broker calls first: an empty read-only root, no capabilities,
//! Landlock to its roots' rights and a default-deny seccomp allowlist.
//!
//! ```no_run
//! use airlock_sandbox::{NativeTier, StagedInput, Tier, Worker, WorkerSpec};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! airlock_sandbox::init::maybe_run_init();
//! let tier = NativeTier::new(std::fs::read_link("/proc/self/exe")?);
//! let mut spec = WorkerSpec::new(["wc", "-c", "in.txt"]);
//! spec.inputs.push(StagedInput { virtual_path: "in.txt".into(), file: std::fs::File::open("/srv/staged/in")?, held: false });
//! let outcome = tier.start(spec)?.wait()?;
//! println!("{:?} {}", outcome.exit, String::from_utf8_lossy(&outcome.stdout));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod any_tier;
mod bound_output;
pub mod broker_jail;
mod call_channel;
mod call_dir;
mod cancel;
mod cgroup;
pub mod docker;
mod error;
mod gate;
pub mod gvisor;
mod held;
mod id_maps;
pub mod init;
mod ipc;
mod landlock;
pub mod microvm;
mod mount_calls;
mod mount_ns;
mod mounts;
pub mod native;
mod outcome;
mod parent;
mod pid1;
mod placement;
mod probe;
mod proc_masks;
mod proc_status;
mod ready;
mod sealed;
mod seccomp;
mod spec;
mod sys;
mod tier_report;
mod visible;
mod warm;
mod wire;
mod worker;
mod worker_exec;

pub use any_tier::{AnyTier, AnyWorker};
pub use broker_jail::{
    confine_broker, spawn_broker, spawn_broker_with, start_writeback_after_append, BrokerOptions, BrokerProcess,
    BROKER_FIRST_ROOT_FD, DEFAULT_MAX_FILE_BYTES,
};
pub use cancel::Cancel;
pub use cgroup::{cgroup_delegation, cgroup_limits_available, CgroupDelegation, SharedCgroup};
pub use docker::{DockerSettings, DockerTier, DockerWorker};
pub use error::{OsErrno, SandboxError, SandboxErrorKind};
pub use gate::{start_gate, GateOpener, StartGate};
pub use gvisor::{GvisorPlatform, GvisorSettings, GvisorTier, GvisorWorker};
pub use held::{lease_support, HeldInput};
pub use ipc::IPC_ENFORCEMENT;
pub use microvm::{Accel, MicrovmSettings, MicrovmTier, MicrovmWorker, Vmm};
pub use native::{LiveStdio, NativeTier};
pub use outcome::{AppliedLimits, Enforcement, ExitStatusKind, OutputExport, WorkerOutcome};
pub use parent::NativeWorker;
pub use placement::BIND_MIN_BYTES;
pub use probe::{probe, HostSupport};
pub use sealed::{seal_memory_file, SealedProgram};
pub use spec::{
    ImageMount, ProvidedFile, StagedInput, StagedOutput, WorkerLimits, WorkerSpec, FS_SOCKET_ENV, FS_SOCKET_FD,
    MAX_PROVIDED_FILES, PROGRAM_PATH, PROVIDED_DIR, STDOUT_TAIL,
};
pub use tier_report::{Leftover, TierReport};
pub use visible::{find_program, NotRunnable, WORKER_PATH};
pub use warm::{PoolBusy, WarmPool, WarmPoolStats, MAX_IDLE as WARM_MAX_IDLE};
pub use worker::{KillHandle, Tier, Worker};
