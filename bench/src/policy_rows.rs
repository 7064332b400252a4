//! Issue 5: Cedar authorization latency per call with 100 policies (the
//! candidate) beside 1 policy (the baseline), on a loaded policy set; the
//! descriptor is a real one-input/one-output call. Target: p99 under 1 ms.

use crate::harness::{compare, Report, Target};
use airlock_core::{CommandBoundary, Descriptor, DirIdentity, FilesystemBoundary, ReadGrant, RelPath};
use airlock_policy::{ArgKind, PolicySet, Request, ToolSpec};
use std::time::Duration;

fn descriptor() -> serde_json::Value {
    let reads =
        vec![ReadGrant { path: "data/in.txt".into(), bytes: 3600, sha256: format!("sha256:{}", "ab".repeat(32)) }];
    let d = Descriptor {
        version: 1,
        tool: "copy".into(),
        tool_version: "1".into(),
        manifest_sha256: format!("sha256:{}", "cd".repeat(32)),
        args: [("input".to_owned(), "data/in.txt".to_owned()), ("output".to_owned(), "results/o.txt".to_owned())]
            .into(),
        argv: vec!["cp".into(), "data/in.txt".into(), "results/o.txt".into()],
        transport: "exec".into(),
        risk_tier: "low".into(),
        human_approval: false,
        working_dir: "/workspace".into(),
        tier: "native".into(),
        command_boundary: CommandBoundary {
            filesystem: FilesystemBoundary::new(
                reads,
                Some(&RelPath::parse("results/o.txt").unwrap()),
                8 << 20,
                Some(DirIdentity::new(2049, 77)),
            ),
        },
        policy_bundle: None,
    };
    serde_json::to_value(d).unwrap()
}

fn policies(n: usize) -> Vec<(String, String)> {
    let mut text = String::from("@id(\"permit-all\")\npermit(principal, action, resource);\n");
    for i in 1..n {
        text.push_str(&format!(
            "@id(\"forbid-{i}\")\nforbid(principal, action, resource) when {{ context.invocation.resolved.command_boundary.filesystem.read_paths.contains(\"data/private-{i}.txt\") }};\n"
        ));
    }
    vec![("bench.cedar".to_owned(), text)]
}

/// 100 policies vs 1.
pub fn authorization_latency(quick: bool) -> Result<Report, String> {
    let tool = ToolSpec {
        name: "copy".into(),
        action: None,
        resource: None,
        args: vec![("input".into(), ArgKind::String), ("output".into(), ArgKind::String)],
    };
    let one = PolicySet::load(&policies(1), std::slice::from_ref(&tool)).map_err(|e| e.to_string())?;
    let hundred = PolicySet::load(&policies(100), std::slice::from_ref(&tool)).map_err(|e| e.to_string())?;
    let descriptor = descriptor();
    let request = Request {
        principal: "local",
        tool: &tool,
        risk_tier: "low",
        human_approval: false,
        descriptor: &descriptor,
        invocation_id: "inv-bench",
        approved: false,
    };
    let check = |set: &PolicySet| -> Result<(), String> {
        let v = set.authorize(&request).map_err(|e| e.to_string())?;
        if v.allowed {
            Ok(())
        } else {
            Err(format!("unexpected deny: {v:?}"))
        }
    };
    let samples = if quick { 300 } else { 3000 };
    let (candidate, baseline) = compare(samples, || check(&hundred), || check(&one))?;
    Ok(Report {
        name: "authorize: 100 Cedar policies vs 1",
        candidate,
        baseline,
        target: Target::P99Under(Duration::from_millis(1)),
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}
