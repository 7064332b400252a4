//! One module per subcommand.

mod doctor;
mod init;
mod prepare;
mod run;
mod staging;
mod tools;

use crate::cli::{Cli, Command};
use crate::settings;
use airlock_core::{Envelope, Refusal};
use airlock_hostfs::HostAuthority;
use airlock_runtime::Runtime;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Envelope, Refusal> {
    if let Command::Init = cli.command {
        return init::run(cli.config.as_deref());
    }
    let config = settings::load_config(cli.config.as_deref())?;
    if let Command::Doctor = cli.command {
        return Ok(doctor::run(&config));
    }
    let mut runtime = Runtime::open(HostAuthority::ambient(), config, settings::resolver_override()?)?;
    match cli.command {
        Command::Run(call) => {
            let exe = std::env::current_exe().map_err(|e| {
                Refusal::new(
                    airlock_core::ReasonCode::SandboxUnavailable,
                    format!("cannot find this executable: {e}"),
                )
            })?;
            runtime.set_init_program(exe, true);
            run::run(&runtime, call)
        }
        Command::Prepare(call) => prepare::run(&runtime, call),
        Command::Tools(cmd) => tools::run(&runtime, cmd),
        Command::Staging(cmd) => staging::run(&runtime, cmd),
        Command::Init | Command::Doctor => unreachable!("handled above"),
    }
}
