//! The connection to the daemon: a small current-thread Tokio runtime (the
//! tier's callers are synchronous), a `bollard` client on the Unix socket at
//! a pinned API version, and the mapping of its errors onto
//! [`SandboxError`].
#![forbid(unsafe_code)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bollard::errors::Error as ApiError;
use bollard::query_parameters::{InspectContainerOptions, RemoveContainerOptions};
use bollard::{ClientVersion, Docker};
use futures_core::Stream;

use crate::error::SandboxError;

/// Engine API 1.41 (Docker 20.10, Podman's compatible API): every field
/// the tier sets exists there, and newer daemons still serve it.
const API_VERSION: ClientVersion = ClientVersion { major_version: 1, minor_version: 41 };

/// Seconds a single request may take to answer (not a stream's whole life).
const REQUEST_TIMEOUT_SECS: u64 = 30;

/// How long removal of a container may take to be confirmed.
pub(crate) const REMOVE_GRACE: Duration = Duration::from_secs(10);

/// A client and the runtime that drives it.
pub(crate) struct Engine {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) api: Docker,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Engine")
    }
}

impl Engine {
    /// Connects (lazily: no request is made) to the daemon at `socket`.
    pub(crate) fn connect(socket: &std::path::Path) -> Result<Engine, SandboxError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SandboxError::Unavailable(format!("cannot start the Docker tier's I/O runtime: {e}")))?;
        let path = socket
            .to_str()
            .ok_or_else(|| SandboxError::Unavailable(format!("the Docker socket {socket:?} is not UTF-8")))?;
        let api = Docker::connect_with_unix(path, REQUEST_TIMEOUT_SECS, &API_VERSION).map_err(|e| {
            SandboxError::Unavailable(format!(
                "no Docker daemon socket at {path} ({e}): start dockerd, or set [sandbox.docker] socket"
            ))
        })?;
        Ok(Engine { rt, api })
    }

    /// Runs `f` to completion on the engine's runtime.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

/// The engine answered `404 Not Found`.
pub(crate) fn is_not_found(e: &ApiError) -> bool {
    matches!(e, ApiError::DockerResponseServerError { status_code: 404, .. })
}

/// The engine answered `409 Conflict` (e.g. killing a container that is
/// not running, removing one already being removed).
pub(crate) fn is_conflict(e: &ApiError) -> bool {
    matches!(e, ApiError::DockerResponseServerError { status_code: 409, .. })
}

/// An engine error as a [`SandboxError`]: the daemon not answering is
/// `Unavailable`, anything else a failed step naming the request.
pub(crate) fn engine_error(call: &str, e: ApiError) -> SandboxError {
    match e {
        ApiError::DockerResponseServerError { status_code, message } => {
            SandboxError::ContainerEngine { call: call.into(), message: format!("{status_code}: {message}") }
        }
        ApiError::SocketNotFoundError(path) => SandboxError::Unavailable(format!(
            "no Docker daemon socket at {path}: start dockerd, or set [sandbox.docker] socket"
        )),
        ApiError::HyperResponseError { .. }
        | ApiError::HyperLegacyError { .. }
        | ApiError::IOError { .. }
        | ApiError::RequestTimeoutError => {
            SandboxError::Unavailable(format!("the Docker daemon did not answer {call}: {e}"))
        }
        other => SandboxError::ContainerEngine { call: call.into(), message: other.to_string() },
    }
}

/// Force-removes container `id` and waits (up to [`REMOVE_GRACE`]) until
/// the engine says it no longer exists. `Ok(true)`: confirmed gone.
pub(crate) async fn remove_and_confirm(api: &Docker, id: &str) -> Result<bool, SandboxError> {
    let opts = RemoveContainerOptions { force: true, v: true, link: false };
    match api.remove_container(id, Some(opts.clone())).await {
        Ok(()) => {}
        Err(e) if is_not_found(&e) || is_conflict(&e) => {}
        Err(e) => return Err(engine_error(&format!("DELETE /containers/{id}?force=1"), e)),
    }
    let until = tokio::time::Instant::now() + REMOVE_GRACE;
    loop {
        match api.inspect_container(id, None::<InspectContainerOptions>).await {
            Err(e) if is_not_found(&e) => return Ok(true),
            Err(e) => return Err(engine_error(&format!("GET /containers/{id}/json"), e)),
            Ok(_) if tokio::time::Instant::now() >= until => return Ok(false),
            Ok(_) => {
                // Still there (a removal in progress): ask again.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Err(e) = api.remove_container(id, Some(opts.clone())).await {
                    if !is_not_found(&e) && !is_conflict(&e) {
                        return Err(engine_error(&format!("DELETE /containers/{id}?force=1"), e));
                    }
                }
            }
        }
    }
}

/// The next item of a stream (an attach connection's frames, a wait's exits).
pub(crate) async fn next<S: Stream + ?Sized>(s: &mut Pin<Box<S>>) -> Option<S::Item> {
    std::future::poll_fn(|cx| s.as_mut().poll_next(cx)).await
}
