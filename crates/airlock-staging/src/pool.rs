//! The pool: admission, release, adoption, reaping and status, each under
//! the pool lock.
//!
//! `STATE/staging/` holds `lock`, `leases/ID` (one JSON record a
//! reservation: bytes, files, charge, and the owner `(pid, start ticks)`, or
//! none when durable) and `data/ID/` (`inputs/N`, `output`, a parser's raw
//! output). The snapshots live here, not in `invocations/ID/`, so every
//! private copy is charged and reaped in one place; the invocation directory
//! keeps only `prepared.json` and the manifest.
//!
//! A call is admitted in prepare, after its inputs are opened and sized by
//! their handles and its output parent is held, before a byte is copied:
//! charge = input bytes + `max_file_bytes` (when it creates a file) + 4 KiB
//! a file. A full pool is `staging.exhausted` (exit 75): nothing copied, no
//! worker. `[staging] max_snapshots` (default 16, 1 … 512) and `max_bytes`
//! (default 1 GiB) count running calls only.
//!
//! Every admission first reaps reservations whose owner is dead (data
//! removed through no-follow handles first, then the record; a failed
//! removal keeps the charge) and data no record names. Lease records are not
//! synced: after a host crash every owner is dead, and a lost record leaves
//! data that the next pass removes as an orphan.
//!
//! `airlock prepare` and approval-required runs make their reservation
//! durable (synced, no owner): the snapshots stay charged until dispatch
//! adopts it, an approver denies the call, it expires, or an operator runs
//! `airlock staging release ID` (refused for a live holder, `staging.busy`;
//! a second release is `staging.not_reserved`). Such a *pending* reservation
//! (`pending: {principal, expires_at}` in its record) is admitted by
//! [`Pool::admit_pending`] against a budget apart from the running pool: at
//! most `[approval] max_pending` per principal, 512 in all, and `[staging]
//! max_bytes` bytes in all (so the pool directory holds at most twice
//! `max_bytes`); over it, `approval.quota` (exit 75) before a byte is
//! copied. Waiting calls therefore never cause `staging.exhausted`. Adoption
//! by dispatch moves a reservation into the running pool even when that is
//! full (it was already counted). A kept call that stages nothing (no
//! input, no output) holds no reservation while it waits and is admitted at
//! dispatch, before its approval is used. A pending reservation past
//! `expires_at` is stale: the next admission or `staging gc` reaps it.

use crate::lock::{Held, PoolLock};
use crate::record::{unix_now, Pending, Request, Reservation, MAX_RECORD_BYTES};
use crate::ProcessIdentity;
use airlock_core::{ReasonCode, Refusal, StagingLimits};
use airlock_hostfs::PrivateDir;
use serde::Serialize;
use std::io::{Read, Write};
use std::sync::Arc;

/// The pool's directory under the state directory.
pub const POOL_DIR: &str = "staging";
/// One reservation record per invocation id.
const LEASES_DIR: &str = "leases";
/// One private data directory per reservation, same name.
const DATA_DIR: &str = "data";
/// Most pending reservations (of all principals together).
pub const MAX_PENDING_TOTAL: u64 = 512;

/// The shared staging pool of one state directory. Cloning is cheap and
/// shares the handles and the lock.
#[derive(Debug, Clone)]
pub struct Pool(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    leases: PrivateDir,
    data: PrivateDir,
    lock: PoolLock,
    limits: StagingLimits,
    /// This process, read once: airlock never forks without exec, so it
    /// cannot change.
    me: ProcessIdentity,
}

