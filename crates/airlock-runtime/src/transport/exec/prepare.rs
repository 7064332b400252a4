//! The exec shape's step 1: validate, resolve through handles, snapshot,
//! hold the output parent.

use super::{Exec, ExecPayload};
use crate::engine::{CallStart, Preparation};
use crate::progress::{Meter, Phase};
use crate::store::{RecordedInput, RecordedOutput};
use crate::{ceilings, Runtime};
use airlock_core::{FilesystemBoundary, ReadGrant, ReasonCode, Refusal, RelPath};
use airlock_hostfs::{HeldOutput, InputFile};
use airlock_sandbox::HeldInput;
use serde_json::json;

/// What a caller asks for.
#[derive(Debug, Clone, Default)]
pub struct CallRequest {
    /// A manifest path or tool name.
    pub tool: String,
    /// Positional values, in `position` order.
    pub positional: Vec<String>,
    /// Named values.
    pub named: Vec<(String, serde_json::Value)>,
    /// The invocation id (see [`crate::new_invocation_id`]).
    pub invocation_id: String,
    /// Who makes the call (`Airlock::Agent` id), as a front authenticated
    /// it; `None` is the runtime's principal (`[policy] principal` or
    /// `--principal`). Never taken from a request body.
    pub principal: Option<String>,
    /// Where the call's long phases (snapshots) are reported; `None`:
    /// nowhere ([`crate::progress`]).
    pub progress: Option<crate::progress::ProgressHook>,
    /// The worker tier asked for (`--tier`); `None`: the manifest's, else
    /// the configured default ([`crate::tier_choice`]).
    pub tier: Option<airlock_core::config::Tier>,
}

