//! Isolated submissions: a command that reaches named directory roots only
//! through a confined broker (issue 9; behaviour of seed 003).
//!
//! The pipeline is the usual one: the roots are opened like ceilings and
//! bound into the descriptor (names, host paths, rights, `(dev, ino)`,
//! budgets and the SHA-256 of the broker and client that run), policy
//! authorizes the descriptor, then the broker and the worker start. The
//! worker has no host file and no host directory: only a socket to airlock,
//! the `airlock-fs` client and its Python module. Airlock checks and relays
//! every operation ([`relay`]), saves a recovery record before any write is
//! named ([`records`]), and on close removes leftover staging entries.
//!
//! # Isolated submissions
//!
//! `airlock isolated --root NAME=PATH:RIGHTS … -- COMMAND` and manifests with
//! `[broker] roots = ["data:r", "out:wl"]` (paths from `airlock.toml`
//! `[broker.roots]`) run this shape. Each root is opened like a ceiling (no
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
//! them, `AIRLOCK_FS_ROOTS` lists `name:rights`, and `AIRLOCK_FS_WINDOW` is the
//! window (the `outstanding` budget: requests in flight at once). airlock holds the other end
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

mod approved;
mod handed;
mod hasher;
mod helpers;
mod inbox;
mod records;
mod relay;
mod roots;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_core::broker::BrokerBoundary;
use airlock_core::manifest::OutputFormat;
use airlock_core::output::parse_output;
use airlock_core::{stream_tail, CreatedFile, Envelope, FilesystemBoundary, ReasonCode, Refusal};
use airlock_sandbox::{ProvidedFile, SealedProgram, SharedCgroup, Tier as _, Worker as _, WorkerLimits, WorkerSpec};
use serde_json::json;

use super::exec::CallRequest;
use crate::catalog::{self, LoadedTool};
use crate::engine::verdict::{exit_number, limits_evidence};
use crate::engine::{answer, AuthorizedCall, CallStart, Preparation, Transport};
use crate::failure::sandbox_refusal;
use crate::Runtime;
pub use helpers::helper_report;
use relay::{Relay, RelayEnd};
pub use roots::RootGrant;

/// `transport` of an isolated submission's descriptor.
pub const ISOLATED_TRANSPORT: &str = "isolated";
/// Journal kind: the operations of a submission, summarized at its end.
pub const BROKER_OPERATIONS: &str = "BrokerOperations";
/// Journal kind: one write renamed into place.
pub const BROKER_WRITE: &str = "BrokerWrite";
/// Journal kind: `airlock isolated recover` cleaned a crashed submission.
pub const BROKER_RECOVERED: &str = "BrokerRecovered";
/// Where the client is inside the worker.
pub const CLIENT_PATH: &str = "/.airlock/bin/airlock-fs";

/// The worker's `PATH`: the client first, then the image's usual directories.
pub const WORKER_PATH: &str = "/.airlock/bin:/usr/local/bin:/usr/bin:/bin";

/// Where the Python module is inside the worker.
pub const PYTHON_PATH: &str = "/.airlock/python/airlock_fs.py";
/// Default deadline of a command-line submission.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const STDERR_LIMIT: usize = 64 * 1024;

/// A command-line submission.
#[derive(Debug, Clone, Default)]
pub struct IsolatedRequest {
    /// The roots, `NAME=PATH:RIGHTS` parsed.
    pub roots: Vec<RootGrant>,
    /// The command run in the worker.
    pub argv: Vec<String>,
    /// The invocation id.
    pub invocation_id: String,
    /// Deadline for the whole submission (`None`: 60 s).
    pub timeout: Option<Duration>,
    /// Pinned SHA-256 of the broker (overrides `[broker] program_sha256`).
    pub broker_sha256: Option<String>,
    /// Who submits it (`None`: the runtime's principal); see
    /// [`crate::CallRequest::principal`].
    pub principal: Option<String>,
}

