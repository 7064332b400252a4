//! A synchronous MCP client over a worker's live stdio: newline-delimited
//! JSON-RPC 2.0 (the MCP stdio transport), every wait bounded by the
//! call's deadline, every line bounded in size.
//!
//! It speaks only what one governed call needs: `initialize`,
//! `notifications/initialized`, `tools/list` (following cursors, bounded)
//! and one `tools/call`. Requests from the server (sampling, roots,
//! elicitation) are answered "method not found": a governed call has no
//! one to ask. Notifications are ignored.

use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::time::Instant;

/// The protocol version airlock asks for (servers may answer with another
/// they support; any answer is accepted).
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// The largest message read from the server.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;
/// The most `tools/list` pages followed.
const MAX_LIST_PAGES: usize = 16;

/// Why the session failed.
#[derive(Debug)]
pub enum ClientError {
    /// The deadline passed while waiting for `what`.
    Deadline(&'static str),
    /// The server broke the protocol, or closed its stdout.
    Protocol(String),
    /// The server has no tool of that name.
    ToolMissing(String),
}

/// One connection to a server.
#[derive(Debug)]
pub struct Client<W: Write> {
    stdin: Option<W>,
    lines: Receiver<Result<Vec<u8>, String>>,
    next_id: u64,
    deadline: Instant,
}

/// How often a waiting request calls its tick.
const TICK: std::time::Duration = std::time::Duration::from_millis(100);

impl<W: Write> Client<W> {
    /// Starts reading `stdout` on a thread of its own (which keeps draining
    /// it, without keeping anything, after the client is gone, so the
    /// server never blocks on a full pipe) and writes to `stdin`.
    pub fn new(stdin: W, stdout: impl Read + Send + 'static, deadline: Instant) -> Self {
        let (tx, lines) = sync_channel(64);
        let spawned = std::thread::Builder::new().name("airlock-mcp-worker-reader".into()).spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut listening = true;
            loop {
                let mut line = Vec::new();
                let item = match (&mut reader).take(MAX_MESSAGE_BYTES as u64 + 1).read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) if line.len() > MAX_MESSAGE_BYTES => {
                        Err(format!("a message longer than {MAX_MESSAGE_BYTES} bytes"))
                    }
                    Ok(_) => Ok(line),
                    Err(e) => {
                        if listening {
                            let _ = tx.send(Err(format!("reading the server's stdout: {e}")));
                        }
                        break;
                    }
                };
                let failed = item.is_err();
                // After an error, or once nobody listens, keep draining
                // (discarding) until the sandbox is gone.
                if listening {
                    listening = tx.send(item).is_ok() && !failed;
                }
            }
        });
        let (_, dead) = sync_channel(0);
        let lines = if spawned.is_ok() { lines } else { dead };
        Client { stdin: Some(stdin), lines, next_id: 1, deadline }
    }

    /// Bounds every wait from now on by `deadline` (a held session's
    /// connection gets one for each call).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// Closes the server's stdin (the MCP stdio way of asking it to exit).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    fn send(&mut self, msg: &Value) -> Result<(), ClientError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| ClientError::Protocol("stdin already closed".into()))?;
        let mut line = serde_json::to_vec(msg).map_err(|e| ClientError::Protocol(format!("encoding: {e}")))?;
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .map_err(|e| ClientError::Protocol(format!("writing to the server's stdin: {e}")))
    }

    /// Sends one request and waits for its answer's `result`.
    fn request(&mut self, method: &'static str, params: Value) -> Result<Value, ClientError> {
        self.request_ticking(method, params, &mut || {})
    }

    /// [`Client::request`], calling `tick` at least every [`TICK`] while it
    /// waits (a session reports progress from it).
    fn request_ticking(
        &mut self,
        method: &'static str,
        params: Value,
        tick: &mut dyn FnMut(),
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left.min(TICK)) {
                Ok(Ok(line)) => line,
                Ok(Err(why)) => return Err(ClientError::Protocol(why)),
                Err(RecvTimeoutError::Timeout) if left > TICK => {
                    tick();
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => return Err(ClientError::Deadline(method)),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ClientError::Protocol(format!(
                        "the server closed its stdout before answering {method}"
                    )))
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let msg: Value = serde_json::from_slice(&line).map_err(|e| {
                ClientError::Protocol(format!(
                    "not JSON ({e}): {}",
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                ))
            })?;
            if msg.get("jsonrpc") != Some(&json!("2.0")) {
                return Err(ClientError::Protocol(format!("not a JSON-RPC 2.0 message: {}", short(&msg))));
            }
            match (msg.get("id"), msg.get("method")) {
                // A request from the server: nobody here can answer it.
                (Some(req_id), Some(_)) => {
                    let req_id = req_id.clone();
                    self.send(&json!({"jsonrpc": "2.0", "id": req_id,
                        "error": {"code": -32601, "message": "airlock does not serve client requests"}}))?;
                }
                // A notification (logging, progress): ignored.
                (None, Some(_)) => {}
                (Some(got), None) if *got == json!(id) => {
                    if let Some(err) = msg.get("error") {
                        return Err(ClientError::Protocol(format!("{method} failed: {}", short(err))));
                    }
                    return msg
                        .get("result")
                        .cloned()
                        .ok_or_else(|| ClientError::Protocol(format!("the answer to {method} has no result")));
                }
                _ => return Err(ClientError::Protocol(format!("an unexpected message: {}", short(&msg)))),
            }
        }
    }

    /// `initialize` and `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<Value, ClientError> {
        let result = self.request(
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "airlock", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        if !result.get("capabilities").is_some_and(Value::is_object) {
            return Err(ClientError::Protocol("the initialize result has no capabilities".into()));
        }
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(result)
    }

    /// Discovers `tool` through `tools/list`: its definition, or
    /// `ToolMissing`.
    pub fn discover(&mut self, tool: &str) -> Result<Value, ClientError> {
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", params)?;
            let tools = page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| ClientError::Protocol("tools/list has no tools array".into()))?;
            if let Some(found) = tools.iter().find(|t| t.get("name") == Some(&json!(tool))) {
                return Ok(found.clone());
            }
            match page.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        Err(ClientError::ToolMissing(tool.to_owned()))
    }

    /// One `tools/call`; its result (which may say `isError`).
    pub fn call(&mut self, tool: &str, arguments: Map<String, Value>) -> Result<Value, ClientError> {
        self.call_ticking(tool, arguments, &mut || {})
    }

    /// [`Client::call`], calling `tick` at least every [`TICK`] while the
    /// server works.
    pub fn call_ticking(
        &mut self,
        tool: &str,
        arguments: Map<String, Value>,
        tick: &mut dyn FnMut(),
    ) -> Result<Value, ClientError> {
        let result = self.request_ticking("tools/call", json!({"name": tool, "arguments": arguments}), tick)?;
        if !result.is_object() {
            return Err(ClientError::Protocol("the tools/call result is not an object".into()));
        }
        Ok(result)
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        let cut = (0..=300).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        format!("{}…", &s[..cut])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A scripted server: the lines it will print, whatever it is sent.
    fn client(script: &str) -> Client<Vec<u8>> {
        let out = std::io::Cursor::new(script.as_bytes().to_vec());
        Client::new(Vec::new(), out, Instant::now() + Duration::from_secs(5))
    }

    #[test]
    fn answers_are_matched_by_id_past_notifications_and_server_requests() {
        let mut c = client(concat!(
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"capabilities\":{}}}\n",
        ));
        c.initialize().unwrap();
        let sent = String::from_utf8(c.stdin.take().unwrap()).unwrap();
        assert!(sent.contains("\"id\":\"s1\"") && sent.contains("-32601"), "{sent}");
    }

    #[test]
    fn garbage_a_wrong_id_and_an_early_close_are_protocol_errors() {
        for script in ["not json\n", "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n", ""] {
            let err = client(script).initialize().unwrap_err();
            assert!(matches!(err, ClientError::Protocol(_)), "{script:?}: {err:?}");
        }
    }

    #[test]
    fn a_missing_tool_is_named() {
        let mut c = client("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"other\"}]}}\n");
        assert!(matches!(c.discover("wanted"), Err(ClientError::ToolMissing(t)) if t == "wanted"));
    }

    #[test]
    fn silence_runs_into_the_deadline() {
        let (_keep, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut c = Client::new(Vec::new(), rx, Instant::now() + Duration::from_millis(100));
        assert!(matches!(c.initialize(), Err(ClientError::Deadline("initialize"))));
    }
}
