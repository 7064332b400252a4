//! Step 1 of the pipeline: validate, resolve through handles, snapshot,
//! hold the output parent, and describe the call.

use crate::store::{PendingInvocation, PreparedRecord, RecordedInput, RecordedOutput};
use crate::{ceilings, id, Runtime};
use airlock_core::descriptor::DESCRIPTOR_VERSION;
use airlock_core::{
    CeilingMode, CommandBoundary, Descriptor, FilesystemBoundary, ReadGrant, ReasonCode, Refusal, RelPath,
};
use airlock_hostfs::{HeldOutput, InputFile};

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
}

/// A call that passed preparation: snapshots taken, output parent held,
/// descriptor built. Only this can be authorized.
#[derive(Debug)]
pub struct PreparedCall {
    record: PreparedRecord,
    manifest: airlock_core::manifest::Manifest,
    output: Option<HeldOutput>,
    store: airlock_hostfs::PrivateDir,
    /// The staging data of a call loaded for dispatch, whose durable
    /// reservation it has not adopted yet.
    staged: Option<airlock_hostfs::PrivateDir>,
    /// The reservation this process holds; its data directory is the call's
    /// private staging data (snapshots, and later its output). Both are
    /// `None` for a source query, which stages nothing.
    lease: Option<airlock_staging::Lease>,
}

impl PreparedCall {
    /// Assembles a prepared call (the source pipeline builds its own).
    pub(crate) fn from_parts(
        record: PreparedRecord,
        manifest: airlock_core::manifest::Manifest,
        output: Option<HeldOutput>,
        store: airlock_hostfs::PrivateDir,
    ) -> PreparedCall {
        PreparedCall { record, manifest, output, store, staged: None, lease: None }
    }

    /// The invocation id.
    pub fn invocation_id(&self) -> &str {
        &self.record.invocation_id
    }

    /// The resolved call.
    pub fn descriptor(&self) -> &Descriptor {
        &self.record.descriptor
    }

    /// `sha256:` digest of the canonical descriptor.
    pub fn digest(&self) -> &str {
        &self.record.descriptor_sha256
    }

    /// Who made the call.
    pub fn principal(&self) -> &str {
        &self.record.principal
    }

    /// The record kept in the state directory.
    pub fn record(&self) -> &PreparedRecord {
        &self.record
    }

    /// The held output parent, if the call creates a file.
    pub fn output(&self) -> Option<&HeldOutput> {
        self.output.as_ref()
    }

    /// Opens the snapshot of input `index` (declaration order), read-only.
    pub fn open_snapshot(&self, index: usize) -> Result<std::fs::File, Refusal> {
        let name =
            &self.record.inputs.get(index).ok_or_else(|| Refusal::new(ReasonCode::Internal, "no such input"))?.snapshot;
        let inputs = self.staged()?.open_subdir(crate::store::INPUTS_DIR)?;
        Ok(inputs.open_file(name)?)
    }

    /// The call's private staging directory (in its pool reservation).
    pub fn staged(&self) -> Result<&airlock_hostfs::PrivateDir, Refusal> {
        self.lease
            .as_ref()
            .map(airlock_staging::Lease::data)
            .or(self.staged.as_ref())
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "this call stages nothing"))
    }

    /// Removes the staged copies and releases their reservation (best
    /// effort: what fails stays reserved under this process and is reaped
    /// once it is gone).
    pub(crate) fn release_staging(self) {
        if let Some(lease) = self.lease {
            let _ = lease.release();
        }
    }

    /// Takes over the durable staging reservation kept since `airlock
    /// prepare`, so it is released when this process is done with it.
    pub(crate) fn adopt_lease(&mut self, pool: &airlock_staging::Pool) -> Result<(), Refusal> {
        if self.lease.is_none() {
            self.lease = Some(pool.adopt(self.invocation_id())?);
        }
        Ok(())
    }

    /// A kept call that staged nothing held no room while it waited: it is
    /// admitted to the running pool now, before its approval is used, so a
    /// full pool (`staging.exhausted`) leaves it dispatchable later.
    pub(crate) fn admit_if_unstaged(&mut self, pool: &airlock_staging::Pool) -> Result<(), Refusal> {
        if self.lease.is_none() && self.staged.is_none() {
            self.lease = Some(pool.admit(&airlock_staging::Request {
                invocation_id: self.invocation_id().to_owned(),
                purpose: airlock_staging::Purpose::Call,
                bytes: 0,
                files: 0,
            })?);
        }
        Ok(())
    }

    /// The manifest exactly as prepared.
    pub fn manifest(&self) -> &airlock_core::manifest::Manifest {
        &self.manifest
    }

    /// The invocation's private directory in the state dir.
    pub fn store(&self) -> &airlock_hostfs::PrivateDir {
        &self.store
    }
}

