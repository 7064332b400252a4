//! The pool on real directories: admission by count and bytes, release
//! that cannot happen twice, durable reservations, and reaping that never
//! follows a link, also while a racer swaps the directory being removed.

use airlock_core::{ReasonCode, StagingLimits};
use airlock_hostfs::{HostAuthority, PrivateDir};
use airlock_staging::{
    unix_now, Pending, Pool, ProcessIdentity, Purpose, Request, Reservation, PER_FILE_OVERHEAD, RESERVATION_VERSION,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct Fixture {
    tmp: tempfile::TempDir,
    state: PrivateDir,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let state = PrivateDir::open_or_create(&HostAuthority::ambient(), &tmp.path().join("state")).unwrap();
        Fixture { tmp, state }
    }

    fn pool(&self, max_snapshots: u32, max_bytes: u64) -> Pool {
        Pool::open(&self.state, StagingLimits { max_snapshots, max_bytes }).unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }
}

fn request(id: &str, bytes: u64, files: u64) -> Request {
    Request { invocation_id: id.into(), purpose: Purpose::Call, bytes, files }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// The identity of a process that has exited.
fn dead_identity() -> ProcessIdentity {
    let mut child = std::process::Command::new("sleep").arg("0.05").spawn().unwrap();
    let id = ProcessIdentity::of(child.id()).unwrap();
    child.wait().unwrap();
    assert!(!id.alive());
    id
}

/// What a holder that died leaves: its record and a data directory with files.
fn leave_dead_reservation(f: &Fixture, id: &str) {
    let record = Reservation {
        version: RESERVATION_VERSION,
        invocation_id: id.into(),
        purpose: Purpose::Call,
        bytes: 10,
        files: 2,
        charged: 10 + 2 * PER_FILE_OVERHEAD,
        owner: Some(dead_identity()),
        pending: None,
    };
    std::fs::write(f.path(&format!("state/staging/leases/{id}")), serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::create_dir_all(f.path(&format!("state/staging/data/{id}"))).unwrap();
    std::fs::write(f.path(&format!("state/staging/data/{id}/0")), "copy").unwrap();
    std::fs::write(f.path(&format!("state/staging/data/{id}/output")), "out").unwrap();
}

#[test]
fn admission_charges_content_and_overhead_and_refuses_by_count_and_by_bytes() {
    let f = Fixture::new();
    let pool = f.pool(2, 3 * PER_FILE_OVERHEAD + 100);
    let a = pool.admit(&request("a", 100, 1)).unwrap();
    assert_eq!(a.charged(), 100 + PER_FILE_OVERHEAD);
    // One byte too many.
    let err = pool.admit(&request("b", 1, 2)).unwrap_err();
    assert_eq!(err.code, ReasonCode::StagingExhausted);
    assert_eq!(err.code.exit_code(), 75);
    assert!(!f.path("state/staging/data/b").exists() && !f.path("state/staging/leases/b").exists());
    // Exactly the rest fits.
    let b = pool.admit(&request("b", 0, 2)).unwrap();
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.reserved_bytes), (2, 3 * PER_FILE_OVERHEAD + 100));
    // The count is full even for an empty request.
    assert_eq!(pool.admit(&request("c", 0, 0)).unwrap_err().code, ReasonCode::StagingExhausted);
    // One id, one reservation.
    drop(b);
    assert_eq!(pool.admit(&request("a", 0, 0)).unwrap_err().code, ReasonCode::InvocationDuplicate);
    a.release().unwrap();
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.reserved_bytes), (0, 0));
    assert_eq!(names(&f.path("state/staging/data")), Vec::<String>::new());
}