/// A reservation held by this process. Its private directory
/// ([`Lease::data`]) is where the copies go. Dropped without
/// [`Lease::release`] or [`Lease::persist`], it is released (best effort;
/// what fails is reaped once this process is gone).
#[derive(Debug)]
pub struct Lease {
    pool: Pool,
    invocation_id: String,
    charged: u64,
    data: PrivateDir,
    state: LeaseState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseState {
    Held,
    Durable,
    Released,
}

/// `airlock staging status`: the pool's size and what holds it.
#[derive(Debug, Clone, Serialize)]
pub struct PoolStatus {
    /// Configured concurrent reservations.
    pub max_snapshots: u32,
    /// Configured bytes.
    pub max_bytes: u64,
    /// Reservations of running calls held now (counted against `max_snapshots`).
    pub reserved_snapshots: u32,
    /// Bytes charged to running calls now (counted against `max_bytes`).
    pub reserved_bytes: u64,
    /// Reservations of prepared calls waiting for dispatch (their own budget,
    /// see [`Pool::admit_pending`]).
    pub pending_reservations: u32,
    /// Bytes charged to waiting calls (at most `max_bytes`, apart from the running pool).
    pub pending_bytes: u64,
    /// Each reservation.
    pub reservations: Vec<ReservationStatus>,
    /// Names of data directories or records that belong to no reservation
    /// (left by a crash; the next admission or gc removes them).
    pub orphans: Vec<String>,
}

/// One reservation in [`PoolStatus`].
#[derive(Debug, Clone, Serialize)]
pub struct ReservationStatus {
    /// The record.
    #[serde(flatten)]
    pub reservation: Reservation,
    /// Whether the owner is alive (`true` for a durable reservation).
    pub live: bool,
    /// Whether it is kept by a prepared call waiting for dispatch.
    pub durable: bool,
    /// Whether it is a waiting call past its expiry (the next admission or
    /// gc removes it).
    pub expired: bool,
}

/// What a reaping pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// Invocation ids whose stale reservations were released after their
    /// data was removed.
    pub released: Vec<String>,
    /// Bytes those reservations had charged.
    pub released_bytes: u64,
    /// Orphaned entries removed.
    pub orphans_removed: Vec<String>,
    /// Stale reservations kept because their data could not be removed
    /// (they stay charged; the message says why).
    pub kept: Vec<(String, String)>,
}

impl Pool {
    /// Opens (creating `0700`) `STATE/staging` with its lock, records and
    /// data directories, sized by `limits`.
    pub fn open(state: &PrivateDir, limits: StagingLimits) -> Result<Pool, Refusal> {
        limits.check()?;
        let root = state.ensure_subdir(POOL_DIR)?;
        let lock = PoolLock::open(&root)?;
        let leases = root.ensure_subdir(LEASES_DIR)?;
        let data = root.ensure_subdir(DATA_DIR)?;
        let me = current_identity()?;
        Ok(Pool(Arc::new(Inner { leases, data, lock, limits, me })))
    }

    /// The configured size.
    pub fn limits(&self) -> StagingLimits {
        self.0.limits
    }

    /// Reserves room for `request` before anything is copied: reaps what
    /// dead holders left, then admits the request if the pool has a free
    /// reservation and enough bytes, else refuses with `staging.exhausted`.
    /// Pending reservations ([`Pool::admit_pending`]) are not counted.
    pub fn admit(&self, request: &Request) -> Result<Lease, Refusal> {
        self.admit_inner(request, None)
    }

    /// Reserves room for a prepared call kept for a later dispatch (one
    /// that waits for an approval, or `airlock prepare`). It is charged to
    /// the pending budget, apart from the running pool, so a flood of calls
    /// waiting for approval never refuses a call that runs now: at most
    /// `max_per_principal` pending reservations of `pending.principal`, at
    /// most [`MAX_PENDING_TOTAL`] in all, and at most `[staging] max_bytes`
    /// bytes in all (so the pool's directory holds at most twice
    /// `max_bytes`). Over any of these: `approval.quota` (exit 75), nothing
    /// copied. The reservation expires at `pending.expires_at`: then the
    /// next admission or [`Pool::gc`] removes it.
    pub fn admit_pending(
        &self,
        request: &Request,
        pending: &Pending,
        max_per_principal: u32,
    ) -> Result<Lease, Refusal> {
        self.admit_inner(request, Some((pending, max_per_principal)))
    }

