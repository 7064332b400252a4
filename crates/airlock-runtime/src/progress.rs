//! Progress of a call's long phases, for whoever shows it.
//!
//! Snapshotting (and hashing) a call's inputs and taking a Git snapshot can
//! take seconds on large files. The runtime reports them to a [`Progress`]
//! hook the front passes with the call ([`crate::CallRequest::progress`]):
//! the command line draws a bar on a terminal, `airlock mcp` sends
//! `notifications/progress` to a client that asked with a progress token.
//! The runtime never draws anything itself, and knows no terminal.
//!
//! A [`Meter`] decides what is worth reporting, the same for every front:
//! a phase is *long* once its total is known to be at least
//! [`LONG_BYTES`], or its bytes done reach it, or it has run for
//! [`LONG_AFTER`]; only a long phase is reported, with one
//! [`Step::Start`], [`Step::Advance`] at most every [`MIN_INTERVAL`], and
//! one [`Step::End`] when it is over (finished or abandoned). A short
//! phase reports nothing, so a small call stays quiet.

use std::fmt;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A phase whose total is at least this many bytes is long from its start.
pub const LONG_BYTES: u64 = 64 << 20;
/// A phase running this long is long, whatever its size.
pub const LONG_AFTER: Duration = Duration::from_secs(1);
/// Advances of one phase are reported at most this often.
pub const MIN_INTERVAL: Duration = Duration::from_millis(200);

/// Which long phase a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Copying the call's inputs into private snapshots, hashing them.
    Snapshot,
    /// Copying a repository into a Git snapshot archive.
    GitSnapshot,
    /// A session's program working on an interaction, until its prompt
    /// shows again (the bytes are its output so far).
    SessionPrompt,
    /// An `[mcp]` session's upstream server working on one `tools/call`,
    /// until it answers (no bytes are counted).
    UpstreamAnswer,
}

impl Phase {
    /// What the phase does, for people.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Snapshot => "snapshotting inputs",
            Phase::GitSnapshot => "snapshotting the repository",
            Phase::SessionPrompt => "waiting for the session's prompt",
            Phase::UpstreamAnswer => "waiting for the upstream server's answer",
        }
    }
}

/// Where a phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The phase became long (reported once, before any advance).
    Start,
    /// More bytes are done.
    Advance,
    /// The phase is over, finished or abandoned.
    End,
}

/// One report: a phase, its step, bytes done and the total if known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The phase.
    pub phase: Phase,
    /// Start, advance or end.
    pub step: Step,
    /// Bytes done so far.
    pub done: u64,
    /// Bytes the phase will do, when known beforehand (a Git snapshot's
    /// size is known only at its end).
    pub total: Option<u64>,
}

/// Receives the reports of a call's long phases; called on the call's
/// thread, so an implementation must return quickly (hand the report to
/// whatever draws or sends it).
pub trait Progress: Send + Sync + fmt::Debug {
    /// One report of a long phase.
    fn report(&self, report: &Report);
}

/// A call's progress hook, as a request carries it.
pub type ProgressHook = Arc<dyn Progress>;

/// Follows one phase and reports it to a hook when it is long (see the
/// module documentation). Dropping it ends the phase.
#[derive(Debug)]
pub(crate) struct Meter<'a> {
    hook: Option<&'a dyn Progress>,
    phase: Phase,
    total: Option<u64>,
    done: u64,
    begun: Instant,
    /// When the last report was made; `None` while the phase is short.
    reported: Option<Instant>,
}

impl<'a> Meter<'a> {
    /// Begins `phase` of `total` bytes (if known); with no hook, a meter
    /// that reports nothing.
    pub(crate) fn begin(hook: Option<&'a dyn Progress>, phase: Phase, total: Option<u64>) -> Meter<'a> {
        let mut meter = Meter { hook, phase, total, done: 0, begun: Instant::now(), reported: None };
        if total.is_some_and(|t| t >= LONG_BYTES) {
            meter.send(Step::Start);
        }
        meter
    }

    /// `bytes` more are done.
    pub(crate) fn add(&mut self, bytes: u64) {
        if self.hook.is_none() {
            return;
        }
        self.done = self.done.saturating_add(bytes);
        match self.reported {
            Some(last) if last.elapsed() >= MIN_INTERVAL => self.send(Step::Advance),
            Some(_) => {}
            None if self.done >= LONG_BYTES || self.begun.elapsed() >= LONG_AFTER => self.send(Step::Start),
            None => {}
        }
    }

    /// A writer that counts what passes through it into this meter.
    pub(crate) fn writer<'m, W: Write>(&'m mut self, inner: &'m mut W) -> Metered<'m, 'a, W> {
        Metered { inner, meter: self }
    }

    fn send(&mut self, step: Step) {
        if let Some(hook) = self.hook {
            hook.report(&Report { phase: self.phase, step, done: self.done, total: self.total });
            self.reported = Some(Instant::now());
        }
    }
}

impl Drop for Meter<'_> {
    fn drop(&mut self) {
        if self.reported.is_some() {
            self.send(Step::End);
        }
    }
}

/// A writer counting the bytes it passes on into a [`Meter`].
pub(crate) struct Metered<'m, 'a, W: Write> {
    inner: &'m mut W,
    meter: &'m mut Meter<'a>,
}

impl<W: Write> Write for Metered<'_, '_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.meter.add(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Recorded(Mutex<Vec<Report>>);

    impl Progress for Recorded {
        fn report(&self, report: &Report) {
            self.0.lock().unwrap().push(*report);
        }
    }

    fn steps(hook: &Recorded) -> Vec<Step> {
        hook.0.lock().unwrap().iter().map(|r| r.step).collect()
    }

    #[test]
    fn a_short_phase_reports_nothing() {
        let hook = Recorded::default();
        let mut meter = Meter::begin(Some(&hook), Phase::Snapshot, Some(1 << 20));
        let mut sink = Vec::new();
        meter.writer(&mut sink).write_all(&[0; 4096]).unwrap();
        drop(meter);
        assert!(steps(&hook).is_empty());
    }

    #[test]
    fn a_large_phase_starts_at_once_and_ends_with_its_bytes() {
        let hook = Recorded::default();
        let mut meter = Meter::begin(Some(&hook), Phase::Snapshot, Some(LONG_BYTES));
        meter.add(LONG_BYTES);
        drop(meter);
        let reports = hook.0.lock().unwrap().clone();
        assert_eq!(reports.first().map(|r| (r.step, r.done)), Some((Step::Start, 0)));
        assert_eq!(reports.last().map(|r| (r.step, r.done)), Some((Step::End, LONG_BYTES)));
        // Advances in between are bounded by the interval: none this fast.
        assert_eq!(reports.len(), 2);
    }

    #[test]
    fn an_unknown_total_becomes_long_when_its_bytes_do() {
        let hook = Recorded::default();
        let mut meter = Meter::begin(Some(&hook), Phase::GitSnapshot, None);
        meter.add(LONG_BYTES - 1);
        assert!(steps(&hook).is_empty());
        meter.add(1);
        std::thread::sleep(MIN_INTERVAL);
        meter.add(1);
        drop(meter);
        assert_eq!(steps(&hook), [Step::Start, Step::Advance, Step::End]);
    }
}