#[test]
fn a_call_larger_than_the_whole_pool_is_refused_as_never_admissible() {
    let f = Fixture::new();
    let max = 3 * PER_FILE_OVERHEAD + 100;
    let pool = f.pool(2, max);
    // At the bound it is admitted (into an empty pool) ...
    pool.admit(&request("at", max - PER_FILE_OVERHEAD, 1)).unwrap().release().unwrap();
    // ... one byte past it, never: not "retry later", whatever the pool holds.
    for pending in [false, true] {
        let req = request("past", max - PER_FILE_OVERHEAD + 1, 1);
        let err = if pending {
            pool.admit_pending(&req, &waiting("agent-a", unix_now() + 3600), 3).unwrap_err()
        } else {
            pool.admit(&req).unwrap_err()
        };
        assert_eq!((err.code, err.code.exit_code()), (ReasonCode::StagingPoolTooSmall, 77));
        assert!(
            err.message.contains("[staging] max_bytes") && err.message.contains(&max.to_string()),
            "{}",
            err.message
        );
        assert!(!f.path("state/staging/data/past").exists() && !f.path("state/staging/leases/past").exists());
    }
}

#[test]
fn a_reservation_is_released_once_and_its_data_goes_first() {
    let f = Fixture::new();
    let pool = f.pool(4, 1 << 20);
    let lease = pool.admit(&request("once", 10, 1)).unwrap();
    lease.data().write_new_file("copy", b"secret bytes").unwrap();
    // A live holder's reservation is not the operator's to release.
    assert_eq!(pool.release("once").unwrap_err().code, ReasonCode::StagingBusy);
    lease.release().unwrap();
    assert!(!f.path("state/staging/data/once").exists());
    assert_eq!(pool.release("once").unwrap_err().code, ReasonCode::StagingNotReserved);
    assert_eq!(pool.status().unwrap().reserved_bytes, 0);

    // A durable reservation released by an operator cannot then be
    // released again by the process that adopted it.
    let mut kept = pool.admit(&request("kept", 10, 1)).unwrap();
    kept.persist().unwrap();
    drop(kept);
    let adopted = pool.adopt("kept").unwrap();
    assert_eq!(pool.release("kept").unwrap_err().code, ReasonCode::StagingBusy);
    std::fs::remove_file(f.path("state/staging/leases/kept")).unwrap();
    assert_eq!(adopted.release().unwrap_err().code, ReasonCode::StagingNotReserved);
}

#[test]
fn a_durable_reservation_survives_its_process_and_gc_until_adopted() {
    let f = Fixture::new();
    let pool = f.pool(4, 1 << 20);
    let mut lease = pool.admit(&request("prep", 10, 1)).unwrap();
    lease.data().write_new_file("snapshot", b"kept").unwrap();
    lease.persist().unwrap();
    drop(lease);
    let status = pool.status().unwrap();
    assert_eq!(status.reservations.len(), 1);
    assert!(status.reservations[0].durable && status.reservations[0].reservation.owner.is_none());
    assert!(pool.gc().unwrap().released.is_empty());
    assert_eq!(std::fs::read(f.path("state/staging/data/prep/snapshot")).unwrap(), b"kept");
    // Another process (here: a new Pool handle) adopts it and releases it.
    let again = f.pool(4, 1 << 20);
    let adopted = again.adopt("prep").unwrap();
    assert_eq!(adopted.data().entries().unwrap(), vec!["snapshot".to_owned()]);
    assert_eq!(pool.adopt("prep").unwrap_err().code, ReasonCode::StagingBusy);
    adopted.release().unwrap();
    assert_eq!(pool.status().unwrap().reserved_snapshots, 0);
}

fn waiting(principal: &str, expires_at: u64) -> Pending {
    Pending { principal: principal.into(), expires_at }
}

