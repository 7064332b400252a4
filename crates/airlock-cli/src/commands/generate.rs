//! `airlock completions SHELL` and `airlock man`: shell completions and a
//! man page generated from the command-line definition, so they never
//! drift from `--help`.

use crate::cli::Cli;
use airlock_core::{ReasonCode, Refusal};
use clap::CommandFactory;

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "airlock", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The man page (roff) of `airlock`, or of one subcommand
/// (`airlock-run(1)`, the page its SUBCOMMANDS section refers to).
pub fn man_page(subcommand: Option<&str>) -> Result<String, Refusal> {
    let mut command = Cli::command();
    command.build();
    let page = match subcommand {
        None => command,
        Some(name) => command.find_subcommand(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = command.get_subcommands().map(|s| s.get_name()).collect();
            crate::usage(format!("airlock man {name:?}: no such subcommand; one of {}", known.join(", ")))
        })?,
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .source(format!("airlock {}", crate::version::TEXT))
        .render(&mut out)
        .map_err(|e| Refusal::new(ReasonCode::Internal, format!("writing the man page: {e}")))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
