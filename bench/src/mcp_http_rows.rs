//! Issue 14 rows: a `read_file` call through `airlock mcp --http` with its
//! bearer token beside the same call over stdio (one session each, one
//! state directory), and the server's resident memory after 2,000
//! `initialize` attempts against the session cap. Target: HTTP p50 at most
//! 1.2x stdio's. The HTTP client opens one connection a request
//! (`Connection: close`), so the HTTP side also pays a loopback connect.

use crate::harness::{compare, Report, Target};
use crate::mcp_rows::Session;
use crate::run_rows::{setup, Setup};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

/// A running `airlock mcp --http 127.0.0.1:0`.
struct HttpServer {
    child: Child,
    addr: String,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl HttpServer {
    fn start(s: &Setup) -> Result<HttpServer, String> {
        let mut child = Command::new(&s.airlock)
            .args(["mcp", "--http", "127.0.0.1:0"])
            .current_dir(&s.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("airlock mcp --http: {e}"))?;
        let mut stderr = BufReader::new(child.stderr.take().ok_or("no stderr")?);
        let mut addr = None;
        while addr.is_none() {
            let mut line = String::new();
            if stderr.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("airlock mcp --http exited before listening".into());
            }
            addr = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).map(str::to_owned);
        }
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let token = std::fs::read_to_string(s.root.join(".airlock/mcp/token")).map_err(|e| e.to_string())?;
        let addr = addr.ok_or("no address")?;
        Ok(HttpServer { child, addr, token: token.trim().to_owned(), session: None, next_id: 1 })
    }

    /// One POST /mcp; the status and the JSON-RPC message it answered with.
    fn post(&self, body: &Value, session: Option<&str>) -> Result<(u16, Option<String>, Value), String> {
        let body = body.to_string();
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: \
             application/json, text/event-stream\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n",
            self.token,
            body.len()
        );
        if let Some(id) = session {
            req.push_str(&format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-06-18\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        let mut stream = std::net::TcpStream::connect(&self.addr).map_err(|e| e.to_string())?;
        stream.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw);
        let (head, rest) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status")?;
        let session = head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case("mcp-session-id").then(|| v.trim().to_owned())
        });
        // The answer is JSON or an event stream (possibly chunked): take
        // the last `data:` line that parses, else the body itself.
        let message = rest
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .next_back()
            .or_else(|| serde_json::from_str(rest).ok())
            .unwrap_or(Value::Null);
        Ok((status, session, message))
    }

    fn initialize(&self) -> Result<(u16, Option<String>), String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let (status, session, _) = self.post(&init, None)?;
        Ok((status, session))
    }

    fn open_session(&mut self) -> Result<(), String> {
        let (status, session) = self.initialize()?;
        let session = session.ok_or(format!("initialize answered {status} without a session"))?;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(&note, Some(&session))?;
        self.session = Some(session);
        Ok(())
    }

    fn read_once(&mut self) -> Result<(), String> {
        self.next_id += 1;
        let call = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
            "params": {"name": "read_file", "arguments": {"path": "data/page.txt"}}});
        let (status, _, v) = self.post(&call, self.session.as_deref())?;
        if status == 200 && v["result"]["isError"] == json!(false) {
            Ok(())
        } else {
            Err(format!("read_file over HTTP answered {status}: {v}"))
        }
    }

    fn rss_kib(&self) -> Result<u64, String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).map_err(|e| e.to_string())?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| "no VmRSS".to_string())
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdio_read_once(session: &mut Session) -> Result<(), String> {
    let v = session.request("tools/call", json!({"name": "read_file", "arguments": {"path": "data/page.txt"}}))?;
    if v["result"]["isError"] == json!(false) {
        Ok(())
    } else {
        Err(format!("read_file over stdio failed: {v}"))
    }
}

/// `read_file` over authenticated HTTP vs stdio; RSS after 2,000 `initialize` attempts.
pub fn http_vs_stdio(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    std::fs::write(s.root.join("data/page.txt"), "x".repeat(4096)).map_err(|e| e.to_string())?;
    let mut http = HttpServer::start(&s)?;
    http.open_session()?;
    let mut stdio = Session::start(&s)?;
    let samples = if quick { 20 } else { 200 };
    let (candidate, baseline) = compare(samples, || http.read_once(), || stdio_read_once(&mut stdio))?;

    let before = http.rss_kib()?;
    let attempts = if quick { 400 } else { 2000 };
    let mut refused = 0;
    for _ in 0..attempts {
        let (status, _) = http.initialize()?;
        if status == 503 {
            refused += 1;
        }
    }
    let after = http.rss_kib()?;
    Ok(Report {
        name: "mcp --http read_file (token) vs stdio",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.2),
        bytes: None,
        samples,
        extra: vec![format!(
            "server RSS {:.1} MB before, {:.1} MB after {attempts} initialize attempts ({refused} refused past the \
             session cap): +{:.1} MB",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            after.saturating_sub(before) as f64 / 1024.0
        )],
    })
}