impl Runtime {
    /// The exec shape's step 1 (see the engine): validate the arguments,
    /// open and check every input before reading any, hold the output's
    /// parent, reserve staging room, snapshot.
    pub(super) fn prepare_exec(
        &self,
        exec: Exec<'_>,
        start: &CallStart<'_>,
    ) -> Result<Preparation<ExecPayload>, Refusal> {
        let Exec { request, manifest } = exec;
        manifest.check_executable()?;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let argv = manifest.build_argv(&args)?;
        let (supported, shape) = match manifest.mcp_spec()? {
            Some(_) => (crate::tier_choice::NATIVE_ONLY, "an [mcp] tool"),
            None if manifest.session_spec().is_some() => (crate::tier_choice::LOCAL_TIERS, "a [session] tool"),
            None => (crate::tier_choice::COMMAND_TIERS, "a [command] tool"),
        };
        let pinned = manifest.tool.sandbox.and_then(|s| s.tier);
        let tier = crate::tier_choice::choose(self.config(), start.tier, pinned, supported, shape)?;
        let plan = manifest.filesystem_plan(&args)?;
        let limits = &self.config().limits;
        if plan.reads.len() > limits.max_inputs {
            return Err(Refusal::new(
                ReasonCode::LimitInputs,
                format!("{} inputs declared, more than {}", plan.reads.len(), limits.max_inputs),
            ));
        }
        let max_file_bytes = limits.file_bytes(plan.max_file_bytes)?;
        // Inputs have their own bound: a manifest's output bound never
        // limits what it may read.
        let max_input_file_bytes = limits.input_file_bytes(plan.max_input_file_bytes)?;

        // A large input of a call run now on the native tier is held
        // unchanged where the kernel grants a read lease, not copied; a
        // small one is copied into memory (see `memory_snapshot`).
        let may_hold = !start.keep && !start.session && tier == airlock_core::config::Tier::Native;
        // Open and check every input before reading any of them.
        let mut opened = Vec::with_capacity(plan.reads.len());
        let mut declared_bytes: u64 = 0;
        for path in &plan.reads {
            let (ceiling, rel) = self.ceiling_for(path)?;
            let rel = rel.ok_or_else(|| {
                Refusal::new(ReasonCode::InputNotRegular, format!("input {:?} is a ceiling directory", path.as_str()))
            })?;
            let what = format!("input {:?}", path.as_str());
            let dir = ceilings::open_readable(self.authority(), ceiling, self.protected(), &what)?;
            let file = InputFile::open(self.resolver(), &dir, &rel, path, max_input_file_bytes)
                .map_err(|e| with_input_hint(e.into(), limits.max_input_file_bytes))?;
            declared_bytes += file.size();
            if declared_bytes > limits.max_input_bytes {
                return Err(input_bytes_refusal(declared_bytes, limits.max_input_bytes));
            }
            let held = may_hold.then(|| HeldInput::hold(file.file())).flatten();
            opened.push((path.clone(), file, held));
        }

        let output = match &plan.create {
            None => None,
            Some(path) => Some(self.hold_output(path, plan.create_parents)?),
        };

        // Room in the shared staging pool is reserved before a byte is
        // copied: the inputs as sized by their handles (a snapshot that
        // grows is refused), the output's bound, and a per-file overhead.
        // A call kept for a later dispatch is charged to its principal's
        // pending budget instead, and expires; if it stages nothing it
        // holds no room at all until it is dispatched.
        // A held input takes no room: only the copies are staged.
        let copied = || opened.iter().filter(|(_, _, held)| held.is_none()).map(|(_, file, _)| file.size());
        let room = airlock_staging::Request {
            invocation_id: start.invocation_id.to_owned(),
            purpose: airlock_staging::Purpose::Call,
            bytes: copied().sum::<u64>().saturating_add(if plan.create.is_some() { max_file_bytes } else { 0 }),
            files: copied().count() as u64 + u64::from(plan.create.is_some()),
        };
        let lease = match start.expires_at {
            None => Some(self.pool().admit(&room)?),
            Some(_) if room.files == 0 => None,
            Some(expires_at) => {
                let waiting = airlock_staging::Pending { principal: start.principal.to_owned(), expires_at };
                Some(self.pool().admit_pending(&room, &waiting, self.config().approval.max_pending)?)
            }
        };
        let inputs_dir = lease.as_ref().map(airlock_staging::Lease::data);
        let mut reads = Vec::with_capacity(opened.len());
        let mut recorded = Vec::with_capacity(opened.len());
        let mut held_inputs = Vec::with_capacity(opened.len());
        let mut memory_inputs = Vec::with_capacity(opened.len());
        let mut total: u64 = 0;
        // Large inputs take seconds to copy and hash: one phase for all of them.
        let mut meter = Meter::begin(start.progress, Phase::Snapshot, Some(declared_bytes));
        for (index, (path, file, held)) in opened.into_iter().enumerate() {
            let name = index.to_string();
            // A held input is hashed in place, after its lease was taken:
            // the hash is of the bytes the worker will read.
            let mut memory = None;
            let info = if held.is_some() {
                file.hash_held(max_input_file_bytes, &mut |n| meter.add(n))?
            } else if let Some(copy) =
                (may_hold && file.size() <= airlock_sandbox::BIND_MIN_BYTES).then(memory_snapshot).flatten()
            {
                let info = file.snapshot_to_file(&copy, max_input_file_bytes, &mut |n| meter.add(n))?;
                memory = Some(seal(copy)?);
                info
            } else {
                let inputs_dir = inputs_dir.ok_or_else(|| Refusal::new(ReasonCode::Internal, "no staging room"))?;
                let dest = inputs_dir.create_file_rw(&name).map_err(Refusal::from)?;
                file.snapshot_to_file(&dest, max_input_file_bytes, &mut |n| meter.add(n))?
            };
            total += info.bytes;
            if total > limits.max_input_bytes {
                return Err(input_bytes_refusal(total, limits.max_input_bytes));
            }
            let grant = ReadGrant { path: path.as_str().to_owned(), bytes: info.bytes, sha256: info.sha256_tagged() };
            recorded.push(RecordedInput {
                path: grant.path.clone(),
                snapshot: name,
                bytes: grant.bytes,
                sha256: grant.sha256.clone(),
                held: held.is_some(),
                in_memory: memory.is_some(),
            });
            reads.push(grant);
            held_inputs.push(held);
            memory_inputs.push(memory);
        }
        drop(meter);

        let output_parent = output.as_ref().map(|o| o.parent().identity());
        let mut filesystem =
            FilesystemBoundary::new(reads, plan.create.as_ref(), max_file_bytes, output_parent.clone());
        filesystem.create_dirs = output.as_ref().map(HeldOutput::missing_paths).filter(|dirs| !dirs.is_empty());
        let mut journal = serde_json::Map::new();
        journal.insert("reads".into(), json!(filesystem.reads));
        journal.insert("create".into(), json!(filesystem.create));
        if let Some(dirs) = &filesystem.create_dirs {
            journal.insert("create_dirs".into(), json!(dirs));
        }
        Ok(Preparation {
            args: args.as_strings(),
            argv,
            filesystem,
            inputs: recorded,
            output: plan
                .create
                .as_ref()
                .zip(output_parent)
                .map(|(p, parent)| RecordedOutput { path: p.as_str().to_owned(), parent }),
            lease,
            journal,
            tier: self.config().tiers.descriptor_name(tier),
            payload: ExecPayload { manifest, output, held: held_inputs, memory: memory_inputs },
        })
    }