    fn admit_inner(&self, request: &Request, pending: Option<(&Pending, u32)>) -> Result<Lease, Refusal> {
        let charge = request.charge();
        if charge > self.0.limits.max_bytes {
            // Never admissible: "retry later" would be a lie.
            return Err(Refusal::new(
                ReasonCode::StagingPoolTooSmall,
                format!(
                    "this call needs {charge} bytes of staging (its inputs, its output's bound and 4 KiB a file), \
                     more than the whole pool holds ([staging] max_bytes = {}); an operator may raise [staging] \
                     max_bytes in airlock.toml",
                    self.0.limits.max_bytes
                ),
            ));
        }
        let me = self.0.me;
        let held = self.0.lock.hold()?;
        self.reap_locked(&held);
        let live: Vec<Reservation> = self.read_all(&held).into_iter().filter_map(|(_, r)| r).collect();
        let limits = self.0.limits;
        match pending {
            None => {
                let running: Vec<&Reservation> = live.iter().filter(|r| r.pending.is_none()).collect();
                let count = running.len() as u64;
                let bytes = running.iter().map(|r| r.charged).fold(0, u64::saturating_add);
                if count >= u64::from(limits.max_snapshots) {
                    return Err(Refusal::new(
                        ReasonCode::StagingExhausted,
                        format!("the staging pool holds {count} of {} reservations; retry later", limits.max_snapshots),
                    ));
                }
                if bytes.saturating_add(charge) > limits.max_bytes {
                    return Err(Refusal::new(
                        ReasonCode::StagingExhausted,
                        format!(
                            "the staging pool has {} of {} bytes free and this call needs {charge}; retry later",
                            limits.max_bytes.saturating_sub(bytes),
                            limits.max_bytes
                        ),
                    ));
                }
            }
            Some((terms, max_per_principal)) => {
                let waiting: Vec<&Reservation> = live.iter().filter(|r| r.pending.is_some()).collect();
                let mine =
                    waiting.iter().filter(|r| r.pending.as_ref().is_some_and(|p| p.principal == terms.principal));
                let mine = mine.count() as u64;
                let bytes = waiting.iter().map(|r| r.charged).fold(0, u64::saturating_add);
                let quota = |why: String| {
                    Refusal::new(
                        ReasonCode::ApprovalQuota,
                        format!(
                            "{why}; nothing was copied. Retry once an approver has settled a waiting call or it has \
                             expired"
                        ),
                    )
                };
                if mine >= u64::from(max_per_principal) {
                    return Err(quota(format!(
                        "principal {:?} already has {mine} calls waiting ([approval] max_pending = {max_per_principal})",
                        terms.principal
                    )));
                }
                if waiting.len() as u64 >= MAX_PENDING_TOTAL {
                    return Err(quota(format!("{MAX_PENDING_TOTAL} calls of all principals are waiting")));
                }
                if bytes.saturating_add(charge) > limits.max_bytes {
                    return Err(quota(format!(
                        "waiting calls hold {bytes} of {} bytes and this call needs {charge}",
                        limits.max_bytes
                    )));
                }
            }
        }
        let id = &request.invocation_id;
        let record = Reservation {
            version: crate::record::RESERVATION_VERSION,
            invocation_id: id.clone(),
            purpose: request.purpose,
            bytes: request.bytes,
            files: request.files,
            charged: charge,
            owner: Some(me),
            pending: pending.map(|(p, _)| p.clone()),
        };
        // Not synced: after a host crash every owner is dead, and a lost
        // record only leaves data that the next pass removes as an orphan.
        let mut f = self.0.leases.create_file(id).map_err(|e| {
            Refusal::new(ReasonCode::InvocationDuplicate, format!("a staging reservation for {id:?} exists: {e}"))
        })?;
        if let Err(e) = f.write_all(&record.to_bytes()) {
            let _ = self.0.leases.remove_tree(id);
            return Err(Refusal::new(ReasonCode::Internal, format!("writing the staging reservation of {id:?}: {e}")));
        }
        let data = match self.0.data.create_subdir(id) {
            Ok(d) => d,
            Err(e) => {
                let _ = self.0.leases.remove_tree(id);
                return Err(e.into());
            }
        };
        drop(held);
        Ok(Lease { pool: self.clone(), invocation_id: id.clone(), charged: charge, data, state: LeaseState::Held })
    }

