//! Call ids that keep increasing across the processes sharing one socket.
//!
//! A shell script runs several `airlock-fs` commands in turn on the same
//! descriptor, each a new process with no memory of the last id used, and
//! airlock refuses an id that is not greater than every id before it. So an
//! id is the `CLOCK_MONOTONIC` time in nanoseconds (the clock every process
//! of the sandbox shares, and the one Python's `time.monotonic_ns()` reads),
//! or one more than this client's last id when the clock has not moved.

use rustix::time::{clock_gettime, ClockId};

/// Issues strictly increasing ids.
#[derive(Debug, Default)]
pub(crate) struct Ids {
    last: u64,
}

impl Ids {
    /// The next id: `max(last + 1, now)`.
    pub(crate) fn next(&mut self) -> u64 {
        self.next_at(monotonic_ns())
    }

    fn next_at(&mut self, now: u64) -> u64 {
        self.last = self.last.saturating_add(1).max(now);
        self.last
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_clock_and_never_repeat() {
        let mut ids = Ids::default();
        assert_eq!(ids.next_at(100), 100);
        assert_eq!(ids.next_at(100), 101, "a clock that has not moved");
        assert_eq!(ids.next_at(50), 102, "a clock behind the last id");
        assert_eq!(ids.next_at(500), 500);
    }

    #[test]
    fn a_later_client_starts_above_an_earlier_ones_ids() {
        let mut first = Ids::default();
        let a = first.next();
        let b = first.next();
        let mut second = Ids::default();
        let c = second.next();
        assert!(a < b && b < c, "{a} {b} {c}");
    }
}
