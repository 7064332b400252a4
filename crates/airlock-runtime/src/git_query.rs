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
//!    only program is the `airlock` binary, bound read-only
//!    ([`airlock_sandbox::NativeTier::bind_program`]) and run as the driver
//!    ([`airlock_git::driver`]); its image holds only the library
//!    directories the driver's loader needs, so no shell and no `git`.
//! 4. **Answer**: the driver's JSON, with what the snapshot left out
//!    (`partial`, `partial_reasons`, `skipped`), is the envelope's
//!    `content`. Nothing is published. Every step is journaled like a tool call.

use crate::{ceilings, Runtime};
use airlock_core::{
    CommandBoundary, Descriptor, Envelope, ErrorBody, Evidence, FilesystemBoundary, ReadGrant, ReasonCode, Refusal,
    RelPath, SnapshotBinding, Tier,
};
use airlock_git::{snapshot, ControlIds, Limits, Operation, Request, SnapshotStats};
use airlock_hostfs::Dir;
use airlock_journal::kind;
use airlock_sandbox::{ImageMount, StagedInput, Tier as _, Worker as _, WorkerLimits, WorkerSpec, PROGRAM_PATH};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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

/// What a finished snapshot leaves for the worker.
struct Prepared {
    descriptor: Descriptor,
    digest: String,
    stats: SnapshotStats,
}

impl Runtime {
    /// Answers one Git query (`operation` is `git_status`, `git_log`,
    /// `git_diff` or `git_staged_diff`; `args` are `path` and, for
    /// `git_log`, `max_count`). `Err` is a refusal before anything ran; a
    /// query that ran answers `Ok` with its status.
    pub fn git_query(
        &self,
        operation: &str,
        args: &BTreeMap<String, String>,
        invocation_id: &str,
    ) -> Result<Envelope, Refusal> {
        let _caller = self.enter_call(invocation_id, self.principal_of(None));
        let id = crate::id::check_invocation_id(invocation_id).ok().map(|()| invocation_id);
        let result = self.git_query_journaled(operation, args, invocation_id);
        self.journal_end(id, result)
    }

    pub(crate) fn git_query_journaled(
        &self,
        operation: &str,
        args: &BTreeMap<String, String>,
        id: &str,
    ) -> Result<Envelope, Refusal> {
        crate::id::check_invocation_id(id)?;
        let (op, path, request) = parse_args(operation, args)?;
        let record = self.invocations()?.create_subdir(id).map_err(|e| {
            Refusal::new(ReasonCode::InvocationDuplicate, format!("invocation id {id:?} was used before: {e}"))
        })?;
        if self.config().tier != Tier::Native {
            return Err(Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("tier {:?} cannot run Git queries yet; they need the native tier", self.config().tier),
            ));
        }
        let tier = self.native_tier()?;
        // 1. Prepare: resolve, reserve the snapshot's bound in the staging
        // pool, snapshot, give back what the archive did not use, describe.
        let repo = self.open_repository(&path)?;
        let limits = Limits::default();
        let mut lease = self.pool().admit(&airlock_staging::Request {
            invocation_id: id.to_owned(),
            purpose: airlock_staging::Purpose::GitSnapshot,
            bytes: limits.max_archive_bytes(),
            files: 1,
        })?;
        let mut archive = lease.data().create_file(ARCHIVE)?;
        let stats =
            snapshot::take(&repo, op.scope(), limits, &self.control_ids(), &mut archive).map_err(Refusal::from)?;
        drop(archive);
        lease.shrink(stats.archive_bytes, 1)?;
        let prepared = self.describe(op, &path, args, stats);
        record.write_new_file("git_query.json", &prepared.descriptor.canonical_json())?;
        self.note(
            kind::INVOCATION_PREPARED,
            Some(id),
            json!({
                "descriptor_sha256": prepared.digest,
                "tool": op.as_str(),
                "reads": prepared.descriptor.command_boundary.filesystem.reads,
                "snapshot": prepared.descriptor.command_boundary.filesystem.snapshot,
                "owner_pid": std::process::id(),
            }),
        )?;

        // 2. Authorize.
        let policy_ids = self.authorize_builtin(&prepared.descriptor, &policy_spec(&prepared.descriptor.tool), id)?;

        // 3. Run the driver on the archive alone.
        let mut tier = tier;
        let program = std::fs::File::open(tier.init_program()).map_err(|e| {
            Refusal::new(ReasonCode::SandboxUnavailable, format!("opening the airlock executable for the driver: {e}"))
        })?;
        tier.bind_program(Arc::new(program));
        let working_dir = self.config().working_dir.clone();
        let request_json =
            serde_json::to_string(&request).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
        let mut spec = WorkerSpec::new([
            PROGRAM_PATH.to_string(),
            airlock_git::driver::DRIVER_MARKER.to_string(),
            request_json,
            format!("{working_dir}/{ARCHIVE}"),
        ]);
        spec.working_dir = working_dir;
        spec.inputs.push(StagedInput { virtual_path: ARCHIVE.into(), file: lease.data().open_file(ARCHIVE)? });
        spec.image = DRIVER_IMAGE
            .iter()
            .filter(|p| std::path::Path::new(p).symlink_metadata().is_ok())
            .map(ImageMount::new)
            .collect();
        spec.limits = driver_limits(&prepared.stats);
        spec.timeout = DRIVER_TIMEOUT;
        spec.stdout_limit = ANSWER_LIMIT;
        spec.stderr_limit = 64 << 10;
        self.record(
            kind::WORKER_STARTED,
            Some(id),
            crate::ledger::worker_started_body(
                &[PROGRAM_PATH.to_owned(), "git-driver".to_owned(), op.as_str().to_owned()],
                json!({}),
            ),
        )?;
        let outcome =
            tier.start(spec).and_then(|w| w.wait()).map_err(|e| crate::failure::sandbox_refusal(&e, "the Git driver"));
        self.note(kind::WORKER_FINISHED,
            Some(id),
            match &outcome {
                Ok(o) => {
                    json!({ "exit": format!("{:?}", o.exit), "timed_out": o.timed_out, "cleanup_confirmed": o.cleanup_confirmed })
                }
                Err(r) => json!({ "error": r.code.as_str(), "message": r.message }),
            },
        )?;
        let outcome = outcome?;
        // The archive is removed and its room given back (a failure here
        // is reaped once this process is gone).
        let _ = lease.release();