    /// Takes over the durable reservation of a prepared call, for its
    /// dispatch by this process: from now on it is released when this
    /// process releases it or is found dead.
    pub fn adopt(&self, invocation_id: &str) -> Result<Lease, Refusal> {
        let me = self.0.me;
        let held = self.0.lock.hold()?;
        let mut record = self.read_one(&held, invocation_id)?;
        if let Some(owner) = record.owner {
            if owner.alive() {
                return Err(Refusal::new(
                    ReasonCode::StagingBusy,
                    format!("the staging reservation of {invocation_id:?} is held by live process {}", owner.pid),
                ));
            }
        }
        let data = self.0.data.open_subdir(invocation_id).map_err(|e| {
            Refusal::new(ReasonCode::StagingNotReserved, format!("the staged copies of {invocation_id:?}: {e}"))
        })?;
        // From now on it is a running call's: charged to the running pool
        // (even when that is full: it was already counted as pending).
        record.owner = Some(me);
        record.pending = None;
        self.0.leases.replace_file(invocation_id, &record.to_bytes())?;
        Ok(Lease {
            pool: self.clone(),
            invocation_id: invocation_id.to_owned(),
            charged: record.charged,
            data,
            state: LeaseState::Held,
        })
    }

    /// Opens, read-only use, the private directory of a reservation held
    /// by someone (e.g. a durable one, to check its snapshots).
    pub fn data_of(&self, invocation_id: &str) -> Result<PrivateDir, Refusal> {
        let held = self.0.lock.hold()?;
        self.read_one(&held, invocation_id)?;
        self.0.data.open_subdir(invocation_id).map_err(|e| {
            Refusal::new(ReasonCode::StagingNotReserved, format!("the staged copies of {invocation_id:?}: {e}"))
        })
    }

    /// Releases the reservation of `invocation_id` for an operator: its
    /// data is removed first, then the record. Refused when no such
    /// reservation is held (`staging.not_reserved`, so a release cannot
    /// happen twice) or when a live process holds it (`staging.busy`).
    pub fn release(&self, invocation_id: &str) -> Result<u64, Refusal> {
        let held = self.0.lock.hold()?;
        let record = self.read_one(&held, invocation_id)?;
        if let Some(owner) = record.owner {
            if owner.alive() {
                return Err(Refusal::new(
                    ReasonCode::StagingBusy,
                    format!("the staging reservation of {invocation_id:?} is held by live process {}", owner.pid),
                ));
            }
        }
        self.remove_locked(&held, invocation_id)?;
        Ok(record.charged)
    }

    /// Removes every reservation whose holder is dead or whose pending call
    /// has expired (data first, then the record) and every orphaned entry.
    /// Other durable reservations stay.
    pub fn gc(&self) -> Result<GcReport, Refusal> {
        let held = self.0.lock.hold()?;
        Ok(self.reap_locked(&held))
    }

