//! A minimal HTTP/1.1 client for `airlock mcp --http` and `--unix`: one
//! request a connection (`Connection: close`), written by hand so a test
//! can send exactly the headers an attacker would; chunked answers are
//! decoded and server-sent events read for their JSON-RPC message.

use crate::util::{Project, AIRLOCK};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where requests go.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A loopback `IP:PORT`.
    Tcp(String),
    /// A Unix socket; `as_nobody` connects from a child run as uid 65534.
    Unix { path: PathBuf, as_nobody: bool },
}

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The header block, lower-cased names.
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    /// The body as JSON, or, for an event stream, the last event's JSON.
    pub fn json(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if let Ok(v) = serde_json::from_str(&text) {
            return v;
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .next_back()
            .unwrap_or_else(|| panic!("no JSON in the answer: {self}"))
    }

    /// The reason code of a refusal answered by the gate.
    pub fn reason(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or("").to_owned()
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}\n{}\n{}", self.status, self.head, String::from_utf8_lossy(&self.body))
    }
}

impl Endpoint {
    /// Sends `METHOD PATH` with `headers` and `body`; `Host`,
    /// `Content-Length` and `Connection: close` are added.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        parse(&self.exchange(&bytes))
    }

    /// Writes `bytes` and reads until the server closes.
    pub fn exchange(&self, bytes: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        match self {
            Endpoint::Tcp(addr) => {
                let mut s = std::net::TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.write_all(bytes).expect("send");
                let _ = s.read_to_end(&mut got);
            }
            Endpoint::Unix { path, as_nobody: false } => {
                let mut s = std::os::unix::net::UnixStream::connect(path).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.write_all(bytes).expect("send");
                let _ = s.read_to_end(&mut got);
            }
            Endpoint::Unix { path, as_nobody: true } => {
                let out = nobody_exchange(path, bytes);
                assert!(out.starts_with(b"HTTP/"), "uid 65534 got no answer: {}", String::from_utf8_lossy(&out));
                got = out;
            }
        }
        got
    }
}

/// Connects to `path` as uid 65534 (python3 under `setpriv`), sends `bytes`
/// and returns what came back, or `CONNECT-ERRNO n` when connecting failed.
pub fn nobody_exchange(path: &Path, bytes: &[u8]) -> Vec<u8> {
    const CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
try:
    s.connect(sys.argv[1])
except OSError as e:
    sys.stdout.write("CONNECT-ERRNO %d" % e.errno)
    sys.exit(0)
s.sendall(sys.stdin.buffer.read())
while True:
    d = s.recv(65536)
    if not d:
        break
    sys.stdout.buffer.write(d)
"#;
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c", CLIENT])
        .arg(path)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("setpriv python3");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    child.wait_with_output().unwrap().stdout
}

fn parse(raw: &[u8]) -> Answer {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| {
        panic!("no HTTP answer: {:?}", String::from_utf8_lossy(raw));
    });
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("status code");
    let rest = &raw[split + 4..];
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked { dechunk(rest) } else { rest.to_vec() };
    Answer { status, head, body }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            body.extend_from_slice(&rest[..size.min(rest.len())]);
            break;
        }
        body.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
    body
}

/// The headers every MCP POST carries.
pub const MCP_POST: [(&str, &str); 2] =
    [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];

/// The body of an `initialize` request.
pub fn initialize_body() -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "airlock-tests", "version": "1"}}})
    .to_string()
    .into_bytes()
}

/// An MCP session over raw HTTP, sending `extra` headers on every request.
pub struct HttpSession {
    pub endpoint: Endpoint,
    pub extra: Vec<(String, String)>,
    pub session: Option<String>,
    next_id: u64,
}

impl HttpSession {
    pub fn new(endpoint: Endpoint, extra: &[(&str, &str)]) -> HttpSession {
        let extra = extra.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        HttpSession { endpoint, extra, session: None, next_id: 2 }
    }

    fn post(&self, body: &[u8]) -> Answer {
        let mut headers: Vec<(&str, &str)> = MCP_POST.to_vec();
        headers.extend(self.extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        if let Some(id) = &self.session {
            headers.push(("Mcp-Session-Id", id));
            headers.push(("MCP-Protocol-Version", "2025-06-18"));
        }
        self.endpoint.send("POST", "/mcp", &headers, body)
    }

    /// `initialize`, then `notifications/initialized`; returns the
    /// `initialize` answer (the session is kept only when it is a 200).
    pub fn initialize(&mut self) -> Answer {
        let answer = self.post(&initialize_body());
        if answer.status == 200 {
            self.session = Some(answer.header("mcp-session-id").expect("a session id"));
            let note =
                self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string().as_bytes());
            assert_eq!(note.status, 202, "{note}");
        }
        answer
    }

    /// One request in the session.
    pub fn request(&mut self, method: &str, params: Value) -> Answer {
        let id = self.next_id;
        self.next_id += 1;
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string().as_bytes())
    }

    /// `tools/call` and its result (panics unless HTTP 200 with a result).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_eq!(answer.status, 200, "{answer}");
        let v = answer.json();
        assert!(v.get("result").is_some(), "tools/call {tool}: {v}");
        v["result"].clone()
    }
}

/// A running `airlock mcp` with an HTTP front; killed when dropped.
pub struct Server {
    pub child: Child,
    /// `IP:PORT` (`--http`) or the socket path (`--unix`).
    pub address: String,
    /// The token file (`--http` only).
    pub token_file: Option<PathBuf>,
    /// Everything it printed on stderr before listening.
    pub stderr: String,
}

impl Server {
    /// Starts `airlock mcp ARGS…` in `p` and waits until it listens, or
    /// returns what it printed when it exits first.
    // The child is waited for on every path: here when it exits early,
    // else by `Server`'s `Drop` or `stop`.
    #[allow(clippy::zombie_processes)]
    pub fn start(p: &Project, args: &[&str]) -> Result<Server, String> {
        let mut child = Command::new(AIRLOCK)
            .arg("mcp")
            .args(args)
            .current_dir(p.root())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut stderr = String::new();
        let mut token_file = None;
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let out = child.wait_with_output().unwrap();
                return Err(format!("{stderr}\nstdout: {}", String::from_utf8_lossy(&out.stdout)));
            }
            stderr.push_str(&line);
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("airlock mcp: bearer token ") {
                let path = rest.split_once(" at ").unwrap().1.split("; send").next().unwrap();
                token_file = Some(PathBuf::from(path));
            }
            let address = line
                .strip_prefix("airlock mcp: listening on http://")
                .map(|a| a.trim_end_matches("/mcp").to_owned())
                .or_else(|| {
                    line.strip_prefix("airlock mcp: listening on unix:")
                        .map(|a| a.split(" (mode").next().unwrap().to_owned())
                });
            if let Some(address) = address {
                std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
                return Ok(Server { child, address, token_file, stderr });
            }
        }
    }

    /// The bearer token, read from its file.
    pub fn token(&self) -> String {
        let path = self.token_file.as_ref().expect("an --http server");
        std::fs::read_to_string(path).unwrap().trim_end().to_owned()
    }

    /// The loopback endpoint (`--http`).
    pub fn tcp(&self) -> Endpoint {
        Endpoint::Tcp(self.address.clone())
    }

    /// Asks the server to stop (SIGTERM) and waits for it.
    pub fn stop(mut self) -> std::process::ExitStatus {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), rustix::process::Signal::TERM)
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "airlock mcp did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `VmRSS` of the server, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
