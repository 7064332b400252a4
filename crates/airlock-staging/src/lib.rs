//! airlock-staging: the shared staging pool (DESIGN.md §1 step 3).
//!
//! Every airlock process on a host that uses one state directory shares one
//! [`Pool`] under `STATE/staging/`, coordinated by a file lock, with no
//! daemon. Before a call copies anything it asks for a [`Lease`] sized to
//! its input bytes, its output's maximum size and a per-file overhead
//! ([`Request::charge`]); a pool without room refuses with
//! `staging.exhausted` (exit 75) and the call starts nothing. The lease's
//! private directory ([`Lease::data`]) holds the copies; releasing the lease
//! removes them first and only then gives the room back.
//!
//! A reservation names the process that holds it (pid and start time). An
//! admission reads one index of every reservation, not each record (its
//! cost does not grow with the number of holders), and counts a holder
//! until it is found gone: by the bounded check each admission makes, by an
//! admission that would otherwise refuse (it checks every holder first), or
//! by [`Pool::gc`]. Then its data is removed through handles that never
//! follow a link, so a data directory swapped for a symlink is unlinked,
//! not entered (the CVE-2022-21658 class), and then the reservation. A prepared call that waits for approval keeps a
//! *durable* reservation ([`Lease::persist`]) that its dispatch takes over
//! ([`Pool::adopt`]). Such a call is admitted with [`Pool::admit_pending`]:
//! charged to a budget of its own (per principal, and in bytes), never to
//! the running pool, and reaped once it expires.
//!
//! ```no_run
//! use airlock_core::StagingLimits;
//! use airlock_hostfs::{HostAuthority, PrivateDir};
//! use airlock_staging::{Pool, Purpose, Request};
//! let state = PrivateDir::open_or_create(&HostAuthority::ambient(), ".airlock".as_ref())?;
//! let pool = Pool::open(&state, StagingLimits::default())?;
//! let lease = pool.admit(&Request { invocation_id: "inv-1".into(), purpose: Purpose::Call, bytes: 4096, files: 2 })?;
//! let _copy = lease.data().create_file("input")?;
//! lease.release()?;
//! # Ok::<(), airlock_core::Refusal>(())
//! ```
#![deny(missing_docs)]

mod identity;
mod index;
mod lock;
mod pool;
mod record;

pub use identity::ProcessIdentity;
pub use pool::{GcReport, Lease, Pool, PoolStatus, ReservationStatus, MAX_PENDING_TOTAL, POOL_DIR};
pub use record::{unix_now, Pending, Purpose, Request, Reservation, PER_FILE_OVERHEAD, RESERVATION_VERSION};