/// A flood of waiting calls fills its own budget (per principal, then in
/// bytes), never the running pool; a call that runs now is still admitted.
#[test]
fn pending_reservations_have_their_own_per_principal_budget_apart_from_the_running_pool() {
    let f = Fixture::new();
    let pool = f.pool(2, 10 * PER_FILE_OVERHEAD);
    let later = unix_now() + 3600;
    for i in 0..3 {
        let mut lease = pool.admit_pending(&request(&format!("a-{i}"), 0, 1), &waiting("agent-a", later), 3).unwrap();
        lease.persist().unwrap();
    }
    let err = pool.admit_pending(&request("a-3", 0, 1), &waiting("agent-a", later), 3).unwrap_err();
    assert_eq!((err.code, err.code.exit_code()), (ReasonCode::ApprovalQuota, 75));
    assert!(err.message.contains("agent-a") && err.message.contains("max_pending = 3"), "{}", err.message);
    assert!(!f.path("state/staging/data/a-3").exists() && !f.path("state/staging/leases/a-3").exists());
    // Another principal has its own count; the bytes of all waiting calls are bounded.
    let b = pool.admit_pending(&request("b-0", 0, 1), &waiting("agent-b", later), 3).unwrap();
    let err = pool.admit_pending(&request("b-1", 6 * PER_FILE_OVERHEAD, 1), &waiting("agent-b", later), 3);
    assert_eq!(err.unwrap_err().code, ReasonCode::ApprovalQuota);
    // The running pool (2 reservations) is untouched by the four waiting ones.
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.reserved_bytes), (0, 0));
    assert_eq!((status.pending_reservations, status.pending_bytes), (4, 4 * PER_FILE_OVERHEAD));
    let r1 = pool.admit(&request("run-1", 0, 1)).unwrap();
    let r2 = pool.admit(&request("run-2", 0, 1)).unwrap();
    assert_eq!(pool.admit(&request("run-3", 0, 1)).unwrap_err().code, ReasonCode::StagingExhausted);
    drop((r1, r2, b));
    // Dispatch moves a waiting call into the running pool.
    let adopted = pool.adopt("a-0").unwrap();
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.pending_reservations), (1, 2));
    adopted.release().unwrap();
    // Now agent-a has room for one more.
    pool.admit_pending(&request("a-3", 0, 1), &waiting("agent-a", later), 3).unwrap();
}

#[test]
fn an_expired_pending_reservation_is_reaped_by_gc_and_by_the_next_admission() {
    let f = Fixture::new();
    let pool = f.pool(4, 1 << 20);
    let past = unix_now().saturating_sub(1);
    let mut fresh = pool.admit_pending(&request("fresh", 10, 1), &waiting("p", unix_now() + 3600), 8).unwrap();
    fresh.persist().unwrap();
    let mut old = Vec::new();
    for id in ["old-1", "old-2"] {
        // Held by this process while it copies: not reaped yet.
        let lease = pool.admit_pending(&request(id, 10, 1), &waiting("p", past), 8).unwrap();
        lease.data().write_new_file("snapshot", b"kept").unwrap();
        old.push(lease);
    }
    for lease in &mut old {
        lease.persist().unwrap();
    }
    let status = pool.status().unwrap();
    assert_eq!(status.reservations.iter().filter(|r| r.expired).count(), 2);
    let gc = pool.gc().unwrap();
    let mut released = gc.released.clone();
    released.sort();
    assert_eq!(released, vec!["old-1".to_owned(), "old-2".to_owned()]);
    assert_eq!(names(&f.path("state/staging/data")), vec!["fresh".to_owned()]);
    // The next admission reaps too.
    let mut again = pool.admit_pending(&request("old-3", 10, 1), &waiting("p", past), 8).unwrap();
    again.persist().unwrap();
    drop(pool.admit(&request("run", 0, 0)).unwrap());
    assert_eq!(names(&f.path("state/staging/leases")), vec!["fresh".to_owned()]);
}

#[test]
fn the_next_admission_reaps_what_a_dead_holder_left_and_orphans() {
    let f = Fixture::new();
    let pool = f.pool(1, 1 << 20);
    leave_dead_reservation(&f, "dead");
    std::fs::create_dir_all(f.path("state/staging/data/orphan/x")).unwrap();
    std::fs::write(f.path("state/staging/leases/garbage"), "not json").unwrap();
    let status = pool.status().unwrap();
    assert_eq!(status.reserved_snapshots, 1);
    assert!(!status.reservations[0].live);
    assert_eq!(status.orphans, vec!["leases/garbage".to_owned(), "data/orphan".to_owned()]);
    // The pool of one is full until the dead holder's data is removed.
    let lease = pool.admit(&request("new", 1, 1)).unwrap();
    assert_eq!(names(&f.path("state/staging/data")), vec!["new".to_owned()]);
    assert_eq!(names(&f.path("state/staging/leases")), vec!["new".to_owned()]);
    drop(lease);
    assert_eq!(pool.status().unwrap().reserved_snapshots, 0);
}