struct OpenedInput {
    path: RelPath,
    file: InputFile,
}

impl Runtime {
    /// Prepares `request`. Nothing runs; on any refusal nothing is kept in
    /// the state directory and no byte of a refused file has been read. The
    /// prepared call is synced to disk, so it survives a crash for a later
    /// dispatch.
    /// The outcome is journaled (`InvocationPrepared` or `InvocationRefused`).
    pub fn prepare(&self, request: &CallRequest) -> Result<PreparedCall, Refusal> {
        let _caller = self.enter_call(&request.invocation_id, self.principal_of(request.principal.as_deref()));
        let result = self.load_tool(&request.tool).and_then(|tool| self.prepare_call(request, tool, true));
        match &result {
            Ok(prepared) => self.journal_prepared(prepared, true)?,
            Err(refusal) => {
                let id = id::check_invocation_id(&request.invocation_id).ok().map(|()| request.invocation_id.as_str());
                if let Some(id) = id {
                    self.reserve_refused_id(id, refusal);
                }
                let body = serde_json::json!({ "code": refusal.code.as_str(), "message": refusal.message });
                self.record(airlock_journal::kind::INVOCATION_REFUSED, id, body)?;
            }
        }
        result
    }

    /// [`Runtime::prepare`] of the manifest `tool` (read once for the
    /// whole call: what is described, authorized and run all come from its
    /// bytes), syncing the kept call only when `durable` (a call run at once
    /// in this process does not need it).
    pub(crate) fn prepare_call(
        &self,
        request: &CallRequest,
        tool: crate::tools::LoadedTool,
        durable: bool,
    ) -> Result<PreparedCall, Refusal> {
        id::check_invocation_id(&request.invocation_id)?;
        // Checked again, atomically, when the call is committed; this early
        // look keeps a reused id from reading any file.
        id::check_unused(&self.invocations()?, &request.invocation_id)?;
        let manifest = &tool.manifest;
        if manifest.source.is_some() {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!(
                    "{} is a source query: it is answered in one call (`airlock query`), not kept for dispatch",
                    manifest.name()
                ),
            ));
        }
        if manifest.broker.is_some() {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!(
                    "{} reaches named roots through the broker: it runs in one call (`airlock run`), not kept for \
                     dispatch",
                    manifest.name()
                ),
            ));
        }
        manifest.check_executable()?;
        let args = manifest.bind_args(&request.positional, &request.named)?;
        let argv = manifest.build_argv(&args)?;
        let plan = manifest.filesystem_plan(&args)?;
        let limits = &self.config().limits;
        if plan.reads.len() > limits.max_inputs {
            return Err(Refusal::new(
                ReasonCode::LimitInputs,
                format!("{} inputs declared, more than {}", plan.reads.len(), limits.max_inputs),
            ));
        }
        let max_file_bytes = limits.file_bytes(plan.max_file_bytes)?;

        // Open and check every input before reading any of them.
        let mut opened = Vec::with_capacity(plan.reads.len());
        let mut declared_bytes: u64 = 0;
        for path in &plan.reads {
            let (ceiling, rel) = self.ceiling_for(path)?;
            let rel = rel.ok_or_else(|| {
                Refusal::new(ReasonCode::InputNotRegular, format!("input {:?} is a ceiling directory", path.as_str()))
            })?;
            let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
            let file = InputFile::open(self.resolver(), &dir, &rel, path, max_file_bytes)?;
            declared_bytes += file.size();
            if declared_bytes > limits.max_input_bytes {
                return Err(input_bytes_refusal(declared_bytes, limits.max_input_bytes));
            }
            opened.push(OpenedInput { path: path.clone(), file });
        }

        let output = match &plan.create {
            None => None,
            Some(path) => Some(self.hold_output(path)?),
        };

        // Room in the shared staging pool is reserved before a byte is
        // copied: the inputs as sized by their handles (a snapshot that
        // grows is refused), the output's bound, and a per-file overhead.
        // A call kept for a later dispatch is charged to its principal's
        // pending budget instead, and expires; if it stages nothing it
        // holds no room at all until it is dispatched.
        let principal = self.principal_of(request.principal.as_deref()).to_owned();
        let prepared_at = airlock_staging::unix_now();
        let expires_at = durable.then(|| prepared_at.saturating_add(self.config().approval.ttl_seconds));
        let room = airlock_staging::Request {
            invocation_id: request.invocation_id.clone(),
            purpose: airlock_staging::Purpose::Call,
            bytes: declared_bytes.saturating_add(if plan.create.is_some() { max_file_bytes } else { 0 }),
            files: opened.len() as u64 + u64::from(plan.create.is_some()),
        };
        let mut lease = match expires_at {
            None => Some(self.pool().admit(&room)?),
            Some(_) if room.files == 0 => None,
            Some(expires_at) => {
                let waiting = airlock_staging::Pending { principal: principal.clone(), expires_at };
                Some(self.pool().admit_pending(&room, &waiting, self.config().approval.max_pending)?)
            }
        };
        let inputs_dir = match &lease {
            Some(lease) => Some(lease.data().create_subdir(crate::store::INPUTS_DIR).map_err(Refusal::from)?),
            None => None,
        };
        let invocations = self.invocations()?;
        let pending = PendingInvocation::begin(&invocations)?;
        let mut reads = Vec::with_capacity(opened.len());
        let mut recorded = Vec::with_capacity(opened.len());
        let mut total: u64 = 0;
        for (index, input) in opened.into_iter().enumerate() {
            let name = index.to_string();
            let inputs_dir =
                inputs_dir.as_ref().ok_or_else(|| Refusal::new(ReasonCode::Internal, "no staging room"))?;
            let mut dest = inputs_dir.create_file(&name).map_err(Refusal::from)?;
            let info = input.file.snapshot_into(&mut dest, max_file_bytes)?;
            total += info.bytes;
            if total > limits.max_input_bytes {
                return Err(input_bytes_refusal(total, limits.max_input_bytes));
            }
            let grant =
                ReadGrant { path: input.path.as_str().to_owned(), bytes: info.bytes, sha256: info.sha256_tagged() };
            recorded.push(RecordedInput {
                path: grant.path.clone(),
                snapshot: name,
                bytes: grant.bytes,
                sha256: grant.sha256.clone(),
            });
            reads.push(grant);
        }

        let output_parent = output.as_ref().map(|o| o.parent().identity());
        let descriptor = Descriptor {
            version: DESCRIPTOR_VERSION,
            tool: manifest.name().to_owned(),
            tool_version: manifest.tool.version.clone(),
            manifest_sha256: manifest.sha256().to_owned(),
            args: args.as_strings(),
            argv,
            transport: "exec".to_owned(),
            risk_tier: manifest.tool.risk_tier.to_string(),
            human_approval: manifest.tool.human_approval,
            working_dir: self.config().working_dir.clone(),
            command_boundary: CommandBoundary {
                filesystem: FilesystemBoundary::new(reads, plan.create.as_ref(), max_file_bytes, output_parent.clone()),
            },
        };
        let record = PreparedRecord {
            format: crate::store::RECORD_FORMAT,
            invocation_id: request.invocation_id.clone(),
            principal,
            manifest_origin: tool.origin.display().to_string(),
            descriptor_sha256: descriptor.digest(),
            descriptor,
            inputs: recorded,
            output: plan
                .create
                .as_ref()
                .zip(output_parent)
                .map(|(p, parent)| RecordedOutput { path: p.as_str().to_owned(), parent }),
            prepared_at: Some(prepared_at),
            expires_at,
        };
        let store = pending.commit(&record, &tool.text, durable)?;
        if let (true, Some(inputs_dir), Some(lease)) = (durable, &inputs_dir, &mut lease) {
            // After the commit: a crash in between loses the snapshots of a
            // kept call (its dispatch is refused), never leaks a durable
            // reservation that no call names.
            inputs_dir.sync()?;
            lease.persist()?;
        }
        Ok(PreparedCall { record, manifest: tool.manifest, output, store, staged: None, lease })
    }

    fn ceiling_for(&self, path: &RelPath) -> Result<(&airlock_core::Ceiling, Option<RelPath>), Refusal> {
        self.config().ceiling_for(path).ok_or_else(|| {
            Refusal::new(ReasonCode::GrantNoCeiling, format!("no configured ceiling covers {:?}", path.as_str()))
        })
    }

    fn hold_output(&self, path: &RelPath) -> Result<HeldOutput, Refusal> {
        let (ceiling, rel) = self.ceiling_for(path)?;
        if ceiling.mode != CeilingMode::Rw {
            return Err(Refusal::new(
                ReasonCode::GrantReadOnly,
                format!("output {:?} is under the read-only ceiling {:?}", path.as_str(), ceiling.spec),
            ));
        }
        let rel = rel.ok_or_else(|| {
            Refusal::new(ReasonCode::OutputExists, format!("output {:?} is a ceiling directory", path.as_str()))
        })?;
        let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
        Ok(HeldOutput::hold(self.resolver(), &dir, &rel, path)?)
    }
}

