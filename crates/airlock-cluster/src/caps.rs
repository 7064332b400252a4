//! What a worker host runs at most, whatever a pinned edge orders. A pinned
//! edge chooses what runs, not how much of the worker host it may take: an
//! order over any cap is refused (`cluster.over_limit`), never trimmed (the
//! edge signed what it asked for, and a trimmed run would not be that call).

use crate::error::ClusterError;
use crate::order::RunSpec;

/// The worker host's caps (its `[limits]` and `[cluster.worker]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCaps {
    /// Most inputs of one call.
    pub max_inputs: usize,
    /// Most input bytes of one call, all inputs together.
    pub max_input_bytes: u64,
    /// Largest input.
    pub max_input_file_bytes: u64,
    /// Largest output bound.
    pub max_file_bytes: u64,
    /// Longest run, in milliseconds.
    pub max_timeout_ms: u64,
    /// Most memory a call may ask for (`None`: no cap of the worker's own).
    pub max_memory_bytes: Option<u64>,
    /// Most processes.
    pub max_pids: Option<u64>,
    /// Most CPU seconds.
    pub max_cpu_seconds: Option<u64>,
    /// Largest private `/tmp`.
    pub max_scratch_bytes: Option<u64>,
}

impl WorkerCaps {
    /// Refuses `run` if it asks for more than a cap; names the first cap
    /// it is over and the key that raises it.
    pub fn admit(&self, run: &RunSpec) -> Result<(), ClusterError> {
        let over = |what: &str, asked: String, cap: String, key: &str| {
            Err(ClusterError::OverLimit(format!(
                "the order asks for {what} {asked}, over this worker's {cap} ({key} in the worker's airlock.toml)"
            )))
        };
        if run.inputs.len() > self.max_inputs {
            return over("inputs:", run.inputs.len().to_string(), self.max_inputs.to_string(), "[limits] max_inputs");
        }
        let total: u64 = run.inputs.iter().map(|i| i.blob.bytes).fold(0, u64::saturating_add);
        if total > self.max_input_bytes {
            return over(
                "input bytes:",
                total.to_string(),
                self.max_input_bytes.to_string(),
                "[limits] max_input_bytes",
            );
        }
        if let Some(big) = run.inputs.iter().find(|i| i.blob.bytes > self.max_input_file_bytes) {
            return over(
                &format!("an input ({}) of", big.virtual_path),
                format!("{} bytes", big.blob.bytes),
                self.max_input_file_bytes.to_string(),
                "[limits] max_input_file_bytes",
            );
        }
        if let Some(o) = run.output.as_ref().filter(|o| o.max_bytes > self.max_file_bytes) {
            return over(
                "an output bound of",
                o.max_bytes.to_string(),
                self.max_file_bytes.to_string(),
                "[limits] max_file_bytes",
            );
        }
        if run.timeout_ms > self.max_timeout_ms {
            return over(
                "a timeout of",
                format!("{} ms", run.timeout_ms),
                format!("{} ms", self.max_timeout_ms),
                "[cluster.worker] timeout_seconds",
            );
        }
        let capped = |asked: Option<u64>, cap: Option<u64>| match (asked, cap) {
            (_, None) => None,
            (Some(a), Some(c)) if a <= c => None,
            (a, Some(c)) => Some((a.map_or_else(|| "no limit".to_owned(), |a| a.to_string()), c.to_string())),
        };
        let l = &run.limits;
        let checks = [
            ("memory_bytes", l.memory_bytes, self.max_memory_bytes),
            ("pids", l.pids, self.max_pids),
            ("cpu_seconds", l.cpu_seconds, self.max_cpu_seconds),
            ("scratch_bytes", Some(l.scratch_bytes), self.max_scratch_bytes),
        ];
        for (name, asked, cap) in checks {
            if let Some((asked, cap)) = capped(asked, cap) {
                return over(&format!("{name} of"), asked, cap, &format!("[cluster.worker] {name}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{Blob, OrderInput, OrderOutput};
    use airlock_core::HasReason as _;

    fn caps() -> WorkerCaps {
        WorkerCaps {
            max_inputs: 2,
            max_input_bytes: 100,
            max_input_file_bytes: 60,
            max_file_bytes: 1000,
            max_timeout_ms: 5000,
            max_memory_bytes: Some(1 << 30),
            max_pids: None,
            max_cpu_seconds: Some(10),
            max_scratch_bytes: None,
        }
    }

    fn run() -> RunSpec {
        let input =
            |n: u64| OrderInput { virtual_path: format!("in-{n}"), blob: Blob { sha256: String::new(), bytes: n } };
        RunSpec {
            argv: vec!["t".into()],
            env: Vec::new(),
            working_dir: "/work".into(),
            inputs: vec![input(40), input(50)],
            output: Some(OrderOutput { virtual_path: "out".into(), max_bytes: 1000, from_stdout: false }),
            limits: airlock_sandbox::WorkerLimits { cpu_seconds: Some(10), ..Default::default() },
            timeout_ms: 5000,
            stdout_limit: 1,
            stderr_limit: 1,
        }
    }

    #[test]
    fn an_order_within_every_cap_is_admitted_and_one_over_any_is_refused_naming_it() {
        assert_eq!(caps().admit(&run()), Ok(()));
        let refused = |r: RunSpec, key: &str| {
            let e = caps().admit(&r).unwrap_err();
            assert_eq!(e.reason(), airlock_core::ReasonCode::ClusterOverLimit);
            assert!(e.to_string().contains(key), "{e}");
        };
        let mut r = run();
        r.inputs.push(r.inputs[0].clone());
        refused(r, "max_inputs");
        let mut r = run();
        r.inputs[1].blob.bytes = 61;
        refused(r, "max_input_bytes");
        let mut r = run();
        r.inputs = vec![r.inputs[0].clone()];
        r.inputs[0].blob.bytes = 61;
        refused(r, "max_input_file_bytes");
        let mut r = run();
        r.output.as_mut().unwrap().max_bytes = 1001;
        refused(r, "max_file_bytes");
        let mut r = run();
        r.timeout_ms = 5001;
        refused(r, "timeout_seconds");
        let mut r = run();
        r.limits.memory_bytes = None;
        refused(r, "memory_bytes");
        let mut r = run();
        r.limits.cpu_seconds = Some(11);
        refused(r, "cpu_seconds");
        // No cap of its own: whatever the order asks.
        let mut r = run();
        r.limits.pids = None;
        r.limits.scratch_bytes = u64::MAX;
        assert_eq!(caps().admit(&r), Ok(()));
    }
}
