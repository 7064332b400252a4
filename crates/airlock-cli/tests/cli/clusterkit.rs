//! A cluster for tests: a real `nats-server` with JetStream on a free
//! loopback port, and `airlock worker` processes of the shipping binary,
//! each with a state directory (and so a key) of its own.

use crate::runkit::wait_until;
use crate::util::{Project, AIRLOCK};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `nats-server -js` that is killed when dropped.
pub struct Nats {
    child: Child,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Nats {
    /// SIGKILLs the server.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running NATS server, or `None` (said loudly) where `nats-server` is
/// not installed and `AIRLOCK_TEST_NATS_REQUIRED` is not set (CI sets it).
pub fn nats() -> Option<Nats> {
    nats_with("")
}

/// [`nats`] with `config` (a nats-server configuration's text, e.g. an
/// `authorization` block) added.
pub fn nats_with(config: &str) -> Option<Nats> {
    let found = Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("AIRLOCK_TEST_NATS_REQUIRED").is_none(),
            "nats-server is required here (AIRLOCK_TEST_NATS_REQUIRED) and not installed"
        );
        eprintln!("SKIPPED: nats-server is not installed (apt-get install nats-server)");
        return None;
    }
    let dir = tempfile::Builder::new().prefix("airlock-nats-").tempdir().unwrap();
    let port = free_port();
    let file = dir.path().join("nats.conf");
    std::fs::write(&file, config).unwrap();
    let child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-c"])
        .arg(&file)
        .arg("-sd")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let up = wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(up, "nats-server did not listen on {port}");
    Some(Nats { child, url: format!("nats://127.0.0.1:{port}"), _dir: dir })
}

/// The usual project with `[cluster]` pointing at `url` (`extra`: more of
/// that section's lines); nothing is done on the cluster yet.
pub fn cluster_project(url: &str, extra: &str) -> Project {
    Project::with_config(&format!(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n\
         [cluster]\nnats = \"{url}\"\n{extra}"
    ))
}

/// An edge project: [`cluster_project`] with a 2 s ack wait, the cluster
/// initialized with its key as an edge's.
pub fn edge(url: &str, extra: &str) -> Project {
    let p = cluster_project(url, &format!("ack_wait_seconds = 2\n{extra}"));
    p.run(&["cluster", "init"]).assert_ok();
    p
}

/// An `airlock worker` process (killed when dropped) with its own state
/// directory; its stderr is kept in a file.
pub struct Worker {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The lab host's network namespace it runs in (`None`: this one).
    netns: Option<String>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Worker {
    /// Starts a worker of `url` and waits until it serves. With `pin`, its
    /// key is pinned through `edge` first (its key exists once it has run
    /// once, so it is made by `airlock journal show`).
    pub fn start(url: &str, edge: Option<&Project>) -> Worker {
        Worker::start_with(url, edge, "", &[])
    }

    /// [`Worker::start`] with `extra` lines in its `[cluster]` and `files`
    /// (name, content, mode) written in its directory first.
    pub fn start_with(url: &str, edge: Option<&Project>, extra: &str, files: &[(&str, &str, u32)]) -> Worker {
        let pin = |key: &str| {
            if let Some(edge) = edge {
                edge.run(&["cluster", "trust", "worker", key]).assert_ok();
            }
        };
        Worker::launch(url, None, extra, files, pin)
    }

    /// A worker on `host` of `lab`; `pin` is given its key before it serves.
    pub fn start_on(lab: &crate::netlab::Lab, host: &str, url: &str, pin: impl FnOnce(&str)) -> Worker {
        Worker::launch(url, Some(lab.ns(host)), "", &[], pin)
    }

    fn launch(
        url: &str,
        netns: Option<String>,
        extra: &str,
        files: &[(&str, &str, u32)],
        pin: impl FnOnce(&str),
    ) -> Worker {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new().prefix("airlock-worker-").tempdir().unwrap();
        for (name, content, mode) in files {
            let path = dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        std::fs::write(
            dir.path().join("airlock.toml"),
            format!("state_dir = \".airlock\"\n[cluster]\nnats = \"{url}\"\nack_wait_seconds = 2\n{extra}"),
        )
        .unwrap();
        let mut w = Worker { child: None, dir, netns };
        // The state directory and its key, before the worker serves.
        let made = w.command(&["journal", "show", "--json"]).output().unwrap();
        assert!(made.status.success(), "{made:?}");
        pin(&w.public_key());
        let log = std::fs::File::create(w.log_path()).unwrap();
        w.child = Some(w.command(&["worker"]).stdout(Stdio::null()).stderr(log).spawn().unwrap());
        assert!(
            wait_until(Duration::from_secs(10), || w.log().contains("serving")),
            "worker did not serve: {}",
            w.log()
        );
        w
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = crate::netlab::command_in(self.netns.as_deref(), AIRLOCK);
        c.args(args).current_dir(self.dir.path()).env_remove("AIRLOCK_CONFIG").stdin(Stdio::null());
        c
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("worker.log")
    }

    /// Its key's text (`ed25519:<hex>`).
    pub fn public_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(".airlock/journal.pub")).unwrap().trim().to_owned()
    }

    /// Its public key file.
    pub fn public_key_file(&self) -> PathBuf {
        self.dir.path().join(".airlock/journal.pub")
    }

    /// What it has written on stderr so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits until its stderr holds `needle`.
    #[track_caller]
    pub fn wait_for(&self, needle: &str, bound: Duration) {
        assert!(wait_until(bound, || self.log().contains(needle)), "worker never said {needle:?}: {}", self.log());
    }

