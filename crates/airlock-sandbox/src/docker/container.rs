//! The container a call runs in, as the create request the engine gets:
//! every confinement the tier promises is a field set here.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountType, ResourcesUlimits,
};

use super::{state_label, DockerSettings, LABEL_CALL, LABEL_MANAGED, LABEL_STATE};
use crate::call_dir::WORKER_ID;
use crate::spec::WorkerSpec;

/// Size of the root-owned tmpfs at the working directory: it holds only the
/// mount points of the call's files (and their directories).
const WORKDIR_TMPFS_BYTES: u64 = 1 << 20;

/// One host file bound into the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bind {
    /// The private copy (or output file) in the call directory.
    pub host: PathBuf,
    /// The path relative to the working directory.
    pub virtual_path: String,
    /// Read-only (inputs) or read-write (the output).
    pub read_only: bool,
}

/// The create request for `spec`'s call named `call`, with `binds` from its
/// call directory; with `tty`, the container gets a terminal and an open
/// stdin (a session's worker), else its stdout and stderr are attached.
pub(crate) fn create_body(
    settings: &DockerSettings,
    spec: &WorkerSpec,
    call: &str,
    binds: &[Bind],
    tty: bool,
) -> ContainerCreateBody {
    let env = crate::worker_exec::worker_env(&spec.env, false).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut ulimits = vec![ulimit("fsize", spec.limits.file_size, spec.limits.file_size), ulimit("core", 0, 0)];
    if let Some(n) = spec.limits.open_files {
        ulimits.push(ulimit("nofile", n, n));
    }
    // As in the native tier: RLIMIT_NPROC as well as the cgroup's pids limit
    // (and an explicit value keeps Podman from raising it past what the
    // host allows).
    if let Some(n) = spec.limits.pids {
        ulimits.push(ulimit("nproc", n, n));
    }
    if let Some(s) = spec.limits.cpu_seconds {
        ulimits.push(ulimit("cpu", s, s.saturating_add(1)));
    }
    let tmpfs = HashMap::from([
        ("/tmp".to_string(), format!("rw,nosuid,nodev,noexec,size={},mode=1777", spec.limits.scratch_bytes.max(4096))),
        (spec.working_dir.clone(), format!("ro,nosuid,nodev,noexec,size={WORKDIR_TMPFS_BYTES},mode=0755")),
    ]);
    let mounts = binds
        .iter()
        .map(|b| Mount {
            typ: Some(MountType::BIND),
            source: Some(b.host.display().to_string()),
            target: Some(format!("{}/{}", spec.working_dir, b.virtual_path)),
            read_only: Some(b.read_only),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                non_recursive: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    // Under a gVisor runtime the container's cgroup also holds the Sentry
    // and the gofer: its bounds get the gVisor tier's margins, and the tool's
    // own are the rlimits the Sentry enforces (nproc above).
    let sentry = settings.runtime.as_deref().is_some_and(|r| r.contains("runsc"));
    let (memory_margin, task_margin) =
        if sentry { (crate::gvisor::SENTRY_MEMORY_MARGIN, crate::gvisor::SENTRY_TASK_MARGIN) } else { (0, 0) };
    let memory = spec.limits.memory_bytes.map(|m| clamp(m.saturating_add(memory_margin)));
    let host_config = HostConfig {
        network_mode: Some("none".into()),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        privileged: Some(false),
        pids_limit: spec.limits.pids.map(|n| clamp(n.saturating_add(task_margin))),
        memory,
        // No swap: the memory limit is the limit.
        memory_swap: memory,
        ulimits: Some(ulimits),
        tmpfs: Some(tmpfs),
        mounts: Some(mounts),
        runtime: settings.runtime.clone(),
        // Nothing the tool prints is kept by the daemon; the tier reads it
        // live through attach, within its bounds.
        log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
        auto_remove: Some(false),
        // A session's program gets its hangup (SIGHUP through the engine,
        // `terminal.rs`) from the engine's init (tini, catatonit): as the
        // container's PID 1 it would ignore a signal it has no handler for.
        init: Some(tty),
        ipc_mode: Some("private".into()),
        // The daemon writes /etc/resolv.conf even without a network: keep
        // the host's resolvers and search domains out of it.
        dns: Some(vec!["127.0.0.1".into()]),
        dns_search: Some(vec![".".into()]),
        dns_options: Some(Vec::new()),
        shm_size: Some(64 << 10),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(settings.image.clone()),
        entrypoint: Some(spec.argv.clone()),
        cmd: Some(Vec::new()),
        env: Some(env),
        working_dir: Some(spec.working_dir.clone()),
        user: Some(format!("{WORKER_ID}:{WORKER_ID}")),
        hostname: Some("airlock".into()),
        network_disabled: Some(true),
        attach_stdin: Some(tty),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(tty),
        tty: Some(tty),
        labels: Some(HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            (LABEL_CALL.to_string(), call.to_string()),
            (LABEL_STATE.to_string(), state_label(settings)),
        ])),
        host_config: Some(host_config),
        ..Default::default()
    }
}

fn ulimit(name: &str, soft: u64, hard: u64) -> ResourcesUlimits {
    ResourcesUlimits { name: Some(name.into()), soft: Some(clamp(soft)), hard: Some(clamp(hard)) }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> DockerSettings {
        DockerSettings {
            socket: "/run/docker.sock".into(),
            image: "airlock-base:1".into(),
            runtime: Some("runsc".into()),
            state_dir: "/var/lib/airlock/tiers/docker".into(),
        }
    }

    #[test]
    fn the_request_confines_the_worker() {
        let mut spec = WorkerSpec::new(["wc", "-c", "in.txt"]);
        spec.limits.file_size = 4096;
        spec.limits.cpu_seconds = Some(5);
        let binds = [
            Bind { host: "/s/c/in-0".into(), virtual_path: "in.txt".into(), read_only: true },
            Bind { host: "/s/c/out".into(), virtual_path: "out/o.txt".into(), read_only: false },
        ];
        let body = create_body(&settings(), &spec, "inv-1", &binds, false);
        let hc = body.host_config.as_ref().unwrap();
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        assert_eq!(body.entrypoint.as_deref(), Some(&spec.argv[..]));
        assert!(body.env.as_ref().unwrap().contains(&"PATH=/usr/local/bin:/usr/bin:/bin".to_string()));
        assert_eq!(body.labels.as_ref().unwrap()[LABEL_CALL], "inv-1");
        assert_eq!(hc.network_mode.as_deref(), Some("none"));
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(hc.security_opt.as_deref(), Some(&["no-new-privileges".to_string()][..]));
        assert_eq!(hc.runtime.as_deref(), Some("runsc"));
        assert_eq!(hc.memory, hc.memory_swap);
        let ulimits = hc.ulimits.as_ref().unwrap();
        let fsize = ulimits.iter().find(|u| u.name.as_deref() == Some("fsize")).unwrap();
        assert_eq!((fsize.soft, fsize.hard), (Some(4096), Some(4096)));
        assert!(ulimits.iter().any(|u| u.name.as_deref() == Some("cpu") && u.hard == Some(6)));
        let tmpfs = hc.tmpfs.as_ref().unwrap();
        assert!(tmpfs["/tmp"].contains("size=67108864"));
        assert!(tmpfs["/workspace"].starts_with("ro,"));
        // Exactly the two binds, at their virtual paths, inputs read-only.
        let mounts = hc.mounts.as_ref().unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].target.as_deref(), Some("/workspace/in.txt"));
        assert_eq!((mounts[0].read_only, mounts[1].read_only), (Some(true), Some(false)));
        assert!(hc.binds.is_none());
    }
}