/// One isolated submission, from either front.
pub(crate) struct Isolated {
    args: BTreeMap<String, String>,
    argv: Vec<String>,
    roots: Vec<RootGrant>,
    timeout: Duration,
    format: OutputFormat,
    broker_pin: Option<String>,
    /// A `[broker]` manifest's `[tool.sandbox] tier`.
    pinned_tier: Option<airlock_core::config::Tier>,
}

/// What an authorized submission runs with: its roots open, its helpers sealed.
#[derive(Debug)]
pub struct IsolatedPayload {
    argv: Vec<String>,
    timeout: Duration,
    format: OutputFormat,
    roots: Vec<roots::OpenRoot>,
    broker: SealedProgram,
    client: SealedProgram,
}

impl Transport for Isolated {
    type Payload = IsolatedPayload;
    const NAME: &'static str = ISOLATED_TRANSPORT;
    const WRITES: bool = true;
    const NOT_KEPT: Option<&'static str> =
        Some("it reaches named roots through the broker: it runs in one call (`airlock run`), not kept for dispatch");
    /// Kept for an approval with nothing beside its record: dispatch
    /// re-opens the roots and re-seals the helpers, and the descriptor
    /// must come out the same ([`approved`]).
    const WAITS_FOR_APPROVAL: bool = true;

    fn prepare(self, rt: &Runtime, start: &CallStart<'_>) -> Result<Preparation<IsolatedPayload>, Refusal> {
        if self.argv.is_empty() {
            return Err(Refusal::new(ReasonCode::BrokerRootInvalid, "no command was given after `--`"));
        }
        let tier = crate::tier_choice::choose(
            rt.config(),
            start.tier,
            self.pinned_tier,
            crate::tier_choice::NATIVE_ONLY,
            "an isolated submission",
        )?;
        // Both helpers are sealed and verified before any root is opened.
        let cfg = &rt.config().broker;
        let broker_path = helpers::locate(cfg.program.as_deref(), helpers::BROKER_BIN)?;
        let broker_pin = self.broker_pin.as_deref().or(cfg.program_sha256.as_deref());
        let broker = helpers::seal_verified(&broker_path, broker_pin, "broker", helpers::BROKER_BIN)?;
        let client_path = helpers::locate(cfg.client.as_deref(), helpers::CLIENT_BIN)?;
        let client = helpers::seal_verified(&client_path, cfg.client_sha256.as_deref(), "client", helpers::CLIENT_BIN)?;
        let roots = rt.open_roots(&self.roots)?;
        let boundary = BrokerBoundary::new(
            roots.iter().map(roots::OpenRoot::describe).collect(),
            cfg.budgets,
            broker.sha256_hex(),
            client.sha256_hex(),
        );
        let mut journal = serde_json::Map::new();
        journal.insert("roots".into(), json!(boundary.roots));
        journal.insert("helpers_build".into(), json!(airlock_fsproto::BUILD_FINGERPRINT));
        let mut filesystem = FilesystemBoundary::new(Vec::new(), None, 0, None);
        filesystem.broker = Some(boundary);
        Ok(Preparation {
            args: self.args,
            argv: self.argv.clone(),
            filesystem,
            inputs: Vec::new(),
            output: None,
            lease: None,
            journal,
            tier: tier.as_str().to_owned(),
            payload: IsolatedPayload {
                argv: self.argv,
                timeout: self.timeout,
                format: self.format,
                roots,
                broker,
                client,
            },
        })
    }

    fn execute(rt: &Runtime, call: AuthorizedCall<IsolatedPayload>) -> Result<Envelope, Refusal> {
        rt.execute_isolated(call)
    }
}

impl Runtime {
    /// Runs one command-line submission: `airlock isolated --root … -- CMD`,
    /// and answers with its envelope (a refusal included).
    pub fn isolated(&self, request: &IsolatedRequest) -> Envelope {
        let principal = self.principal_of(request.principal.as_deref());
        self.as_call(&request.invocation_id, principal, Some(catalog::ADHOC_TOOL), || {
            let submission = Isolated {
                args: BTreeMap::new(),
                argv: request.argv.clone(),
                roots: request.roots.clone(),
                timeout: request.timeout.unwrap_or(DEFAULT_TIMEOUT),
                format: OutputFormat::Text,
                broker_pin: request.broker_sha256.clone(),
                pinned_tier: None,
            };
            let start = CallStart {
                invocation_id: &request.invocation_id,
                principal,
                keep: false,
                expires_at: None,
                progress: None,
                tier: None,
                session: false,
            };
            self.drive(submission, &catalog::adhoc_isolated_tool(), start)
        })
    }