    /// SIGKILLs it (and so its sandbox, which dies with its parent).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` to the worker process alone (not its sandbox).
    pub fn signal(&self, signal: rustix::process::Signal) {
        let c = self.child.as_ref().expect("running");
        rustix::process::kill_process(rustix::process::Pid::from_raw(c.id() as i32).unwrap(), signal).unwrap();
    }

    /// Sends SIGTERM and waits for it to exit; its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The `WorkerFinished` record of invocation `id` at the edge.
pub fn worker_finished(edge: &Project, id: &str) -> serde_json::Value {
    edge.journal_records(id).into_iter().find(|r| r["kind"] == "WorkerFinished").expect("WorkerFinished")
}

/// Three `nats-server` nodes in one JetStream cluster (each killed when
/// dropped), each with a monitoring port: on loopback ([`nats3`]) or on
/// three hosts of a lab ([`nats3_in`]).
pub struct Nats3 {
    nodes: Vec<Option<Child>>,
    /// Where each node's monitoring port is: address, port, namespace.
    monitors: Vec<(String, u16, Option<String>)>,
    /// The three client URLs, comma-separated.
    pub urls: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nats3 {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Where one node runs: its address, its client, route and monitoring
/// ports, and its network namespace (`None`: this one).
struct Place {
    addr: String,
    client: u16,
    route: u16,
    monitor: u16,
    netns: Option<String>,
}

/// A running three-node cluster on loopback, or `None` as [`nats`] says.
pub fn nats3() -> Option<Nats3> {
    drop(nats()?);
    let place = |_| Place {
        addr: "127.0.0.1".into(),
        client: free_port(),
        route: free_port(),
        monitor: free_port(),
        netns: None,
    };
    Some(nats3_at((0..3).map(place).collect()))
}

/// A running three-node cluster on the lab's `hosts`, or `None` as
/// [`nats`] says.
pub fn nats3_in(lab: &crate::netlab::Lab, hosts: [&str; 3]) -> Option<Nats3> {
    drop(nats()?);
    let place = |host: &str| Place {
        addr: lab.addr(host),
        client: 4222,
        route: 6222,
        monitor: 8222,
        netns: Some(lab.ns(host)),
    };
    Some(nats3_at(hosts.into_iter().map(place).collect()))
}

fn nats3_at(places: Vec<Place>) -> Nats3 {
    let dir = tempfile::Builder::new().prefix("airlock-nats3-").tempdir().unwrap();
    let mut nodes = Vec::new();
    for (i, at) in places.iter().enumerate() {
        let others: Vec<String> = places
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| format!("\"nats://{}:{}\"", o.addr, o.route))
            .collect();
        let config = format!(
            "server_name: n{i}\nlisten: {a}:{}\nhttp: {a}:{}\n\
             jetstream {{ store_dir: \"{}\" }}\n\
             cluster {{ name: airlock, listen: {a}:{}, routes: [{}] }}\n",
            at.client,
            at.monitor,
            dir.path().join(format!("n{i}")).display(),
            at.route,
            others.join(", "),
            a = at.addr,
        );
        let file = dir.path().join(format!("n{i}.conf"));
        std::fs::write(&file, config).unwrap();
        let mut command = crate::netlab::command_in(at.netns.as_deref(), "nats-server");
        let child = command.arg("-c").arg(&file).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        nodes.push(Some(child.expect("start nats-server")));
    }
    let urls = places.iter().map(|p| format!("nats://{}:{}", p.addr, p.client)).collect::<Vec<_>>().join(",");
    let monitors = places.into_iter().map(|p| (p.addr, p.monitor, p.netns)).collect();
    let cluster = Nats3 { nodes, monitors, urls, _dir: dir };
    // JetStream answers once the nodes have elected a meta leader.
    let ready = wait_until(Duration::from_secs(30), || {
        (0..3).all(|i| cluster.monitor(i, "/jsz").is_some_and(|j| j["meta_cluster"]["leader"].is_string()))
    });
    assert!(ready, "the three nodes elected no JetStream leader");
    cluster
}

impl Nats3 {
    /// `GET path` on node `i`'s monitoring port, as JSON.
    pub fn monitor(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        let (addr, port, netns) = &self.monitors[i];
        let get = || {
            use std::io::Write as _;
            let to = std::net::SocketAddr::new(addr.parse().ok()?, *port);
            let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
            let mut answer = String::new();
            s.read_to_string(&mut answer).ok()?;
            serde_json::from_str(answer.split_once("\r\n\r\n")?.1).ok()
        };
        match netns {
            Some(ns) => crate::netlab::in_netns(ns, get),
            None => get(),
        }
    }

    /// The node (0, 1 or 2) leading `stream`, as a live node reports it.
    pub fn leader_of(&self, stream: &str) -> Option<usize> {
        (0..3).filter(|i| self.nodes[*i].is_some()).find_map(|i| {
            let jsz = self.monitor(i, "/jsz?streams=true")?;
            let accounts = jsz["account_details"].as_array()?;
            let name =
                accounts.iter().flat_map(|a| a["stream_detail"].as_array().into_iter().flatten()).find_map(|s| {
                    (s["name"] == stream).then(|| s["cluster"]["leader"].as_str().map(str::to_owned)).flatten()
                })?;
            name.strip_prefix('n')?.parse().ok()
        })
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `f` on a runtime of its own (the tests' own NATS clients).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}
