//! One module per subcommand.

mod approvals;
mod cluster;
mod doctor;
mod generate;
mod init;
mod isolated;
mod journal;
mod linking;
mod mcp;
mod prepare;
mod query;
mod report;
mod run;
mod session;
mod session_holder;
mod staging;
mod tools;

use crate::cli::{Cli, Command};
use crate::settings;
use airlock_core::{Envelope, Refusal};
use airlock_hostfs::HostAuthority;
use airlock_runtime::Runtime;

/// What a command answers: an envelope, text that is the answer itself
/// (`attest`'s DSSE envelope, a man page), or a status report for people.
pub enum Answer {
    /// One JSON envelope.
    Envelope(Box<Envelope>),
    /// Printed as is; exit 0.
    Text(String),
    /// A status command's text on a terminal (see `report`): `text` is
    /// printed, and `envelope` gives the exit code and the stderr line.
    Report {
        /// What people read.
        text: String,
        /// The answer it renders.
        envelope: Box<Envelope>,
    },
}

impl From<Envelope> for Answer {
    fn from(e: Envelope) -> Answer {
        Answer::Envelope(Box::new(e))
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Answer, Refusal> {
    match &cli.command {
        Command::Init => return init::run(cli.globals.config.as_deref()).map(Answer::from),
        Command::Completions { shell } => return Ok(Answer::Text(generate::completions(*shell))),
        Command::Man { subcommand } => return generate::man_page(subcommand.as_deref()).map(Answer::Text),
        _ => {}
    }
    if let Command::Schema(crate::cli::SchemaCommand::Envelope) = cli.command {
        let schema = airlock_core::envelope_schema::schema();
        return Ok(Answer::Text(format!("{}\n", serde_json::to_string_pretty(&schema).unwrap_or_default())));
    }
    let loaded = settings::load_config(cli.globals.config.as_deref())?;
    if cli.globals.verbose {
        eprintln!("airlock: {}", loaded.describe());
    }
    if let Command::Doctor { json } = cli.command {
        return Ok(report::status(json, doctor::run(&loaded.config, loaded.report()), doctor::text));
    }
    let config = loaded.config;
    if let Command::Approver(crate::cli::ApproverCommand::Init { key, id }) = &cli.command {
        return approvals::init(&config, key.as_deref(), id.as_deref()).map(Answer::from);
    }
    if let Command::Journal(crate::cli::JournalCommand::Verify { public_key, journal, against_stream, nats }) =
        &cli.command
    {
        let stream = against_stream.then_some(nats.as_deref());
        return journal::verify(&config, public_key.as_deref(), journal.as_deref(), stream).map(Answer::from);
    }
    if let Command::Policy(crate::cli::PolicyCommand::ShowDefault) = cli.command {
        return Ok(Answer::Text(airlock_policy::PolicySet::default_policies().to_owned()));
    }
    if let Command::Policy(crate::cli::PolicyCommand::Schema) = cli.command {
        let specs = airlock_runtime::policy_tool_specs(&HostAuthority::ambient(), &config.tools_dir);
        return Ok(Answer::Text(airlock_policy::schema_text(&specs)));
    }
    // `airlock run`'s sandbox starts before the runtime opens: its start is
    // most of a trivial call's wait.
    let run_init = match &cli.command {
        Command::Run(_) => Some(init_executable()?),
        _ => None,
    };
    let prestarted = run_init.clone().and_then(|init| airlock_runtime::Prestarted::start(&config, init));
    let mut runtime = Runtime::open(HostAuthority::ambient(), config, settings::resolver_override()?)?;
    let principal = cli.globals.principal.clone();
    if let Some(principal) = cli.globals.principal {
        runtime.set_principal(principal);
    }
    let answer = match cli.command {
        Command::Run(call) => {
            runtime.set_init_program(run_init.map_or_else(init_executable, Ok)?, true);
            runtime.adopt_prestarted(prestarted);
            crate::signals::cancel_on_signal(runtime.canceller())?;
            run::run(&runtime, call)?.into()
        }
        Command::Dispatch { id } => {
            runtime.set_init_program(init_executable()?, true);
            if runtime.kept_session_start(&id) {
                session::dispatch(&runtime, &id, cli.globals.config.as_deref(), principal.as_deref())?
            } else {
                crate::signals::cancel_on_signal(runtime.canceller())?;
                runtime.dispatch(&id).into()
            }
        }
        Command::Mcp { action: Some(crate::cli::McpCommand::Pin { tool }), .. } => {
            runtime.set_init_program(init_executable()?, true);
            Envelope { content: Some(runtime.mcp_pin(&tool)?), ..Envelope::ok() }.into()
        }
        Command::Mcp { action: None, http, token_file, unix } => {
            runtime.set_init_program(init_executable()?, true);
            runtime.start_warm_pool()?;
            mcp::run(runtime, mcp::Front::choose(http, token_file, unix)?)?;
            Answer::Text(String::new())
        }
        Command::Approve { digest, key, invocation } => {
            approvals::approve(&runtime, &digest, key.as_deref(), invocation.as_deref())?.into()
        }
        Command::Approvals(cmd) => approvals::run(&runtime, cmd)?,
        Command::Prepare(call) => prepare::run(&runtime, call)?.into(),
        Command::Query(args) => {
            runtime.set_init_program(init_executable()?, true);
            if airlock_git::Operation::parse(&args.operation).is_ok() {
                runtime.prestart_git_driver();
            }
            crate::signals::cancel_on_signal(runtime.canceller())?;
            query::run(&runtime, args)?.into()
        }
        Command::Isolated(args) => {
            runtime.set_init_program(init_executable()?, true);
            crate::signals::cancel_on_signal(runtime.canceller())?;
            isolated::run(&runtime, args)?.into()
        }
        Command::Tools(cmd) => tools::run(&runtime, cmd)?,
        Command::Staging(cmd) => staging::run(&runtime, cmd)?,
        Command::Session(crate::cli::SessionCommand::Serve) => {
            runtime.set_init_program(init_executable()?, true);
            session_holder::serve(&runtime)?;
            Answer::Text(String::new())
        }
        Command::Session(cmd) => session::run(&runtime, cmd, cli.globals.config.as_deref(), principal.as_deref())?,
        Command::Journal(crate::cli::JournalCommand::Show { json }) => journal::show(&runtime, json)?,
        Command::Journal(crate::cli::JournalCommand::Export { segment, file }) => {
            journal::export(&runtime, segment, &file)?.into()
        }
        Command::Journal(crate::cli::JournalCommand::Prune { before, allow_unexported }) => {
            journal::prune(&runtime, before, allow_unexported)?.into()
        }
        Command::Journal(crate::cli::JournalCommand::Verify { .. }) => unreachable!("handled above"),
        Command::Journal(crate::cli::JournalCommand::Push { nats }) => journal::push(&runtime, nats.as_deref())?.into(),
        Command::Invocation(crate::cli::InvocationCommand::Inspect { id }) => {
            journal::inspection(runtime.inspect(&id)?).into()
        }
        Command::Invocation(crate::cli::InvocationCommand::Recover { id, discard }) => {
            journal::inspection(runtime.recover(&id, discard)?).into()
        }
        Command::Attest { id } => journal::attest(&runtime, &id)?,
        Command::Worker(args) => {
            runtime.set_init_program(init_executable()?, true);
            // A long-lived worker of the native tier keeps warm sandboxes too.
            if args.tier.unwrap_or(runtime.config().tier) == airlock_core::config::Tier::Native {
                runtime.start_warm_pool()?;
            }
            cluster::worker(&runtime, args)?
        }
        Command::Cluster(cmd) => cluster::run(&runtime, cmd)?,
        Command::Workers(crate::cli::WorkersCommand::List { nats, json }) => {
            cluster::list(&runtime, nats.as_deref(), json)?
        }
        Command::Init
        | Command::Doctor { .. }
        | Command::Policy(_)
        | Command::Approver(_)
        | Command::Schema(_)
        | Command::Completions { .. }
        | Command::Man { .. } => {
            unreachable!("handled above")
        }
    };
    Ok(answer)
}

/// The native tier's init: `airlock-sandbox-init` beside this executable
/// (it links only the init, so a call execs a few MiB instead of all of
/// airlock), else this executable, which can be the init too.
pub(crate) fn init_executable() -> Result<std::path::PathBuf, Refusal> {
    airlock_runtime::own_program::beside_or_self(INIT_BIN).map_err(|e| {
        Refusal::new(airlock_core::ReasonCode::SandboxUnavailable, format!("cannot find this executable: {e}"))
    })
}

/// The file name of the native tier's own init binary.
pub(crate) const INIT_BIN: &str = "airlock-sandbox-init";
