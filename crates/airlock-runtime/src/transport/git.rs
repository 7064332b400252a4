//! Git queries (`git_status`, `git_log`, `git_diff`, `git_staged_diff`)
//! through the whole pipeline.
//!
//! 1. **Prepare**: the repository directory (`path`, relative to the
//!    working directory, default `.`) is resolved beneath its ceiling
//!    through handles; [`airlock_git::snapshot::take`] copies it, bounded,
//!    into ONE private archive in the call's staging directory (never
//!    entering a control directory, by name or by identity — the state
//!    directory, `tools_dir`, the config file — and leaving hard-linked
//!    files out, counted); the
//!    descriptor binds the operation, the arguments and the snapshot
//!    (files, bytes, archive size and SHA-256) at
//!    `command_boundary.filesystem` (`reads` names the archive, `snapshot`
//!    describes it).
//! 2. **Authorize**: the configured Cedar policies (the query is the action
//!    `git_status`, …, its arguments `path` and `max_count`), or the
//!    built-in default, which permits these low-risk queries unless the
//!    snapshot found a hard-linked file (`snapshot.linked_files > 0`).
//! 3. **Run**: a native worker whose only file is the archive and whose
//!    only program is the driver ([`airlock_git::driver`]):
//!    `airlock-git-driver` beside `airlock`, else the `airlock` binary,
//!    bound read-only ([`airlock_sandbox::NativeTier::bind_program`]); its
//!    image holds only the library directories the driver's loader needs,
//!    so no shell and no `git`.
//! 4. **Answer**: the driver's JSON, with what the snapshot left out
//!    (`partial`, `partial_reasons`, `skipped`), is the envelope's
//!    `content`. Nothing is published. Every step is journaled like a tool call.
//!
//! # Git queries
//!
//! The repository directory is resolved beneath its ceiling
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
//! (`catalog::tool_specs`) serves start-up validation, Git authorization
//! and `airlock policy schema`, and a manifest naming a Git operation never
//! adds a second spec. Without policy files the default permits them unless
//! the snapshot found a hard-linked file (`policy.denied`,
//! `airlock.default.forbid-linked-files`, in the native default and in
//! `airlock policy show-default` alike), so that someone notices; a Cedar
//! policy may permit it and the answer then says so.
//!
//! The driver runs in a native worker whose only file is the archive
//! (`/workspace/snapshot`, a staged input) and whose image holds only `/lib*`
//! and `/usr/lib*` (no shell, no `git`); the driver is `airlock-git-driver`
//! beside `airlock` (a binary of the Git reader alone), else `airlock`
//! itself, dispatched by `main` on a hidden marker argument before anything
//! else (`NativeTier::bind_program`). Driver errors come back as
//! `{"error":{code,message}}` and become the envelope's error; only `git.*`
//! codes and `helper.mismatch` (a driver of another build) are believed,
//! anything else from the worker is `tool.failed`.
//! Refusals reserve the invocation id and are journaled like tool calls; a
//! query that ran journals prepared, authorized, worker started, worker
//! finished and finished. It publishes nothing.

use crate::engine::{answer, AuthorizedCall, CallStart, Preparation, Transport};
use crate::progress::{Meter, Phase};
use crate::{ceilings, Runtime};
use airlock_core::{Envelope, FilesystemBoundary, ReadGrant, ReasonCode, Refusal, RelPath, SnapshotBinding};
use airlock_git::{snapshot, ControlIds, Limits, Operation, Request, SnapshotStats};
use airlock_hostfs::Dir;
use airlock_sandbox::{ImageMount, NativeTier, StagedInput, WorkerLimits, WorkerSpec, PROGRAM_PATH};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// `transport` of a Git query's descriptor.
pub const GIT_TRANSPORT: &str = "git-snapshot";
/// Name of the archive in the call's staging directory and in the worker.
const ARCHIVE: &str = "snapshot";
/// Bytes of the driver's answer kept; a larger answer is `limit.output_size`.
const ANSWER_LIMIT: usize = 32 << 20;
/// The driver's wall-clock budget.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(120);
/// tmpfs space per unpacked file or directory (one page each at least).
const PER_ENTRY_BYTES: u64 = 4096;
/// Extra scratch for gix and the rewritten configuration.
const SCRATCH_MARGIN: u64 = 16 << 20;
/// The only image directories a driver worker gets: what the dynamic
/// loader needs, no `bin` directory (so no shell, no `git`).
const DRIVER_IMAGE: &[&str] = &["/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32"];

