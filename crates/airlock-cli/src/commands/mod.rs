//! One module per subcommand.

mod doctor;
mod init;
mod journal;
mod prepare;
mod run;
mod staging;
mod tools;

use crate::cli::{Cli, Command};
use crate::settings;
use airlock_core::{Envelope, Refusal};
use airlock_hostfs::HostAuthority;
use airlock_runtime::Runtime;

/// What a command answers: an envelope, or text that is the answer itself
/// (`journal show`, `attest`'s DSSE envelope).
pub enum Answer {
    /// One JSON envelope.
    Envelope(Box<Envelope>),
    /// Printed as is; exit 0.
    Text(String),
}

impl From<Envelope> for Answer {
    fn from(e: Envelope) -> Answer {
        Answer::Envelope(Box::new(e))
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Answer, Refusal> {
    if let Command::Init = cli.command {
        return init::run(cli.config.as_deref()).map(Answer::from);
    }
    let config = settings::load_config(cli.config.as_deref())?;
    if let Command::Doctor = cli.command {
        return Ok(doctor::run(&config).into());
    }
    if let Command::Journal(crate::cli::JournalCommand::Verify { public_key, journal }) = &cli.command {
        return journal::verify(&config, public_key.as_deref(), journal.as_deref()).map(Answer::from);
    }
    let mut runtime = Runtime::open(HostAuthority::ambient(), config, settings::resolver_override()?)?;
    let answer = match cli.command {
        Command::Run(call) => {
            let exe = std::env::current_exe().map_err(|e| {
                Refusal::new(airlock_core::ReasonCode::SandboxUnavailable, format!("cannot find this executable: {e}"))
            })?;
            runtime.set_init_program(exe, true);
            run::run(&runtime, call)?.into()
        }
        Command::Prepare(call) => prepare::run(&runtime, call)?.into(),
        Command::Tools(cmd) => tools::run(&runtime, cmd)?.into(),
        Command::Staging(cmd) => staging::run(&runtime, cmd)?.into(),
        Command::Journal(crate::cli::JournalCommand::Show { json }) => journal::show(&runtime, json)?,
        Command::Journal(crate::cli::JournalCommand::Verify { .. }) => unreachable!("handled above"),
        Command::Invocation(crate::cli::InvocationCommand::Inspect { id }) => {
            journal::inspection(runtime.inspect(&id)?).into()
        }
        Command::Invocation(crate::cli::InvocationCommand::Recover { id, discard }) => {
            journal::inspection(runtime.recover(&id, discard)?).into()
        }
        Command::Attest { id } => journal::attest(&runtime, &id)?,
        Command::Init | Command::Doctor => unreachable!("handled above"),
    };
    Ok(answer)
}
