//! `airlock session start|send|finalize|close|list`: a client of the
//! session holder (`session_holder`), which it starts when none is
//! listening.

use super::session_holder::{session_dir, socket_path};
use super::Answer;
use crate::cli::SessionCommand;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_runtime::Runtime;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Most bytes of one answer read from the holder (an interaction's 4 MiB, escaped, and the envelope).
const MAX_REPLY_BYTES: u64 = 64 << 20;
/// How long a started holder has to listen.
const HOLDER_START: Duration = Duration::from_secs(10);

/// Runs a session subcommand; `config` and `principal` are the command line's.
pub fn run(
    runtime: &Runtime,
    cmd: SessionCommand,
    config: Option<&Path>,
    principal: Option<&str>,
) -> Result<Answer, Refusal> {
    let mut request = match cmd {
        SessionCommand::Start(call) => {
            let r = super::prepare::request(call)?;
            let named: serde_json::Map<String, Value> = r.named.into_iter().collect();
            json!({
                "op": "start", "tool": r.tool, "positional": r.positional, "named": named,
                "invocation_id": r.invocation_id,
            })
        }
        SessionCommand::Send { session, command, arg, raw } => {
            json!({ "op": "send", "session": session, "command": command, "arg": arg, "raw": raw })
        }
        SessionCommand::Finalize { session, arg, command } => {
            json!({ "op": "finalize", "session": session, "arg": arg, "command": command })
        }
        SessionCommand::Close { session } => json!({ "op": "close", "session": session }),
        SessionCommand::List => json!({ "op": "list" }),
        SessionCommand::Serve => unreachable!("served by the holder"),
    };
    // A session is driven only by the principal that started it.
    request["principal"] = json!(principal);
    relay(runtime, &request, config)
}

/// `airlock dispatch ID` of a session's start kept for an exact-call
/// approval: the holder starts it (and holds it).
pub fn dispatch(
    runtime: &Runtime,
    id: &str,
    config: Option<&Path>,
    principal: Option<&str>,
) -> Result<Answer, Refusal> {
    relay(runtime, &json!({ "op": "start", "dispatch": id, "principal": principal }), config)
}

/// Sends `request` to the holder (started for a start) and relays its answer.
fn relay(runtime: &Runtime, request: &Value, config: Option<&Path>) -> Result<Answer, Refusal> {
    let path = socket_path(&session_dir(runtime)?);
    let reply = match talk(&path, request) {
        Ok(reply) => reply,
        Err(_) if request["op"] == "start" => {
            start_holder(config, &path)?;
            talk(&path, request).map_err(|e| holder_error(&path, &e))?
        }
        Err(_) if request["op"] == "list" => json!({ "status": "ok", "content": { "sessions": [] } }),
        Err(_) => {
            let id = request["session"].as_str().unwrap_or("");
            return Err(Refusal::new(
                ReasonCode::SessionNotFound,
                format!("no live session {id:?}: no session holder is running for this state directory"),
            ));
        }
    };
    Ok(relayed(reply))
}

/// Lists the live sessions for `staging status` (empty with no holder).
pub fn live_sessions(runtime: &Runtime) -> Value {
    let Ok(dir) = session_dir(runtime) else { return json!([]) };
    match talk(&socket_path(&dir), &json!({ "op": "list" })) {
        Ok(reply) => reply["content"]["sessions"].clone(),
        Err(_) => json!([]),
    }
}

fn holder_error(path: &Path, e: &std::io::Error) -> Refusal {
    Refusal::new(ReasonCode::SessionHolder, format!("the session holder at {} did not answer: {e}", path.display()))
}

/// One request, one answer.
fn talk(path: &Path, request: &Value) -> std::io::Result<Value> {
    let mut stream = UnixStream::connect(path)?;
    let mut line = request.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut text = String::new();
    stream.take(MAX_REPLY_BYTES).read_to_string(&mut text)?;
    serde_json::from_str(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Starts `airlock session serve` detached (its own process group, no
/// terminal streams) and waits until it listens.
fn start_holder(config: Option<&Path>, path: &Path) -> Result<(), Refusal> {
    let exe = std::env::current_exe()
        .map_err(|e| Refusal::new(ReasonCode::SessionHolder, format!("cannot find this executable: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd.args(["session", "serve"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
        .map_err(|e| Refusal::new(ReasonCode::SessionHolder, format!("cannot start the session holder: {e}")))?;
    let began = Instant::now();
    while began.elapsed() < HOLDER_START {
        if UnixStream::connect(path).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Refusal::new(ReasonCode::SessionHolder, format!("the session holder did not listen at {}", path.display())))
}

/// The holder's envelope, printed as it came, with its exit code.
fn relayed(reply: Value) -> Answer {
    let envelope = match reply.get("error") {
        Some(error) => {
            let code = error["code"].as_str().and_then(ReasonCode::from_str_code).unwrap_or(ReasonCode::Internal);
            Envelope::from_refusal(&Refusal::new(code, error["message"].as_str().unwrap_or("").to_owned()))
        }
        None => Envelope::ok(),
    };
    let text = format!("{}\n", serde_json::to_string(&reply).unwrap_or_default());
    Answer::Report { text, envelope: Box::new(envelope) }
}
