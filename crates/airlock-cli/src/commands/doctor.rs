//! `airlock doctor`: what this host supports, and which tiers work here.

use airlock_core::{Config, Envelope, ReasonCode, Refusal, Tier};
use serde_json::{json, Value};

fn check(ok: bool, detail: impl Into<String>) -> Value {
    json!({ "ok": ok, "detail": detail.into() })
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
/// when the configured tier cannot run here. `config_report` says which
/// configuration file is in use and why.
pub fn run(config: &Config, config_report: Value) -> Envelope {
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
    let limits = limits_report(config);
    // Each tier as it would run a call now (a trivial worker is started
    // on every configured container tier).
    let reports = airlock_runtime::tiers::tier_reports(config, &host);
    let mut tiers = serde_json::Map::new();
    for r in &reports {
        let detail = match (&r.why, r.tier.as_str()) {
            (Some(why), _) => why.clone(),
            (None, "native") => "namespaces, Landlock and seccomp are available".to_owned(),
            (None, "cluster") => r.platform.clone().unwrap_or_default(),
            (None, _) => format!(
                "a trivial worker ran here ({})",
                [r.version.as_deref(), r.platform.as_deref()].into_iter().flatten().collect::<Vec<_>>().join("; ")
            ),
        };
        let mut entry = serde_json::to_value(r).expect("tier reports serialize");
        entry["detail"] = detail.into();
        entry["allowed"] = config.tiers.allowed.iter().any(|t| t.as_str() == r.tier).into();
        tiers.insert(r.tier.clone(), entry);
    }
    // Why the configured tier cannot run a call here; `None`: it can.
    let configured_why = match reports.iter().find(|r| r.tier == config.tier.as_str()) {
        Some(r) if r.ready => None,
        Some(r) => Some(r.why.clone().unwrap_or_else(|| "its trivial worker did not run".to_owned())),
        None => Some("no report".to_owned()),
    };
    let (linked_static, linking) = super::linking::report();
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
            "warm_sandboxes": warm_report(config, host.cgroup_delegation.is_ok()),
            "sandbox_init": init_report(),
            "git_driver": git_driver_report(),
            "linking": check(linked_static, linking),
            "input_leases": match airlock_sandbox::lease_support() {
                Ok(secs) => check(true, format!(
                    "an input over 8 MiB of a native call is held under a read lease, not copied; a host writer \
                     opening it waits for the call (at most {secs} s) and voids it"
                )),
                Err(why) => check(false, format!("{why}: inputs over 8 MiB are copied into staging")),
            },
        },
        "limits": limits,
        "tiers": tiers,
        "isolated": airlock_runtime::isolated_helper_report(config),
        "approval": approval_report(config),
        "configured_tier": config.tier,
        "config": config_report,
    });
    let envelope = Envelope { content: Some(content), ..Envelope::ok() };
    let required = if config.require_cgroup {
        airlock_sandbox::cgroup_limits_available(config.cgroup_parent.as_deref()).err()
    } else {
        None
    };
    match (config.tier, native) {
        (Tier::Native, Ok(())) => match required {
            None => envelope,
            Some(why) => Envelope {
                content: envelope.content,
                ..Envelope::from_refusal(&Refusal::new(
                    ReasonCode::SandboxLimitsUnavailable,
                    format!(
                        "[sandbox] require_cgroup = true and no cgroup can hold memory and process limits here \
                         ({why}): every worker call will be refused. Delegate a cgroup v2 with memory and pids and \
                         name it in [sandbox] cgroup_parent, or set require_cgroup = false"
                    ),
                ))
            },
        },
        (Tier::Native, Err(why)) => Envelope {
            content: envelope.content,
            ..Envelope::from_refusal(&Refusal::new(
                ReasonCode::SandboxUnavailable,
                format!("the native tier cannot run here: {why}"),
            ))
        },
        (other, _) => match configured_why {
            None => envelope,
            Some(why) => Envelope {
                content: envelope.content,
                ..Envelope::from_refusal(&Refusal::new(
                    ReasonCode::SandboxUnavailable,
                    format!("the configured tier {:?} cannot run here: {why}", other.as_str()),
                ))
            },
        },
    }
}

/// Which program a native call starts as its sandbox init.
fn init_report() -> Value {
    own_program_report(
        super::INIT_BIN,
        "starts each native call",
        "airlock is its own sandbox init, so each native call execs all of airlock (about 1 ms more a call)",
    )
}

/// Which program a Git query's worker runs.
fn git_driver_report() -> Value {
    own_program_report(
        airlock_runtime::transport::git::DRIVER_BIN,
        "answers each Git query in its worker",
        "airlock is its own Git driver, so a Git query's worker runs all of airlock's code instead of the Git \
         reader's alone",
    )
}

