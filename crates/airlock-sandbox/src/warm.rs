//! Warm sandboxes: a small pool of single-use skeletons that a long-lived
//! caller (`airlock mcp`) keeps ready, so a call only furnishes one with its
//! files and runs its tool.
//!
//! A skeleton is a native worker started without its call: its init has
//! made the namespaces and had the ids mapped, and its PID 1 has made its
//! mount namespace, built the root tmpfs with the image, `/etc`, `/dev` and
//! `/proc`, and compiled the seccomp filters; no file of any call is in it.
//! PID 1 then blocks on the skeleton's call channel
//! ([`crate::call_channel`]). A call claims one skeleton, sends its spec and
//! descriptors, and from there on the skeleton is that call's worker: PID 1
//! sizes the root, places the files, pivots, forks the worker and confines
//! it exactly as a cold start does (the same code from there on). A
//! skeleton runs one call or none: it is never handed back.
//!
//! What a skeleton fixes before its call, and so what a call must share
//! with it to use it: the image, the init program's build, captured
//! stdio, no cgroup of its own (a call that would get one, or that must
//! have one, starts cold). A bound program comes with the call, in a slot
//! like its files, and is bound as a cold start binds it. A skeleton idle
//! longer than [`MAX_IDLE`] is discarded (its copy of the host's mounts is
//! that old).
//!
//! The caller's end of the channel is the skeleton's lifeline: when the
//! caller goes away (even SIGKILLed), the init sees the channel hang up and
//! kills PID 1, and with it the namespace.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::error::{errno, SandboxError};
use crate::outcome::AppliedLimits;
use crate::parent::{dup_for_init, kill_init, open_to_worker, pipe, spawn_init, InitStart, NativeWorker, Pipes};
use crate::spec::{ImageMount, WorkerSpec};
use crate::wire::SkeletonSpec;

/// A skeleton idle this long is discarded rather than used.
pub const MAX_IDLE: Duration = Duration::from_secs(60);

/// How long the refill waits after a skeleton died before its call, at
/// most (it doubles from one second with each such death).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long after a call's end the refill waits before it builds, while
/// another skeleton is ready. A call's end ([`WarmPool::busy`]) comes just
/// before its answer is written (by another thread, an MCP transport's);
/// building a skeleton takes a core for half a millisecond and the kernel's
/// mount lock some thirty times, and on this scheduler it ran on the
/// answering core ahead of the answer (0.5 ms of an MCP call's 5–6 ms).
const ANSWER_QUIET: Duration = Duration::from_millis(2);

/// A pool of warm sandboxes for one native tier's init program and image.
/// Dropping it stops the refill and kills the idle skeletons.
#[derive(Debug)]
pub struct WarmPool {
    shared: Arc<Shared>,
    refill: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    init_program: PathBuf,
    image: Vec<ImageMount>,
    size: usize,
    /// Build one skeleton, once, and never refill ([`WarmPool::start_one`]).
    one_shot: bool,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<Skeleton>,
    stopping: bool,
    /// Skeletons found dead before their call, since the last good claim.
    deaths: u32,
    /// Calls that started in a skeleton (for reports and tests).
    claimed: u64,
    /// Calls running in a skeleton now (their [`Lease`]s).
    active: u32,
    /// Calls in progress in the pool's process, from their start to their
    /// answer ([`WarmPool::busy`]), whether or not in a skeleton.
    busy: u32,
    /// Why the last skeleton could not be started, if it could not.
    last_error: Option<String>,
    /// When the last call in progress ended ([`PoolBusy`] dropped).
    last_end: Option<Instant>,
    /// A one-shot pool's skeleton is still being built: a claim waits for it.
    building: bool,
}

/// Counts of a pool, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmPoolStats {
    /// Skeletons ready now.
    pub ready: usize,
    /// Calls started in a skeleton so far.
    pub claimed: u64,
    /// Why the last skeleton could not be started, if it could not.
    pub last_error: Option<String>,
}

impl WarmPool {
    /// Starts a pool that keeps `size` skeletons (at least one) of
    /// `init_program` with `image` ready, refilled by a thread of its own.
    pub fn start(init_program: PathBuf, image: Vec<ImageMount>, size: usize) -> Result<WarmPool, SandboxError> {
        WarmPool::spawn(init_program, image, size.max(1), false)
    }

