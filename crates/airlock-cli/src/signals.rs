//! SIGINT and SIGTERM during a call command (`run`, `dispatch`, `query`,
//! `isolated`): the first one cancels the call through the runtime's
//! [`Cancel`] (its worker is killed and reaped, nothing is published, the
//! answer is `call.cancelled`, its reservation is released) and the process
//! exits 128 + the signal's number once that answer is printed; a second
//! one exits at once with that status.
//!
//! The handlers are tokio's (already linked for `airlock mcp`): installed
//! on the calling thread before the call starts, so a signal is never
//! missed, and awaited on a thread of their own.

use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::Cancel;
use std::sync::atomic::{AtomicI32, Ordering};
use tokio::signal::unix::{signal, SignalKind};

/// Linux's SIGINT.
const SIGINT: i32 = 2;
/// Linux's SIGTERM.
const SIGTERM: i32 = 15;

/// The first signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Cancels `cancel` on the first SIGINT or SIGTERM (see the module
/// documentation).
pub fn cancel_on_signal(cancel: Cancel) -> Result<(), Refusal> {
    on_first_signal(move |name| {
        eprintln!("airlock: {name}: cancelling the call (send it again to exit at once)");
        cancel.cancel();
    })
}

/// Sets `stop` on the first SIGINT or SIGTERM (`airlock worker` drains:
/// it finishes the call in hand and takes no more); a second one exits at
/// once.
pub fn drain_on_signal(stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<(), Refusal> {
    on_first_signal(move |name| {
        eprintln!(
            "airlock: {name}: draining: the call in hand finishes, no more are taken (send it again to exit at once)"
        );
        stop.store(true, Ordering::SeqCst);
    })
}

/// Runs `first` on the first SIGINT or SIGTERM; exits 128 + the signal's
/// number on the next.
fn on_first_signal(first: impl Fn(&str) + Send + 'static) -> Result<(), Refusal> {
    let failed = |e: std::io::Error| Refusal::new(ReasonCode::Internal, format!("installing signal handlers: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().map_err(failed)?;
    let (mut interrupt, mut terminate) = {
        let _inside = rt.enter();
        (signal(SignalKind::interrupt()).map_err(failed)?, signal(SignalKind::terminate()).map_err(failed)?)
    };
    let watch = move || {
        rt.block_on(async move {
            loop {
                let (signo, name) = tokio::select! {
                    _ = interrupt.recv() => (SIGINT, "SIGINT"),
                    _ = terminate.recv() => (SIGTERM, "SIGTERM"),
                };
                if RECEIVED.compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                    eprintln!("airlock: {name} again: exiting now");
                    std::process::exit(128 + signo);
                }
                first(name);
            }
        })
    };
    std::thread::Builder::new().name("airlock-signals".into()).spawn(watch).map_err(failed)?;
    Ok(())
}

/// The process exit status for an answer with reason `code`: 128 + the
/// signal's number for a call cancelled by a signal, else `default`.
pub fn exit_status(code: Option<ReasonCode>, default: i32) -> i32 {
    match (code, RECEIVED.load(Ordering::SeqCst)) {
        (Some(ReasonCode::CallCancelled), signo) if signo != 0 => 128 + signo,
        _ => default,
    }
}
