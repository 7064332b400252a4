//! Issue 19 rows: tier start-up side by side. The same trivial
//! one-input/one-output call (the copy tool of [`crate::run_rows`]) through
//! `airlock run` on the native, gvisor, docker and docker+runsc tiers, each
//! beside the same `cp` run bare by its runtime: `runsc run` of an OCI
//! bundle, `docker run --rm` (and `--runtime runsc`). The bare sides do the
//! same isolation work (image directories read-only, the input bound
//! read-only, an output file bound read-write, user 65534, no network, no
//! capabilities); airlock additionally snapshots and hashes the input,
//! authorizes, journals and publishes. Target: each tier's p50 at most 1.3×
//! its bare baseline's.
//!
//! Docker: `AIRLOCK_BENCH_DOCKER_SOCKET` names the engine's socket and
//! `AIRLOCK_BENCH_DOCKER_IMAGE` a local image (default `airlock-base:test`);
//! with no socket given, a private daemon is started with
//! `scripts/dockerd-lab.sh` (stopped once this process is gone) and the
//! image is built offline with `scripts/docker-image.sh`.

use crate::harness::{compare, Report, Target};
use crate::run_rows::{check, setup_with};
use oci_spec::runtime::{
    get_default_maskedpaths, get_default_readonly_paths, Capabilities, LinuxBuilder, LinuxCapabilitiesBuilder,
    LinuxNamespaceBuilder, LinuxNamespaceType, Mount, MountBuilder, ProcessBuilder, RootBuilder, SpecBuilder,
    UserBuilder,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The worker's user and group, as every tier runs it.
const WORKER_ID: u32 = 65534;
/// The runsc binary the gvisor tier and its baseline run.
const RUNSC: &str = "/usr/bin/runsc";
/// The tool's command line inside every sandbox (working directory `/workspace`).
const ARGV: [&str; 3] = ["cp", "data/in.txt", "results/out.txt"];
/// The gvisor tier's settings, matched by the bare runsc (this host has ptrace only).
const GVISOR_CONFIG: &str = "[sandbox.gvisor]\nplatform = \"ptrace\"\n";

fn samples(quick: bool) -> usize {
    if quick {
        5
    } else {
        15
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Times `candidate` against `baseline`; an error unless the baseline's
/// output file then holds the input.
fn report(
    name: &'static str,
    quick: bool,
    (input, bare_output): (&Path, &Path),
    candidate: impl FnMut() -> Result<(), String>,
    baseline: impl FnMut() -> Result<(), String>,
    target: f64,
) -> Result<Report, String> {
    let samples = samples(quick);
    let (candidate, baseline) = compare(samples, candidate, baseline)?;
    let copied = std::fs::read(bare_output).map_err(err)?;
    if copied != std::fs::read(input).map_err(err)? {
        return Err(format!("the baseline did not copy the input into {}", bare_output.display()));
    }
    Ok(Report {
        name,
        candidate,
        baseline,
        target: if target.is_finite() { Target::TimeRatioAtMost(target) } else { Target::ForScale },
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}

/// `airlock run --tier gvisor` vs bare `runsc run` of the same `cp`.
pub fn gvisor_vs_runsc(quick: bool) -> Result<Report, String> {
    runsc_row("tier gvisor: airlock run vs bare runsc run", quick, "gvisor", 1.3)
}

/// `airlock run` on the native tier beside bare `runsc run`: reported only
/// (the native tier's target is the bwrap row's).
pub fn native_vs_runsc(quick: bool) -> Result<Report, String> {
    runsc_row("tier native: airlock run vs bare runsc run", quick, "native", f64::INFINITY)
}

fn runsc_row(name: &'static str, quick: bool, tier: &str, target: f64) -> Result<Report, String> {
    let s = setup_with(GVISOR_CONFIG)?;
    let bare = BareRunsc::new(&s.root)?;
    report(name, quick, (&bare.input, &bare.output), || s.airlock_with(&["--tier", tier]), || bare.run_once(), target)
}

/// `airlock run --tier docker` vs `docker run --rm` of the same `cp`.
pub fn docker_vs_docker_run(quick: bool) -> Result<Report, String> {
    docker_row("tier docker: airlock run vs docker run --rm", quick, None)
}

/// `[sandbox.docker] runtime = "runsc"` vs `docker run --rm --runtime runsc`.
pub fn docker_runsc_vs_docker_run(quick: bool) -> Result<Report, String> {
    docker_row("tier docker+runsc: airlock run vs docker run --runtime runsc", quick, Some("runsc"))
}

fn docker_row(name: &'static str, quick: bool, runtime: Option<&str>) -> Result<Report, String> {
    let engine = engine()?;
    if let Some(runtime) = runtime {
        engine.require_runtime(runtime)?;
    }
    let mut config = format!(
        "[sandbox.docker]\nsocket = {:?}\nimage = {:?}\n",
        engine.socket.to_str().ok_or("the Docker socket path is not UTF-8")?,
        engine.image
    );
    if let Some(runtime) = runtime {
        config.push_str(&format!("runtime = {runtime:?}\n"));
    }
    let s = setup_with(&config)?;
    let output = worker_writable_file(&s.root.join("bare/docker-out.txt"))?;
    let input = s.root.join("data/in.txt");
    report(
        name,
        quick,
        (&input, &output),
        || s.airlock_with(&["--tier", "docker"]),
        || engine.run_once(&input, &output, runtime),
        1.3,
    )
}

/// An empty file at `path` the worker's user may write.
fn worker_writable_file(path: &Path) -> Result<PathBuf, String> {
    std::fs::write(path, "").map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(path.to_path_buf())
}

/// One OCI bundle, built once, that `runsc run` starts again and again.
struct BareRunsc {
    input: PathBuf,
    output: PathBuf,
    root: PathBuf,
    bundle: PathBuf,
    counter: AtomicUsize,
}

impl BareRunsc {
    /// The bundle under `project/bare-runsc`, runsc's state under `project/bare-runsc-root`.
    fn new(project: &Path) -> Result<BareRunsc, String> {
        if !Path::new(RUNSC).is_file() {
            return Err(format!(
                "{RUNSC} is not installed, so the gvisor tier is not available (apt-get install runsc)"
            ));
        }
        let bundle = project.join("bare-runsc");
        let root = project.join("bare-runsc-root");
        std::fs::create_dir_all(&root).map_err(err)?;
        let input = project.join("data/in.txt");
        let output = worker_writable_file(&project.join("bare/runsc-out.txt"))?;
        write_bundle(&bundle, &input, &output)?;
        Ok(BareRunsc { input, output, root, bundle, counter: AtomicUsize::new(0) })
    }

    fn run_once(&self) -> Result<(), String> {
        let id = format!("bench-{}-{}", std::process::id(), self.counter.fetch_add(1, Ordering::Relaxed));
        check(
            Command::new(RUNSC)
                .arg("--root")
                .arg(&self.root)
                .args(["--platform=ptrace", "--network=none", "run", "--bundle"])
                .arg(&self.bundle)
                .arg(&id)
                .output(),
            "runsc run",
        )
    }
}

fn mount(destination: &str, typ: &str, source: &Path, options: &[&str]) -> Result<Mount, String> {
    MountBuilder::default()
        .destination(destination)
        .typ(typ)
        .source(source)
        .options(options.iter().map(|o| o.to_string()).collect::<Vec<_>>())
        .build()
        .map_err(err)
}

/// What the gvisor tier's bundle holds for this call: an empty read-only
/// rootfs, `/proc`, an empty `/sys`, a tmpfs `/tmp`, the image directories
/// read-only (their symlinks recreated), `/etc/passwd`/`group` and the
/// loader cache, a read-only tmpfs `/workspace`, the input read-only and the
/// output read-write; user 65534, no capabilities, no new privileges.
fn write_bundle(bundle: &Path, input: &Path, output: &Path) -> Result<(), String> {
    let rootfs = bundle.join("rootfs");
    let inside = |p: &str| rootfs.join(p.trim_start_matches('/'));
    let ro = ["rbind", "ro", "nosuid", "nodev"];
    for dir in ["/proc", "/sys", "/tmp", "/etc", "/dev", "/workspace"] {
        std::fs::create_dir_all(inside(dir)).map_err(err)?;
    }
    let mut mounts = vec![
        mount("/proc", "proc", Path::new("proc"), &["nosuid", "noexec", "nodev"])?,
        mount("/sys", "tmpfs", Path::new("tmpfs"), &["ro", "nosuid", "noexec", "nodev", "size=4096"])?,
        mount("/tmp", "tmpfs", Path::new("tmpfs"), &["nosuid", "nodev", "mode=1777", "size=67108864"])?,
    ];
    for dir in ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"] {
        let Ok(md) = std::fs::symlink_metadata(dir) else { continue };
        if md.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(dir).map_err(err)?, inside(dir)).map_err(err)?;
        } else if md.is_dir() {
            std::fs::create_dir_all(inside(dir)).map_err(err)?;
            mounts.push(mount(dir, "bind", Path::new(dir), &ro)?);
        }
    }
    std::fs::write(
        inside("/etc/passwd"),
        "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\n",
    )
    .map_err(err)?;
    std::fs::write(inside("/etc/group"), "root:x:0:\nnogroup:x:65534:\n").map_err(err)?;
    if Path::new("/etc/ld.so.cache").is_file() {
        std::fs::write(inside("/etc/ld.so.cache"), "").map_err(err)?;
        mounts.push(mount("/etc/ld.so.cache", "bind", Path::new("/etc/ld.so.cache"), &ro)?);
    }
    mounts.push(mount(
        "/workspace",
        "tmpfs",
        Path::new("tmpfs"),
        &["ro", "nosuid", "nodev", "mode=0755", "size=65536"],
    )?);
    mounts.push(mount("/workspace/data/in.txt", "bind", input, &["bind", "ro", "nosuid", "nodev", "noexec"])?);
    mounts.push(mount("/workspace/results/out.txt", "bind", output, &["bind", "rw", "nosuid", "nodev", "noexec"])?);

    let none = Capabilities::new();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(none.clone())
        .effective(none.clone())
        .inheritable(none.clone())
        .permitted(none.clone())
        .ambient(none)
        .build()
        .map_err(err)?;
    let user = UserBuilder::default().uid(WORKER_ID).gid(WORKER_ID).build().map_err(err)?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(user)
        .args(ARGV.iter().map(|a| a.to_string()).collect::<Vec<_>>())
        .env(vec!["PATH=/usr/local/bin:/usr/bin:/bin".to_string()])
        .cwd("/workspace")
        .capabilities(capabilities)
        .no_new_privileges(true)
        .build()
        .map_err(err)?;
    let namespaces = [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ]
    .into_iter()
    .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build().map_err(err))
    .collect::<Result<Vec<_>, _>>()?;
    SpecBuilder::default()
        .version("1.0.2")
        .root(RootBuilder::default().path("rootfs").readonly(true).build().map_err(err)?)
        .hostname("bench")
        .process(process)
        .mounts(mounts)
        .linux(
            LinuxBuilder::default()
                .namespaces(namespaces)
                .masked_paths(get_default_maskedpaths())
                .readonly_paths(get_default_readonly_paths())
                .build()
                .map_err(err)?,
        )
        .build()
        .map_err(err)?
        .save(bundle.join("config.json"))
        .map_err(err)
}

/// A Docker engine and the local image both sides run.
struct Engine {
    socket: PathBuf,
    image: String,
}

/// The engine of this process: the one `AIRLOCK_BENCH_DOCKER_SOCKET` names,
/// or a private lab started (and its image built) on first use.
fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE.get_or_init(Engine::open).as_ref().map_err(|e| format!("the docker tier is not available: {e}"))
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts")
}