    /// The pool's size and reservations, without changing anything.
    pub fn status(&self) -> Result<PoolStatus, Refusal> {
        let held = self.0.lock.hold()?;
        let now = unix_now();
        let mut reservations = Vec::new();
        let mut orphans = Vec::new();
        for (name, record) in self.read_all(&held) {
            match record {
                Some(r) => reservations.push(ReservationStatus {
                    live: r.owner.is_none_or(|o| o.alive()),
                    durable: r.owner.is_none(),
                    expired: r.owner.is_none() && r.stale(now),
                    reservation: r,
                }),
                None => orphans.push(format!("{LEASES_DIR}/{name}")),
            }
        }
        for name in self.0.data.entries()? {
            if !reservations.iter().any(|r| r.reservation.invocation_id == name) {
                orphans.push(format!("{DATA_DIR}/{name}"));
            }
        }
        let limits = self.0.limits;
        let sum = |pending: bool| {
            let of = reservations.iter().filter(|r| r.reservation.pending.is_some() == pending);
            (of.clone().count() as u32, of.map(|r| r.reservation.charged).fold(0, u64::saturating_add))
        };
        let ((reserved_snapshots, reserved_bytes), (pending_reservations, pending_bytes)) = (sum(false), sum(true));
        Ok(PoolStatus {
            max_snapshots: limits.max_snapshots,
            max_bytes: limits.max_bytes,
            reserved_snapshots,
            reserved_bytes,
            pending_reservations,
            pending_bytes,
            reservations,
            orphans,
        })
    }

    /// Every record by name; `None` for one that cannot be read back.
    fn read_all(&self, _held: &Held<'_>) -> Vec<(String, Option<Reservation>)> {
        let names = self.0.leases.entries().unwrap_or_default();
        names.into_iter().map(|name| (name.clone(), self.read_record(&name).ok())).collect()
    }

    fn read_one(&self, _held: &Held<'_>, invocation_id: &str) -> Result<Reservation, Refusal> {
        self.read_record(invocation_id).map_err(|e| {
            if matches!(e.code, ReasonCode::StagingNotReserved | ReasonCode::RecordVersion) {
                e
            } else {
                Refusal::new(ReasonCode::StagingNotReserved, format!("{invocation_id:?}: {}", e.message))
            }
        })
    }

    /// Reads a record through a no-follow open, bounded; its name must be
    /// the id it records.
    fn read_record(&self, name: &str) -> Result<Reservation, Refusal> {
        if !self.0.leases.contains(name) {
            return Err(Refusal::new(
                ReasonCode::StagingNotReserved,
                format!("no staging reservation is held for {name:?}"),
            ));
        }
        let mut bytes = Vec::new();
        self.0
            .leases
            .open_file(name)?
            .take(MAX_RECORD_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("reading staging reservation {name:?}: {e}")))?;
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return Err(Refusal::new(ReasonCode::Internal, format!("staging reservation {name:?} is too long")));
        }
        let record = Reservation::from_bytes(&bytes)?;
        if record.invocation_id != name {
            return Err(Refusal::new(ReasonCode::Internal, format!("staging reservation {name:?} names another id")));
        }
        Ok(record)
    }

    /// Data first, then the record: a reservation is released only once
    /// its private data is confirmed gone. Neither removal is synced: if a
    /// host crash brings data back, no record names it and the next pass
    /// removes it as an orphan.
    fn remove_locked(&self, _held: &Held<'_>, name: &str) -> Result<(), Refusal> {
        self.0.data.remove_tree(name)?;
        self.0.leases.remove_tree(name)?;
        Ok(())
    }

    fn reap_locked(&self, held: &Held<'_>) -> GcReport {
        let mut report = GcReport::default();
        let now = unix_now();
        let mut kept_names = Vec::new();
        for (name, record) in self.read_all(held) {
            // Another airlock's reservation (`record.version`) is not this
            // one's to reap.
            if let Some(Err(e)) = record.is_none().then(|| self.read_record(&name)) {
                if e.code == ReasonCode::RecordVersion {
                    report.kept.push((name.clone(), e.message));
                    kept_names.push(name);
                    continue;
                }
            }
            let stale = match &record {
                None => true,
                Some(r) => r.stale(now),
            };
            if !stale {
                kept_names.push(name);
                continue;
            }
            match self.remove_locked(held, &name) {
                Ok(()) => match record {
                    Some(r) => {
                        report.released_bytes = report.released_bytes.saturating_add(r.charged);
                        report.released.push(name);
                    }
                    None => report.orphans_removed.push(format!("{LEASES_DIR}/{name}")),
                },
                Err(e) => {
                    report.kept.push((name.clone(), e.message));
                    kept_names.push(name);
                }
            }
        }
        // Data that no record names (a record lost in a host crash, or an
        // entry nobody admitted) goes too.
        if let Ok(names) = self.0.data.entries() {
            for name in names {
                if kept_names.contains(&name) {
                    continue;
                }
                match self.0.data.remove_tree(&name) {
                    Ok(()) => report.orphans_removed.push(format!("{DATA_DIR}/{name}")),
                    Err(e) => report.kept.push((format!("{DATA_DIR}/{name}"), e.message().to_owned())),
                }
            }
        }
        report
    }
}