/// The driver's image: the library directories of [`DRIVER_IMAGE`] this
/// host has.
pub fn driver_image(authority: &airlock_hostfs::HostAuthority) -> Vec<ImageMount> {
    DRIVER_IMAGE.iter().filter(|p| authority.lstat(std::path::Path::new(p)).is_ok()).map(ImageMount::new).collect()
}

/// One Git query: the operation and its arguments (`path`, `max_count`).
pub(crate) struct Git<'a> {
    pub operation: &'a str,
    pub args: &'a BTreeMap<String, String>,
}

/// What a Git query carries from its snapshot to its driver.
#[derive(Debug)]
pub struct GitPayload {
    op: Operation,
    request: Request,
    stats: SnapshotStats,
    tier: NativeTier,
}

impl Transport for Git<'_> {
    type Payload = GitPayload;
    const NAME: &'static str = GIT_TRANSPORT;
    const WRITES: bool = false;
    const NOT_KEPT: Option<&'static str> =
        Some("it is a Git query: it is answered in one call (`airlock query`), not kept for dispatch");

    fn prepare(self, rt: &Runtime, start: &CallStart<'_>) -> Result<Preparation<GitPayload>, Refusal> {
        let (op, path, request) = parse_args(self.operation, self.args)?;
        let tier_name =
            crate::tier_choice::choose(rt.config(), start.tier, None, crate::tier_choice::NATIVE_ONLY, "a Git query")?
                .as_str()
                .to_owned();
        let tier = rt.native_tier()?;
        // Resolve, reserve the snapshot's bound in the staging pool,
        // snapshot, give back what the archive did not use, describe.
        let repo = rt.open_repository(&path)?;
        let limits = Limits::default();
        let mut lease = rt.pool().admit(&airlock_staging::Request {
            invocation_id: start.invocation_id.to_owned(),
            purpose: airlock_staging::Purpose::GitSnapshot,
            bytes: limits.max_archive_bytes(),
            files: 1,
        })?;
        let mut archive = lease.data().create_file(ARCHIVE)?;
        let mut meter = Meter::begin(start.progress, Phase::GitSnapshot, None);
        let stats = snapshot::take(&repo, op.scope(), limits, &rt.control_ids(), &mut meter.writer(&mut archive))
            .map_err(Refusal::from)?;
        drop(meter);
        drop(archive);
        lease.shrink(stats.archive_bytes, 1)?;
        let filesystem = boundary(&path, &stats);
        let mut journal = serde_json::Map::new();
        journal.insert("reads".into(), json!(filesystem.reads));
        journal.insert("snapshot".into(), json!(filesystem.snapshot));
        Ok(Preparation {
            args: self.args.clone(),
            argv: vec![op.as_str().to_owned()],
            filesystem,
            inputs: Vec::new(),
            output: None,
            lease: Some(lease),
            journal,
            tier: tier_name,
            payload: GitPayload { op, request, stats, tier },
        })
    }

    fn execute(rt: &Runtime, call: AuthorizedCall<GitPayload>) -> Result<Envelope, Refusal> {
        let (mut prepared, decision) = call.into_parts();
        let id = prepared.invocation_id().to_owned();
        let GitPayload { op, request, stats, tier } = prepared.payload();
        // The driver runs on the archive alone.
        let mut tier = tier.clone();
        let program = crate::own_program::beside_or_self(DRIVER_BIN).and_then(|exe| rt.authority().open_read(&exe));
        let program = program.map_err(|e| {
            Refusal::new(ReasonCode::SandboxUnavailable, format!("opening the Git driver's executable: {e}"))
        })?;
        tier.bind_program(Arc::new(program));
        let working_dir = rt.config().working_dir.clone();
        let request_json =
            serde_json::to_string(request).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
        let mut words = vec![PROGRAM_PATH.to_string()];
        words.extend(airlock_git::driver::driver_args(request_json, format!("{working_dir}/{ARCHIVE}")));
        let mut spec = WorkerSpec::new(words);
        spec.working_dir = working_dir;
        spec.inputs.push(StagedInput {
            virtual_path: ARCHIVE.into(),
            file: prepared.staged()?.open_file(ARCHIVE)?,
            held: false,
        });
        spec.image = driver_image(rt.authority());
        spec.limits = driver_limits(stats);
        spec.timeout = DRIVER_TIMEOUT;
        spec.stdout_limit = ANSWER_LIMIT;
        spec.stderr_limit = 64 << 10;
        let argv = [PROGRAM_PATH.to_owned(), "git-driver".to_owned(), op.as_str().to_owned()];
        let (step, outcome) = rt.run_journaled(&tier, spec, &id, &argv, json!({}), "the Git driver")?;
        step.finished(outcome.as_ref())?;
        let outcome = outcome?;
        let mut base = answer::finished(&prepared, &decision.policy_ids, Some((&outcome, None)));
        // The driver's stdout is its JSON answer, which becomes the content
        // or the error: not a stream to show.
        base.stdout_tail = None;
        let answered = judge(&outcome).map(|mut content| {
            stats.annotate(&mut content);
            content
        });
        // The archive is removed and its room given back (a failure here
        // is reaped once this process is gone).
        prepared.release_staging();
        Ok(match answered {
            Ok(content) => Envelope { content: Some(content), ..base },
            Err(r) => answer::failed(&base, r, None),
        })
    }
}

