//! What `airlock doctor` and `staging gc` ask of the Docker tier: is it
//! ready here (and why not, with the fix), and what did a dead airlock
//! leave (containers labelled as airlock's, call directories), and removing
//! one such leftover.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bollard::errors::Error as ApiError;
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};

use super::client::{engine_error, is_not_found, remove_and_confirm, Engine};
use super::{state_label, DockerSettings, DockerTier, LABEL_CALL, LABEL_MANAGED, LABEL_STATE, NAME_PREFIX};
use crate::call_dir::{is_safe_name, remove_call_dir};
use crate::error::SandboxError;
use crate::spec::WorkerSpec;
use crate::tier_report::{Leftover, TierReport};
use crate::worker::{Tier, Worker};

const TIER: &str = "docker";

/// How long the trivial worker of [`probe`] may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// The Docker tier's state here: the socket answers (found, engine version),
/// the configured runtime is registered (platform), the image exists locally
/// (never pulled), and a trivial `true` worker starts, runs and is removed
/// (ready); otherwise why not, with the fix.
pub fn probe(settings: &DockerSettings) -> TierReport {
    let engine = match Engine::connect(&settings.socket) {
        Ok(e) => e,
        Err(e) => return TierReport::not_ready(TIER, e.to_string()),
    };
    let mut report = TierReport { tier: TIER.into(), ..TierReport::default() };
    let facts = engine.block_on(async {
        let version = engine.api.version().await?;
        let info = engine.api.info().await?;
        let image = engine.api.inspect_image(&settings.image).await;
        Ok::<_, bollard::errors::Error>((version, info, image))
    });
    let (version, info, image) = match facts {
        Ok(f) => f,
        Err(e) => {
            report.why = Some(format!(
                "the Docker daemon at {} does not answer: {}; start dockerd (e.g. scripts/dockerd-lab.sh start DIR) \
                 or set [sandbox.docker] socket",
                settings.socket.display(),
                engine_error("GET /version", e)
            ));
            return report;
        }
    };
    report.found = true;
    report.version = Some(format!(
        "{} (API {})",
        version.version.as_deref().unwrap_or("unknown"),
        version.api_version.as_deref().unwrap_or("unknown")
    ));
    let runtimes = info.runtimes.unwrap_or_default();
    let runtime = settings.runtime.clone().or(info.default_runtime).unwrap_or_else(|| "runc".into());
    let Some(registered) = runtimes.get(&runtime) else {
        report.why = Some(format!(
            "the Docker daemon has no runtime {runtime:?} (it has: {}): register it in daemon.json \
             (\"runtimes\": {{\"{runtime}\": {{\"path\": \"/usr/bin/{runtime}\"}}}}) and restart dockerd",
            names(&runtimes)
        ));
        return report;
    };
    let args = registered.runtime_args.clone().unwrap_or_default();
    // The tier sizes the container's cgroup for gVisor's Sentry only when it
    // is told the runtime (an engine's default is not asked per call: Podman
    // answers `GET /info` in about 400 ms).
    if settings.runtime.is_none() && runtime.contains("runsc") {
        report.why = Some(format!(
            "the engine's default runtime is {runtime:?}: name it with [sandbox.docker] runtime = \"{runtime}\", so \
             that the container's pids and memory bounds leave room for gVisor's Sentry"
        ));
        return report;
    }
    report.platform = Some(if args.is_empty() { runtime } else { format!("{runtime} {}", args.join(" ")) });
    match image {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {
            report.why = Some(format!(
                "the image {:?} does not exist in this daemon (airlock never pulls): make it offline with \
                 `scripts/docker-image.sh {} {}` or `docker import`, or set [sandbox.docker] image",
                settings.image,
                settings.socket.display(),
                settings.image
            ));
            return report;
        }
        Err(e) => {
            report.why = Some(engine_error(&format!("GET /images/{}/json", settings.image), e).to_string());
            return report;
        }
    }
    match trivial_worker(settings) {
        Ok(()) => report.ready = true,
        Err(why) => report.why = Some(format!("a trivial worker (`true`) did not run: {why}")),
    }
    report
}

fn names(runtimes: &HashMap<String, bollard::models::Runtime>) -> String {
    let mut n: Vec<&str> = runtimes.keys().map(String::as_str).collect();
    n.sort_unstable();
    n.join(", ")
}

/// Runs `true` with no files and checks it exited 0 and was removed.
fn trivial_worker(settings: &DockerSettings) -> Result<(), String> {
    let mut spec = WorkerSpec::new(["true"]);
    spec.timeout = PROBE_TIMEOUT;
    let outcome = DockerTier::new(settings.clone()).start(spec).and_then(|w| w.wait()).map_err(|e| e.to_string())?;
    if !outcome.exit.success() {
        return Err(format!("it ended {:?}: {}", outcome.exit, String::from_utf8_lossy(&outcome.stderr).trim()));
    }
    if !outcome.cleanup_confirmed {
        return Err("its container's removal was not confirmed".into());
    }
    Ok(())
}