#[test]
fn gc_unlinks_a_data_directory_swapped_for_a_symlink_and_never_enters_it() {
    let f = Fixture::new();
    let pool = f.pool(4, 1 << 20);
    leave_dead_reservation(&f, "swapped");
    std::fs::create_dir_all(f.path("canary/deep")).unwrap();
    std::fs::write(f.path("canary/deep/file"), "CANARY").unwrap();
    std::fs::remove_dir_all(f.path("state/staging/data/swapped")).unwrap();
    std::os::unix::fs::symlink(f.path("canary"), f.path("state/staging/data/swapped")).unwrap();
    let report = pool.gc().unwrap();
    assert_eq!(report.released, vec!["swapped".to_owned()]);
    assert_eq!(std::fs::read_to_string(f.path("canary/deep/file")).unwrap(), "CANARY");
    assert_eq!(names(&f.path("state/staging/data")), Vec::<String>::new());
}

/// A racer flips the dead holder's data directory between the real one and
/// a symlink to a canary directory while gc runs again and again: the canary
/// is never touched and the reservation is released once its data is gone.
#[test]
fn gc_racing_a_symlink_swap_never_touches_the_canary() {
    let f = Arc::new(Fixture::new());
    let pool = f.pool(4, 1 << 20);
    leave_dead_reservation(&f, "raced");
    for i in 0..20 {
        std::fs::create_dir_all(f.path(&format!("canary/d{i}"))).unwrap();
        std::fs::write(f.path(&format!("canary/d{i}/f")), "CANARY").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            let (data, aside, canary) = (f.path("state/staging/data/raced"), f.path("aside"), f.path("canary"));
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(&data, &aside).is_ok() {
                    let _ = std::os::unix::fs::symlink(&canary, &data);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&data);
                    let _ = std::fs::rename(&aside, &data);
                    swaps += 1;
                } else {
                    // The reaper removed it: keep putting the link back.
                    let _ = std::os::unix::fs::symlink(&canary, &data);
                    std::thread::yield_now();
                }
            }
            swaps
        })
    };
    let mut released = false;
    for _ in 0..2000 {
        if let Ok(report) = pool.gc() {
            released |= report.released.contains(&"raced".to_owned());
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    // Whatever the racer left (its directory moved aside, or a link) is
    // reaped once it stops.
    let _ = std::fs::remove_dir_all(f.path("aside"));
    let report = pool.gc().unwrap();
    released |= report.released.contains(&"raced".to_owned());
    eprintln!("{swaps} swaps; released: {released}");
    assert!(swaps > 0);
    assert!(released, "the reservation was never released");
    for i in 0..20 {
        assert_eq!(std::fs::read_to_string(f.path(&format!("canary/d{i}/f"))).unwrap(), "CANARY", "d{i}");
    }
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.reserved_bytes), (0, 0));
    assert_eq!(names(&f.path("state/staging/data")), Vec::<String>::new());
}

/// Set for a child process of this test binary that plays a holder:
/// `STATE`, `ID`, `MAX_SNAPSHOTS` and `MAX_BYTES`, one a line.
const HOLDER_ENV: &str = "AIRLOCK_STAGING_TEST_HOLDER";

/// Not a check of its own: the holder the tests below start as a separate
/// process (this binary, `--exact holder_role`, with [`HOLDER_ENV`] set).
/// It admits a reservation, copies a file into it and waits to be killed.
/// Without the variable it returns at once.
#[test]
fn holder_role() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else { return };
    let [state, id, max_snapshots, max_bytes] = spec.lines().collect::<Vec<_>>()[..] else { panic!("{spec:?}") };
    let state = PrivateDir::open_or_create(&HostAuthority::ambient(), Path::new(state)).unwrap();
    let limits = StagingLimits { max_snapshots: max_snapshots.parse().unwrap(), max_bytes: max_bytes.parse().unwrap() };
    let pool = Pool::open(&state, limits).unwrap();
    let lease = pool.admit(&request(id, 0, 1)).unwrap();
    lease.data().write_new_file("copy", b"held").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(60));
    drop(lease);
}

