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

mod helpers;
mod records;
mod relay;
mod roots;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_core::broker::BrokerBoundary;
use airlock_core::descriptor::DESCRIPTOR_VERSION;
use airlock_core::manifest::OutputFormat;
use airlock_core::output::parse_output;
use airlock_core::{
    CommandBoundary, CreatedFile, Descriptor, Envelope, ErrorBody, Evidence, FilesystemBoundary, ReasonCode, Refusal,
};
use airlock_journal::kind;
use airlock_sandbox::{ProvidedFile, SharedCgroup, Tier as _, Worker as _, WorkerLimits, WorkerSpec};
use serde_json::json;

use crate::prepare::CallRequest;
use crate::store::{PendingInvocation, PreparedRecord};
use crate::tools::LoadedTool;
use crate::{id, ledger, Runtime};
pub use helpers::helper_report;
use relay::{Relay, RelayEnd};
pub use roots::RootGrant;

/// `transport` of an isolated submission's descriptor.
pub const ISOLATED_TRANSPORT: &str = "isolated";
/// The tool name of a command-line submission (`airlock isolated -- CMD`).
pub const ADHOC_TOOL: &str = "isolated";
/// Journal kind: the operations of a submission, summarized at its end.
pub const BROKER_OPERATIONS: &str = "BrokerOperations";
/// Journal kind: one write renamed into place.
pub const BROKER_WRITE: &str = "BrokerWrite";
/// Journal kind: `airlock isolated recover` cleaned a crashed submission.
pub const BROKER_RECOVERED: &str = "BrokerRecovered";
/// Where the client is inside the worker.
pub const CLIENT_PATH: &str = "/.airlock/bin/airlock-fs";
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

/// Everything one submission needs, from either front.
struct Submission {
    tool: String,
    tool_version: String,
    manifest_sha256: String,
    manifest_text: String,
    origin: String,
    args: BTreeMap<String, String>,
    argv: Vec<String>,
    risk_tier: String,
    human_approval: bool,
    roots: Vec<RootGrant>,
    timeout: Duration,
    format: OutputFormat,
    broker_pin: Option<String>,
    spec: airlock_policy::ToolSpec,
    invocation_id: String,
}

/// The Cedar view of a command-line submission: action
/// `tool_call::isolated`, no arguments.
pub(crate) fn adhoc_policy_spec() -> airlock_policy::ToolSpec {
    airlock_policy::ToolSpec { name: ADHOC_TOOL.into(), action: None, resource: None, args: Vec::new() }
}

impl Runtime {
    /// Runs one command-line submission: `airlock isolated --root … -- CMD`.
    pub fn isolated(&self, request: &IsolatedRequest) -> Result<Envelope, Refusal> {
        let _caller = self.enter_call(&request.invocation_id, self.principal_of(request.principal.as_deref()));
        let id = id::check_invocation_id(&request.invocation_id).ok().map(|()| request.invocation_id.as_str());
        let submission = Submission {
            tool: ADHOC_TOOL.into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            manifest_sha256: "builtin".into(),
            manifest_text: String::new(),
            origin: "command line".into(),
            args: BTreeMap::new(),
            argv: request.argv.clone(),
            risk_tier: "medium".into(),
            human_approval: false,
            roots: request.roots.clone(),
            timeout: request.timeout.unwrap_or(DEFAULT_TIMEOUT),
            format: OutputFormat::Text,
            broker_pin: request.broker_sha256.clone(),
            spec: adhoc_policy_spec(),
            invocation_id: request.invocation_id.clone(),
        };
        let result = self.submit(submission);
        self.journal_end(id, result)
    }