    /// A manifest with `[broker]` (from `Runtime::run`).
    pub(crate) fn run_isolated_tool(
        &self,
        request: &CallRequest,
        tool: &LoadedTool,
        start: CallStart<'_>,
    ) -> Result<Envelope, Refusal> {
        let manifest = &tool.manifest;
        manifest.check_executable()?;
        let def = manifest.broker.as_ref().ok_or_else(|| Refusal::new(ReasonCode::Internal, "not a [broker] tool"))?;
        let roots = def.roots.iter().map(|e| RootGrant::from_manifest(e, self)).collect::<Result<Vec<_>, _>>()?;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let argv = manifest.build_argv(&args)?;
        let submission = Isolated {
            args: args.as_strings(),
            argv,
            roots,
            timeout: Duration::from_secs(manifest.tool.timeout_seconds),
            format: manifest.output_parser(),
            broker_pin: None,
            pinned_tier: manifest.tool.sandbox.and_then(|s| s.tier),
        };
        self.drive(submission, &tool.call_tool(), start)
    }
}

fn unavailable(what: &str) -> impl FnOnce(std::io::Error) -> Refusal + '_ {
    move |e| Refusal::new(ReasonCode::BrokerUnavailable, format!("{what}: {e}"))
}

impl Runtime {
    fn execute_isolated(&self, call: AuthorizedCall<IsolatedPayload>) -> Result<Envelope, Refusal> {
        let (prepared, decision) = call.into_parts();
        let base = answer::finished(&prepared, &decision.policy_ids, None);
        let sub = prepared.payload();
        let IsolatedPayload { roots, broker, client, .. } = sub;
        let id = prepared.invocation_id();
        let mut tier = self.native_tier()?;
        let budgets =
            prepared.descriptor().command_boundary.filesystem.broker.as_ref().map(|b| b.budgets).unwrap_or_default();

        let (broker_here, broker_there) = UnixStream::pair().map_err(unavailable("socketpair for the broker"))?;
        let (worker_here, worker_there) = UnixStream::pair().map_err(unavailable("socketpair for the worker"))?;
        for end in [&broker_here, &broker_there, &worker_here, &worker_there] {
            relay::size_buffers(end);
        }
        let spec = self.isolated_worker_spec(sub, OwnedFd::from(worker_there), budgets.outstanding)?;
        // One budget for the pair where a cgroup is delegated: the broker is
        // adopted into it as soon as it exists, the worker's init before it
        // forks. Dropped (whatever is left killed, the cgroup removed) when
        // this function returns, after both were waited for.
        let shared = self.shared_cgroup(&spec.limits);
        let (mut broker_proc, broker_stderr) =
            self.start_broker(broker, roots, OwnedFd::from(broker_there), budgets.write_bytes)?;
        let broker_bound = match &shared {
            Some(cg) => {
                tier.in_cgroup(Arc::clone(cg));
                if cg.adopt(broker_proc.id()).is_ok() {
                    "cgroup"
                } else {
                    "rlimit"
                }
            }
            None => "rlimit",
        };
        let step = self.worker_started(
            id,
            &sub.argv,
            json!({ "broker_sha256": broker.sha256_hex(), "client_sha256": client.sha256_hex() }),
        )?;
        let deadline = Instant::now() + sub.timeout;
        let worker = match tier.start(spec) {
            Ok(worker) => worker,
            Err(e) => {
                let refusal = sandbox_refusal(&e, "the isolated worker");
                step.finished(Err(&refusal))?;
                return Err(refusal);
            }
        };
        let kill = worker.kill_handle();
        // Made once the worker exists (an earlier failure leaves nothing to
        // recover), and before the relay serves its first write.
        let records = records::RecordBook::create(self.state(), id)?;

        let mut on_write = |w: &relay::WriteReceipt, stage: &str| {
            self.note(
                BROKER_WRITE,
                Some(id),
                json!({ "root": w.root, "path": w.path, "bytes": w.bytes, "sha256": w.sha256, "stage": stage }),
            )
            .map_err(|r| r.message)
        };
        let (outcome, end, usage, log, writes) = std::thread::scope(|scope| {
            let relay_thread = scope.spawn(|| {
                let mut relay = Relay::new(worker_here, broker_here, roots, budgets, &records, deadline, &mut on_write);
                let end = relay.run();
                if !matches!(end, RelayEnd::Closed) {
                    let _ = kill.kill();
                }
                (end, relay.usage, relay.log, relay.writes)
            });
            let outcome = worker.wait();
            let (end, usage, log, writes) = relay_thread.join().unwrap_or_else(|_| {
                (RelayEnd::BrokerLost("the relay panicked".into()), relay::Usage::default(), Vec::new(), Vec::new())
            });
            (outcome, end, usage, log, writes)
        });
        // The relay dropped its end: the broker reads end-of-file and exits.
        let broker_exit = wait_broker(&mut broker_proc, Duration::from_secs(5));
        let broker_stderr = broker_stderr.join().unwrap_or_default();
        let cleanup = records.close(self.resolver(), self.state(), id, roots);
        let outcome = outcome.map_err(|e| sandbox_refusal(&e, "the isolated worker"));
        // From here a record that cannot be journaled no longer ends the
        // call early: writes may have landed, and the answer lists them
        // whatever happens to the journal (the first such failure becomes
        // the answer's error).
        let finished = step.finished(outcome.as_ref());
        let log_sha256 = relay::sha256_hex(&serde_json::to_vec(&log).unwrap_or_default());
        let failure = match &end {
            RelayEnd::Failed(f) => Some(f.clone()),
            _ => None,
        };
        let operations = self.note(
            BROKER_OPERATIONS,
            Some(id),
            json!({
                "calls": usage.calls,
                "read_bytes": usage.read_bytes,
                "write_bytes": usage.write_bytes,
                "entries": usage.entries,
                "writes": writes.len(),
                "operations_sha256": log_sha256,
                "failure": failure,
                "cleanup": cleanup.as_ref().ok(),
            }),
        );
        let unjournaled = finished.and(operations).err();
        let created_files: Vec<CreatedFile> = writes
            .iter()
            .map(|w| CreatedFile { path: format!("{}:{}", w.root, w.path), bytes: w.bytes, sha256: w.sha256.clone() })
            .collect();
        let outcome = match outcome {
            Ok(o) => o,
            Err(r) if created_files.is_empty() => return Err(r),
            Err(r) => return Ok(answer::with_error(Envelope { created_files, ..base }, &r)),
        };
        let broker_summary = json!({
            "usage": usage,
            "operations": log,
            "operations_sha256": log_sha256,
            "failure": failure,
        });
        let mut evidence = base.evidence.clone().unwrap_or_default();
        evidence.limits = Some(limits_evidence(&outcome.limits, Some(broker_bound)));
        let base = Envelope {
            exit_code: Some(exit_number(outcome.exit)),
            stdout_tail: stream_tail(&outcome.stdout),
            stderr_tail: stream_tail(&outcome.stderr),
            created_files,
            evidence: Some(evidence),
            ..base
        };
        // A failed submission's output is not parsed: its streams' tails
        // are the answer's; the broker's summary stays its content.
        let failed = |code: ReasonCode, message: String| {
            answer::failed(&base, Refusal::new(code, message), Some(json!({ "broker": broker_summary })))
        };
        let broker_exit = broker_exit.map_err(|why| format!("{why}: {}", broker_stderr.trim_end()));
        if let Err((code, message)) = verdict(&end, cleanup.map(|_| ()), broker_exit, &outcome, sub.timeout) {
            return Ok(failed(code, message));
        }
        if let Some(r) = unjournaled {
            return Ok(failed(r.code, format!("the submission ran but its end could not be journaled: {}", r.message)));
        }
        match parse_output(sub.format, &outcome.stdout) {
            Ok(output) => Ok(Envelope { content: Some(json!({ "output": output, "broker": broker_summary })), ..base }),
            Err(r) => Ok(failed(r.code, r.message)),
        }
    }
}

