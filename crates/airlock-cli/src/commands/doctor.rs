//! `airlock doctor`: what this host supports, and which tiers work here.

use airlock_core::{Config, Envelope, ReasonCode, Refusal, Tier};
use serde_json::{json, Value};

fn check(ok: bool, detail: impl Into<String>) -> Value {
    json!({ "ok": ok, "detail": detail.into() })
}

fn on_path(program: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(program))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// Approvers and their keys: warns when none is pinned, and when an
/// approver key at the default place is readable by the user running this
/// (who, running `airlock doctor` where calls run, is the user an agent's
/// calls run as: such an agent could sign its own approvals).
fn approval_report(config: &Config) -> Value {
    let mut warnings = Vec::new();
    let pinned = config.approval.approvers.len();
    if pinned == 0 {
        warnings.push(
            "no [[approval.approvers]] is configured: calls that need an approval can never be approved".to_owned(),
        );
    }
    if let Some(key) = airlock_runtime::approval::default_key_path() {
        if std::fs::File::open(&key).is_ok() {
            warnings.push(format!(
                "the approver key {} is readable by the user running airlock here, so an agent whose calls run as \
                 this user can approve its own calls; keep approver keys under another user's account (or where \
                 the agent does not run)",
                key.display()
            ));
        }
    }
    for w in &warnings {
        eprintln!("airlock: warning: {w}");
    }
    json!({ "ok": warnings.is_empty(), "approvers": pinned, "ttl_seconds": config.approval.ttl_seconds,
            "max_pending": config.approval.max_pending, "warnings": warnings })
}

/// Probes the host; the status is `error` (`sandbox.unavailable`, exit 78)
/// when the configured tier cannot run here.
pub fn run(config: &Config) -> Envelope {
    let host = airlock_sandbox::probe();
    let native = host.native_ready();
    let userns = match &host.userns {
        Ok(()) => check(true, "unprivileged user namespaces can be created"),
        Err(why) => check(false, why.clone()),
    };
    let landlock = match host.landlock_abi {
        Some(abi) => check(true, format!("Landlock ABI {abi}")),
        None => check(false, "Landlock is absent or disabled (needs Linux 5.13+ with lsm=landlock)"),
    };
    let cgroups = match &host.cgroup_delegation {
        Ok(dir) => check(true, format!("memory/pids limits through {}", dir.display())),
        Err(why) => check(false, format!("{why}; memory and process limits fall back to RLIMIT_AS and RLIMIT_NPROC")),
    };
    let not_built = |program: &str| {
        let found = on_path(program).map_or_else(|| format!("{program} not found"), |p| format!("{program} at {p}"));
        json!({ "ready": false, "detail": format!("not built in this version of airlock ({found})") })
    };
    let content = json!({
        "host": {
            "user_namespaces": userns,
            "landlock": landlock,
            "seccomp": check(host.seccomp, if host.seccomp { "seccomp filters are accepted" } else { "seccomp is unavailable" }),
            "openat2": check(host.openat2, if host.openat2 {
                "openat2 with RESOLVE_BENEATH works; the kernel resolves declared paths"
            } else {
                "openat2 is unavailable; the emulated O_NOFOLLOW resolver is used"
            }),
            "cgroup_delegation": cgroups,
        },
        "tiers": {
            "native": match &native {
                Ok(()) => json!({ "ready": true, "detail": "namespaces, Landlock and seccomp are available" }),
                Err(why) => json!({ "ready": false, "detail": why }),
            },
            "gvisor": not_built("runsc"),
            "docker": not_built("docker"),
            "microvm": not_built("qemu-system-x86_64"),
        },
        "isolated": airlock_runtime::isolated_helper_report(config),
        "approval": approval_report(config),
        "configured_tier": config.tier,
    });
    let envelope = Envelope { content: Some(content), ..Envelope::ok() };
    match (config.tier, native) {
        (Tier::Native, Ok(())) => envelope,
        (Tier::Native, Err(why)) => Envelope {
            content: envelope.content,
            ..Envelope::from_refusal(&Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("the native tier cannot run here: {why}"),
            ))
        },
        (other, _) => Envelope {
            content: envelope.content,
            ..Envelope::from_refusal(&Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("the configured tier {other:?} is not built in this version"),
            ))
        },
    }
}