    /// Starts building one skeleton now, on a thread of its own, for the
    /// one call a short-lived caller (`airlock run`) is about to make: the
    /// sandbox's start overlaps the call's preparation instead of following
    /// it. The pool never refills; a claim waits for the skeleton while it
    /// is being built.
    pub fn start_one(init_program: PathBuf, image: Vec<ImageMount>) -> Result<WarmPool, SandboxError> {
        WarmPool::spawn(init_program, image, 1, true)
    }

    fn spawn(
        init_program: PathBuf,
        image: Vec<ImageMount>,
        size: usize,
        one_shot: bool,
    ) -> Result<WarmPool, SandboxError> {
        let shared = Arc::new(Shared {
            init_program,
            image,
            size,
            one_shot,
            state: Mutex::new(State { building: one_shot, ..State::default() }),
            wake: Condvar::new(),
        });
        let refill = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("airlock-warm".into())
                .spawn(move || if shared.one_shot { shared.build_once() } else { shared.refill() })
                .map_err(|e| SandboxError::Fork { role: "warm pool refill thread".into(), errno: errno(e) })?
        };
        Ok(WarmPool { shared, refill: Some(refill) })
    }

    /// Counts a call in progress until the guard is dropped (its answer is
    /// ready): while one is, the pool builds no skeleton unless none is
    /// ready.
    pub fn busy(&self) -> PoolBusy {
        self.shared.lock().busy += 1;
        PoolBusy(Arc::clone(&self.shared))
    }

    /// The pool's counts.
    pub fn stats(&self) -> WarmPoolStats {
        let state = self.shared.lock();
        WarmPoolStats { ready: state.ready.len(), claimed: state.claimed, last_error: state.last_error.clone() }
    }

    /// A live skeleton for a call with `image`, if one is ready, with the
    /// lease that counts the call as running until it is dropped.
    pub(crate) fn claim(&self, image: &[ImageMount]) -> Option<(Skeleton, Lease)> {
        if image != self.shared.image.as_slice() {
            return None;
        }
        let mut discarded = Vec::new();
        let found = {
            let mut state = self.shared.lock();
            while state.building && state.ready.is_empty() {
                state = self.shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            let found = loop {
                match state.ready.pop_front() {
                    None => break None,
                    Some(s) if s.born.elapsed() > MAX_IDLE => discarded.push(s),
                    Some(s) if !s.alive() => {
                        state.deaths += 1;
                        discarded.push(s);
                    }
                    Some(s) => break Some(s),
                }
            };
            if found.is_some() {
                state.deaths = 0;
                state.claimed += 1;
                state.active += 1;
            }
            found
        };
        self.shared.wake.notify_all();
        drop(discarded);
        found.map(|skeleton| (skeleton, Lease(Arc::clone(&self.shared))))
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.refill.take() {
            let _ = t.join();
        }
        let idle = std::mem::take(&mut self.shared.lock().ready);
        drop(idle);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One call fewer in the count `counter` picks; wakes the refill.
    fn count_down(&self, counter: impl FnOnce(&mut State) -> &mut u32) {
        let mut state = self.lock();
        let count = counter(&mut state);
        *count = count.saturating_sub(1);
        drop(state);
        self.wake.notify_all();
    }

    /// A one-shot pool's builder: one skeleton, then done.
    fn build_once(&self) {
        let made = Skeleton::spawn(&self.init_program, &self.image);
        let mut state = self.lock();
        match made {
            Ok(skeleton) if !state.stopping => state.ready.push_back(skeleton),
            Ok(_) => {}
            Err(why) => state.last_error = Some(why.to_string()),
        }
        state.building = false;
        drop(state);
        self.wake.notify_all();
    }

    fn refill(&self) {
        let mut state = self.lock();
        loop {
            if state.stopping {
                return;
            }
            let (old, kept): (VecDeque<Skeleton>, VecDeque<Skeleton>) =
                std::mem::take(&mut state.ready).into_iter().partition(|s| s.born.elapsed() > MAX_IDLE);
            state.ready = kept;
            if !old.is_empty() {
                // Killed and reaped outside the lock.
                drop(state);
                drop(old);
                state = self.lock();
                continue;
            }
            match next_step(state.ready.len(), self.size, state.active > 0 || state.busy > 0, state.last_end) {
                Next::Build => {}
                Next::Wait(limit) => {
                    // Woken by a claim or a call's end, after a call's quiet
                    // time, or in time to replace an old skeleton.
                    state = self.wake.wait_timeout(state, limit).map(|(s, _)| s).unwrap_or_else(|p| p.into_inner().0);
                    continue;
                }
            }
            if state.deaths > 0 {
                let backoff = Duration::from_secs(1u64 << state.deaths.min(5)).min(MAX_BACKOFF);
                state = self
                    .wake
                    .wait_timeout_while(state, backoff, |s| !s.stopping)
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0);
                if state.stopping {
                    return;
                }
            }
            drop(state);
            let made = Skeleton::spawn(&self.init_program, &self.image);
            state = self.lock();
            match made {
                Ok(skeleton) => {
                    state.ready.push_back(skeleton);
                    state.last_error = None;
                }
                Err(why) => {
                    state.last_error = Some(why.to_string());
                    state.deaths += 1;
                }
            }
        }
    }
}

