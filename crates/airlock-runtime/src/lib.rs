//! airlock-runtime: the pipeline as a library.
//!
//! A [`Runtime`] is opened once per process from a [`Config`] and a
//! [`HostAuthority`]. [`Runtime::prepare`] walks step 1 of DESIGN.md §1 and
//! returns a [`PreparedCall`]: inputs snapshotted into the call's staging
//! reservation through handles, the output's parent held, and the descriptor
//! built and digested. [`Runtime::run`] takes a call through every step;
//! [`Runtime::dispatch`] continues a call that was prepared and kept.
//!
//! ```no_run
//! use airlock_core::Config;
//! use airlock_hostfs::HostAuthority;
//! use airlock_runtime::{new_invocation_id, CallRequest, Runtime};
//! let config = Config::embedded_default(".".as_ref());
//! let runtime = Runtime::open(HostAuthority::ambient(), config, None)?;
//! let call = runtime.prepare(&CallRequest {
//!     tool: "wordcount".into(),
//!     positional: vec!["data/in.txt".into(), "results/out.json".into()],
//!     invocation_id: new_invocation_id(),
//!     ..Default::default()
//! })?;
//! println!("{}", call.digest());
//! # Ok::<(), airlock_core::Refusal>(())
//! ```
//!
//! # Ceilings and control files
//!
//! A ceiling directory that is itself a symlink is refused (`path.symlink`),
//! since another host process could have swapped it. `/proc`, `/sys` and
//! `/dev` are judged on the path the kernel reports for the opened handle.
//! A ceiling inside the state directory is always refused; a ceiling may
//! contain the state directory only when the state directory sits under a
//! control-directory name (`.airlock`), which the path grammar makes
//! unreachable. That exception is kept by identity: walking up from the
//! state handle, each step's name is the last component of the kernel's path
//! for the handle, confirmed by `fstatat(parent, name, NOFOLLOW)`; a ceiling
//! above the first control-named step is allowed.
//!
//! The config file (or, with none, `./airlock.toml` where discovery would find
//! one), `tools_dir`, the directory of each `[policy] files` pattern and the
//! state directory are airlock's control files ([`control::ControlFiles::of`]:
//! one line a kind). At start-up every directory holding one is collected as
//! `(dev, ino)`: for each existing prefix of its path, the directory opened
//! (`O_PATH`) and every directory above it by `openat(fd, "..")` up to `/`, so
//! a link on the way counts where it lies and where it leads, and a missing
//! file where it would be made. A ceiling or broker root whose opened handle
//! is one of them is `config.control_file_exposed` (refused, 78), whatever its
//! mode: checked for existing ceilings and `[broker.roots]` at start-up, and
//! again whenever a ceiling or root is opened. A bind mount of the project has
//! the project's identity.
//!
//! Control files are read by `airlock_hostfs::read_control_file` (the file
//! opened beneath its directory's handle without following a link, owner and
//! mode of both from `fstat` on those handles); owned by someone other than
//! the euid or root, or writable by group or others, is
//! `config.control_file_unsafe` (78), like a symlink. Only the direct
//! directory is checked, not every ancestor (ssh checks up to the home
//! directory). `policy schema`'s tool list still reads manifests plainly: it
//! types policies, and no call runs from it.
//!
//! # Prepared calls and invocation ids
//!
//! A prepared call lives in `STATE/invocations/ID/` (`prepared.json` and the
//! exact manifest bytes; its snapshots are in its staging reservation), built
//! under a temporary name and renamed into place with `RENAME_NOREPLACE`; a
//! reused id is `invocation.duplicate`. `STATE/invocations/ID` is created for
//! every prepared call and for every refusal that named a valid id, so an id
//! the journal has seen is refused before any file is read. A call run at once
//! (`airlock run`) does not sync its prepared record (nothing later needs it to
//! survive a crash); `airlock prepare` does.
//!
//! # One manifest read per call (ATTACKS 24)
//!
//! [`Runtime::run`] reads the manifest once (`tools::LoadedTool`: bytes and
//! parse) and hands it to prepare. Whether the call stops for approval is
//! decided from the prepared descriptor (`risk_tier`, `human_approval`), which
//! binds the same bytes by `manifest_sha256`, and Cedar's `ToolSpec` is built
//! from the same parse.
//!
//! # Principals (ATTACKS 21)
//!
//! A call's principal is its request's (`CallRequest.principal`, set by a front
//! from an authenticated identity: the MCP transport, the command line's
//! `--principal`), else `[policy] principal` (default `local`). It is
//! registered for the invocation id while the call runs (`caller.rs`), and
//! `Runtime::record`/`Runtime::note` put it in every journal record body
//! of that call (`"principal"`); records of no call (recovery, approvals)
//! carry the acting process's. The prepared record keeps it (`prepared.json`
//! format 2), so a dispatched call stays its preparer's: Cedar judges the
//! preparer, whoever dispatches. The envelope's `evidence.principal` and the
//! attestation's `predicate.principal` name it.
//!
//! # Authorization
//!
//! With `[policy] files`, [`CedarPolicy`] judges the call (`airlock-policy`);
//! without, [`DefaultPolicy`] evaluates the built-in default natively. Approved
//! calls pass the default's permit; its forbid (a Git snapshot with
//! `linked_files > 0`) wins over everything. A run builds the Cedar policy set
//! for its one tool (5–11 ms); a long-lived server should cache it per tool.
//! Cedar sees `context.invocation.approved` (an approver's approval of this
//! exact call was verified and consumed), so a policy can say "high risk needs
//! a permit and an approval".
//!
//! # Approval
//!
//! `needs_approval` = risk tier high or critical, or `human_approval`. The run
//! stops after a durable prepare whose record holds the principal,
//! `prepared_at` and `expires_at` (`[approval] ttl`, default 24 h, ≤ 30 d);
//! the agent's answer names the invocation id and digest and gives no command.
//! An approval is a signed statement (DESIGN.md §3, "Journal") by the
//! approver's own key; `[[approval.approvers]]` pins `id` and `public_key =
//! "ed25519:<64 hex>"` (the journal key's text form; points checked at
//! start-up).
//!
//! `airlock approve` loads the key (raw 32-byte seed, `O_NOFOLLOW`, owned by
//! the caller, `0600`, one link, in a directory no other user may write, and,
//! by `(dev, ino)` of every ancestor, not inside a ceiling, a broker root or
//! the state dir; `approver init` creates it under the same rules, by default
//! in `$XDG_CONFIG_HOME/airlock/` or `~/.config/airlock/` made `0700`), finds
//! the one waiting call with the digest (`--invocation` when several share
//! it), stores `STATE/approvals/ID` (replacing a file that does not verify)
//! and journals `ApprovalGranted` (approver, key id, expiry, signature).
//!
//! Dispatch refuses a denied call (`approval.denied`) or an expired one
//! (`approval.expired`) before reading anything, then verifies the stored
//! approval against the pinned keys only (`approval.no_approvers`,
//! `approval.unknown_approver`, `approval.invalid` for a bad signature or
//! another digest or invocation, `approval.expired`), and consumes it by a
//! no-replace rename to `ID.used` (+ `ApprovalConsumed` with approver and key
//! id) before `STATE/invocations/ID/dispatched` is created exclusively; it
//! re-hashes every snapshot against the descriptor and re-holds the output
//! parent by its recorded identity. `approvals deny` writes `denied` and then
//! takes the same exclusive `dispatched` marker (of a deny and a dispatch at
//! once, one wins), releases the reservation and journals `ApprovalDenied`.
//!
//! Not covered: an agent that can read an approver's key file can approve
//! (same uid: `airlock doctor` warns when the default key is readable); an
//! approver who must write the state directory to store an approval runs as a
//! user who can.
//!
//! # Resource limits
//!
//! `[sandbox] require_cgroup = true` refuses every worker call with
//! `sandbox.limits_unavailable` (status `refused`, exit 78: the host cannot
//! enforce the configuration, like `sandbox.unavailable`) when no cgroup can
//! hold both the memory and the pids limit. It is checked when the tier is
//! made, before any worker or broker starts, and again by the tier itself
//! before it spawns the init (and after adoption); `airlock doctor` fails with
//! the same code. Every answer of a call that ran a worker (tool, `[mcp]`,
//! isolated, Git driver) carries `evidence.limits` from the sandbox's
//! `AppliedLimits` (`verdict.rs`).
//!
//! # Journaling
//!
//! One record a step through `Runtime::record` (synced before the effect it
//! announces: `WorkerStarted`, `FilePublicationPrepared`,
//! `FilePublicationFinished`) or `Runtime::note` (records that announce no
//! effect: `InvocationPrepared` within a run, `InvocationAuthorized`,
//! `WorkerFinished`, `InvocationRefused`, `InvocationFinished`, appended without
//! their own `fdatasync` and durable with the next synced record). The journal
//! refuses numbers above 2^53, so [`ledger::record`]/[`ledger::note`] turn any
//! integer beyond ±(2^53 − 1) in a body into its decimal string
//! ([`ledger::exact_numbers`]): a step is never left unjournaled by a number.
//! `WorkerStarted` holds `argv` only up to 4 KiB of words (the word that does
//! not fit is cut at a character boundary), with `argv_truncated`,
//! `argv_bytes` and `argv_sha256` (SHA-256 of each word followed by NUL; the
//! full argv is in the descriptor), so a long argument costs a bounded record.
//!
//! An end that cannot be journaled keeps the answer: a call that ran answers
//! with its `created_files` and the journal's error (`journal_end`); an
//! isolated submission whose `WorkerFinished` or `BrokerOperations` fails to
//! append is not ended early by it.
//!
//! # Publication steps and recovery
//!
//! Pending marker `STATE/pending/ID@PID.START` (synced) → candidate written and
//! synced (unnamed; or, without `O_TMPFILE`, `.airlock-candidate-ID`, named
//! from the id so a crash before any record still leaves it findable) →
//! `FilePublicationPrepared` (`candidate_mode` `tmpfile`|`named`,
//! `candidate_name` or null, the candidate's `(dev, ino)`, size, hash) →
//! `linkat` (or `RENAME_NOREPLACE` + identity check) + directory fsync →
//! `FilePublicationFinished` → marker removed.
//!
//! Recovery decides by identity: the output's name holding the recorded inode
//! with the recorded size and hash is `published` (other bytes: `conflict`); a
//! named candidate that is the recorded inode is published by recovery (and
//! checked again after the rename); an unnamed candidate died with its
//! process, so a free name is `never_linked` and settles as nothing published
//! without `--discard`; without an intent, a named candidate is removed only if
//! it is a regular file owned by airlock's user. A marker with a dead owner and
//! no recorded outcome blocks new effects (`journal.unconfirmed`); one whose
//! outcome is recorded is cleared automatically. Test-only crash points
//! (`AIRLOCK_TEST_CRASH_AT`) exist only in debug builds.
//!
//! # Source queries (issue 6)
//!
//! `Runtime::run` dispatches any manifest with `[source]` to the source
//! pipeline (`source.rs`) before staging is touched, so `airlock run`, `airlock
//! query` and MCP get it alike; the Git operations go to the Git pipeline. A
//! source query announces no effect, so an unconfirmed publication does not
//! block it. It uses no worker, no mount, no staging and no worker slot.
//!
//! A name of a bundled operation (`airlock_source::BUNDLED`) with no manifest
//! in `tools_dir` loads the bundled manifest (origin `bundled:NAME.clad.toml`).
//! A manifest of that name in `tools_dir` replaces the bundled one **only if
//! it is itself a valid source manifest for the same operation** (an operator
//! may lower its risk, change its description or drop optional arguments);
//! anything else is `source.shadowed`, so a command tool can never stand in for
//! a source query. `airlock query OP` accepts only source operation names.
//! `airlock tools list` shows the bundled tools (manifest
//! `bundled:NAME.clad.toml`), and policies are validated at start-up (and
//! `airlock policy schema` built) with the bundled tools a project does not
//! shadow.
//!
//! The prepared record (descriptor, no content) is kept in
//! `STATE/invocations/ID` with a `dispatched` marker (so `airlock dispatch` of
//! a source id is `invocation.duplicate`); the result stays in memory.
//! `InvocationPrepared` carries a summary (operation, path, broker hash, result
//! digest, partial, number of ranges and the digest of the ranges list) rather
//! than the ranges, which can exceed a 64 KiB record; the descriptor digest
//! binds the full list. The result enters the envelope (`content`) only after
//! `InvocationAuthorized`; a policy refusal is `InvocationRefused` and the
//! envelope has no content.
//!
//! # Git queries
//!
//! `git_query.rs`: the repository directory is resolved beneath its ceiling
//! through handles and copied by `airlock_git::snapshot::take` into ONE archive
//! file in the call's staging directory. The snapshot reserves
//! `Limits::max_archive_bytes()` in the shared staging pool (purpose
//! `git_snapshot`) before the walk; the reservation is lowered to the
//! archive's real size once it is written and released after the driver is
//! reaped. The control identities it must not enter (`airlock_git::ControlIds`)
//! are the state directory's held handle, `tools_dir` and the config file; a
//! repository or `.git` that is one of them is `path.control_dir`.
//!
//! Cedar sees the query as the action `tool_call::git_status` (etc.) with
//! arguments `path` (String) and `max_count` (Long); these four actions are
//! part of the schema policies are validated against: one list
//! (`policy_files::tool_specs`) serves start-up validation, Git authorization
//! and `airlock policy schema`, and a manifest naming a Git operation never
//! adds a second spec. Without policy files the default permits them unless
//! the snapshot found a hard-linked file (`policy.denied`,
//! `airlock.default.forbid-linked-files`, in the native default and in
//! `airlock policy show-default` alike), so that someone notices; a Cedar
//! policy may permit it and the answer then says so.
//!
//! The driver runs in a native worker whose only file is the archive
//! (`/workspace/snapshot`, a staged input) and whose image holds only `/lib*`
//! and `/usr/lib*` (no shell, no `git`); the `airlock` binary is the driver
//! (`NativeTier::bind_program`), dispatched by `main` on a hidden marker
//! argument before anything else. Driver errors come back as
//! `{"error":{code,message}}` and become the envelope's error; only `git.*`
//! codes are believed, anything else from the worker is `tool.failed`.
//! Refusals reserve the invocation id and are journaled like tool calls; a
//! query that ran journals prepared, authorized, worker started, worker
//! finished and finished. It publishes nothing.
//!
//! # MCP workers
//!
//! The MCP worker client lives here (`mcp_worker/`), not in `airlock-mcp`:
//! `airlock-mcp` depends on the runtime, and the runtime stays synchronous (no
//! tokio). It is a small newline-delimited JSON-RPC client: `initialize`
//! (protocol 2025-06-18) → `notifications/initialized` → `tools/list`
//! (cursors, ≤ 16 pages) → one `tools/call`; server requests are answered
//! -32601, notifications ignored, messages bounded at 8 MiB, every wait
//! bounded by the call's deadline; a reader thread keeps draining stdout after
//! the session so the server never blocks. After a result without `isError`
//! stdin is closed and the server must exit by itself within 5 s
//! (`SHUTDOWN_GRACE`), then the usual judge (cleanup, limits, exit 0) and
//! publication run; anything else kills the worker at once and publishes
//! nothing. The worker runs with live stdio (`NativeTier::start_live`) and
//! creates its own output (`NativeTier::worker_creates_output`).
//!
//! # Isolated submissions (issue 9)
//!
//! `airlock isolated --root NAME=PATH:RIGHTS … -- COMMAND` and manifests with
//! `[broker] roots = ["data:r", "out:wl"]` (paths from `airlock.toml`
//! `[broker.roots]`) run `isolated/`. Each root is opened like a ceiling (no
//! link as its last component, never `/proc`/`/sys`/`/dev` or the state
//! directory, never a tree holding a control file) and bound into the
//! descriptor's `broker` section. Approval-required isolated tools are refused
//! (`manifest.unsupported`) for now.
//!
//! Processes: the worker is a native-tier worker with no host file at all: fd
//! 3 is one end of a socketpair (`AIRLOCK_FS_FD=3`), and
//! `/.airlock/bin/airlock-fs` and `/.airlock/python/airlock_fs.py` are copies
//! made by PID 1 in its tmpfs (`WorkerSpec.provided`; the sources are sealed
//! memfds, which the kernel will not bind); `PATH` and `PYTHONPATH` point at
//! them, and `AIRLOCK_FS_ROOTS` lists `name:rights`. airlock holds the other end
//! and a second socketpair to the broker. The broker (`airlock-broker`, found
//! beside `airlock`, or `[broker] program`) is copied into a sealed memfd while
//! it is hashed and executed from that memfd, so the copy that was hashed (and
//! compared with `--broker-sha256` / `program_sha256`, else
//! `broker.digest_mismatch`, nothing started) is the copy that runs; the client
//! binary is sealed and pinned the same way (`client_sha256`). The broker gets
//! the socket as fd 0 and one directory handle per root as fds 3…, rights on
//! its command line. Where a cgroup is delegated, the broker and the worker
//! share one (`SharedCgroup`: the worker's memory limit, its pids + 1): the
//! broker is adopted right after it is spawned, the worker's init before it
//! forks; otherwise each is bounded by its own rlimits and
//! `evidence.limits.broker` says `rlimit`.
//!
//! Checks in airlock (`isolated/relay.rs`), in order: the call is charged
//! (calls) on receipt; the frame is decoded strictly, every number bounded
//! there (`airlock_fsproto` `validate`): an id (or a prepared-write id) over
//! 2^53 − 1 is `broker.protocol`, a `max` over the operation's limit (64 KiB a
//! read, 256 names a list) `broker.limit`, so no unbounded number reaches a
//! budget, an answer or the journal; the id must increase; the operation's
//! budget is charged (reads charge their `max`, lists their `max`, writes
//! their payload), never refunded; then the root and right
//! (`broker.denied`), the size limits (64 KiB a read or write, 256 names a
//! list, `broker.limit`) and the path rules (`airlock_fsproto::check_path`:
//! the worker sees the `path.*` code; the staging prefix in any letter case is
//! `broker.path_reserved`). Outstanding = frames received and not yet
//! answered; more than `outstanding` is `broker.budget`. The first failed
//! operation is answered, then the worker's socket is shut and the worker
//! killed: the envelope is `failed`, `broker.operation_failed` (exit 1), with
//! the operation and its own code at `content.broker.failure`.
//!
//! Writes and recovery: between the broker's `write_prepare` and
//! `write_commit` airlock saves `STATE/isolated/ID/w-N.json` (root name, path
//! and identity, the target directory's components and identity, the prepared
//! file's identity, the staging name, the target) and syncs it and its
//! directory, so any named staging entry has a durable record first. Closing
//! the submission (after the worker and broker are gone) removes each record's
//! staging entry only if it is still a regular file with the recorded `(dev,
//! ino)` in the recorded directory, then the records; anything undecided keeps
//! them and answers `broker.cleanup_failed`. `airlock isolated recover --root
//! …` does the same for every submission whose owner process is gone (live
//! ones are reported `busy`), refusing (`broker.recovery_roots`) when a record
//! names a root not granted at the same path and identity; it is journaled
//! (`BrokerRecovered`) and can be repeated. A target is therefore always the
//! old file or the new one: the new inode is complete and synced before it is
//! named.
//!
//! Evidence: `InvocationPrepared` (roots), `InvocationAuthorized`,
//! `WorkerStarted` (both helper digests, synced), one `BrokerWrite` per write
//! renamed into place, `WorkerFinished`, `BrokerOperations` (usage, SHA-256 of
//! the operation log, the failure, the cleanup) and `InvocationFinished`.
#![deny(missing_docs)]