    /// A manifest with `[broker]` (from `Runtime::run`).
    pub(crate) fn run_isolated_tool(&self, request: &CallRequest, tool: LoadedTool) -> Result<Envelope, Refusal> {
        let manifest = &tool.manifest;
        manifest.check_executable()?;
        let def = manifest.broker.as_ref().ok_or_else(|| Refusal::new(ReasonCode::Internal, "not a [broker] tool"))?;
        let roots = def.roots.iter().map(|e| RootGrant::from_manifest(e, self)).collect::<Result<Vec<_>, _>>()?;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let argv = manifest.build_argv(&args)?;
        let submission = Submission {
            tool: manifest.name().to_owned(),
            tool_version: manifest.tool.version.clone(),
            manifest_sha256: manifest.sha256().to_owned(),
            manifest_text: tool.text.clone(),
            origin: tool.origin.display().to_string(),
            args: args.as_strings(),
            argv,
            risk_tier: manifest.tool.risk_tier.to_string(),
            human_approval: manifest.tool.human_approval,
            roots,
            timeout: Duration::from_secs(manifest.tool.timeout_seconds),
            format: manifest.output.as_ref().map_or(OutputFormat::Text, |o| o.format),
            broker_pin: None,
            spec: airlock_policy::ToolSpec::from_manifest(manifest),
            invocation_id: request.invocation_id.clone(),
        };
        self.submit(submission)
    }

    fn submit(&self, sub: Submission) -> Result<Envelope, Refusal> {
        ledger::refuse_if_unconfirmed(self.state(), self.journal())?;
        id::check_invocation_id(&sub.invocation_id)?;
        let invocations = self.invocations()?;
        id::check_unused(&invocations, &sub.invocation_id)?;
        if crate::approval::needs_approval(&sub.risk_tier, sub.human_approval) {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("{} needs an exact-call approval, which isolated submissions do not take yet", sub.tool),
            ));
        }
        if sub.argv.is_empty() {
            return Err(Refusal::new(ReasonCode::BrokerRootInvalid, "no command was given after `--`"));
        }
        let roots = self.open_roots(&sub.roots)?;
        let cfg = &self.config().broker;
        let broker_path = helpers::locate(cfg.program.as_deref(), helpers::BROKER_BIN)?;
        let broker_pin = sub.broker_pin.as_deref().or(cfg.program_sha256.as_deref());
        let broker = helpers::seal(&broker_path, broker_pin, "broker")?;
        let client_path = helpers::locate(cfg.client.as_deref(), helpers::CLIENT_BIN)?;
        let client = helpers::seal(&client_path, cfg.client_sha256.as_deref(), "client")?;

        let boundary = BrokerBoundary::new(
            roots.iter().map(roots::OpenRoot::describe).collect(),
            cfg.budgets,
            broker.sha256_hex(),
            client.sha256_hex(),
        );
        let mut filesystem = FilesystemBoundary::new(Vec::new(), None, 0, None);
        filesystem.broker = Some(boundary);
        let descriptor = Descriptor {
            version: DESCRIPTOR_VERSION,
            tool: sub.tool.clone(),
            tool_version: sub.tool_version.clone(),
            manifest_sha256: sub.manifest_sha256.clone(),
            args: sub.args.clone(),
            argv: sub.argv.clone(),
            transport: ISOLATED_TRANSPORT.into(),
            risk_tier: sub.risk_tier.clone(),
            human_approval: sub.human_approval,
            working_dir: self.config().working_dir.clone(),
            command_boundary: CommandBoundary { filesystem },
        };
        let record = PreparedRecord {
            format: crate::store::RECORD_FORMAT,
            invocation_id: sub.invocation_id.clone(),
            principal: self.record_principal(Some(&sub.invocation_id)),
            manifest_origin: sub.origin.clone(),
            descriptor_sha256: descriptor.digest(),
            descriptor,
            inputs: Vec::new(),
            output: None,
            prepared_at: None,
            expires_at: None,
        };
        let store = PendingInvocation::begin(&invocations)?.commit(&record, &sub.manifest_text, false)?;
        // Run once, here: a later `airlock dispatch` of this id is a duplicate.
        store.create_file(crate::store::DISPATCHED)?;
        let id = sub.invocation_id.as_str();
        let digest = record.descriptor_sha256.clone();
        self.note(
            kind::INVOCATION_PREPARED,
            Some(id),
            json!({
                "descriptor_sha256": digest,
                "tool": sub.tool,
                "manifest_sha256": sub.manifest_sha256,
                "transport": ISOLATED_TRANSPORT,
                "roots": record.descriptor.command_boundary.filesystem.broker.as_ref().map(|b| &b.roots),
                "owner_pid": std::process::id(),
            }),
        )?;
        let policy_ids = self.authorize_builtin(&record.descriptor, &sub.spec, id)?;
        let base = Envelope {
            invocation_id: Some(id.to_owned()),
            tool: Some(sub.tool.clone()),
            stage: Some("finished"),
            evidence: Some(Evidence {
                descriptor_sha256: Some(digest),
                policy_ids,
                principal: Some(record.principal.clone()),
                limits: None,
            }),
            ..Envelope::ok()
        };
        let run = Run { sub: &sub, roots: &roots, broker: &broker, client: &client, descriptor: &record.descriptor };
        self.execute_isolated(run, base)
    }
}

