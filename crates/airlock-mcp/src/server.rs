//! The MCP handler: `tools/list` from the catalog, `tools/call` through the
//! pipeline on a thread of its own.

use crate::answer::to_result;
use crate::catalog::Catalog;
use airlock_core::{Envelope, ReasonCode, Refusal};
use airlock_runtime::{new_invocation_id, CallRequest, Runtime};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::sync::Arc;

/// Serves the runtime's tools over MCP. Cheap to clone (one runtime shared
/// by every session).
#[derive(Clone, Debug)]
pub struct AirlockServer {
    runtime: Arc<Runtime>,
}

impl AirlockServer {
    /// A server for `runtime` (which must have its sandbox init program set
    /// for calls to run).
    pub fn new(runtime: Runtime) -> Self {
        AirlockServer { runtime: Arc::new(runtime) }
    }

    /// The tools served right now (the tools directory is read on every
    /// listing, so a manifest added while serving appears).
    pub fn catalog(&self) -> Catalog {
        Catalog::load(&self.runtime)
    }

    /// Runs one call to completion on a new thread and answers with its
    /// envelope. The thread lives until the worker has been reaped, which is
    /// what the native tier's parent-death signal is tied to: if this
    /// process dies, the worker dies with it.
    pub async fn call(&self, name: &str, arguments: serde_json::Map<String, serde_json::Value>) -> Envelope {
        let Some(entry) = self.catalog().find(name).cloned() else {
            return Envelope::from_refusal(&Refusal::new(
                ReasonCode::ManifestNotFound,
                format!("no tool named {name:?} is served"),
            ));
        };
        let request = CallRequest {
            tool: entry.manifest.display().to_string(),
            positional: Vec::new(),
            named: arguments.into_iter().collect(),
            invocation_id: new_invocation_id(),
            principal: None,
        };
        let runtime = Arc::clone(&self.runtime);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned =
            std::thread::Builder::new().name(format!("airlock-call-{}", request.invocation_id)).spawn(move || {
                let id = request.invocation_id.clone();
                let envelope = runtime
                    .run(&request)
                    .unwrap_or_else(|refusal| Envelope { invocation_id: Some(id), ..Envelope::from_refusal(&refusal) });
                let _ = tx.send(envelope);
            });
        if let Err(e) = spawned {
            return Envelope::from_refusal(&Refusal::new(ReasonCode::Internal, format!("starting a call thread: {e}")));
        }
        rx.await.unwrap_or_else(|_| {
            Envelope::from_refusal(&Refusal::new(ReasonCode::Internal, "the call thread ended without an answer"))
        })
    }
}

impl ServerHandler for AirlockServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool runs one operation on exactly the files its arguments name, in a sandbox, through \
                 airlock's policy. structuredContent is airlock's envelope: created_files are the published \
                 outputs, evidence binds the call to its descriptor. A refusal has isError and error.code.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.catalog().tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let envelope = self.call(&request.name, request.arguments.unwrap_or_default()).await;
        Ok(to_result(&envelope).into())
    }
}