pub mod approval;
mod attest;
mod authorize;
mod caller;
mod ceilings;
pub mod control;
mod git_query;
mod id;
mod isolated;
pub mod ledger;
mod mcp_worker;
mod policy_files;
mod prepare;
pub mod recovery;
mod run;
mod source;
pub mod store;
pub mod tools;
mod verdict;

pub use airlock_staging as staging;
pub use attest::{IN_TOTO_PAYLOAD_TYPE, PREDICATE_TYPE};
pub use authorize::{AuthorizedCall, Authorizer, CedarPolicy, Decision, DefaultPolicy, DEFAULT_POLICY_ID};
pub use caller::PRINCIPAL_FIELD;
pub use ceilings::Protected;
pub use id::{check_invocation_id, new_invocation_id};
pub use isolated::{
    helper_report as isolated_helper_report, IsolatedRequest, RootGrant, ADHOC_TOOL, BROKER_OPERATIONS,
    BROKER_RECOVERED, BROKER_WRITE, ISOLATED_TRANSPORT,
};
pub use policy_files::tool_specs as policy_tool_specs;
pub use prepare::{CallRequest, PreparedCall};
pub use source::{bundled_missing_from, SOURCE_TRANSPORT};

use airlock_core::{Config, ReasonCode, Refusal, ResolverChoice};

