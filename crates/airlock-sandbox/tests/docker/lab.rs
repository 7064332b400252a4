//! The Docker daemon and image the tests use, made once per test process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use airlock_sandbox::docker::{self, DockerSettings};
use airlock_sandbox::{DockerTier, Tier, Worker, WorkerOutcome, WorkerSpec};

/// The image tag the tests build (or find up to date).
const IMAGE: &str = "airlock-test-base:1";

/// A daemon that answers and has the test image.
pub struct Lab {
    pub socket: PathBuf,
    pub image: String,
    /// Why `runsc` is not usable through this daemon, if it is not.
    pub runsc_missing: Option<String>,
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

fn required() -> bool {
    std::env::var("AIRLOCK_TEST_DOCKER_REQUIRED").is_ok_and(|v| v == "1")
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn set_up() -> Result<Lab, String> {
    let socket = match std::env::var_os("AIRLOCK_TEST_DOCKER_SOCKET") {
        Some(s) => PathBuf::from(s),
        None => {
            if !super::util::is_root() {
                return Err("not root: cannot start a private dockerd (set AIRLOCK_TEST_DOCKER_SOCKET)".into());
            }
            if super::util::which("dockerd").is_none() {
                return Err("dockerd is not installed (apt-get install docker.io)".into());
            }
            let dir = std::env::temp_dir().join(format!("airlock-dockerd-test-{}", std::process::id()));
            let script = scripts().join("dockerd-lab.sh");
            PathBuf::from(run(Command::new(script).arg("start").arg(&dir).arg(std::process::id().to_string()))?)
        }
    };
    let image = match std::env::var("AIRLOCK_TEST_DOCKER_IMAGE") {
        Ok(i) => i,
        Err(_) => {
            run(Command::new(scripts().join("docker-image.sh")).arg(&socket).arg(IMAGE))?;
            IMAGE.to_string()
        }
    };
    let settings =
        DockerSettings { socket: socket.clone(), image: image.clone(), runtime: None, state_dir: "/".into() };
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let report = docker::probe(&DockerSettings { state_dir: state.path().join("docker"), ..settings.clone() });
    if !report.ready {
        return Err(format!("the docker tier is not ready: {report:?}"));
    }
    let runsc = docker::probe(&DockerSettings {
        runtime: Some("runsc".into()),
        state_dir: state.path().join("docker"),
        ..settings
    });
    Ok(Lab { socket, image, runsc_missing: (!runsc.ready).then(|| format!("{:?}", runsc.why)) })
}

/// The lab, or `None` after a loud SKIP naming `test` and why (a panic
/// when Docker is required).
pub fn lab(test: &str) -> Option<&'static Lab> {
    static LAB: OnceLock<Result<Lab, String>> = OnceLock::new();
    match LAB.get_or_init(set_up) {
        Ok(lab) => Some(lab),
        Err(why) => {
            skip(test, why);
            None
        }
    }
}

/// Says loudly that `test` did not run and why — straight to the process's
/// stderr, past the test harness's capture — or fails it where Docker is
/// required (`AIRLOCK_TEST_DOCKER_REQUIRED=1`).
pub fn skip(test: &str, why: &str) {
    if required() {
        panic!("the Docker tier is required here (AIRLOCK_TEST_DOCKER_REQUIRED=1): {why}");
    }
    let line = format!("\n*** SKIPPED docker::{test}: {why} ***\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// A tier on the lab with its own state directory (kept alive by the
/// returned guard).
pub struct Tiered {
    pub tier: DockerTier,
    pub state: tempfile::TempDir,
}

impl Lab {
    pub fn settings(&self, state: &Path, runtime: Option<&str>) -> DockerSettings {
        DockerSettings {
            socket: self.socket.clone(),
            image: self.image.clone(),
            runtime: runtime.map(str::to_string),
            state_dir: state.join("tiers/docker"),
        }
    }

    pub fn tier(&self, runtime: Option<&str>) -> Tiered {
        let state = tempfile::tempdir().unwrap();
        Tiered { tier: DockerTier::new(self.settings(state.path(), runtime)), state }
    }

    /// Runs `spec` on the default runtime; panics on an error.
    pub fn run(&self, spec: WorkerSpec) -> WorkerOutcome {
        run_on(&self.tier(None), spec)
    }
}

/// Runs `spec` on `t`; panics on an error. Afterwards the call directory
/// is gone.
pub fn run_on(t: &Tiered, spec: WorkerSpec) -> WorkerOutcome {
    let argv = spec.argv.clone();
    let o = match t.tier.start(spec).and_then(|w| w.wait()) {
        Ok(o) => o,
        Err(e) => panic!("{argv:?} failed to run: {e} ({})", e.kind()),
    };
    let dir = t.tier.settings().state_dir.clone();
    let left: Vec<_> = std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "call directories left in {}: {left:?}", dir.display());
    o
}

/// A call id unique to this process.
pub fn call_id(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("t-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// Containers the daemon has that carry `call`'s label.
pub fn containers_of(settings: &DockerSettings, call: &str) -> Vec<String> {
    docker::leftovers(settings)
        .unwrap()
        .into_iter()
        .filter(|l| !l.id.starts_with('/') && l.call_id.as_deref() == Some(call))
        .map(|l| l.id)
        .collect()
}