/// A call running in a skeleton, as the pool counts it: held by its
/// worker, dropped (and the refill woken) when the worker is.
#[derive(Debug)]
pub(crate) struct Lease(Arc<Shared>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.count_down(|state| &mut state.active);
    }
}

/// A call in progress, as [`WarmPool::busy`] counts it.
#[derive(Debug)]
pub struct PoolBusy(Arc<Shared>);

impl Drop for PoolBusy {
    fn drop(&mut self) {
        self.0.count_down(|state| {
            state.last_end = Some(Instant::now());
            &mut state.busy
        });
    }
}

/// What the refill does next.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Build a skeleton now.
    Build,
    /// Wait this long at most (a wake-up comes sooner with a claim or a
    /// call's end), then decide again.
    Wait(Duration),
}

/// The refill's decision for a pool of `size` with `ready` skeletons, when
/// `calls` are in progress or not and the last ended at `last_end`. While
/// none is ready it builds at once; otherwise a skeleton is built only
/// when no call is in progress and none has just ended: building one
/// takes the kernel's mount lock some thirty times and a core, which a
/// call's start, its publication's syncs and its answer would wait for.
fn next_step(ready: usize, size: usize, calls: bool, last_end: Option<Instant>) -> Next {
    if ready >= size || (calls && ready > 0) {
        return Next::Wait(MAX_IDLE);
    }
    let since_end = last_end.map(|t| t.elapsed());
    match since_end {
        Some(since) if ready > 0 && since < ANSWER_QUIET => Next::Wait(ANSWER_QUIET - since),
        _ => Next::Build,
    }
}

/// One warm sandbox, as its caller holds it until a call claims it.
#[derive(Debug)]
pub(crate) struct Skeleton {
    /// `None` once the skeleton became a worker.
    child: Option<crate::parent::InitProcess>,
    pidfd: Arc<OwnedFd>,
    pipes: Option<Pipes>,
    channel: Option<OwnedFd>,
    born: Instant,
}