fn input_bytes_refusal(total: u64, max: u64) -> Refusal {
    Refusal::new(ReasonCode::LimitInputBytes, format!("inputs total {total} bytes or more, more than {max}"))
}

impl PreparedCall {
    /// Marks the call dispatched (exclusively): a second dispatch of the same
    /// prepared call is `invocation.duplicate`.
    pub(crate) fn mark_dispatched(&self) -> Result<(), Refusal> {
        match self.store.create_file(crate::store::DISPATCHED) {
            Ok(_) => Ok(self.store.sync()?),
            Err(e) if e.errno() == Some(rustix::io::Errno::EXIST) => Err(Refusal::new(
                ReasonCode::InvocationDuplicate,
                format!("{} has already been dispatched", self.record.invocation_id),
            )),
            Err(e) => Err(e.into()),
        }
    }
}

impl Runtime {
    /// Loads a call kept by `airlock prepare`, for dispatch: the exact
    /// manifest bytes it was prepared from (which must still hash to the
    /// descriptor's), every snapshot re-hashed against the descriptor, and
    /// the output parent re-held by its recorded identity with the output
    /// still absent. The host files are not read again: what runs is what
    /// was prepared.
    pub fn load_prepared(&self, id: &str) -> Result<PreparedCall, Refusal> {
        use std::io::Read;
        id::check_invocation_id(id)?;
        let store = self.invocations()?.open_subdir(id).map_err(|_| {
            Refusal::new(ReasonCode::InvocationNotFound, format!("no prepared call {id:?} in this state directory"))
        })?;
        if !store.contains(crate::store::PREPARED_FILE) {
            return Err(Refusal::new(ReasonCode::InvocationNotFound, format!("{id} was refused, not prepared")));
        }
        if store.contains(crate::store::DISPATCHED) {
            return Err(Refusal::new(ReasonCode::InvocationDuplicate, format!("{id} has already been dispatched")));
        }
        let record = self.prepared_record(id)?;
        let mut text = String::new();
        store
            .open_file(crate::store::MANIFEST_FILE)?
            .take(crate::tools::MAX_MANIFEST_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading the kept manifest: {e}")))?;
        let manifest = airlock_core::manifest::Manifest::parse(&text, &record.manifest_origin)?;
        if manifest.sha256() != record.descriptor.manifest_sha256 {
            return Err(Refusal::new(ReasonCode::InputChanged, "the kept manifest does not match the descriptor"));
        }
        // A kept call that stages nothing held no reservation while it
        // waited. (A call run at once has no expiry and released its
        // reservation: it is refused here, never run again.)
        let unstaged = record.expires_at.is_some() && record.inputs.is_empty() && record.output.is_none();
        let staged = if unstaged { None } else { Some(self.pool().data_of(id)?) };
        let inputs = match &staged {
            Some(staged) if !record.inputs.is_empty() => Some(staged.open_subdir(crate::store::INPUTS_DIR)?),
            _ => None,
        };
        for rec in &record.inputs {
            let inputs = inputs.as_ref().ok_or_else(|| Refusal::new(ReasonCode::Internal, "no staged copies"))?;
            let mut f = inputs.open_file(&rec.snapshot)?;
            let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
            let n = std::io::copy(&mut f, &mut hasher)
                .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading snapshot: {e}")))?;
            let got = format!("sha256:{}", hex::encode(sha2::Digest::finalize(hasher)));
            if n != rec.bytes || got != rec.sha256 {
                return Err(Refusal::new(
                    ReasonCode::InputChanged,
                    format!("the kept snapshot of {:?} no longer matches the descriptor", rec.path),
                ));
            }
        }
        let output = match &record.output {
            None => None,
            Some(out) => {
                let path = RelPath::parse(&out.path)?;
                let expected = (
                    out.parent.dev.parse().map_err(|_| Refusal::new(ReasonCode::Internal, "bad parent dev"))?,
                    out.parent.ino.parse().map_err(|_| Refusal::new(ReasonCode::Internal, "bad parent ino"))?,
                );
                let (ceiling, rel) = self.ceiling_for(&path)?;
                let rel =
                    rel.ok_or_else(|| Refusal::new(ReasonCode::OutputExists, "the output is a ceiling directory"))?;
                let dir = ceilings::open(self.authority(), ceiling, self.protected())?;
                let held = HeldOutput::reopen(self.resolver(), &dir, &rel, &path, expected)?;
                held.ensure_absent()?;
                Some(held)
            }
        };
        Ok(PreparedCall { record, manifest, output, store, staged, lease: None })
    }
}
