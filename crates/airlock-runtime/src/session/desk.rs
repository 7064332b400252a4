//! The live sessions of one holder (the CLI's `airlock session serve`, or
//! `airlock mcp`), answering one JSON request at a time. Whoever owns a
//! desk must call it from one long-lived thread: each session's worker dies
//! with the thread that started it.

use super::{SendResult, Session};
use crate::progress::{Progress, ProgressHook};
use crate::transport::exec::CallRequest;
use crate::Runtime;
use airlock_core::{Envelope, ReasonCode, Refusal};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The live sessions of one holder.
#[derive(Debug, Default)]
pub struct Desk {
    sessions: BTreeMap<String, Session>,
}

fn field<'a>(request: &'a Value, key: &str) -> &'a str {
    request.get(key).and_then(Value::as_str).unwrap_or("")
}

fn not_found(id: &str) -> Envelope {
    Envelope::from_refusal(&Refusal::new(
        ReasonCode::SessionNotFound,
        format!("no live session {id:?} (it was finalized, closed or timed out; `session list` shows the live ones)"),
    ))
}

impl Desk {
    /// No session is live.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Discards every session past its idle or total timeout.
    pub fn reap_expired(&mut self, runtime: &Runtime) {
        let expired: Vec<String> =
            self.sessions.iter().filter(|(_, s)| s.expired()).map(|(id, _)| id.clone()).collect();
        for id in expired {
            if let Some(s) = self.sessions.remove(&id) {
                let _ = runtime.session_close(s, "timed out (idle_timeout_seconds or session_timeout_seconds)");
            }
        }
    }

    /// Discards every session (the holder is going away).
    pub fn close_all(&mut self, runtime: &Runtime, why: &str) {
        for (_, s) in std::mem::take(&mut self.sessions) {
            let _ = runtime.session_close(s, why);
        }
    }

    /// Answers one request: `{"op": "start", "tool", "positional", "named",
    /// "invocation_id"}` (or `{"op": "start", "dispatch": ID}`: the start
    /// `ID`, kept for an exact-call approval), `{"op": "send", "session", "command", "arg",
    /// "raw"}`, `{"op": "finalize", "session", "arg", "command"}`, `{"op":
    /// "close", "session"}` or `{"op": "list"}`. `principal` is who asks,
    /// as the front authenticated it (`None`: the runtime's); a session is
    /// only ever driven by the principal that started it.
    pub fn answer(&mut self, runtime: &Runtime, request: &Value, principal: Option<&str>) -> Envelope {
        self.answer_with_progress(runtime, request, principal, None)
    }

    /// [`Desk::answer`], reporting a start's, send's or finalize's wait for
    /// the prompt (and a start's snapshots) to `progress`.
    pub fn answer_with_progress(
        &mut self,
        runtime: &Runtime,
        request: &Value,
        principal: Option<&str>,
        hook: Option<&ProgressHook>,
    ) -> Envelope {
        let progress: Option<&dyn Progress> = hook.map(|h| h.as_ref());
        let asker = runtime.principal_of(principal).to_owned();
        let id = field(request, "session").to_owned();
        let op = field(request, "op");
        if matches!(op, "send" | "finalize" | "close")
            && self.sessions.get(&id).is_none_or(|s| s.prepared.principal() != asker)
        {
            return not_found(&id);
        }
        match op {
            "start" => self.start(runtime, request, principal, hook),
            "send" => {
                let Some(session) = self.sessions.get_mut(&id) else { return not_found(&id) };
                let raw = request.get("raw").and_then(Value::as_bool).unwrap_or(false);
                match runtime.session_send(session, field(request, "command"), field(request, "arg"), raw, progress) {
                    SendResult::Answer(envelope) => *envelope,
                    SendResult::Ended(refusal) => match self.sessions.remove(&id) {
                        Some(session) => runtime.session_end_with(session, refusal),
                        None => not_found(&id),
                    },
                }
            }
            "finalize" => match self.sessions.remove(&id) {
                Some(session) => {
                    let command = request.get("command").and_then(Value::as_str);
                    let (envelope, kept) = runtime.session_finalize(session, command, field(request, "arg"), progress);
                    if let Some(session) = kept {
                        self.sessions.insert(id, session);
                    }
                    envelope
                }
                None => not_found(&id),
            },
            "close" => match self.sessions.remove(&id) {
                Some(session) => runtime.session_close(session, "closed"),
                None => not_found(&id),
            },
            "list" => {
                let mine: Vec<_> =
                    self.sessions.values().filter(|s| s.prepared.principal() == asker).map(Session::info).collect();
                Envelope { content: Some(json!({ "sessions": mine })), ..Envelope::ok() }
            }
            other => Envelope::from_refusal(&Refusal::new(ReasonCode::Usage, format!("unknown request {other:?}"))),
        }
    }

    fn start(
        &mut self,
        runtime: &Runtime,
        request: &Value,
        principal: Option<&str>,
        hook: Option<&ProgressHook>,
    ) -> Envelope {
        let max = runtime.config().limits.max_sessions;
        if self.sessions.len() >= max {
            return Envelope::from_refusal(&Refusal::new(
                ReasonCode::SessionLimit,
                format!("{max} sessions are live ([limits] max_sessions in airlock.toml); finalize or close one first"),
            ));
        }
        let dispatch = field(request, "dispatch");
        if !dispatch.is_empty() {
            return match runtime.session_dispatch(dispatch, principal) {
                Ok((session, envelope)) => {
                    self.sessions.insert(session.id().to_owned(), session);
                    envelope
                }
                Err(envelope) => *envelope,
            };
        }
        let positional = request
            .get("positional")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let named = request
            .get("named")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let invocation_id = match field(request, "invocation_id") {
            "" => crate::new_invocation_id(),
            id => id.to_owned(),
        };
        let call = CallRequest {
            tool: field(request, "tool").to_owned(),
            positional,
            named,
            invocation_id,
            principal: principal.map(str::to_owned),
            progress: hook.cloned(),
            tier: None,
        };
        match runtime.session_start(&call) {
            Ok((session, envelope)) => {
                self.sessions.insert(session.id().to_owned(), session);
                envelope
            }
            Err(envelope) => *envelope,
        }
    }
}
