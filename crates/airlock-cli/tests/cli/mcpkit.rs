//! A minimal MCP client for the tests: `airlock mcp` over stdio, one JSON
//! object a line, answers matched to requests by id (they may arrive out
//! of order: calls run concurrently).

use crate::util::{Project, AIRLOCK};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// One `airlock mcp` process with an initialized session.
pub struct McpSession {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pending: HashMap<u64, Value>,
    next_id: u64,
    /// Notifications from the server (a `method`, no `id`), in order of arrival.
    pub notifications: Vec<Value>,
}

impl McpSession {
    /// Starts `airlock mcp` in the project and completes the handshake.
    pub fn start(p: &Project) -> McpSession {
        McpSession::start_with(p, &[], Stdio::inherit())
    }

    /// [`McpSession::start`] with more environment variables and stderr
    /// sent to `stderr`.
    pub fn start_with(p: &Project, env: &[(&str, &str)], stderr: Stdio) -> McpSession {
        let mut cmd = Command::new(AIRLOCK);
        cmd.arg("mcp")
            .current_dir(p.root())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .envs(env.iter().copied());
        if let Ok(r) = std::env::var("AIRLOCK_RESOLVER") {
            cmd.env("AIRLOCK_RESOLVER", r);
        }
        let mut child = cmd.spawn().expect("spawn airlock mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut s = McpSession { child, stdin, lines, pending: HashMap::new(), next_id: 1, notifications: Vec::new() };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "airlock-tests", "version": "1"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "airlock", "{init}");
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").and_then(|()| stdin.flush()).expect("write to airlock mcp");
    }

    /// Sends a notification (no answer).
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its id without waiting.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The response to request `id` (waiting at most 60 s).
    pub fn response(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = self.pending.remove(&id) {
                return v;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|e| panic!("no answer to request {id}: {e}"));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            self.keep(v);
        }
    }

    /// Files an answer by its id, a notification in order.
    fn keep(&mut self, v: Value) {
        match v["id"].as_u64() {
            Some(got) => {
                self.pending.insert(got, v);
            }
            None if v["method"].is_string() => self.notifications.push(v),
            None => {}
        }
    }

    /// The id of whichever of `ids` is answered first.
    pub fn first_answered(&mut self, ids: &[u64]) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(id) = ids.iter().find(|id| self.pending.contains_key(id)) {
                return *id;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("an answer");
            let v: Value = serde_json::from_str(&line).unwrap();
            self.keep(v);
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(id)
    }

    /// `tools/call` and its `result` (panics on a protocol error).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let v = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert!(v.get("error").is_none(), "tools/call {tool} was a protocol error: {v}");
        v["result"].clone()
    }

    /// Closes stdin and waits for the server to exit.
    pub fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "airlock mcp did not exit after stdin closed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
