//! The pool: admission, release, adoption, reaping and status, each under
//! the pool lock.
//!
//! `STATE/staging/` holds `lock`, `index` (see below), `leases/ID` (one
//! JSON record a reservation: bytes, files, charge, and the owner `(pid,
//! start ticks)`, or none when durable) and `data/ID/` (`N`, input N's snapshot;
//! `output`, a parser's raw output). The snapshots live here, not in
//! `invocations/ID/`, so every private copy is charged and reaped in one
//! place; the invocation directory keeps only `prepared.json` and the
//! manifest.
//!
//! A call is admitted in prepare, after its inputs are opened and sized by
//! their handles and its output parent is held, before a byte is copied:
//! charge = input bytes + `max_file_bytes` (when it creates a file) + 4 KiB
//! a file. A full pool is `staging.exhausted` (exit 75): nothing copied, no
//! worker. `[staging] max_snapshots` (default 16, 1 … 512) and `max_bytes`
//! (default 1 GiB) count running calls only.
//!
//! Admission reads one file, the index (`index.rs`): every reservation's
//! charge, owner and pending terms, kept under the lock beside the records,
//! never counting less than they hold. It counts every indexed reservation,
//! the dead holders' too, so an admission that fits needs no liveness check
//! at all; its cost does not grow with the number of holders. Each
//! admission also checks at most two holders (`CHECKS_PER_ADMISSION`),
//! those checked longest ago (one read of `/proc/PID/stat` each; a reused
//! pid has another start time), and looks at every waiting call's expiry:
//! a dead holder's or an expired call's data is removed within a bounded
//! number of admissions. Before it refuses, an admission
//! rebuilds the index from the records by a full pass — every record read,
//! every owner checked, dead holders' and expired calls' data removed
//! through no-follow handles first, then their records (a failed removal
//! keeps the charge), and data no record names removed — and counts again:
//! a call is refused only when the live reservations leave no room, as
//! before. The same full pass is `staging gc`, and rebuilds an index that
//! is missing, torn, or from before this boot. Whatever the index says, a
//! reservation is reaped only once its record says so. Lease records are
//! not synced: after a host crash every owner is dead, and a lost record
//! leaves data that the next full pass removes as an orphan.
//!
//! The lock is held for the index and the record only: an admitted call's
//! data directory is made after its record is written and the lock given
//! back (the record keeps every reaper away from the name), and a release
//! removes the copies first, outside the lock, through the lease's own
//! directory handle, then the directory and the record under it.
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

use crate::index::{Entry, Index, IndexFile};
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
/// Owners whose liveness one admission checks: those checked longest ago.
/// With `N` other holders, a dead one is found within `N / 2` admissions
/// (and by any admission that would otherwise refuse).
const CHECKS_PER_ADMISSION: usize = 2;