/// Starts a holder process of `id` on `f`'s pool and waits until its copy is made.
fn spawn_holder(f: &Fixture, limits: (u32, u64), id: &str) -> std::process::Child {
    let spec = format!("{}\n{id}\n{}\n{}", f.path("state").display(), limits.0, limits.1);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder_role", "--test-threads=1"])
        .env(HOLDER_ENV, spec)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let copy = f.path(&format!("state/staging/data/{id}/copy"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !copy.exists() {
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("holder {id} never made its copy: {:?}", child.wait());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}

fn sigkill(mut child: std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Admission reads the index, which counts every holder until it is found
/// dead: each admission checks the owners checked longest ago, so a
/// SIGKILLed holder's copies and reservation go with the next admissions,
/// and the live holder's stay.
#[test]
fn a_sigkilled_holder_process_is_found_by_the_next_admission_and_a_live_one_kept() {
    let f = Fixture::new();
    let limits = (8, 1 << 20);
    let pool = f.pool(limits.0, limits.1);
    let mine = pool.admit(&request("mine", 0, 1)).unwrap();
    let (live, dead) = (spawn_holder(&f, limits, "live"), spawn_holder(&f, limits, "dead"));
    sigkill(dead);
    assert_eq!(names(&f.path("state/staging/leases")), ["dead", "live", "mine"]);
    // Two owners checked an admission: the dead one and the live one.
    drop(pool.admit(&request("probe", 0, 0)).unwrap());
    assert_eq!(names(&f.path("state/staging/leases")), ["live", "mine"]);
    assert_eq!(names(&f.path("state/staging/data")), ["live", "mine"]);
    sigkill(live);
    drop(pool.admit(&request("probe", 0, 0)).unwrap());
    assert_eq!(names(&f.path("state/staging/data")), ["mine"]);
    mine.release().unwrap();
    let status = pool.status().unwrap();
    assert_eq!((status.reserved_snapshots, status.reserved_bytes), (0, 0));
}

/// Three killed holders fill the pool's bytes; one admission checks two
/// owners, so the third is still counted when it asks for room: before it
/// refuses, it reads every record, finds the last dead holder and is admitted.
#[test]
fn an_admission_that_would_refuse_first_reaps_every_dead_holder() {
    let f = Fixture::new();
    let limits = (8, 3 * PER_FILE_OVERHEAD);
    let pool = f.pool(limits.0, limits.1);
    drop(pool.admit(&request("first", 0, 0)).unwrap());
    let holders: Vec<_> = ["h-1", "h-2", "h-3"].iter().map(|id| spawn_holder(&f, limits, id)).collect();
    // The pool is full.
    assert_eq!(pool.status().unwrap().reserved_bytes, 3 * PER_FILE_OVERHEAD);
    holders.into_iter().for_each(sigkill);
    let whole = pool.admit(&request("whole", 2 * PER_FILE_OVERHEAD, 1)).unwrap();
    assert_eq!(names(&f.path("state/staging/leases")), ["whole"]);
    assert_eq!(names(&f.path("state/staging/data")), ["whole"]);
    // Full again, by a live holder now: refused.
    assert_eq!(pool.admit(&request("more", 0, 1)).unwrap_err().code, ReasonCode::StagingExhausted);
    whole.release().unwrap();
}

/// The index is derived from the records and never trusted when it cannot
/// be: emptied, torn or damaged, the next admission rebuilds it from the
/// records, so the pool's bound still holds.
#[test]
fn a_damaged_index_is_rebuilt_from_the_records() {
    let f = Fixture::new();
    let pool = f.pool(2, 1 << 20);
    let a = pool.admit(&request("a", 10, 1)).unwrap();
    let b = pool.admit(&request("b", 10, 1)).unwrap();
    for damage in [&b""[..], b"airlock-staging-index 1 5 0000000000000000\n{}", b"\0\0\0"] {
        std::fs::write(f.path("state/staging/index"), damage).unwrap();
        // Still full: both records count.
        assert_eq!(pool.admit(&request("c", 0, 0)).unwrap_err().code, ReasonCode::StagingExhausted);
    }
    drop((a, b));
    drop(pool.admit(&request("c", 0, 0)).unwrap());
    assert_eq!(names(&f.path("state/staging/leases")), Vec::<String>::new());
}