impl Runtime {
    /// A cgroup for a submission's broker and worker together, where one is
    /// delegated: the worker's memory limit bounds both, and one more task
    /// than the worker's is allowed for the broker. `None`: each is bounded
    /// by its own rlimits (the worker's `RLIMIT_AS`/`RLIMIT_NPROC`, the
    /// broker's `RLIMIT_AS` 256 MiB and `RLIMIT_NPROC` 0).
    fn shared_cgroup(&self, limits: &WorkerLimits) -> Option<Arc<SharedCgroup>> {
        let pids = limits.pids.map(|p| p.saturating_add(1));
        SharedCgroup::create(self.config().cgroup_parent.as_deref(), limits.memory_bytes, pids).ok().map(Arc::new)
    }

    /// Starts the broker from its sealed copy with one duplicate handle per
    /// root, the resolver this runtime uses, and its standard error read
    /// (bounded) on a thread.
    fn start_broker(
        &self,
        broker: &airlock_sandbox::SealedProgram,
        roots: &[roots::OpenRoot],
        socket: OwnedFd,
        max_file_bytes: u64,
    ) -> Result<(airlock_sandbox::BrokerProcess, std::thread::JoinHandle<String>), Refusal> {
        let mut root_fds = Vec::with_capacity(roots.len());
        for r in roots {
            let fd: OwnedFd = r.dir.as_fd().try_clone_to_owned().map_err(unavailable("duplicating a root"))?;
            root_fds.push((fd, r.grant.rights));
        }
        let resolver = match self.resolver().kind() {
            airlock_hostfs::ResolverKind::Openat2 => "openat2",
            airlock_hostfs::ResolverKind::Emulated => "emulated",
        };
        // The broker's largest file is the submission's write budget (a
        // chunked write may use all of it).
        let options = airlock_sandbox::BrokerOptions {
            resolver: Some(resolver.into()),
            mode: Some(self.output_modes().file),
            max_file_bytes: Some(max_file_bytes),
        };
        let (stderr_r, stderr_w) = std::io::pipe().map_err(unavailable("a pipe for the broker's errors"))?;
        let process =
            airlock_sandbox::spawn_broker_with(broker, socket, root_fds, std::process::Stdio::from(stderr_w), &options)
                .map_err(|e| Refusal::new(ReasonCode::BrokerUnavailable, format!("starting the broker: {e}")))?;
        Ok((process, std::thread::spawn(move || read_bounded(stderr_r, 4096))))
    }