/// Whether airlock's own program `name` is beside it (the check says what
/// it `does`), or airlock does its job (`without` says what that costs).
fn own_program_report(name: &str, does: &str, without: &str) -> Value {
    match airlock_runtime::own_program::beside_or_self(name) {
        Ok(path) if path.file_name().is_some_and(|n| n == name) => check(true, format!("{} {does}", path.display())),
        Ok(path) => {
            check(false, format!("no {name} beside {}: {without}; install it from the same build", path.display()))
        }
        Err(e) => check(false, format!("cannot find this executable: {e}")),
    }
}

/// Which enforcement a worker started now would get: `memory` and `pids`
/// (`cgroup` or `rlimit`), `ipc` and `memfd` as in an answer's
/// `evidence.limits`, whether a cgroup is required, and why none is used.
fn limits_report(config: &Config) -> Value {
    let delegated = airlock_sandbox::cgroup_delegation(config.cgroup_parent.as_deref());
    let (memory, pids) = match &delegated {
        Ok(d) => (d.memory, d.pids),
        Err(_) => (false, false),
    };
    let by = |cgroup: bool| if cgroup { "cgroup" } else { "rlimit" };
    let detail = match &delegated {
        Ok(d) if memory && pids => {
            format!("each worker gets a cgroup under {} (memory.max, pids.max)", d.dir.display())
        }
        Ok(d) => format!(
            "{} delegates only {}; the rest falls back to rlimits",
            d.dir.display(),
            if memory { "memory" } else { "pids" }
        ),
        Err(why) => format!(
            "{why}: memory is bounded per process (RLIMIT_AS: memfd contents, pipe and socket buffers are not \
             counted) and processes per user (RLIMIT_NPROC)"
        ),
    };
    json!({
        "memory": by(memory),
        "pids": by(pids),
        "ipc": airlock_sandbox::IPC_ENFORCEMENT,
        "memfd": if memory { "cgroup" } else { "file-size" },
        "require_cgroup": config.require_cgroup,
        "detail": detail,
    })
}

/// `doctor` for people: the configuration in use, each host check, each
/// tier, the limits, the approvers, and the verdict.
pub fn text(envelope: &Envelope) -> String {
    let c = envelope.content.as_ref().unwrap_or(&Value::Null);
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let mut out = format!(
        "configuration: {} ({}: {})\nstate dir: {}\n\nhost:\n",
        c["config"]["file"].as_str().unwrap_or("the embedded default"),
        s(&c["config"]["origin"]),
        s(&c["config"]["why"]),
        s(&c["config"]["state_dir"])
    );
    for (name, check) in c["host"].as_object().into_iter().flatten() {
        let mark = if check["ok"] == true { "ok " } else { "no " };
        out.push_str(&format!("  {mark} {name:<18} {}\n", s(&check["detail"])));
    }
    out.push_str("\ntiers:\n");
    for (name, tier) in c["tiers"].as_object().into_iter().flatten() {
        let mark = if tier["ready"] == true { "ok " } else { "no " };
        out.push_str(&format!("  {mark} {name:<18} {}\n", s(&tier["detail"])));
    }
    out.push_str(&format!(
        "\nlimits: memory by {}, processes by {}; {}\n",
        s(&c["limits"]["memory"]),
        s(&c["limits"]["pids"]),
        s(&c["limits"]["detail"])
    ));
    // The approval warnings were said on stderr already.
    out.push_str(&format!("approvers pinned: {}\n", c["approval"]["approvers"]));
    out.push_str(&match &envelope.error {
        None => format!("\nthe configured tier ({}) can run here\n", s(&c["configured_tier"])),
        Some(e) => format!("\n{}: {}\n", e.code, e.message),
    });
    out
}

/// What `[sandbox] warm_pool` gives the long-lived commands, `airlock run`
/// and Git queries here.
fn warm_report(config: &Config, cgroups_delegated: bool) -> Value {
    let n = config.warm_pool;
    if n == 0 {
        return check(true, "off ([sandbox] warm_pool = 0): every native call builds its sandbox after preparing");
    }
    let own_cgroups = config.require_cgroup || cgroups_delegated;
    let (cold, run) = if own_cgroups {
        (
            "; calls that get a cgroup of their own (delegated here) start cold",
            "airlock run and Git queries build their sandbox after preparing (workers get cgroups of their own here)",
        )
    } else {
        ("", "airlock run and Git queries build their sandbox while they prepare the call")
    };
    check(
        true,
        format!(
            "airlock mcp and a native airlock worker keep {n} single-use sandboxes built ahead of their calls{cold}; \
             {run}"
        ),
    )
}
