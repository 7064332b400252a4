//! `airlock`: run tools on a host's files one operation at a time, with
//! exactly the files each operation declares.
//!
//! This binary is thin: it parses the command line, finds the
//! configuration, makes the one [`HostAuthority`], calls the runtime, and
//! prints one envelope on stdout with the exit code its reason implies.

mod cli;
mod commands;
mod logging;
mod progress;
mod settings;
mod signals;
mod version;

use airlock_core::{exit, Envelope, ReasonCode, Refusal};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // When re-executed as the native tier's sandbox init, become it and
    // never return (this must run before anything else).
    airlock_sandbox::init::maybe_run_init();
    // As PID 1 of a microVM guest, serve the call and power off.
    airlock_sandbox::microvm::guest::maybe_run_guest();
    // When executed inside a worker as the Git query driver, answer and exit.
    airlock_git::driver::maybe_run_driver();
    let cli = match cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => exit::OK,
                _ => exit::USAGE,
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let pretty = cli.globals.pretty;
    if let Err(refusal) = logging::init(matches!(cli.command, cli::Command::Mcp { .. })) {
        return emit(&Envelope::from_refusal(&refusal), pretty);
    }
    match commands::run(cli) {
        Ok(commands::Answer::Text(text)) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(exit::SOFTWARE as u8),
            }
        }
        Ok(commands::Answer::Envelope(envelope)) => emit(&envelope, pretty),
        Ok(commands::Answer::Report { text, envelope }) => {
            if let Some(err) = &envelope.error {
                eprintln!("airlock: {}: {}: {}", status_word(&envelope), err.code, err.message);
            }
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => ExitCode::from(envelope.exit_code_for_process() as u8),
                Err(_) => ExitCode::from(exit::SOFTWARE as u8),
            }
        }
        Err(refusal) => emit(&Envelope::from_refusal(&refusal), pretty),
    }
}

/// Prints the envelope and returns its exit code; a refusal is also said on
/// stderr for people.
fn emit(envelope: &Envelope, pretty: bool) -> ExitCode {
    if let Some(err) = &envelope.error {
        eprintln!("airlock: {}: {}: {}", status_word(envelope), err.code, err.message);
    }
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", envelope.to_json(pretty)).and_then(|()| out.flush()).is_err() {
        return ExitCode::from(exit::SOFTWARE as u8);
    }
    let code = signals::exit_status(envelope.error.as_ref().map(|e| e.code), envelope.exit_code_for_process());
    ExitCode::from(code as u8)
}

fn status_word(envelope: &Envelope) -> &'static str {
    match envelope.status {
        airlock_core::Status::Ok => "ok",
        airlock_core::Status::Failed => "failed",
        airlock_core::Status::Refused => "refused",
        airlock_core::Status::Error => "error",
    }
}

/// A usage refusal.
pub(crate) fn usage(message: impl Into<String>) -> Refusal {
    Refusal::new(ReasonCode::Usage, message)
}