// `[journal] segment_bytes` is checked against the journal's own bounds.
const _: () = assert!(
    airlock_core::JournalSettings::MIN_SEGMENT_BYTES == airlock_journal::MIN_SEGMENT_BYTES
        && airlock_core::JournalSettings::MAX_SEGMENT_BYTES == airlock_journal::MAX_SEGMENT_BYTES
);
use airlock_hostfs::{HostAuthority, PrivateDir, Resolver};

/// One process's view of the host: configuration, resolver, state directory.
#[derive(Debug)]
pub struct Runtime {
    authority: HostAuthority,
    policy_sources: Option<Vec<(String, String)>>,
    principal: String,
    callers: caller::Callers,
    journal: airlock_journal::Journal,
    init_program: Option<(std::path::PathBuf, bool)>,
    config: Config,
    resolver: Resolver,
    state: PrivateDir,
    pool: airlock_staging::Pool,
    protected: Protected,
}

impl Runtime {
    /// Opens the state directory (creating it `0700`) and picks the
    /// resolver: `resolver_override` wins over `[filesystem] resolver`.
    pub fn open(
        authority: HostAuthority,
        config: Config,
        resolver_override: Option<ResolverChoice>,
    ) -> Result<Runtime, Refusal> {
        let resolver = Resolver::new(resolver_override.unwrap_or(config.resolver))?;
        let state = PrivateDir::open_or_create(&authority, &config.state_dir)?;
        let protected = Protected::new(&authority, &config, &state)?;
        ceilings::check_at_start(&authority, &config, &protected)?;
        check_image(&config, &protected)?;
        approval::pinned(&config.approval.approvers)?;
        let key = airlock_journal::JournalKey::open_or_create(&state).map_err(ledger::journal_refusal)?;
        let journal = airlock_journal::Journal::open(&state, key)
            .map_err(ledger::journal_refusal)?
            .with_segment_bytes(config.journal.segment_bytes);
        let pool = airlock_staging::Pool::open(&state, config.staging)?;
        let policy_sources =
            if config.policy_files.is_empty() { None } else { Some(policy_files::load(&authority, &config)?) };
        let principal = config.principal.clone();
        Ok(Runtime {
            authority,
            policy_sources,
            principal,
            callers: caller::Callers::default(),
            journal,
            init_program: None,
            config,
            resolver,
            state,
            pool,
            protected,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The resolver in use.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Loads a tool by manifest path or name; the bundled source tools
    /// answer for their names when the tools directory has no manifest of
    /// that name.
    pub fn load_tool(&self, tool: &str) -> Result<tools::LoadedTool, Refusal> {
        let path = tools::locate(tool, &self.config.tools_dir)?;
        source::load(&self.authority, tool, &path)
    }

    /// Sets the executable the native tier re-executes as its sandbox init
    /// (the binary must call `airlock_sandbox::init::maybe_run_init()` first
    /// in `main`). Without it, `run` is refused with `sandbox.unavailable`.
    /// `die_with_caller`: workers are killed when the thread that started
    /// them exits (right for a CLI that runs calls on its main thread, so a
    /// SIGKILLed `airlock` leaves no worker behind).
    pub fn set_init_program(&mut self, path: std::path::PathBuf, die_with_caller: bool) -> &mut Self {
        self.init_program = Some((path, die_with_caller));
        self
    }

    /// The authorizer for this configuration: the built-in default policy,
    /// or the configured Cedar policies.
    pub fn authorizer(&self) -> Box<dyn Authorizer> {
        match &self.policy_sources {
            None => Box::new(DefaultPolicy),
            Some(sources) => Box::new(CedarPolicy { sources: sources.clone() }),
        }
    }

    /// Calls are made as `principal` (an `Airlock::Agent` id) instead of
    /// `[policy] principal`.
    pub fn set_principal(&mut self, principal: String) -> &mut Self {
        self.principal = principal;
        self
    }

    pub(crate) fn native_tier(&self) -> Result<airlock_sandbox::NativeTier, Refusal> {
        let (program, die_with_caller) = self.init_program.clone().ok_or_else(|| {
            Refusal::new(ReasonCode::SandboxUnavailable, "no sandbox init program was configured for the native tier")
        })?;
        // Refused here, before a worker (or a broker) is started, when the
        // operator requires real limits and the host delegates no cgroup;
        // the tier checks again when it starts each worker.
        let parent = self.config.cgroup_parent.as_deref();
        if self.config.require_cgroup {
            airlock_sandbox::cgroup_limits_available(parent).map_err(|why| {
                Refusal::new(
                    ReasonCode::SandboxLimitsUnavailable,
                    format!(
                        "[sandbox] require_cgroup = true, but no cgroup can hold the worker's memory and process \
                         limits here: {why}. Delegate a cgroup v2 directory with the memory and pids controllers \
                         enabled in its cgroup.subtree_control and writable by the user airlock runs as, and name \
                         it in [sandbox] cgroup_parent; or set require_cgroup = false to accept per-process rlimits"
                    ),
                )
            })?;
        }
        let mut tier = airlock_sandbox::NativeTier::new(program);
        tier.die_with_caller(die_with_caller).require_cgroup(self.config.require_cgroup);
        if let Some(dir) = parent {
            tier.cgroup_parent(dir.to_path_buf());
        }
        Ok(tier)
    }

    /// The image directories bound read-only into every worker.
    pub fn image(&self) -> Vec<airlock_sandbox::ImageMount> {
        match &self.config.image {
            None => airlock_sandbox::ImageMount::default_image(),
            Some(dirs) => dirs.iter().map(airlock_sandbox::ImageMount::new).collect(),
        }
    }

    /// The signed journal of this state directory.
    pub fn journal(&self) -> &airlock_journal::Journal {
        &self.journal
    }

    /// The state directory.
    pub fn state(&self) -> &PrivateDir {
        &self.state
    }

    /// The shared staging pool of the state directory.
    pub fn pool(&self) -> &airlock_staging::Pool {
        &self.pool
    }

    pub(crate) fn authority(&self) -> &HostAuthority {
        &self.authority
    }

    pub(crate) fn protected(&self) -> &Protected {
        &self.protected
    }

    pub(crate) fn invocations(&self) -> Result<PrivateDir, Refusal> {
        Ok(self.state.ensure_subdir(store::INVOCATIONS)?)
    }
}

/// Refuses an image directory that overlaps the state directory or a
/// ceiling: the image is visible to every tool, so it must hold neither.
fn check_image(config: &Config, protected: &Protected) -> Result<(), Refusal> {
    let Some(dirs) = &config.image else { return Ok(()) };
    let ceilings: Vec<std::path::PathBuf> =
        config.ceilings.iter().filter_map(|c| std::fs::canonicalize(&c.host).ok()).collect();
    for dir in dirs {
        let real = std::fs::canonicalize(dir)
            .map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, format!("[sandbox] image entry {dir:?}: {e}")))?;
        let overlaps = |other: &std::path::Path| real.starts_with(other) || other.starts_with(&real);
        if overlaps(&protected.state_dir) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[sandbox] image entry {dir:?} overlaps the state directory"),
            ));
        }
        if let Some(c) = ceilings.iter().find(|c| overlaps(c)) {
            return Err(Refusal::new(
                ReasonCode::ConfigInvalid,
                format!("[sandbox] image entry {dir:?} overlaps the ceiling {}; every tool would see it", c.display()),
            ));
        }
    }
    Ok(())
}