/// What airlock's Docker workers left on this host: every container that
/// carries airlock's label (running or not; [`Leftover::id`] is the
/// container id, [`Leftover::call_id`] its call), and every call directory
/// under [`DockerSettings::state_dir`] ([`Leftover::id`] is its absolute
/// path). Which of them belong to calls that are over is the caller's
/// decision.
pub fn leftovers(settings: &DockerSettings) -> Result<Vec<Leftover>, SandboxError> {
    let mut found = Vec::new();
    match std::fs::read_dir(&settings.state_dir) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().is_ok_and(|t| t.is_dir()) && is_safe_name(&name) {
                    found.push(Leftover { id: entry.path().display().to_string(), call_id: Some(name) });
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(SandboxError::Unavailable(format!("cannot list {}: {e}", settings.state_dir.display())));
        }
    }
    let engine = Engine::connect(&settings.socket)?;
    let opts = ListContainersOptions {
        all: true,
        // Only this state directory's: other airlock processes share the engine.
        filters: Some(HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_MANAGED}=1"), format!("{LABEL_STATE}={}", state_label(settings))],
        )])),
        ..Default::default()
    };
    let containers = match engine.block_on(engine.api.list_containers(Some(opts))) {
        Ok(list) => list
            .into_iter()
            .filter_map(|c| Some(Leftover { id: c.id?, call_id: c.labels.and_then(|mut l| l.remove(LABEL_CALL)) }))
            .collect(),
        // Podman lists states Docker's API does not have (`stopped`), which
        // the client cannot read: find the containers by name instead, one
        // for each call directory (a container never outlives its directory).
        Err(ApiError::JsonDataError { .. }) => {
            let calls: Vec<String> = found.iter().filter_map(|l| l.call_id.clone()).collect();
            by_name(&engine, settings, &calls)?
        }
        Err(e) => return Err(engine_error("GET /containers/json?all=1", e)),
    };
    found.splice(0..0, containers);
    Ok(found)
}

/// The containers named after `calls` that exist; one whose description
/// the client cannot read is given by its name.
fn by_name(engine: &Engine, settings: &DockerSettings, calls: &[String]) -> Result<Vec<Leftover>, SandboxError> {
    let mut found = Vec::new();
    for call in calls {
        let name = super::container_name(settings, call);
        match engine.block_on(engine.api.inspect_container(&name, None::<InspectContainerOptions>)) {
            Ok(info) => found.push(Leftover { id: info.id.unwrap_or(name), call_id: Some(call.clone()) }),
            Err(e) if is_not_found(&e) => {}
            Err(ApiError::JsonDataError { .. }) => found.push(Leftover { id: name, call_id: Some(call.clone()) }),
            Err(e) => return Err(engine_error(&format!("GET /containers/{name}/json"), e)),
        }
    }
    Ok(found)
}

/// Removes one leftover from [`leftovers`]: a container is force-removed
/// and its removal confirmed, then its call directory is removed; a call
/// directory (an absolute path directly under the state dir) is removed.
pub fn reap(settings: &DockerSettings, leftover: &Leftover) -> Result<(), SandboxError> {
    if leftover.id.starts_with('/') {
        let path = Path::new(&leftover.id);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.parent() != Some(settings.state_dir.as_path()) || !is_safe_name(name) {
            return Err(SandboxError::InvalidSpec(format!(
                "{} is not a call directory of the docker tier (under {})",
                leftover.id,
                settings.state_dir.display()
            )));
        }
        return remove_call_dir(path);
    }
    let named = leftover.id.strip_prefix(NAME_PREFIX).is_some_and(is_safe_name);
    if !named && (leftover.id.is_empty() || !leftover.id.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(SandboxError::InvalidSpec(format!("{:?} is not a container id", leftover.id)));
    }
    let engine = Engine::connect(&settings.socket)?;
    let ours = match engine.block_on(engine.api.inspect_container(&leftover.id, None::<InspectContainerOptions>)) {
        Ok(info) => info.config.and_then(|c| c.labels).is_some_and(|l| {
            l.get(LABEL_MANAGED).is_some_and(|v| v == "1")
                && l.get(LABEL_STATE).is_some_and(|v| *v == state_label(settings))
        }),
        Err(e) if is_not_found(&e) => true,
        // Named by this tier, described in states the client cannot read (Podman).
        Err(ApiError::JsonDataError { .. }) if named => true,
        Err(e) => return Err(engine_error(&format!("GET /containers/{}/json", leftover.id), e)),
    };
    if !ours {
        return Err(SandboxError::InvalidSpec(format!(
            "container {} does not carry airlock's labels {LABEL_MANAGED}=1 and {LABEL_STATE} of this state \
             directory: not removed",
            leftover.id
        )));
    }
    if !engine.block_on(remove_and_confirm(&engine.api, &leftover.id))? {
        return Err(SandboxError::ContainerEngine {
            call: format!("DELETE /containers/{}?force=1", leftover.id),
            message: "the container still exists after removal".into(),
        });
    }
    match &leftover.call_id {
        Some(call) if is_safe_name(call) => remove_call_dir(&settings.state_dir.join(call)),
        _ => Ok(()),
    }
}
