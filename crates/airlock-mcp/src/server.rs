//! The MCP handler: `tools/list` from the catalog, `tools/call` through the
//! pipeline on a thread of its own.
//!
//! Each call runs `Runtime::run` on a **new OS thread per call** (not
//! tokio's blocking pool) that lives until the worker is reaped, so
//! `die_with_caller(true)` stays right: the parent-death signal is tied to
//! that thread, and killing the server kills every worker. One `Runtime`
//! (its journal under its mutex and `flock`) serves all sessions.
//!
//! # Cancellation
//!
//! Each call runs under its own cancellation
//! (`Runtime::call_canceller`). rmcp cancels a request's token when the
//! client sends `notifications/cancelled` for it, and when its session
//! ends (stdio EOF, an HTTP session deleted or closed); airlock then
//! cancels the call: its worker is killed and reaped, nothing is
//! published, its staging room is released, and the journal has
//! `InvocationCancelled` (`reason` `client`, or `session_closed`). A call
//! already past its publication point completes and says so (`outcome`
//! `completed`). The response to
//! a cancelled request is not sent (MCP: the client has stopped waiting).
//! [`crate::serve_stdio`] waits for the calls in flight to settle before
//! it returns, so their cancellation is journaled before the process exits.

use crate::answer::to_result;
use crate::catalog::Catalog;
use crate::gate::Caller;
use crate::request_log;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_runtime::progress::ProgressHook;
use airlock_runtime::{new_invocation_id, CallRequest, Runtime};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::sync::Arc;
use std::time::Instant;

/// Serves the runtime's tools over MCP. Cheap to clone (one runtime shared
/// by every session).
#[derive(Clone, Debug)]
pub struct AirlockServer {
    runtime: Arc<Runtime>,
    /// Served behind the HTTP gate: a call must carry the [`Caller`] the
    /// gate authenticated, or it is refused.
    gated: bool,
    /// How many calls are in flight (their threads not yet answered).
    in_flight: Arc<tokio::sync::watch::Sender<usize>>,
    /// The live sessions of every client (issue 21).
    sessions: Arc<crate::session_tools::Sessions>,
    /// The catalog read last, reused while the tools directory is unchanged.
    catalog: Arc<crate::catalog::CatalogCache>,
}

/// `reason` of a call cancelled by the client's `notifications/cancelled`.
const CLIENT: &str = "client";
/// `reason` of a call cancelled because its session ended.
const SESSION_CLOSED: &str = "session_closed";

/// One call in flight, counted until dropped.
struct InFlight(Arc<tokio::sync::watch::Sender<usize>>);