    /// The worker: the command, no host file, the socket at fd 3, copies of
    /// the client and its Python module under `/.airlock`.
    fn isolated_worker_spec(&self, sub: &IsolatedPayload, socket: OwnedFd, window: u64) -> Result<WorkerSpec, Refusal> {
        let IsolatedPayload { roots, client, .. } = sub;
        let client_copy = client.file().try_clone().map_err(unavailable("duplicating the client"))?;
        let granted: Vec<String> = roots.iter().map(|r| format!("{}:{}", r.grant.name, r.grant.rights)).collect();
        let mut spec = WorkerSpec::new(sub.argv.clone());
        spec.env = vec![
            ("PATH".into(), WORKER_PATH.into()),
            ("PYTHONPATH".into(), "/.airlock/python".into()),
            ("AIRLOCK_FS_ROOTS".into(), granted.join(",")),
            (airlock_fsproto::ENV_WINDOW.into(), window.to_string()),
        ];
        spec.working_dir = self.config().working_dir.clone();
        spec.image = self.image();
        spec.timeout = sub.timeout;
        spec.stderr_limit = STDERR_LIMIT;
        spec.fs_socket = Some(socket);
        spec.provided = vec![
            ProvidedFile { path: CLIENT_PATH.into(), file: client_copy, executable: true },
            ProvidedFile { path: PYTHON_PATH.into(), file: provided_python()?, executable: false },
        ];
        Ok(spec)
    }
}