impl Skeleton {
    /// Starts a skeleton: the init of `init_program`, given only what
    /// every call shares ([`SkeletonSpec`]).
    fn spawn(init_program: &std::path::Path, image: &[ImageMount]) -> Result<Skeleton, SandboxError> {
        let (status_r, status_w) = pipe()?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        open_to_worker(&stdout_w)?;
        open_to_worker(&stderr_w)?;
        let (ours, theirs) = crate::call_channel::pair()?;
        let status_fd = dup_for_init(&status_w)?;
        drop(status_w);
        let call_fd = dup_for_init(&theirs)?;
        drop(theirs);
        // A root caller writes the init's id maps itself, as for a cold start.
        let (maps_ours, maps_theirs) = match crate::init::privileged_caller() {
            true => {
                let (ours, theirs) = crate::id_maps::socket_pair()?;
                (Some(ours), Some(dup_for_init(&theirs)?))
            }
            false => (None, None),
        };
        let spec = SkeletonSpec {
            build: airlock_fsproto::BUILD_FINGERPRINT.to_owned(),
            image: image.to_vec(),
            status_fd: status_fd.as_raw_fd(),
            call_fd: call_fd.as_raw_fd(),
            maps_fd: maps_theirs.as_ref().map(AsRawFd::as_raw_fd),
        };
        let spec_bytes =
            serde_json::to_vec(&spec).map_err(|e| SandboxError::Protocol(format!("encode skeleton spec: {e}")))?;
        let (spec_r, spec_w) = pipe()?;
        let mut fds = vec![status_fd.as_raw_fd(), call_fd.as_raw_fd()];
        fds.extend(maps_theirs.as_ref().map(AsRawFd::as_raw_fd));
        let how = InitStart {
            program: init_program,
            markers: &[crate::init::INIT_MARKER, crate::init::WARM_MARKER],
            stdin: spec_r,
            stdout: stdout_w,
            stderr: stderr_w,
            fds,
            // The channel's hang-up, not PR_SET_PDEATHSIG, ends a skeleton
            // with its caller (this thread may end before its skeletons).
            die_with_caller: false,
        };
        let started = spawn_init(how);
        drop((status_fd, call_fd, maps_theirs));
        let (child, pidfd) = started?;
        let pid = child.pid();
        let skeleton = Skeleton {
            child: Some(child),
            pidfd,
            pipes: Some(Pipes { stdout: Some(stdout_r), stderr: stderr_r, status: status_r }),
            channel: Some(ours),
            born: Instant::now(),
        };
        // On failure the skeleton is dropped, which kills and reaps the init.
        std::fs::File::from(spec_w)
            .write_all(&spec_bytes)
            .map_err(|e| SandboxError::Descriptor { call: "write(skeleton spec)".into(), errno: errno(e) })?;
        if let Some(ours) = &maps_ours {
            let id = crate::init::ROOT_CALLER_HOST_ID;
            crate::id_maps::map_for_init(ours, pid.as_raw_nonzero().get() as u32, id, id)?;
        }
        Ok(skeleton)
    }

    /// Whether the init is still running.
    fn alive(&self) -> bool {
        let mut fds = [PollFd::new(&*self.pidfd, PollFlags::IN)];
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
    }

    /// Sends the skeleton its call (`call`: an [`crate::wire::InitSpec`]
    /// whose descriptors are the slots of `fds`) and makes it that call's
    /// worker. `Err`: the skeleton is gone (it is killed and reaped) and
    /// nothing of the call ran.
    pub(crate) fn run(
        mut self,
        lease: Lease,
        call: &[u8],
        fds: &[OwnedFd],
        spec: &mut WorkerSpec,
        started: Instant,
        limits: AppliedLimits,
    ) -> Result<NativeWorker, SandboxError> {
        let channel = self.channel.take().ok_or_else(|| SandboxError::Protocol("a skeleton sent twice".into()))?;
        crate::call_channel::send(&channel, call, fds)?;
        let (child, pipes) = match (self.child.take(), self.pipes.take()) {
            (Some(child), Some(pipes)) => (child, pipes),
            _ => return Err(SandboxError::Protocol("a skeleton used twice".into())),
        };
        let sink = spec.stdout_sink.take();
        let mut worker = NativeWorker::new(child, None, Arc::clone(&self.pidfd), pipes, spec, sink, started, limits);
        worker.held = Some(Box::new((channel, lease)));
        Ok(worker)
    }
}

impl Drop for Skeleton {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_init(&self.pidfd);
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{next_step, Next, ANSWER_QUIET, MAX_IDLE};
    use std::time::{Duration, Instant};

    #[test]
    fn a_full_pool_and_a_call_in_progress_with_one_ready_wait() {
        assert_eq!(next_step(2, 2, false, None), Next::Wait(MAX_IDLE));
        assert_eq!(next_step(1, 2, true, None), Next::Wait(MAX_IDLE));
    }

    #[test]
    fn an_empty_pool_builds_at_once_even_beside_a_call_or_just_after_one() {
        assert_eq!(next_step(0, 2, true, None), Next::Build);
        assert_eq!(next_step(0, 2, false, Some(Instant::now())), Next::Build);
    }

    #[test]
    fn a_call_that_just_ended_is_answered_before_the_next_skeleton_is_built() {
        match next_step(1, 2, false, Some(Instant::now())) {
            Next::Wait(d) => assert!(d <= ANSWER_QUIET && d > Duration::ZERO, "{d:?}"),
            Next::Build => panic!("built while the answer was being written"),
        }
        let long_ago = Instant::now().checked_sub(ANSWER_QUIET * 2).expect("a monotonic clock this old");
        assert_eq!(next_step(1, 2, false, Some(long_ago)), Next::Build);
        assert_eq!(next_step(1, 2, false, None), Next::Build);
    }
}
