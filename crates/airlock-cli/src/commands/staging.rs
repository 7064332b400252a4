//! `airlock staging status|gc`.

use crate::cli::StagingCommand;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::staging::StagingArea;
use airlock_runtime::Runtime;

/// Runs a staging subcommand.
pub fn run(runtime: &Runtime, cmd: StagingCommand) -> Result<Envelope, Refusal> {
    let area = StagingArea::open(runtime.state())?;
    let content = match cmd {
        StagingCommand::Status => serde_json::json!({ "calls": area.status()? }),
        StagingCommand::Gc => serde_json::json!({ "removed": area.reap_stale()? }),
    };
    Ok(Envelope { content: Some(content), ..Envelope::ok() })
}