impl Runtime {
    /// The identities a snapshot never enters: the state directory (from
    /// its held handle) and every control file and directory that exists
    /// (config file, `tools_dir`, policy directories, the default approver
    /// key).
    fn control_ids(&self) -> ControlIds {
        use std::os::unix::fs::MetadataExt;
        let mut ids = ControlIds::new();
        ids.insert(self.state().dir().dev_ino());
        for control in crate::control::ControlFiles::of(self.authority(), self.config()).0 {
            if let Ok(m) = self.authority().lstat(&control.path) {
                ids.insert((m.dev(), m.ino()));
            }
        }
        ids
    }

    /// The repository directory beneath its ceiling, through handles.
    fn open_repository(&self, path: &Option<RelPath>) -> Result<Dir, Refusal> {
        let (ceiling, rel) = match path {
            Some(p) => self.config().ceiling_for(p).ok_or_else(|| {
                Refusal::new(ReasonCode::GrantNoCeiling, format!("no configured ceiling covers {:?}", p.as_str()))
            })?,
            None => self
                .config()
                .ceilings
                .iter()
                .find(|c| c.virtual_root.is_none())
                .map(|c| (c, None))
                .ok_or_else(|| Refusal::new(ReasonCode::GrantNoCeiling, "no configured ceiling covers \".\""))?,
        };
        let what = format!("the repository {:?}", path.as_ref().map_or(".", RelPath::as_str));
        let dir = ceilings::open_readable(self.authority(), ceiling, self.protected(), &what)?;
        match rel {
            None => Ok(dir),
            Some(rel) => {
                let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY;
                let fd = self.resolver().open_beneath(rustix::fd::AsFd::as_fd(&dir), &rel, flags)?;
                Ok(Dir::from_fd(fd)?)
            }
        }
    }
}

