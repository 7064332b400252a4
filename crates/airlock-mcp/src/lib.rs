//! airlock-mcp: the MCP server front of airlock.
//!
//! [`AirlockServer`] serves every runnable manifest of the configured tools
//! directory as an MCP tool ([`catalog::Catalog`]): its `inputSchema` is the
//! JSON Schema of the manifest's `[args]`, its annotations are derived from
//! the manifest (a tool with a `create` grant is not read-only; airlock never
//! overwrites, so no tool is destructive; the sandbox has no network, so no
//! tool is open-world). Each `tools/call` runs through the whole pipeline
//! ([`airlock_runtime::Runtime::run`]) on a thread of its own, so a slow call
//! never holds up another, and answers with [`answer::to_result`]: the
//! content, plus `structuredContent` carrying the envelope (`created_files`,
//! evidence). A refusal is a result with `isError: true` and the reason code,
//! never a protocol error. A call whose request carries
//! `_meta.progressToken` gets `notifications/progress` for its long phases
//! (large snapshots, Git snapshots, a session's wait for its prompt), and
//! every `tools/list` and `tools/call` is logged as one line
//! ([`request_log`]).
//!
//! Transports: [`serve_stdio`] (the process's stdin/stdout; calls are made
//! as the runtime's principal), [`serve_http`] (streamable HTTP on a
//! loopback address, path `/mcp`, every request carrying the bearer
//! [`Token`]) and [`serve_unix`] (the same on a [`UnixSocket`], each
//! connection's peer uid mapped to a principal). Both HTTP fronts pass
//! every request through a [`Gate`]: Origin allow-list, authentication, a
//! body limit and a cap on live sessions ([`BoundedSessions`]); the
//! authenticated [`Caller`] — never the request body — names the principal
//! of the calls.
//!
//! ```no_run
//! use airlock_core::Config;
//! use airlock_hostfs::HostAuthority;
//! use airlock_runtime::Runtime;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::open(HostAuthority::ambient(), Config::embedded_default(".".as_ref()), None)?;
//! airlock_mcp::serve_stdio(airlock_mcp::AirlockServer::new(runtime)).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod answer;
pub mod catalog;
mod gate;
mod progress;
pub mod request_log;
pub mod schemas;
mod server;
mod session_tools;
mod sessions;
mod socket;
mod token;
mod transport;

pub use gate::{Authentication, Caller, Gate, PeerCred};
pub use server::AirlockServer;
pub use sessions::{BoundedSessions, Ticket};
pub use socket::UnixSocket;
pub use token::{Token, TOKEN_BYTES};
pub use transport::{serve_http, serve_stdio, serve_unix, ServeError, HTTP_PATH};