    pub(crate) fn ceiling_for(&self, path: &RelPath) -> Result<(&airlock_core::Ceiling, Option<RelPath>), Refusal> {
        self.config().ceiling_for(path).ok_or_else(|| {
            Refusal::new(ReasonCode::GrantNoCeiling, format!("no configured ceiling covers {:?}", path.as_str()))
        })
    }

    /// Holds the output's parent beneath its read-write or create-only ceiling; with
    /// `create_parents`, its deepest existing ancestor and the names of the
    /// directories to make (at publication) below it.
    pub(crate) fn hold_output(&self, path: &RelPath, create_parents: bool) -> Result<HeldOutput, Refusal> {
        let (ceiling, rel) = self.ceiling_for(path)?;
        if !ceiling.mode.creates() {
            return Err(Refusal::new(
                ReasonCode::GrantReadOnly,
                format!("output {:?} is under the read-only ceiling {:?}", path.as_str(), ceiling.spec),
            ));
        }
        let rel = rel.ok_or_else(|| {
            Refusal::new(ReasonCode::OutputExists, format!("output {:?} is a ceiling directory", path.as_str()))
        })?;
        let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
        if create_parents {
            return Ok(HeldOutput::hold_creating(self.resolver(), &dir, &rel, path)?);
        }
        HeldOutput::hold(self.resolver(), &dir, &rel, path).map_err(|e| {
            let mut r = Refusal::from(e);
            if r.code == ReasonCode::OutputParentMissing {
                r.message.push_str("; create it first, or set create_parents = true in the manifest's [filesystem]");
            }
            r
        })
    }
}

fn input_bytes_refusal(total: u64, max: u64) -> Refusal {
    Refusal::new(
        ReasonCode::LimitInputBytes,
        format!(
            "inputs total {total} bytes or more, more than {max} ([limits] max_input_bytes in airlock.toml, at most {})",
            airlock_core::limits::hard::MAX_INPUT_BYTES
        ),
    )
}

/// Says how to let a too-large input through: the manifest's bound, within
/// the operator's, within the hard cap.
fn with_input_hint(refusal: Refusal, operator: u64) -> Refusal {
    if refusal.code != ReasonCode::InputTooLarge {
        return refusal;
    }
    let cap = airlock_core::limits::hard::MAX_FILE_BYTES;
    Refusal::new(
        refusal.code,
        format!(
            "{}; a manifest's [filesystem] max_input_file_bytes may allow up to {operator} ([limits] \
             max_input_file_bytes in airlock.toml, at most {cap})",
            refusal.message
        ),
    )
}

/// A new memory file for the snapshot of a small input of a call run at
/// once on the native tier. The worker gets a copy of so small an input on
/// its own tmpfs anyway (`airlock_sandbox::BIND_MIN_BYTES`), and no later
/// dispatch needs it: in memory it costs the staging file system no inode
/// (on the bench's host each new one cost 0.3–0.65 ms) and no write-back.
/// It is still charged to the staging pool as a copy is. `None` where the
/// kernel makes no memory file (the snapshot is staged on disk then).
fn memory_snapshot() -> Option<std::fs::File> {
    use rustix::fs::{memfd_create, MemfdFlags};
    memfd_create("airlock-input", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).ok().map(std::fs::File::from)
}

/// Seals a written snapshot: its bytes, the ones hashed, can no longer
/// change through any descriptor of it.
fn seal(copy: std::fs::File) -> Result<std::fs::File, Refusal> {
    airlock_sandbox::seal_memory_file(&copy, "airlock-input")
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("sealing an input snapshot: {e}")))?;
    Ok(copy)
}