/// The boundary of a query over `stats`: `reads` names the archive,
/// `snapshot` describes it.
fn boundary(path: &Option<RelPath>, stats: &SnapshotStats) -> FilesystemBoundary {
    let sha256 = format!("sha256:{}", stats.sha256_hex);
    let shown = path.as_ref().map_or(".".to_string(), |p| p.as_str().to_owned());
    let read = ReadGrant { path: shown, bytes: stats.archive_bytes, sha256: sha256.clone() };
    let mut filesystem = FilesystemBoundary::new(vec![read], None, airlock_git::MAX_FILE_BYTES, None);
    filesystem.snapshot = Some(SnapshotBinding {
        kind: "git".into(),
        files: stats.files,
        stat_only: stats.stat_only,
        bytes: stats.bytes,
        archive_bytes: stats.archive_bytes,
        sha256,
        linked_files: stats.linked_files,
        skipped: stats.skipped,
    });
    filesystem
}

/// The operation, the repository path (`None` for `.`) and the driver's request.
fn parse_args(
    operation: &str,
    args: &BTreeMap<String, String>,
) -> Result<(Operation, Option<RelPath>, Request), Refusal> {
    let op = Operation::parse(operation)?;
    let bad = |m: String| Refusal::new(ReasonCode::GitBadArgument, m);
    if let Some(unknown) = args.keys().find(|k| !matches!(k.as_str(), "path" | "max_count")) {
        return Err(bad(format!("{operation} has no argument {unknown:?} (path, max_count)")));
    }
    let path = match args.get("path").map(String::as_str) {
        None | Some(".") => None,
        Some(p) => Some(RelPath::parse(p)?),
    };
    let max_count = match args.get("max_count") {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| bad(format!("max_count {v:?} is not a count")))?),
    };
    let request = Request { operation: op, max_count };
    request.check()?;
    Ok((op, path, request))
}

/// The file name of the Git driver's own binary, which the worker runs
/// when it sits beside airlock (it links only the Git reader, so the
/// worker executes a few MiB of one job's code instead of all of airlock);
/// else airlock is the driver. Not the tier's init, which may be
/// `airlock-sandbox-init`.
pub const DRIVER_BIN: &str = "airlock-git-driver";

/// Limits for a driver unpacking `stats`: files up to 64 MiB, a `/tmp`
/// that holds the unpacked repository, and no more processes than it needs.
fn driver_limits(stats: &SnapshotStats) -> WorkerLimits {
    WorkerLimits {
        file_size: airlock_git::MAX_FILE_BYTES + (1 << 20),
        scratch_bytes: stats
            .bytes
            .saturating_add((stats.files + stats.dirs).saturating_mul(PER_ENTRY_BYTES))
            .saturating_add(SCRATCH_MARGIN),
        pids: Some(16),
        ..WorkerLimits::default()
    }
}

/// The driver's answer, or why there is none.
fn judge(outcome: &airlock_sandbox::WorkerOutcome) -> Result<serde_json::Value, Refusal> {
    if !outcome.cleanup_confirmed {
        return Err(Refusal::new(ReasonCode::WorkerCleanup, "the Git driver's processes could not be confirmed gone"));
    }
    if outcome.timed_out {
        return Err(Refusal::new(ReasonCode::ToolTimeout, "the Git driver ran out of time"));
    }
    if outcome.stdout_truncated {
        return Err(Refusal::new(
            ReasonCode::LimitOutputSize,
            format!("the answer is larger than {ANSWER_LIMIT} bytes"),
        ));
    }
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&outcome.stdout).ok();
    match (outcome.exit.success(), parsed) {
        (true, Some(v)) => Ok(v),
        (false, Some(v)) if v.get("error").is_some() => {
            // The worker's words are untrusted: only `git.*` codes and a
            // driver's refusal of another build pass through.
            let code = v["error"]["code"].as_str().filter(|c| c.starts_with("git.") || *c == "helper.mismatch");
            let code = code.and_then(ReasonCode::from_str_code).unwrap_or(ReasonCode::ToolFailed);
            Err(Refusal::new(code, v["error"]["message"].as_str().unwrap_or("").to_owned()))
        }
        _ => Err(Refusal::new(
            ReasonCode::ToolFailed,
            format!(
                "the Git driver ended {:?} without an answer: {}",
                outcome.exit,
                String::from_utf8_lossy(&outcome.stderr[..outcome.stderr.len().min(2048)])
            ),
        )),
    }
}
