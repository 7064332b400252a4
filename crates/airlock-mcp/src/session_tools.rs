//! Sessions over MCP (issue 21): `session_start`, `session_send`,
//! `session_finalize` and `session_close`, listed when the tools directory
//! holds a `[session]` tool. Every session of the server lives on one
//! dedicated thread (the runtime's [`Desk`]), which lives as long as the
//! server: each session's worker dies with the thread that started it, so
//! killing the server kills every session's program and publishes nothing.
//! A session is driven only by the principal that started it.

use crate::catalog::Catalog;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_runtime::progress::ProgressHook;
use airlock_runtime::session::Desk;
use airlock_runtime::Runtime;
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{json, Map, Value};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The names of the session tools.
pub const NAMES: [&str; 4] = ["session_start", "session_send", "session_finalize", "session_close"];

type Job = (Value, Option<String>, Option<ProgressHook>, tokio::sync::oneshot::Sender<Envelope>);

/// The thread that holds every session of a server, started on first use.
#[derive(Debug, Default)]
pub struct Sessions {
    jobs: Mutex<Option<Sender<Job>>>,
}

impl Sessions {
    /// Whether the session thread runs: a session tool was served by this
    /// server, so `session_send`, `session_finalize` and `session_close` go
    /// to it without reading the tools directory (only `session_start`
    /// needs the catalog; an unknown session id is `session.not_found`).
    pub fn serving(&self) -> bool {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some()
    }

    /// Answers one session tool call `name` with `arguments`, as `principal`;
    /// a start's, send's or finalize's wait for the prompt is reported to
    /// `progress`.
    /// `catalog` is what `session_start` finds its tool in (`None` refuses a
    /// start: the caller read no catalog).
    pub async fn call(
        &self,
        runtime: &Arc<Runtime>,
        catalog: Option<&Catalog>,
        name: &str,
        arguments: Map<String, Value>,
        principal: Option<String>,
        progress: Option<ProgressHook>,
    ) -> Envelope {
        let request = match request(catalog, name, arguments) {
            Ok(r) => r,
            Err(refusal) => return Envelope::from_refusal(&refusal),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = match self.sender(runtime) {
            Ok(jobs) => jobs.send((request, principal, progress, tx)).is_ok(),
            Err(refusal) => return Envelope::from_refusal(&refusal),
        };
        if !sent {
            return Envelope::from_refusal(&Refusal::new(ReasonCode::SessionHolder, "the session thread is gone"));
        }
        rx.await.unwrap_or_else(|_| {
            Envelope::from_refusal(&Refusal::new(
                ReasonCode::SessionHolder,
                "the session thread ended without an answer",
            ))
        })
    }

    fn sender(&self, runtime: &Arc<Runtime>) -> Result<Sender<Job>, Refusal> {
        let mut jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(tx) = jobs.as_ref() {
            return Ok(tx.clone());
        }
        let (tx, rx) = channel::<Job>();
        let runtime = Arc::clone(runtime);
        std::thread::Builder::new()
            .name("airlock-sessions".into())
            .spawn(move || {
                let mut desk = Desk::default();
                loop {
                    match rx.recv_timeout(Duration::from_secs(1)) {
                        Ok((request, principal, progress, reply)) => {
                            let envelope =
                                desk.answer_with_progress(&runtime, &request, principal.as_deref(), progress.as_ref());
                            // The hook goes before the answer: the call's
                            // notifications are flushed once it is gone.
                            drop(progress);
                            let _ = reply.send(envelope);
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    desk.reap_expired(&runtime);
                }
                desk.close_all(&runtime, "ended with its server");
            })
            .map_err(|e| Refusal::new(ReasonCode::Internal, format!("starting the session thread: {e}")))?;
        *jobs = Some(tx.clone());
        Ok(tx)
    }
}

fn text<'a>(arguments: &'a Map<String, Value>, key: &str) -> Result<&'a str, Refusal> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Refusal::new(ReasonCode::Usage, format!("{key} (a string) is required")))
}

/// The desk's request for a tool call; a session's tool must be one the
/// catalog serves (a client never names a path).
fn request(catalog: Option<&Catalog>, name: &str, arguments: Map<String, Value>) -> Result<Value, Refusal> {
    let optional = |key: &str| arguments.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(match name {
        "session_start" => {
            let tool = text(&arguments, "tool")?;
            let entry = catalog.and_then(|c| c.find_session(tool)).ok_or_else(|| {
                Refusal::new(ReasonCode::ManifestNotFound, format!("no [session] tool named {tool:?} is served"))
            })?;
            let named = arguments.get("arguments").cloned().unwrap_or_else(|| json!({}));
            json!({
                "op": "start", "tool": entry.manifest.display().to_string(), "named": named,
                "dispatch": optional("dispatch"),
            })
        }
        "session_send" => json!({
            "op": "send", "session": text(&arguments, "session")?, "command": text(&arguments, "command")?,
            "arg": optional("arg"), "raw": arguments.get("raw").and_then(Value::as_bool).unwrap_or(false),
        }),
        "session_finalize" => json!({
            "op": "finalize", "session": text(&arguments, "session")?, "arg": optional("arg"),
            "command": arguments.get("command").and_then(Value::as_str),
        }),
        "session_close" => json!({ "op": "close", "session": text(&arguments, "session")? }),
        other => return Err(Refusal::new(ReasonCode::ManifestNotFound, format!("no tool named {other:?}"))),
    })
}

/// The four session tools, for `tools/list`.
pub fn tools(catalog: &Catalog) -> Vec<Tool> {
    let names: Vec<&str> = catalog.sessions.iter().map(|e| e.tool.name.as_ref()).collect();
    let string = |d: &str| json!({ "type": "string", "description": d });
    let schema = |props: Value, required: &[&str]| {
        let v = json!({ "type": "object", "properties": props, "required": required, "additionalProperties": false });
        Arc::new(v.as_object().cloned().unwrap_or_default())
    };
    let session = string("The session id session_start answered");
    let start = schema(
        json!({
            "tool": { "type": "string", "enum": names, "description": "A [session] tool" },
            "arguments": { "type": "object", "description": "The tool's arguments, by name (its files are granted for the whole session)" },
            "dispatch": string("Start the session whose start waited for an exact-call approval (its id), once an approver approved it"),
        }),
        &["tool"],
    );
    let send = schema(
        json!({
            "session": session, "command": string("A command the tool's [session.commands] declares"),
            "arg": string("One line; it must match the command's whole-string pattern (for an [mcp] session: the upstream tool's arguments as a JSON object)"),
            "raw": { "type": "boolean", "description": "Keep terminal escape sequences in the output" },
        }),
        &["session", "command"],
    );
    let finalize = schema(
        json!({ "session": session, "arg": string("The finalize command's argument (none for an [mcp] session)"), "command": string("Which finalize command (none for an [mcp] session)") }),
        &["session"],
    );
    let close = schema(json!({ "session": session }), &["session"]);
    let hint = |read_only: bool| {
        ToolAnnotations::new().read_only(read_only).destructive(false).idempotent(false).open_world(false)
    };
    vec![
        Tool::new(
            "session_start",
            "Start a [session] tool (a REPL, sqlite3, a held MCP server) with its declared files",
            start,
        )
        .annotate(hint(true)),
        Tool::new("session_send", "Send one declared command to a live session and read its output", send)
            .annotate(hint(true)),
        Tool::new("session_finalize", "Run the finalize command, end the session and publish its one output", finalize)
            .annotate(hint(false)),
        Tool::new("session_close", "End a session without publishing anything", close).annotate(hint(true)),
    ]
}
