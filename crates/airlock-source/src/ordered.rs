//! Work done on several threads, handed back in the order it was given.
//!
//! A search submits one job a file, in walk order; worker threads (each
//! with one reusable buffer) do the jobs in any order, and [`Pool::next`]
//! returns their results strictly in submission order, so whoever applies
//! them (budgets, matches, evidence) sees exactly the sequence a serial run
//! would. With one thread the job is done at once on the caller's thread.
//! When the caller is done (a budget ran out), the threads stop at their
//! next job: queued jobs are dropped undone and their results never read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

/// Threads a search uses by default: the cores this process may run on,
/// at most 8.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// One job's work: the job and the thread's own buffer.
pub(crate) type Work<'w, J, R> = dyn Fn(J, &mut Vec<u8>) -> R + Sync + 'w;

/// Jobs in, results out in submission order.
pub(crate) struct Pool<'w, J, R> {
    mode: Mode<'w, J, R>,
    submitted: usize,
    returned: usize,
    /// Results that arrived before those submitted earlier.
    early: BTreeMap<usize, R>,
}

enum Mode<'w, J, R> {
    /// One thread: the caller's.
    Inline { work: &'w Work<'w, J, R>, buf: Vec<u8> },
    /// Worker threads fed by a channel.
    Threads { jobs: Sender<(usize, J)>, results: Receiver<(usize, R)> },
}

impl<J, R> Pool<'_, J, R> {
    /// Hands `job` to a worker (or, inline, does it now).
    pub(crate) fn submit(&mut self, job: J) {
        let index = self.submitted;
        self.submitted += 1;
        match &mut self.mode {
            Mode::Inline { work, buf } => {
                let result = work(job, buf);
                self.early.insert(index, result);
            }
            Mode::Threads { jobs, .. } => {
                // The workers outlive the pool, so the channel is open.
                let _ = jobs.send((index, job));
            }
        }
    }

    /// Jobs submitted whose results were not yet returned.
    pub(crate) fn in_flight(&self) -> usize {
        self.submitted - self.returned
    }

    /// The result of the oldest job not yet returned: waiting for it when
    /// `wait`, else only if it is already done. `None` when nothing is in
    /// flight (or, without `wait`, the oldest is not done).
    pub(crate) fn next(&mut self, wait: bool) -> Option<R> {
        if self.in_flight() == 0 {
            return None;
        }
        loop {
            if let Some(r) = self.early.remove(&self.returned) {
                self.returned += 1;
                return Some(r);
            }
            let Mode::Threads { results, .. } = &self.mode else { return None };
            let (index, r) = if wait { results.recv().ok()? } else { results.try_recv().ok()? };
            self.early.insert(index, r);
        }
    }
}

/// Runs `body` with a pool of `threads` workers doing `work`; when `body`
/// returns, the workers stop at their next job and are joined.
pub(crate) fn with_pool<J: Send, R: Send, T>(
    threads: usize,
    work: &Work<'_, J, R>,
    body: impl FnOnce(&mut Pool<'_, J, R>) -> T,
) -> T {
    if threads <= 1 {
        let mut pool =
            Pool { mode: Mode::Inline { work, buf: Vec::new() }, submitted: 0, returned: 0, early: BTreeMap::new() };
        return body(&mut pool);
    }
    let (job_tx, job_rx) = channel::<(usize, J)>();
    let (result_tx, result_rx) = channel::<(usize, R)>();
    let job_rx = Mutex::new(job_rx);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (job_rx, stop, result_tx) = (&job_rx, &stop, result_tx.clone());
            scope.spawn(move || {
                let mut buf = Vec::new();
                loop {
                    let next = match job_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok((index, job)) = next else { return };
                    if stop.load(Ordering::Relaxed) || result_tx.send((index, work(job, &mut buf))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(result_tx);
        let mut pool = Pool {
            mode: Mode::Threads { jobs: job_tx, results: result_rx },
            submitted: 0,
            returned: 0,
            early: BTreeMap::new(),
        };
        let out = body(&mut pool);
        stop.store(true, Ordering::Relaxed);
        // Closing the job channel ends the workers' loops.
        drop(pool);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_submission_order_whatever_finishes_first() {
        for threads in [1, 2, 4] {
            let work = |n: u64, buf: &mut Vec<u8>| {
                buf.push(0);
                // Later jobs finish first.
                std::thread::sleep(std::time::Duration::from_micros(50 * (20 - n)));
                n * 10
            };
            let got = with_pool(threads, &work, |pool| {
                let mut got = Vec::new();
                for n in 0..20 {
                    pool.submit(n);
                    while let Some(r) = pool.next(pool.in_flight() >= 8) {
                        got.push(r);
                    }
                }
                while let Some(r) = pool.next(true) {
                    got.push(r);
                }
                got
            });
            assert_eq!(got, (0..20).map(|n| n * 10).collect::<Vec<_>>(), "{threads} threads");
        }
    }

    #[test]
    fn a_pool_left_early_stops_its_workers() {
        let done = std::sync::atomic::AtomicUsize::new(0);
        let work = |_: u32, _: &mut Vec<u8>| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            done.fetch_add(1, Ordering::Relaxed);
        };
        with_pool(2, &work, |pool| {
            for n in 0..200 {
                pool.submit(n);
            }
            pool.next(true);
        });
        assert!(done.load(Ordering::Relaxed) < 20, "queued jobs were dropped undone");
    }
}
