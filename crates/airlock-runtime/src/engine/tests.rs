//! The engine with a transport of the test's own: the steps run in order,
//! each journals what DESIGN §6 lists, a refusal at any step stops the
//! later ones, and a call that needs an approval stops after prepare. No
//! sandbox is involved: the transport's run step reports a worker outcome
//! of its own making, as a tier would.

use super::*;
use crate::Runtime;
use airlock_core::{Config, FilesystemBoundary, ReasonCode, ToolIdentity};
use airlock_hostfs::HostAuthority;
use airlock_sandbox::{AppliedLimits, ExitStatusKind, WorkerOutcome};
use std::cell::RefCell;

/// What the test's transport did, in order.
#[derive(Default)]
struct Steps(RefCell<Vec<&'static str>>);

/// A transport whose prepare and run report themselves, and fail on request.
struct Probe<'a> {
    steps: &'a Steps,
    fail_prepare: bool,
}

/// The run step of [`Probe`] (a transport's execute is an associated
/// function: it gets only the authorized call).
struct ProbePayload<'a>(&'a Steps);

impl<'a> Transport for Probe<'a> {
    type Payload = ProbePayload<'a>;
    const NAME: &'static str = "probe";
    const WRITES: bool = false;
    const NOT_KEPT: Option<&'static str> = Some("probes are never kept");

    fn prepare(self, _rt: &Runtime, start: &CallStart<'_>) -> Result<Preparation<ProbePayload<'a>>, Refusal> {
        self.steps.0.borrow_mut().push("prepare");
        assert!(!start.keep);
        if self.fail_prepare {
            return Err(Refusal::new(ReasonCode::InputNotRegular, "the probe found nothing"));
        }
        let mut journal = Map::new();
        journal.insert("probe".into(), json!(true));
        Ok(Preparation {
            args: BTreeMap::from([("x".into(), "1".into())]),
            argv: vec!["probe".into()],
            filesystem: FilesystemBoundary::new(Vec::new(), None, 0, None),
            inputs: Vec::new(),
            output: None,
            lease: None,
            journal,
            tier: "none".into(),
            payload: ProbePayload(self.steps),
        })
    }

    fn execute(rt: &Runtime, call: AuthorizedCall<ProbePayload<'a>>) -> Result<Envelope, Refusal> {
        let (prepared, decision) = call.into_parts();
        prepared.payload().0 .0.borrow_mut().push("execute");
        let step = rt.worker_started(prepared.invocation_id(), &["probe".to_owned()], json!({}))?;
        let outcome = WorkerOutcome {
            exit: ExitStatusKind::Exited(0),
            timed_out: false,
            stdout: b"done".to_vec(),
            stdout_truncated: false,
            stderr: Vec::new(),
            stderr_truncated: false,
            output: None,
            cleanup_confirmed: true,
            cgroup_limits_applied: false,
            limits: AppliedLimits::default(),
        };
        step.finished(Ok(&outcome))?;
        Ok(answer::finished(&prepared, &decision.policy_ids, Some((&outcome, None))))
    }
}

fn runtime(dir: &std::path::Path) -> Runtime {
    let config = Config::parse("state_dir = \"state\"\n", None, dir).unwrap();
    Runtime::open(HostAuthority::ambient(), config, None).unwrap()
}

fn tool(risk_tier: &str) -> CallTool {
    CallTool {
        identity: ToolIdentity::builtin("probe", "1", risk_tier),
        spec: airlock_policy::ToolSpec { name: "probe".into(), action: None, resource: None, args: Vec::new() },
        text: String::new(),
        origin: "test".into(),
    }
}

fn start(id: &str) -> CallStart<'_> {
    CallStart {
        invocation_id: id,
        principal: "tester",
        keep: false,
        expires_at: None,
        progress: None,
        tier: None,
        session: false,
    }
}

/// `(kind, body)` of the records of invocation `id`, in order.
fn journal(rt: &Runtime, id: &str) -> Vec<(String, Value)> {
    rt.journal()
        .records()
        .unwrap()
        .into_iter()
        .filter(|r| r.invocation_id.as_deref() == Some(id))
        .map(|r| (r.kind, r.body))
        .collect()
}

/// The reason code of a refused answer.
fn code(answer: &airlock_core::Envelope) -> ReasonCode {
    answer.error.as_ref().expect("a refused answer").code
}

