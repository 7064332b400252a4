//! One module per subcommand.

mod prepare;
mod tools;

use crate::cli::{Cli, Command};
use crate::settings;
use airlock_core::{Envelope, Refusal};
use airlock_hostfs::HostAuthority;
use airlock_runtime::Runtime;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Envelope, Refusal> {
    let config = settings::load_config(cli.config.as_deref())?;
    let runtime = || Runtime::open(HostAuthority::ambient(), config.clone(), settings::resolver_override()?);
    match cli.command {
        Command::Prepare(call) => prepare::run(&runtime()?, call),
        Command::Tools(cmd) => tools::run(&runtime()?, cmd),
    }
}