impl InFlight {
    fn enter(count: &Arc<tokio::sync::watch::Sender<usize>>) -> InFlight {
        count.send_modify(|n| *n += 1);
        InFlight(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl AirlockServer {
    /// A server for `runtime` (which must have its sandbox init program set
    /// for calls to run).
    pub fn new(runtime: Runtime) -> Self {
        let (in_flight, _) = tokio::sync::watch::channel(0);
        AirlockServer {
            runtime: Arc::new(runtime),
            gated: false,
            in_flight: Arc::new(in_flight),
            sessions: Arc::default(),
            catalog: Arc::default(),
        }
    }

    /// This server, with every call required to carry an authenticated
    /// [`Caller`] (set for the HTTP fronts).
    pub(crate) fn behind_gate(mut self) -> Self {
        self.gated = true;
        self
    }

    /// The tools served right now: a manifest added, changed or removed
    /// while serving is seen by the next request ([`crate::catalog::CatalogCache`]).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.current(&self.runtime)
    }

    /// Runs one call to completion on a new thread and answers with its
    /// envelope. The thread lives until the worker has been reaped, which is
    /// what the native tier's parent-death signal is tied to: if this
    /// process dies, the worker dies with it. The call is made as
    /// `principal` (`None`: the runtime's principal); its long phases are
    /// reported to `progress`, if any. When `cancelled` fires first the
    /// call is cancelled (see the module documentation; `session_closed`
    /// tells a closed session from the client's notification) and its
    /// answer is what it came to: `call.cancelled`, or what it did if it
    /// was past its publication point.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        principal: Option<String>,
        progress: Option<ProgressHook>,
        cancelled: tokio_util::sync::CancellationToken,
        session_closed: impl Fn() -> bool,
    ) -> Envelope {
        let session_tool = crate::session_tools::NAMES.contains(&name);
        // An interaction with a live session reads no tools directory: it
        // was authorized at its start and by its own Cedar request.
        if session_tool && name != "session_start" && self.sessions.serving() {
            return self.sessions.call(&self.runtime, None, name, arguments, principal, progress).await;
        }
        let catalog = self.catalog();
        if session_tool && !catalog.sessions.is_empty() {
            return self.sessions.call(&self.runtime, Some(&catalog), name, arguments, principal, progress).await;
        }
        let Some(entry) = catalog.find(name).cloned() else {
            return Envelope::from_refusal(&Refusal::new(
                ReasonCode::ManifestNotFound,
                format!("no tool named {name:?} is served"),
            ));
        };
        // The catalog may be older than the host's programs.
        if let Err(refusal) = self.runtime.check_runnable(&entry.parsed) {
            return Envelope { tool: Some(name.to_owned()), ..Envelope::from_refusal(&refusal) };
        }
        let name = name.to_owned();
        let request = CallRequest {
            tool: entry.manifest.display().to_string(),
            positional: Vec::new(),
            named: arguments.into_iter().collect(),
            invocation_id: new_invocation_id(),
            principal,
            progress,
            tier: None,
        };
        let runtime = Arc::clone(&self.runtime);
        let cancel = runtime.call_canceller();
        let call_cancel = cancel.clone();
        let in_flight = InFlight::enter(&self.in_flight);
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let spawned =
            std::thread::Builder::new().name(format!("airlock-call-{}", request.invocation_id)).spawn(move || {
                let _in_flight = in_flight;
                let _ = tx.send(Envelope { tool: Some(name), ..runtime.run_cancellable(&request, call_cancel) });
            });
        if let Err(e) = spawned {
            return Envelope::from_refusal(&Refusal::new(ReasonCode::Internal, format!("starting a call thread: {e}")));
        }
        let answer = tokio::select! {
            answer = &mut rx => answer,
            () = cancelled.cancelled() => {
                cancel.cancel_because(if session_closed() { SESSION_CLOSED } else { CLIENT });
                rx.await
            }
        };
        answer.unwrap_or_else(|_| {
            Envelope::from_refusal(&Refusal::new(ReasonCode::Internal, "the call thread ended without an answer"))
        })
    }

    /// Waits (at most `limit`) until no call is in flight.
    pub async fn settled(&self, limit: std::time::Duration) {
        let mut count = self.in_flight.subscribe();
        let _ = tokio::time::timeout(limit, count.wait_for(|n| *n == 0)).await;
    }
}

impl AirlockServer {
    /// Whose call this is: the [`Caller`] the HTTP gate put on the
    /// request (rmcp passes the request's parts along), never anything in
    /// the request body. Over stdio there is none and the runtime's
    /// principal is used; behind the gate a missing one is refused.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Option<String>, Refusal> {
        let caller =
            context.extensions.get::<axum::http::request::Parts>().and_then(|parts| parts.extensions.get::<Caller>());
        match caller {
            Some(caller) => Ok(caller.principal.clone()),
            None if self.gated => Err(Refusal::new(
                ReasonCode::McpUnauthenticated,
                "the request reached the tool without an authenticated caller",
            )),
            None => Ok(None),
        }
    }
}

impl ServerHandler for AirlockServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(crate::schemas::instructions(self.runtime.config()))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let began = Instant::now();
        let catalog = self.catalog();
        let mut tools = catalog.tools();
        if !catalog.sessions.is_empty() {
            tools.extend(crate::session_tools::tools(&catalog));
        }
        let principal = self.caller(&context).ok().flatten();
        request_log::list(principal.as_deref().unwrap_or(self.runtime.principal()), tools.len(), began);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let began = Instant::now();
        let (principal, envelope) = match self.caller(&context) {
            Ok(principal) => {
                let (hook, sender) = crate::progress::for_request(&context).unzip();
                let arguments = request.arguments.unwrap_or_default();
                let (ct, peer) = (context.ct.clone(), context.peer.clone());
                let envelope = self
                    .call(&request.name, arguments, principal.clone(), hook, ct, || peer.is_transport_closed())
                    .await;
                if let Some(sender) = sender {
                    crate::progress::flushed(sender).await;
                }
                (principal.unwrap_or_else(|| self.runtime.principal().to_owned()), envelope)
            }
            // Nobody authenticated: no principal to name.
            Err(refusal) => ("-".to_owned(), Envelope::from_refusal(&refusal)),
        };
        request_log::call(&principal, &request.name, &envelope, began);
        Ok(to_result(&envelope).into())
    }
}