impl Lease {
    /// The invocation it belongs to.
    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }

    /// Bytes it is charged.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Its private directory, where the copies go.
    pub fn data(&self) -> &PrivateDir {
        &self.data
    }

    /// Gives back what a bounded copy did not use: once the copy is made,
    /// its reservation is lowered to `bytes` of content in `files` files
    /// (never raised: a request that grows must be admitted anew).
    pub fn shrink(&mut self, bytes: u64, files: u64) -> Result<(), Refusal> {
        let held = self.pool.0.lock.hold()?;
        let mut record = self.pool.read_one(&held, &self.invocation_id)?;
        let smaller = Request { invocation_id: record.invocation_id.clone(), purpose: record.purpose, bytes, files };
        if smaller.charge() > record.charged {
            return Err(Refusal::new(
                ReasonCode::Internal,
                format!("a reservation of {} bytes cannot grow to {}", record.charged, smaller.charge()),
            ));
        }
        record.bytes = bytes;
        record.files = files;
        record.charged = smaller.charge();
        // Written in place under the lock, like the record at admission.
        let f = self.pool.0.leases.open_append(&self.invocation_id)?;
        f.set_len(0)
            .and_then(|()| (&f).write_all(&record.to_bytes()))
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("rewriting a staging reservation: {e}")))?;
        self.charged = record.charged;
        Ok(())
    }

    /// Keeps the reservation after this process ends, synced: a prepared
    /// call waiting for approval or dispatch keeps its snapshots charged
    /// until [`Pool::adopt`] (dispatch) or an operator's [`Pool::release`].
    pub fn persist(&mut self) -> Result<(), Refusal> {
        let held = self.pool.0.lock.hold()?;
        let mut record = self.pool.read_one(&held, &self.invocation_id)?;
        record.owner = None;
        self.data.sync()?;
        self.pool.0.data.sync()?;
        self.pool.0.leases.replace_file(&self.invocation_id, &record.to_bytes())?;
        self.state = LeaseState::Durable;
        Ok(())
    }

    /// Removes the private data, then the reservation. Consumes the lease;
    /// the record must still name this process, so a reservation released
    /// by someone else is reported (`staging.not_reserved`), not released
    /// twice.
    pub fn release(mut self) -> Result<(), Refusal> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), Refusal> {
        if self.state != LeaseState::Held {
            return Ok(());
        }
        self.state = LeaseState::Released;
        let me = self.pool.0.me;
        let held = self.pool.0.lock.hold()?;
        let record = self.pool.read_one(&held, &self.invocation_id)?;
        if record.owner != Some(me) {
            return Err(Refusal::new(
                ReasonCode::StagingNotReserved,
                format!("the staging reservation of {:?} is no longer this process's", self.invocation_id),
            ));
        }
        self.pool.remove_locked(&held, &self.invocation_id)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

fn current_identity() -> Result<ProcessIdentity, Refusal> {
    ProcessIdentity::current()
        .ok_or_else(|| Refusal::new(ReasonCode::Internal, "cannot read this process's identity from /proc"))
}