/// What `execute_isolated` works with.
struct Run<'a> {
    sub: &'a Submission,
    roots: &'a [roots::OpenRoot],
    broker: &'a airlock_sandbox::SealedProgram,
    client: &'a airlock_sandbox::SealedProgram,
    descriptor: &'a Descriptor,
}

fn unavailable(what: &str) -> impl FnOnce(std::io::Error) -> Refusal + '_ {
    move |e| Refusal::new(ReasonCode::BrokerUnavailable, format!("{what}: {e}"))
}

impl Runtime {
    fn execute_isolated(&self, run: Run<'_>, base: Envelope) -> Result<Envelope, Refusal> {
        let Run { sub, roots, broker, client, descriptor } = run;
        let id = sub.invocation_id.as_str();
        let mut tier = self.native_tier()?;
        let budgets = descriptor.command_boundary.filesystem.broker.as_ref().map(|b| b.budgets).unwrap_or_default();

        let (broker_here, broker_there) = UnixStream::pair().map_err(unavailable("socketpair for the broker"))?;
        let (worker_here, worker_there) = UnixStream::pair().map_err(unavailable("socketpair for the worker"))?;
        let spec = self.isolated_worker_spec(sub, roots, client, OwnedFd::from(worker_there))?;
        // One budget for the pair where a cgroup is delegated: the broker is
        // adopted into it as soon as it exists, the worker's init before it
        // forks. Dropped (whatever is left killed, the cgroup removed) when
        // this function returns, after both were waited for.
        let shared = self.shared_cgroup(&spec.limits);
        let (mut broker_proc, broker_stderr) = self.start_broker(broker, roots, OwnedFd::from(broker_there))?;
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
        self.record(
            kind::WORKER_STARTED,
            Some(id),
            ledger::worker_started_body(
                &sub.argv,
                json!({ "broker_sha256": broker.sha256_hex(), "client_sha256": client.sha256_hex() }),
            ),
        )?;
        let deadline = Instant::now() + sub.timeout;
        let worker = tier.start(spec).map_err(|e| crate::failure::sandbox_refusal(&e, "the isolated worker"))?;
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
        let outcome = outcome.map_err(|e| crate::failure::sandbox_refusal(&e, "the isolated worker"));
        // From here a record that cannot be journaled no longer ends the
        // call early: writes may have landed, and the answer lists them
        // whatever happens to the journal (the first such failure becomes
        // the answer's error).
        let finished = self.note(
            kind::WORKER_FINISHED,
            Some(id),
            match &outcome {
                Ok(o) => json!({
                    "exit_code": crate::verdict::exit_number(o.exit),
                    "timed_out": o.timed_out,
                    "cleanup_confirmed": o.cleanup_confirmed,
                }),
                Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
            },
        );
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
            Err(r) => {
                let refused = Envelope::from_refusal(&r);
                return Ok(Envelope { status: refused.status, error: refused.error, created_files, ..base });
            }
        };
        let broker_summary = json!({
            "usage": usage,
            "operations": log,
            "operations_sha256": log_sha256,
            "failure": failure,
        });
        let tails = json!({
            "stdout": crate::verdict::output_tail(&outcome.stdout),
            "stderr": crate::verdict::output_tail(&outcome.stderr),
        });
        let mut evidence = base.evidence.clone().unwrap_or_default();
        evidence.limits = Some(crate::verdict::limits_evidence(&outcome.limits, Some(broker_bound)));
        let base = Envelope {
            exit_code: Some(crate::verdict::exit_number(outcome.exit)),
            created_files,
            evidence: Some(evidence),
            ..base
        };
        let failed = |code: ReasonCode, message: String, detail: serde_json::Value| Envelope {
            status: code.status(),
            error: Some(ErrorBody { code, message }),
            content: Some(json!({ "output": detail, "broker": broker_summary })),
            ..base.clone()
        };
        let broker_exit = broker_exit.map_err(|why| format!("{why}: {}", broker_stderr.trim_end()));
        if let Err((code, message)) = verdict(&end, cleanup.map(|_| ()), broker_exit, &outcome, sub.timeout) {
            return Ok(failed(code, message, tails));
        }
        if let Some(r) = unjournaled {
            return Ok(failed(
                r.code,
                format!("the submission ran but its end could not be journaled: {}", r.message),
                tails,
            ));
        }
        match parse_output(sub.format, &outcome.stdout) {
            Ok(output) => Ok(Envelope { content: Some(json!({ "output": output, "broker": broker_summary })), ..base }),
            Err(r) => Ok(failed(r.code, r.message, tails)),
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
        let options = airlock_sandbox::BrokerOptions { resolver: Some(resolver.into()) };
        let (stderr_r, stderr_w) = std::io::pipe().map_err(unavailable("a pipe for the broker's errors"))?;
        let process =
            airlock_sandbox::spawn_broker_with(broker, socket, root_fds, std::process::Stdio::from(stderr_w), &options)
                .map_err(|e| Refusal::new(ReasonCode::BrokerUnavailable, format!("starting the broker: {e}")))?;
        Ok((process, std::thread::spawn(move || read_bounded(stderr_r, 4096))))
    }