        // 4. Answer.
        let base = Envelope {
            invocation_id: Some(id.to_owned()),
            tool: Some(op.as_str().to_owned()),
            stage: Some("finished"),
            exit_code: Some(match outcome.exit {
                airlock_sandbox::ExitStatusKind::Exited(c) => c,
                airlock_sandbox::ExitStatusKind::Signaled(s) => 128 + s,
            }),
            descriptor: Some(prepared.descriptor.clone()),
            evidence: Some(Evidence {
                descriptor_sha256: Some(prepared.digest.clone()),
                policy_ids,
                principal: Some(self.record_principal(Some(id))),
                limits: Some(crate::verdict::limits_evidence(&outcome.limits, None)),
            }),
            ..Envelope::ok()
        };
        Ok(match judge(&outcome) {
            Ok(mut content) => {
                prepared.stats.annotate(&mut content);
                Envelope { content: Some(content), ..base }
            }
            Err(r) => Envelope {
                status: r.code.status(),
                error: Some(ErrorBody { code: r.code, message: r.message }),
                ..base
            },
        })
    }

    /// The identities a snapshot never enters: the state directory (from
    /// its held handle) and every control file and directory that exists
    /// (config file, `tools_dir`, policy directories, the default approver
    /// key).
    fn control_ids(&self) -> ControlIds {
        use std::os::unix::fs::MetadataExt;
        let mut ids = ControlIds::new();
        ids.insert(self.state().dir().dev_ino());
        for control in crate::control::ControlFiles::of(self.config()).0 {
            if let Ok(m) = std::fs::symlink_metadata(&control.path) {
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
        let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
        match rel {
            None => Ok(dir),
            Some(rel) => {
                let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY;
                let fd = self.resolver().open_beneath(rustix::fd::AsFd::as_fd(&dir), &rel, flags)?;
                Ok(Dir::from_fd(fd)?)
            }
        }
    }

    fn describe(
        &self,
        op: Operation,
        path: &Option<RelPath>,
        args: &BTreeMap<String, String>,
        stats: SnapshotStats,
    ) -> Prepared {
        let sha256 = format!("sha256:{}", stats.sha256_hex);
        let shown = path.as_ref().map_or(".".to_string(), |p| p.as_str().to_owned());
        let read = ReadGrant { path: shown, bytes: stats.archive_bytes, sha256: sha256.clone() };
        let mut filesystem = FilesystemBoundary::new(vec![read], None, airlock_git::MAX_FILE_BYTES, None);
        filesystem.snapshot = Some(SnapshotBinding {
            kind: "git".into(),
            files: stats.files,
            bytes: stats.bytes,
            archive_bytes: stats.archive_bytes,
            sha256,
            linked_files: stats.linked_files,
            skipped: stats.skipped,
        });
        let descriptor = Descriptor {
            version: airlock_core::descriptor::DESCRIPTOR_VERSION,
            tool: op.as_str().to_owned(),
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            manifest_sha256: "builtin".into(),
            args: args.clone(),
            argv: vec![op.as_str().to_owned()],
            transport: "git-snapshot".into(),
            risk_tier: "low".into(),
            human_approval: false,
            working_dir: self.config().working_dir.clone(),
            command_boundary: CommandBoundary { filesystem },
        };
        let digest = descriptor.digest();
        Prepared { descriptor, digest, stats }
    }
}

/// The Cedar view of one Git query: action `tool_call::OPERATION`, with
/// arguments `path` (String) and `max_count` (Long).
fn policy_spec(operation: &str) -> airlock_policy::ToolSpec {
    airlock_policy::ToolSpec {
        name: operation.to_owned(),
        action: None,
        resource: None,
        args: vec![
            ("path".into(), airlock_policy::ArgKind::String),
            ("max_count".into(), airlock_policy::ArgKind::Long),
        ],
    }
}

/// Every Git query's Cedar view (policies are validated against them at start-up).
pub(crate) fn policy_specs() -> impl Iterator<Item = airlock_policy::ToolSpec> {
    Operation::ALL.into_iter().map(|op| policy_spec(op.as_str()))
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
            // The worker's words are untrusted: only `git.*` codes pass through.
            let code = v["error"]["code"].as_str().filter(|c| c.starts_with("git."));
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