impl Engine {
    fn open() -> Result<Engine, String> {
        let image = std::env::var("AIRLOCK_BENCH_DOCKER_IMAGE")
            .ok()
            .filter(|i| !i.is_empty())
            .unwrap_or("airlock-base:test".into());
        let engine = match std::env::var_os("AIRLOCK_BENCH_DOCKER_SOCKET").filter(|s| !s.is_empty()) {
            Some(socket) => Engine { socket: socket.into(), image },
            None => {
                // Kept after this process: the lab's watcher stops the
                // daemon and removes the directory once we are gone.
                let dir = tempfile::Builder::new().prefix("airlock-bench-docker-").tempdir().map_err(err)?.keep();
                let out = Command::new(scripts().join("dockerd-lab.sh"))
                    .arg("start")
                    .arg(&dir)
                    .arg(std::process::id().to_string())
                    .output()
                    .map_err(|e| format!("scripts/dockerd-lab.sh: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "scripts/dockerd-lab.sh start failed (set AIRLOCK_BENCH_DOCKER_SOCKET to use a running engine): {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let socket = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let engine = Engine { socket: socket.into(), image };
                check(
                    Command::new(scripts().join("docker-image.sh")).arg(&engine.socket).arg(&engine.image).output(),
                    "scripts/docker-image.sh",
                )?;
                engine
            }
        };
        check(
            engine.docker().args(["image", "inspect", "--format", "{{.Id}}", &engine.image]).output(),
            "docker image inspect",
        )
        .map_err(|e| {
            format!("{e}(build the image with scripts/docker-image.sh {} {})", engine.socket.display(), engine.image)
        })?;
        Ok(engine)
    }

    /// `docker -H unix://SOCKET`.
    fn docker(&self) -> Command {
        let mut cmd = Command::new("docker");
        cmd.arg("-H").arg(format!("unix://{}", self.socket.display()));
        cmd
    }

    /// An error unless the daemon has `runtime` registered.
    fn require_runtime(&self, runtime: &str) -> Result<(), String> {
        let out = self.docker().args(["info", "--format", "{{json .Runtimes}}"]).output().map_err(err)?;
        let runtimes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if runtimes.get(runtime).is_some() {
            Ok(())
        } else {
            Err(format!(
                "the docker+{runtime} tier is not available: the engine at {} has no {runtime:?} runtime registered",
                self.socket.display()
            ))
        }
    }

    /// `docker run --rm` of the tool with the same confinement as the tier.
    fn run_once(&self, input: &Path, output: &Path, runtime: Option<&str>) -> Result<(), String> {
        let mut cmd = self.docker();
        cmd.args(["run", "--rm", "--network", "none", "--user", "65534:65534", "--read-only", "--cap-drop", "ALL"])
            .args(["--security-opt", "no-new-privileges", "--log-driver", "none", "--workdir", "/workspace"])
            .args(["--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=67108864,mode=1777"])
            .args(["--tmpfs", "/workspace:ro,nosuid,nodev,noexec,size=1048576,mode=0755"])
            .arg("--mount")
            .arg(format!("type=bind,source={},target=/workspace/data/in.txt,readonly", input.display()))
            .arg("--mount")
            .arg(format!("type=bind,source={},target=/workspace/results/out.txt", output.display()));
        if let Some(runtime) = runtime {
            cmd.args(["--runtime", runtime]);
        }
        check(cmd.arg(&self.image).args(ARGV).output(), "docker run --rm")
    }
}