fn kinds(records: &[(String, Value)]) -> Vec<&str> {
    records.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn the_steps_run_in_order_and_each_is_journaled_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let steps = Steps::default();
    let answer = rt.as_call("probe-1", "tester", None, || {
        rt.drive(Probe { steps: &steps, fail_prepare: false }, &tool("low"), start("probe-1"))
    });
    assert_eq!(*steps.0.borrow(), ["prepare", "execute"]);
    assert_eq!(answer.exit_code, Some(0));
    let evidence = answer.evidence.unwrap();
    assert_eq!(evidence.policy_ids, [DEFAULT_POLICY_ID]);
    assert_eq!(evidence.principal.as_deref(), Some("tester"));
    assert!(answer.duration_ms.is_some());
    assert_eq!(evidence.journal.as_ref().unwrap().key_id, rt.journal().key().key_id());
    let seqs: Vec<u64> = rt
        .journal()
        .records()
        .unwrap()
        .iter()
        .filter(|r| r.invocation_id.as_deref() == Some("probe-1"))
        .map(|r| r.seq)
        .collect();
    let range = evidence.records.unwrap();
    assert_eq!((range.first, range.last), (seqs[0], *seqs.last().unwrap()), "the answer names its records");

    let records = journal(&rt, "probe-1");
    assert_eq!(
        kinds(&records),
        ["InvocationPrepared", "InvocationAuthorized", "WorkerStarted", "WorkerFinished", "InvocationFinished"]
    );
    let prepared = &records[0].1;
    assert_eq!(prepared["transport"], "probe");
    assert_eq!(prepared["probe"], true, "the shape's own keys are added: {prepared:#}");
    assert_eq!(prepared["descriptor_sha256"], evidence.descriptor_sha256.unwrap().as_str());
    for (kind, body) in &records {
        assert_eq!(body["principal"], "tester", "{kind}: {body:#}");
    }
    let finished: Vec<&str> = records[3].1.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(finished, ["cleanup_confirmed", "exit_code", "output_bytes", "principal", "timed_out"]);
    // The committed record reserves the id and marks it run: never dispatchable.
    assert_eq!(code(&rt.dispatch("probe-1")), ReasonCode::InvocationDuplicate);
}

#[test]
fn a_refused_prepare_runs_nothing_and_journals_the_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let steps = Steps::default();
    let refused = rt.as_call("probe-2", "tester", None, || {
        rt.drive(Probe { steps: &steps, fail_prepare: true }, &tool("low"), start("probe-2"))
    });
    assert_eq!(code(&refused), ReasonCode::InputNotRegular);
    assert_eq!(*steps.0.borrow(), ["prepare"]);
    assert_eq!(kinds(&journal(&rt, "probe-2")), ["InvocationRefused"]);
    let evidence = refused.evidence.as_ref().expect("a refusal carries its evidence");
    assert_eq!(evidence.principal.as_deref(), Some("tester"));
    let range = evidence.records.unwrap();
    assert_eq!(range.first, range.last, "one record, the refusal");
    // The id is spent all the same.
    let again = rt.as_call("probe-2", "tester", None, || {
        rt.drive(Probe { steps: &steps, fail_prepare: false }, &tool("low"), start("probe-2"))
    });
    assert_eq!(code(&again), ReasonCode::InvocationDuplicate);
}

#[test]
fn a_denied_call_is_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let steps = Steps::default();
    // The default policy denies what it does not know to be low or medium
    // risk; `critical` would need an approval, which a probe cannot wait for.
    let refused = rt.as_call("probe-3", "tester", None, || {
        rt.drive(Probe { steps: &steps, fail_prepare: false }, &tool("unknown"), start("probe-3"))
    });
    assert_eq!(code(&refused), ReasonCode::PolicyDenied);
    assert_eq!(*steps.0.borrow(), ["prepare"]);
    assert_eq!(kinds(&journal(&rt, "probe-3")), ["InvocationPrepared", "InvocationRefused"]);
}

#[test]
fn a_call_needing_approval_that_its_shape_cannot_keep_is_refused_before_prepare() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let steps = Steps::default();
    let refused = rt.as_call("probe-4", "tester", None, || {
        rt.drive(Probe { steps: &steps, fail_prepare: false }, &tool("high"), start("probe-4"))
    });
    assert_eq!(code(&refused), ReasonCode::ManifestUnsupported);
    let message = &refused.error.as_ref().unwrap().message;
    assert!(message.contains("probes are never kept"), "{message}");
    assert!(steps.0.borrow().is_empty());
}