    /// The worker: the command, no host file, the socket at fd 3, copies of
    /// the client and its Python module under `/.airlock`.
    fn isolated_worker_spec(
        &self,
        sub: &Submission,
        roots: &[roots::OpenRoot],
        client: &airlock_sandbox::SealedProgram,
        socket: OwnedFd,
    ) -> Result<WorkerSpec, Refusal> {
        let client_copy = client.file().try_clone().map_err(unavailable("duplicating the client"))?;
        let granted: Vec<String> = roots.iter().map(|r| format!("{}:{}", r.grant.name, r.grant.rights)).collect();
        let mut spec = WorkerSpec::new(sub.argv.clone());
        spec.env = vec![
            ("PATH".into(), "/.airlock/bin:/usr/local/bin:/usr/bin:/bin".into()),
            ("PYTHONPATH".into(), "/.airlock/python".into()),
            ("AIRLOCK_FS_ROOTS".into(), granted.join(",")),
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
    crate::verdict::judge(outcome, timeout.as_secs(), 0).map_err(|r| (r.code, r.message))
}

/// Waits for the broker to exit by itself (it reads end-of-file once the
/// relay is done), at most `bound`, then kills it. `Err` unless it exited 0.
fn wait_broker(broker: &mut airlock_sandbox::BrokerProcess, bound: Duration) -> Result<(), String> {
    // The pidfd becomes readable when the broker exits.
    let until = Instant::now() + bound;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let timeout =
            rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let pidfd = broker.pidfd();
        let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
            _ => break,
        }
    }
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