/// The submission's answer, from how the relay ended, the cleanup, the
/// broker's exit and the worker's: the first problem wins.
fn verdict(
    end: &RelayEnd,
    cleanup: Result<(), Refusal>,
    broker_exit: Result<(), String>,
    outcome: &airlock_sandbox::WorkerOutcome,
    timeout: Duration,
) -> Result<(), (ReasonCode, String)> {
    match end {
        RelayEnd::Failed(f) => {
            return Err((
                ReasonCode::BrokerOperationFailed,
                format!(
                    "operation {} ({} {}:{}) failed with {}: {}; the submission ends",
                    f.id, f.op, f.root, f.path, f.code, f.message
                ),
            ))
        }
        RelayEnd::BrokerLost(why) => return Err((ReasonCode::BrokerFailed, format!("the broker was lost: {why}"))),
        RelayEnd::Deadline => return Err((ReasonCode::ToolTimeout, format!("the submission ran past {timeout:?}"))),
        RelayEnd::Closed => {}
    }
    cleanup.map_err(|r| (r.code, r.message))?;
    broker_exit.map_err(|why| (ReasonCode::BrokerFailed, why))?;
    // An isolated worker has no output file: nothing is exported.
    crate::engine::verdict::judge(outcome, timeout.as_secs(), 0).map_err(|r| (r.code, r.message))
}

/// Waits for the broker to exit by itself (it reads end-of-file once the
/// relay is done), at most `bound`, then kills it. `Err` unless it exited 0.
fn wait_broker(broker: &mut airlock_sandbox::BrokerProcess, bound: Duration) -> Result<(), String> {
    // The pidfd becomes readable when the broker exits; whether it did is
    // `try_wait`'s to say.
    let _ = airlock_fsproto::wait_ready(broker.pidfd(), airlock_fsproto::PollFlags::IN, Some(Instant::now() + bound));
    match broker.try_wait() {
        Ok(Some(status)) if status.success() => Ok(()),
        Ok(Some(status)) => Err(format!("the broker exited with {status}")),
        Ok(None) => {
            let _ = broker.kill();
            let _ = broker.wait();
            Err(format!("the broker did not exit within {bound:?} and was killed"))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Reads at most `max` bytes of `r` (then drains the rest) as text.
fn read_bounded(r: impl std::io::Read, max: u64) -> String {
    use std::io::Read;
    let mut r = r;
    let mut kept = Vec::new();
    let _ = r.by_ref().take(max).read_to_end(&mut kept);
    let _ = std::io::copy(&mut r, &mut std::io::sink());
    String::from_utf8_lossy(&kept).into_owned()
}

/// The Python client module as a sealed memory file.
fn provided_python() -> Result<std::fs::File, Refusal> {
    let fail = |e: String| Refusal::new(ReasonCode::BrokerUnavailable, format!("the Python client: {e}"));
    let sealed = airlock_sandbox::SealedProgram::from_bytes(airlock_fs::PYTHON_MODULE.as_bytes(), "airlock_fs.py")
        .map_err(|e| fail(e.to_string()))?;
    sealed.file().try_clone().map_err(|e| fail(e.to_string()))
}

impl Runtime {
    /// `airlock isolated recover`: cleans every crashed submission's staging
    /// entries under `grants` (which must include every root they wrote
    /// under, at the same host path and identity). Live submissions are
    /// skipped and reported.
    pub fn isolated_recover(&self, grants: &[RootGrant]) -> Result<serde_json::Value, Refusal> {
        let roots = self.open_roots(grants)?;
        let (done, busy) = records::recover(self.resolver(), self.state(), &roots)?;
        for d in &done {
            self.record(BROKER_RECOVERED, Some(&d.invocation_id), json!(d.report))?;
        }
        Ok(json!({ "recovered": done, "busy": busy }))
    }
}