/// The shared staging pool of one state directory. Cloning is cheap and
/// shares the handles and the lock.
#[derive(Debug, Clone)]
pub struct Pool(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    leases: PrivateDir,
    data: PrivateDir,
    lock: PoolLock,
    index: IndexFile,
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
    /// (left by a crash; `staging gc`, or an admission that reads every record, removes them).
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
        let index = IndexFile::open(&root)?;
        let leases = root.ensure_subdir(LEASES_DIR)?;
        let data = root.ensure_subdir(DATA_DIR)?;
        let me = current_identity()?;
        Ok(Pool(Arc::new(Inner { leases, data, lock, index, limits, me })))
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
        let now = unix_now();
        let (mut index, rebuilt) = match self.0.index.load() {
            Some(mut index) => {
                self.tend_locked(&held, &mut index, now);
                (index, false)
            }
            None => (self.rebuild_locked(&held, now).1, true),
        };
        let mut room = has_room(&index, charge, pending, self.0.limits);
        if room.is_err() && !rebuilt {
            // The index counts dead holders until they are found: before
            // refusing, every record is read and every owner checked.
            index = self.rebuild_locked(&held, now).1;
            room = has_room(&index, charge, pending, self.0.limits);
        }
        if let Err(refusal) = room {
            // What tending removed (an index that still names it only counts more).
            let _ = self.0.index.store(&mut index, false);
            return Err(refusal);
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
        // record only leaves data that the next full pass removes as an orphan.
        let mut f = match self.0.leases.create_file(id) {
            Ok(f) => f,
            Err(e) => {
                let _ = self.0.index.store(&mut index, false);
                return Err(Refusal::new(
                    ReasonCode::InvocationDuplicate,
                    format!("a staging reservation for {id:?} exists: {e}"),
                ));
            }
        };
        if let Err(e) = f.write_all(&record.to_bytes()) {
            let _ = self.0.leases.remove_tree(id);
            let _ = self.0.index.store(&mut index, false);
            return Err(Refusal::new(ReasonCode::Internal, format!("writing the staging reservation of {id:?}: {e}")));
        }
        // Counted before this process can use a byte of it (a kill before
        // this line leaves a dead holder's record and no data).
        index.put(Entry::of(&record, index.turn));
        if let Err(e) = self.0.index.store(&mut index, false) {
            let _ = self.0.leases.remove_tree(id);
            return Err(e);
        }
        drop(held);
        // Made outside the lock: the record, already written, keeps every
        // other process's reaping away from this name.
        let data = match self.0.data.create_subdir(id) {
            Ok(d) => d,
            Err(e) => {
                let held = self.0.lock.hold()?;
                let _ = self.0.leases.remove_tree(id);
                self.reindex(&held, |index| index.remove(id));
                return Err(e.into());
            }
        };
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
        // The index first (the change moves the charge into the running
        // pool, so it must be counted there before the record says so);
        // undone if the record cannot be written.
        let before = self.0.index.load();
        if let Some(mut index) = before.clone() {
            index.put(Entry::of(&record, index.turn));
            self.0.index.store(&mut index, false)?;
        }
        if let Err(e) = self.0.leases.replace_file(invocation_id, &record.to_bytes()) {
            if let Some(mut index) = before {
                if self.0.index.store(&mut index, false).is_err() {
                    let _ = self.0.index.invalidate();
                }
            }
            return Err(e.into());
        }
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
        self.reindex(&held, |index| index.remove(invocation_id));
        Ok(record.charged)
    }

    /// Removes every reservation whose holder is dead or whose pending call
    /// has expired (data first, then the record) and every orphaned entry.
    /// Other durable reservations stay.
    pub fn gc(&self) -> Result<GcReport, Refusal> {
        let held = self.0.lock.hold()?;
        Ok(self.rebuild_locked(&held, unix_now()).0)
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
        let file = self.0.leases.open_file(name).map_err(|e| {
            if e.code() == ReasonCode::InvocationNotFound || !self.0.leases.contains(name) {
                Refusal::new(ReasonCode::StagingNotReserved, format!("no staging reservation is held for {name:?}"))
            } else {
                e.into()
            }
        })?;
        let mut bytes = Vec::new();
        file.take(MAX_RECORD_BYTES + 1)
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

    /// The full pass: reads every record, reaps the stale ones (data
    /// first, then the record) and every orphaned entry, and writes the
    /// index anew from what is left. Its cost grows with the reservations;
    /// admission runs it only when the index cannot be trusted or before
    /// it would refuse.
    fn rebuild_locked(&self, held: &Held<'_>, now: u64) -> (GcReport, Index) {
        let mut report = GcReport::default();
        let mut index = Index::default();
        let mut kept_names = Vec::new();
        for (name, record) in self.read_all(held) {
            // Another airlock's reservation (`record.version`) is not this
            // one's to reap (nor to count: it cannot be read).
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
                if let Some(r) = &record {
                    index.put(Entry::of(r, index.turn));
                }
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
                    // Still charged until its data is gone.
                    if let Some(r) = &record {
                        index.put(Entry::of(r, index.turn));
                    }
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
        // Unwritten, the old index stays: rebuilt again next time, or
        // (cannot be emptied either) counting what this pass removed.
        let _ = self.0.index.store(&mut index, true);
        (report, index)
    }

    /// An admission's bounded care of a trusted index: waiting calls past
    /// their expiry and the holders of the [`CHECKS_PER_ADMISSION`] owners
    /// checked longest ago are looked at; what their records say is stale
    /// is reaped. Only in memory: the caller stores the index.
    fn tend_locked(&self, held: &Held<'_>, index: &mut Index, now: u64) {
        index.turn = index.turn.wrapping_add(1);
        let turn = index.turn;
        let mut suspects: Vec<String> = index
            .entries
            .iter()
            .filter(|e| e.owner.is_none() && e.pending.as_ref().is_some_and(|p| p.expired_at(now)))
            .map(|e| e.id.clone())
            .collect();
        for _ in 0..CHECKS_PER_ADMISSION {
            let me = self.0.me;
            let Some(owner) = index
                .entries
                .iter()
                .filter(|e| e.checked != turn && e.owner.is_some_and(|o| o != me))
                .min_by_key(|e| e.checked)
                .and_then(|e| e.owner)
            else {
                break;
            };
            let alive = owner.alive();
            for e in index.entries.iter_mut().filter(|e| e.owner == Some(owner)) {
                e.checked = turn;
                if !alive {
                    suspects.push(e.id.clone());
                }
            }
        }
        for id in suspects {
            self.reap_entry_locked(held, index, &id, now);
        }
    }

    /// Reaps the reservation `id` if its record (the truth, whatever the
    /// index said) is stale or unreadable; corrects its entry otherwise.
    fn reap_entry_locked(&self, held: &Held<'_>, index: &mut Index, id: &str, now: u64) {
        match self.read_record(id) {
            Ok(record) if !record.stale(now) => index.put(Entry::of(&record, index.turn)),
            // Another airlock's: kept and not counted, as the full pass does.
            Err(e) if e.code == ReasonCode::RecordVersion => index.remove(id),
            // No record: its data, if any, is an orphan.
            Err(e) if e.code == ReasonCode::StagingNotReserved => {
                let _ = self.0.data.remove_tree(id);
                index.remove(id);
            }
            // Stale or damaged: data first, then the record; still
            // charged if either stays.
            Ok(_) | Err(_) => {
                if self.remove_locked(held, id).is_ok() {
                    index.remove(id);
                }
            }
        }
    }

    /// Applies `change` to a trusted index and writes it; an untrusted one
    /// is left for the next admission to rebuild. For changes that lower a
    /// count, made after the record: an index left unwritten only counts more.
    fn reindex(&self, _held: &Held<'_>, change: impl FnOnce(&mut Index)) {
        if let Some(mut index) = self.0.index.load() {
            change(&mut index);
            let _ = self.0.index.store(&mut index, false);
        }
    }
}

/// Whether `index` leaves room for `charge` more bytes: in the running pool,
/// or, for a waiting call, in the pending budget.
fn has_room(
    index: &Index,
    charge: u64,
    pending: Option<(&Pending, u32)>,
    limits: StagingLimits,
) -> Result<(), Refusal> {
    match pending {
        None => {
            let running = index.entries.iter().filter(|e| e.pending.is_none());
            let count = running.clone().count() as u64;
            let bytes = running.map(|e| e.charged).fold(0, u64::saturating_add);
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
            let waiting = index.entries.iter().filter(|e| e.pending.is_some());
            let mine = waiting.clone().filter(|e| e.pending.as_ref().is_some_and(|p| p.principal == terms.principal));
            let mine = mine.count() as u64;
            let count = waiting.clone().count() as u64;
            let bytes = waiting.map(|e| e.charged).fold(0, u64::saturating_add);
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
            if count >= MAX_PENDING_TOTAL {
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
    Ok(())
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
        self.pool.reindex(&held, |index| index.put(Entry::of(&record, index.turn)));
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
        // Only the owner changes (no count does); an index left naming this
        // process is corrected from the record once it is found gone.
        self.pool.reindex(&held, |index| index.put(Entry::of(&record, index.turn)));
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
        // The copies go first, outside the lock (a large output takes a
        // while to remove), through this lease's own handle, so nothing but
        // its own directory is touched whatever its name now leads to; the
        // directory and then the record go under the lock.
        for name in self.data.entries()? {
            self.data.remove_tree(&name)?;
        }
        let held = self.pool.0.lock.hold()?;
        let id = &self.invocation_id;
        let record = match self.pool.read_one(&held, id) {
            Ok(record) => record,
            Err(e) => {
                if e.code == ReasonCode::StagingNotReserved {
                    self.pool.reindex(&held, |index| index.remove(id));
                }
                return Err(e);
            }
        };
        if record.owner != Some(me) {
            self.pool.reindex(&held, |index| index.put(Entry::of(&record, index.turn)));
            return Err(Refusal::new(
                ReasonCode::StagingNotReserved,
                format!("the staging reservation of {id:?} is no longer this process's"),
            ));
        }
        self.pool.remove_locked(&held, id)?;
        self.pool.reindex(&held, |index| index.remove(id));
        Ok(())
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
