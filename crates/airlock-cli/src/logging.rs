//! Logs: `tracing` events of the libraries, written by one subscriber set
//! up here, never on stdout (which carries exactly one answer, or MCP).
//!
//! - The filter is `AIRLOCK_LOG`, else `RUST_LOG`, in `tracing`'s
//!   `EnvFilter` syntax (`debug`, `airlock_runtime=debug,warn`, …); unset,
//!   warnings only, and for `airlock mcp` also its one line per request
//!   (target `airlock::request`, level info).
//! - Lines go to stderr, or with `AIRLOCK_LOG_FILE=PATH` to that file:
//!   opened for appending, created `0600`, never through a symbolic link
//!   (`O_NOFOLLOW`), so a planted link cannot make airlock write elsewhere.
//! - A filter that does not parse, or a log file that cannot be opened, is
//!   `config.logging` (78): asked-for logs are never dropped silently.

use airlock_core::{ReasonCode, Refusal};
use rustix::fs::{Mode, OFlags};
use std::sync::Mutex;
use tracing_subscriber::EnvFilter;

/// The log filter (wins over `RUST_LOG`).
pub const LOG_ENV: &str = "AIRLOCK_LOG";
/// Read when `AIRLOCK_LOG` is unset.
pub const RUST_LOG_ENV: &str = "RUST_LOG";
/// Where log lines go instead of stderr.
pub const LOG_FILE_ENV: &str = "AIRLOCK_LOG_FILE";
/// The filter when neither variable is set.
const DEFAULT: &str = "warn";
/// The default of `airlock mcp`: also one line per request.
const DEFAULT_SERVER: &str = "warn,airlock::request=info";

/// Sets up the process's subscriber from the environment; `server`: the
/// command is `airlock mcp`.
pub fn init(server: bool) -> Result<(), Refusal> {
    let (var, directives) = [LOG_ENV, RUST_LOG_ENV]
        .into_iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()).map(|v| (var, v)))
        .unwrap_or(("the default", (if server { DEFAULT_SERVER } else { DEFAULT }).to_owned()));
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        Refusal::new(
            ReasonCode::ConfigLogging,
            format!("{var}={directives:?} is not a log filter ({e}); e.g. {LOG_ENV}=debug or {LOG_ENV}=airlock_runtime=debug,warn"),
        )
    })?;
    // Plain text everywhere: colours would need tracing-subscriber's `ansi`
    // feature (asking for them without it panics).
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false);
    // A second subscriber (never in this binary) keeps the first.
    let _ = match std::env::var_os(LOG_FILE_ENV).filter(|p| !p.is_empty()) {
        Some(path) => logs.with_writer(Mutex::new(open_log_file(path.as_ref())?)).try_init(),
        None => logs.with_writer(std::io::stderr).try_init(),
    };
    Ok(())
}

/// Opens `path` for appending, creating it `0600`, refusing a symbolic
/// link at the path (`O_NOFOLLOW`) and anything but a regular file.
fn open_log_file(path: &std::path::Path) -> Result<std::fs::File, Refusal> {
    let refused =
        |why: String| Refusal::new(ReasonCode::ConfigLogging, format!("{LOG_FILE_ENV}={}: {why}", path.display()));
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    // Non-blocking: a FIFO at the path is refused below instead of hanging the open.
    let flags = flags | OFlags::NONBLOCK;
    let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o600)).map_err(|e| match e {
        rustix::io::Errno::LOOP => refused("is a symbolic link; name the log file itself".into()),
        e => refused(format!("cannot be opened for appending: {e}")),
    })?;
    let file = std::fs::File::from(fd);
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(refused("is not a regular file".into())),
        Err(e) => Err(refused(format!("cannot be examined: {e}"))),
    }
}
