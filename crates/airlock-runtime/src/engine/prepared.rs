//! Step 1's product: a call that passed preparation, of any shape.
//!
//! A [`PreparedCall`] holds the committed record (descriptor and digest,
//! principal, what was snapshotted), the invocation's private directory,
//! the call's staging reservation, Cedar's view of its tool, and the
//! shape's own payload (a held output parent, a query's result, a
//! repository snapshot's statistics, a broker's roots). Only a
//! `PreparedCall` can be authorized.

use crate::store::PreparedRecord;
use airlock_core::{Descriptor, ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;

/// A call that passed preparation, with its shape's payload `P`.
#[derive(Debug)]
pub struct PreparedCall<P> {
    pub(super) record: PreparedRecord,
    pub(super) store: PrivateDir,
    pub(super) spec: airlock_policy::ToolSpec,
    /// The staging data of a call loaded for dispatch, whose durable
    /// reservation it has not adopted yet.
    pub(super) staged: Option<PrivateDir>,
    /// The reservation this process holds; its data directory is the call's
    /// private staging data (snapshots, an archive, later its output).
    /// `None` for a call that stages nothing (a source query).
    pub(super) lease: Option<airlock_staging::Lease>,
    pub(super) payload: P,
}

impl<P> PreparedCall<P> {
    /// Rebuilds a call kept by `airlock prepare` from its stored parts (see
    /// the exec transport's `load_prepared`): `staged` is its staging data,
    /// whose reservation is adopted at dispatch.
    pub(crate) fn reloaded(
        record: PreparedRecord,
        store: PrivateDir,
        spec: airlock_policy::ToolSpec,
        staged: Option<PrivateDir>,
        payload: P,
    ) -> Self {
        PreparedCall { record, store, spec, staged, lease: None, payload }
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

    /// The invocation's private directory in the state dir.
    pub fn store(&self) -> &PrivateDir {
        &self.store
    }

    /// The shape's own part of the call.
    pub fn payload(&self) -> &P {
        &self.payload
    }

    /// Takes the shape's own part out of the call (its staging, if any, is
    /// released as the rest is dropped).
    pub(crate) fn into_payload(self) -> P {
        self.payload
    }

    /// Cedar's view of the call's tool.
    pub(crate) fn spec(&self) -> &airlock_policy::ToolSpec {
        &self.spec
    }

    /// The call's private staging directory (in its pool reservation).
    pub fn staged(&self) -> Result<&PrivateDir, Refusal> {
        self.lease
            .as_ref()
            .map(airlock_staging::Lease::data)
            .or(self.staged.as_ref())
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "this call stages nothing"))
    }

    /// Removes the staged copies and releases their reservation (best
    /// effort: what fails stays reserved under this process and is reaped
    /// once it is gone).
    pub(crate) fn release_staging(&mut self) {
        if let Some(lease) = self.lease.take() {
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

    /// Marks the call dispatched (exclusively): a second dispatch of the same
    /// prepared call is `invocation.duplicate`.
    pub(crate) fn mark_dispatched(&self) -> Result<(), Refusal> {
        match crate::store::mark(&self.store, crate::store::DISPATCHED) {
            Ok(_) => Ok(self.store.sync()?),
            Err(e) if e.errno() == Some(rustix::io::Errno::EXIST) => Err(Refusal::new(
                ReasonCode::InvocationDuplicate,
                format!("{} has already been dispatched", self.record.invocation_id),
            )),
            Err(e) => Err(e.into()),
        }
    }
}
