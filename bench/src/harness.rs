//! Alternating timing of a candidate and its baseline, and the printed row.

use std::fmt;
use std::time::{Duration, Instant};

/// Percentiles of a set of samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Median.
    pub p50: Duration,
    /// 99th percentile (the maximum for fewer than 100 samples).
    pub p99: Duration,
}

/// p50 and p99 of `samples` (at least one).
pub fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Summary { p50: at(0.5), p99: at(0.99) }
}

/// How the ratio is judged.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// candidate p50 / baseline p50 must be at most this.
    TimeRatioAtMost(f64),
    /// candidate and baseline p99 must both be under this.
    P99Under(Duration),
    /// airlock's p50 must be at most this (an absolute goal, such as issue
    /// 22's 0.1 ms for a broker read); the baseline is printed for scale.
    P50AtMost(Duration),
    /// airlock's p50 may exceed the baseline's by at most this (issue 23:
    /// what the cluster adds to a local call).
    P50AddsAtMost(Duration),
    /// No target: the row is printed for scale (a peer, an unconfined
    /// command), with neither MET nor MISSED.
    ForScale,
}

/// One printed row.
#[derive(Debug)]
pub struct Report {
    /// Row name.
    pub name: &'static str,
    /// What airlock did.
    pub candidate: Summary,
    /// What the baseline did.
    pub baseline: Summary,
    /// The goal.
    pub target: Target,
    /// Bytes processed per iteration, for a throughput column.
    pub bytes: Option<u64>,
    /// Samples per side.
    pub samples: usize,
    /// More lines printed under the row (e.g. throughput under concurrency).
    pub extra: Vec<String>,
}

impl Report {
    /// candidate p50 / baseline p50.
    pub fn ratio(&self) -> f64 {
        self.candidate.p50.as_secs_f64() / self.baseline.p50.as_secs_f64()
    }

    /// Whether the target was met.
    pub fn met(&self) -> bool {
        match self.target {
            Target::TimeRatioAtMost(max) => self.ratio() <= max,
            Target::P99Under(limit) => self.candidate.p99 < limit && self.baseline.p99 < limit,
            Target::P50AtMost(limit) => self.candidate.p50 <= limit,
            Target::P50AddsAtMost(limit) => self.candidate.p50.saturating_sub(self.baseline.p50) <= limit,
            Target::ForScale => true,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match self.target {
            Target::TimeRatioAtMost(max) => format!("target ratio <= {max:.3}"),
            Target::P99Under(limit) => format!("target p99 < {:.3} ms", ms(limit)),
            Target::P50AtMost(limit) => format!("target airlock p50 <= {:.3} ms", ms(limit)),
            Target::P50AddsAtMost(limit) => format!(
                "adds {:.3} ms, target adds <= {:.3} ms",
                ms(self.candidate.p50.saturating_sub(self.baseline.p50)),
                ms(limit)
            ),
            Target::ForScale => "for scale, no target".into(),
        };
        let verdict = match self.target {
            Target::ForScale => "",
            _ if self.met() => " MET",
            _ => " MISSED",
        };
        write!(
            f,
            "{:<44} airlock p50 {:>8.3} ms p99 {:>8.3} ms | baseline p50 {:>8.3} ms p99 {:>8.3} ms | ratio {:.3} ({target}){verdict} [n={}]",
            self.name,
            ms(self.candidate.p50),
            ms(self.candidate.p99),
            ms(self.baseline.p50),
            ms(self.baseline.p99),
            self.ratio(),
            self.samples,
        )?;
        for line in &self.extra {
            write!(f, "\n{:<44} {line}", "")?;
        }
        if let Some(bytes) = self.bytes {
            let mbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e6;
            write!(
                f,
                "\n{:<44} throughput airlock {:.0} MB/s, baseline {:.0} MB/s, airlock/baseline {:.3}",
                "",
                mbps(self.candidate.p50),
                mbps(self.baseline.p50),
                1.0 / self.ratio()
            )?;
        }
        Ok(())
    }
}

/// Runs `candidate` and `baseline` alternately `samples` times each (after
/// one warm-up of each) and summarizes both.
pub fn compare(
    samples: usize,
    candidate: impl FnMut() -> Result<(), String>,
    baseline: impl FnMut() -> Result<(), String>,
) -> Result<(Summary, Summary), String> {
    compare_settled(samples, Duration::ZERO, candidate, baseline)
}

/// [`compare`], idle for `settle` (untimed) after each call, so what a
/// long-lived candidate does after its answer (a warm sandbox's refill, a
/// namespace's release) is neither timed in the baseline's call nor in its
/// own next one: each call is timed on an idle server, as calls spaced
/// apart meet it.
pub fn compare_settled(
    samples: usize,
    settle: Duration,
    mut candidate: impl FnMut() -> Result<(), String>,
    mut baseline: impl FnMut() -> Result<(), String>,
) -> Result<(Summary, Summary), String> {
    candidate()?;
    baseline()?;
    let (mut a, mut b) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for i in 0..samples {
        // Alternate which side goes first so drift hits both equally.
        let time = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<Duration, String> {
            let t = Instant::now();
            f()?;
            let took = t.elapsed();
            std::thread::sleep(settle);
            Ok(took)
        };
        if i % 2 == 0 {
            a.push(time(&mut candidate)?);
            b.push(time(&mut baseline)?);
        } else {
            b.push(time(&mut baseline)?);
            a.push(time(&mut candidate)?);
        }
    }
    Ok((summarize(a), summarize(b)))
}

/// Runs `call` `total` times split over `callers` threads; returns calls per second.
pub fn throughput(
    callers: usize,
    total: usize,
    call: impl Fn(usize) -> Result<(), String> + Sync,
) -> Result<f64, String> {
    let start = Instant::now();
    let per = total / callers;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|c| {
                let call = &call;
                s.spawn(move || (0..per).try_for_each(|i| call(c * per + i)))
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| "a caller panicked".to_string())?)
    })?;
    Ok((per * callers) as f64 / start.elapsed().as_secs_f64())
}
