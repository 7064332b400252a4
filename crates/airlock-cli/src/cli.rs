//! The command line (DESIGN.md §3).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Run tools on a host's files one operation at a time, with exactly the
/// files each operation declares.
#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version = crate::version::TEXT,
    about = "Run tools on a host's files one operation at a time, with exactly the files each operation declares",
    max_term_width = 100
)]
pub struct Cli {
    /// Options every subcommand takes.
    #[command(flatten)]
    pub globals: Globals,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes (before or after it).
#[derive(Debug, Args)]
pub struct Globals {
    /// Configuration file (default: $AIRLOCK_CONFIG, else airlock.toml in the
    /// current directory or the nearest parent up to a repository top or
    /// file-system boundary, else ~/.config/airlock/airlock.toml, else the
    /// embedded default).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Say on stderr which configuration file is in use and why.
    #[arg(long, global = true)]
    pub verbose: bool,
    /// Indent the JSON envelope.
    #[arg(long, global = true)]
    pub pretty: bool,
    /// Make calls as this principal (`Airlock::Agent` id; default: `[policy] principal`, else "local").
    #[arg(long, global = true, value_name = "ID")]
    pub principal: Option<String>,
}

impl Cli {
    /// Parses the process's arguments.
    ///
    /// The one-shot calls (`airlock run`, `airlock query`) are parsed first
    /// by a command line that holds only them: clap builds every
    /// subcommand's arguments before it parses, and for this command line
    /// that was 0.4–0.5 ms of a 9 ms `airlock run`. Whatever that parser
    /// does not accept (help, the version, a mistake, any other
    /// subcommand) is parsed again by the whole command line, so what
    /// people see, and every other subcommand, is unchanged; the two share
    /// the definitions of the globals and of both subcommands' arguments.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        Self::parse_from_args(std::env::args_os())
    }

    /// [`Cli::parse_args`] of `args` (the first is the program's name).
    fn parse_from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        match OneShotCli::try_parse_from(&args) {
            Ok(one_shot) => Ok(one_shot.into()),
            Err(_) => Cli::try_parse_from(&args),
        }
    }
}

/// The command line of the one-shot calls alone (see [`Cli::parse_args`]).
#[derive(Debug, Parser)]
#[command(name = "airlock")]
struct OneShotCli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: OneShotCommand,
}

#[derive(Debug, Subcommand)]
enum OneShotCommand {
    Run(CallArgs),
    Query(QueryArgs),
}

impl From<OneShotCli> for Cli {
    fn from(one_shot: OneShotCli) -> Cli {
        let command = match one_shot.command {
            OneShotCommand::Run(call) => Command::Run(call),
            OneShotCommand::Query(query) => Command::Query(query),
        };
        Cli { globals: one_shot.globals, command }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create airlock.toml, the state directory, data/ and results/ ceilings
    /// and an example tool in the current directory.
    Init,
    /// Run one tool call: prepare, authorize, run in the sandbox, publish.
    Run(CallArgs),
    /// Approve exactly one prepared call, by its descriptor digest: sign an
    /// approval with your approver key (pinned in `[approval] approvers`).
    Approve {
        /// The descriptor digest (`sha256:…`) from `airlock approvals list` or the prepare envelope.
        digest: String,
        /// Your approver key (default: $XDG_CONFIG_HOME/airlock/approver.key, else ~/.config/airlock/approver.key).
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// The invocation to approve, when several waiting calls share the digest.
        #[arg(long, value_name = "ID")]
        invocation: Option<String>,
    },
    /// Make an approver key (run as the approver, not as the user that runs calls).
    #[command(subcommand)]
    Approver(ApproverCommand),
    /// List, show or deny the prepared calls that wait for an approval.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Run a prepared (and, if it needs it, approved) call once, from its snapshots.
    Dispatch {
        /// The invocation id.
        id: String,
    },
    /// Validate a call, snapshot its inputs, hold its output parent and print
    /// the descriptor; keep the prepared call for a later dispatch.
    Prepare(CallArgs),
    /// Answer a bounded source query beneath the configured ceilings:
    /// read_file, list_files and grep_files in-process with no worker;
    /// git_status, git_log, git_diff and git_staged_diff from a private
    /// snapshot of the repository, in a sandbox.
    Query(QueryArgs),
    /// Run a command that reaches named directory roots only through a
    /// confined broker: `airlock isolated --root data=./data:r -- sh -c 'airlock-fs read data a.txt'`.
    Isolated(IsolatedArgs),
    /// List, validate or describe tools.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Inspect, clean or release reservations of the shared staging pool.
    #[command(subcommand)]
    Staging(StagingCommand),
    /// Verify or show the signed journal.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Drive a `[session]` tool (a REPL, sqlite3) held by a long-lived
    /// airlock process: start, send declared commands, finalize to publish,
    /// or close to discard.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Inspect or recover one invocation.
    #[command(subcommand)]
    Invocation(InvocationCommand),
    /// Print an in-toto statement (DSSE, signed with the journal key) of what
    /// an invocation published.
    Attest {
        /// Invocation id.
        id: String,
    },
    /// Print the Cedar schema or the built-in default policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Print the JSON Schema (draft 2020-12) of what airlock answers.
    #[command(subcommand)]
    Schema(SchemaCommand),
    /// Serve every runnable tool to MCP clients: over stdio (default),
    /// streamable HTTP at http://ADDR/mcp with --http (loopback only; every
    /// request carries the bearer token), or on a Unix socket with --unix
    /// (each peer uid mapped to a principal by [mcp.principals]).
    /// `airlock mcp pin TOOL` prints an [mcp] tool's upstream schema digest.
    #[command(args_conflicts_with_subcommands = true)]
    Mcp {
        /// `pin TOOL` instead of serving.
        #[command(subcommand)]
        action: Option<McpCommand>,
        /// Serve streamable HTTP on this loopback address (IP:PORT or localhost:PORT; port 0 picks one, printed on stderr).
        #[arg(long, value_name = "ADDR", conflicts_with = "unix")]
        http: Option<String>,
        /// The bearer token file of --http (default: STATE/mcp/token; made 0600 if missing).
        #[arg(long, value_name = "FILE", requires = "http")]
        token_file: Option<PathBuf>,
        /// Serve streamable HTTP on a Unix socket made at PATH (its directory must be yours).
        #[arg(long, value_name = "PATH")]
        unix: Option<PathBuf>,
    },
    /// Serve calls of a NATS cluster on a tier of this host (`[cluster]`
    /// gives the defaults): pull each call of the tier and pool, verify the
    /// edge's signature and every blob, run it, answer with a signed
    /// receipt. SIGTERM drains: the call in hand finishes, no more are
    /// taken.
    Worker(WorkerArgs),
    /// Set up a NATS cluster for airlock: its streams and buckets, and the
    /// keys it trusts.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// The cluster's workers, as each last reported.
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Report what this host supports (user namespaces, Landlock, seccomp,
    /// openat2, cgroup delegation), which tiers can run here, and which
    /// configuration file is in use and why.
    Doctor {
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `airlock completions bash > /etc/bash_completion.d/airlock`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of airlock, or of one subcommand:
    /// `airlock man | man -l -`.
    Man {
        /// A subcommand (its page is airlock-SUBCOMMAND(1)).
        subcommand: Option<String>,
    },
}

/// `airlock worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The cluster's NATS URL(s), comma-separated (default: `[cluster] nats`).
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// The tier of this host calls run on (default: `[sandbox] tier`).
    #[arg(long, value_name = "TIER", value_parser = parse_tier)]
    pub tier: Option<airlock_core::config::Tier>,
    /// The pool served (default: `[cluster] pool`, else `default`).
    #[arg(long, value_name = "NAME")]
    pub pool: Option<String>,
}

/// `airlock cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create the streams and buckets (`[cluster] replicas` copies each) and
    /// pin this airlock's key (its `journal.pub`) as an edge's.
    Init {
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
    /// Pin a public key (`ed25519:<hex>`, from a `journal.pub` or the line
    /// `airlock worker` prints) as an edge's or a worker's.
    Trust {
        /// `edge` (signs calls) or `worker` (signs receipts).
        #[arg(value_parser = ["edge", "worker"])]
        role: String,
        /// The key.
        key: String,
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
    /// Make a user NKey: its seed goes to FILE (new, mode 0600; name it in
    /// `[cluster] nkey_file`), its public key is printed for the server's
    /// configuration (an account's `users: [{ nkey: U… }]`).
    Nkey {
        /// Where the seed goes (must not exist).
        file: std::path::PathBuf,
    },
    /// The cluster's Cedar policy bundle (edges with `[cluster]
    /// policy_bundle = true` authorize with it).
    #[command(subcommand)]
    Policy(ClusterPolicyCommand),
    /// Journal each second valid receipt of a call this edge answered (the
    /// call also ran on another worker: delivery is at least once) as
    /// `ClusterResultDuplicated`, once; publishes nothing.
    Reconcile {
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
}

/// `airlock cluster policy …`.
#[derive(Debug, Subcommand)]
pub enum ClusterPolicyCommand {
    /// Check FILEs as policy files (against the tools here) and store them
    /// as the cluster's bundle; prints its revision and SHA-256.
    Push {
        /// The Cedar files, in order.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
    /// The bundle's revision, SHA-256 and size.
    Show {
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
}

/// `airlock workers …`.
#[derive(Debug, Subcommand)]
pub enum WorkersCommand {
    /// Each worker's key, tier, pool, host, state, calls served and when it
    /// last reported.
    List {
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
}

/// `airlock approver …`.
#[derive(Debug, Subcommand)]
pub enum ApproverCommand {
    /// Make a new Ed25519 approver key (0600, in a directory only you may
    /// change, never inside a ceiling, broker root or the state directory)
    /// and print the `[[approval.approvers]]` entry that pins it.
    Init {
        /// Where to keep the key (default: $XDG_CONFIG_HOME/airlock/approver.key, else ~/.config/airlock/approver.key).
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// Your approver id (1-64 of A-Z a-z 0-9 . _ - @; default: $USER, else "approver").
        #[arg(long, value_name = "NAME")]
        id: Option<String>,
    },
}

/// `airlock approvals …`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// The prepared calls waiting for an approval: id, tool, digest, principal, prepared and expiry times.
    List {
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
    /// One prepared call: where it stands and its descriptor.
    Show {
        /// Invocation id.
        id: String,
    },
    /// Refuse a waiting call: it never runs, and its staged copies are released.
    Deny {
        /// Invocation id.
        id: String,
        /// Why (journaled).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
}

/// `airlock staging …`.
#[derive(Debug, Subcommand)]
pub enum StagingCommand {
    /// The pool's size, what is reserved, by which invocation and process.
    Status {
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
    /// Remove the staged copies of callers that are gone, then release
    /// their reservations.
    Gc,
    /// Release the reservation of one invocation that no live process holds
    /// (e.g. a prepared call that will never be dispatched): its staged
    /// copies are removed first.
    Release {
        /// Invocation id.
        id: String,
    },
}

/// `airlock session …`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a session of a `[session]` tool (its inputs snapshotted, its
    /// output held) and print its id.
    Start(CallArgs),
    /// Send one declared command with its argument (checked against the
    /// command's whole-string pattern before anything is written).
    Send {
        /// The session id.
        session: String,
        /// A command the manifest declares (`[session.commands.NAME]`).
        command: String,
        /// Its argument (one line).
        #[arg(default_value = "")]
        arg: String,
        /// Return the output with its terminal escape sequences (never interpreted).
        #[arg(long)]
        raw: bool,
    },
    /// Run the finalize command, end the session and publish its output.
    Finalize {
        /// The session id.
        session: String,
        /// The finalize command's argument.
        #[arg(default_value = "")]
        arg: String,
        /// Which finalize command (default: the manifest's first).
        #[arg(long, value_name = "NAME")]
        command: Option<String>,
    },
    /// End a session without publishing anything; its staging is discarded.
    Close {
        /// The session id.
        session: String,
    },
    /// The live sessions.
    List,
    /// The holder process itself (started by `session start`).
    #[command(hide = true)]
    Serve,
}

/// A tool and its arguments.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// A manifest path, or a tool name found in the tools directory.
    pub tool: String,
    /// Positional argument values, in the order of `[args.*].position`.
    pub values: Vec<String>,
    /// A named argument value (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE")]
    pub named: Vec<String>,
    /// Use this invocation id instead of a fresh one (1-64 of A-Z a-z 0-9 . _ -).
    #[arg(long, value_name = "ID")]
    pub invocation_id: Option<String>,
    /// Run the worker on this tier (native, gvisor, docker, microvm, or
    /// cluster: a worker of `[cluster]`); it must be in `[sandbox] tiers`
    /// and agree with the manifest's `[tool.sandbox] tier`.
    #[arg(long, value_name = "TIER", value_parser = parse_tier)]
    pub tier: Option<airlock_core::config::Tier>,
}

fn parse_tier(name: &str) -> Result<airlock_core::config::Tier, String> {
    airlock_core::config::Tier::parse(name)
        .ok_or_else(|| format!("{name:?} is not a tier (native, gvisor, docker, microvm, cluster)"))
}

/// A source operation and its arguments.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// read_file, list_files, grep_files, git_status, git_log, git_diff or git_staged_diff.
    pub operation: String,
    /// Arguments as NAME=VALUE (read_file: path, offset, limit; list_files:
    /// path; grep_files: pattern, path; git_*: path (the repository, default
    /// `.`), and for git_log max_count).
    #[arg(value_name = "NAME=VALUE")]
    pub pairs: Vec<String>,
    /// Use this invocation id instead of a fresh one (1-64 of A-Z a-z 0-9 . _ -).
    #[arg(long, value_name = "ID")]
    pub invocation_id: Option<String>,
}

/// `airlock isolated`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct IsolatedArgs {
    /// `recover`: clean up after a crashed submission.
    #[command(subcommand)]
    pub action: Option<IsolatedCommand>,
    /// A root the command may reach: NAME=PATH:RIGHTS, rights any of r
    /// (read), w (create/replace), l (list). Repeat for more (at most 64).
    #[arg(long = "root", value_name = "NAME=PATH:RIGHTS")]
    pub roots: Vec<String>,
    /// Refuse to start unless the broker executable has this SHA-256 (hex).
    #[arg(long, value_name = "HEX")]
    pub broker_sha256: Option<String>,
    /// Deadline for the whole submission, in seconds (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Use this invocation id instead of a fresh one (1-64 of A-Z a-z 0-9 . _ -).
    #[arg(long, value_name = "ID")]
    pub invocation_id: Option<String>,
    /// The command, after `--`. Inside, `airlock-fs read|write|list ROOT PATH`
    /// and the Python module `airlock_fs` reach the roots.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `airlock isolated recover`.
#[derive(Debug, Subcommand)]
pub enum IsolatedCommand {
    /// Remove the staging entries crashed submissions left (their records
    /// must name only roots granted here, at the same path and identity).
    Recover {
        /// A root, as given to the submission: NAME=PATH:RIGHTS.
        #[arg(long = "root", value_name = "NAME=PATH:RIGHTS", required = true)]
        roots: Vec<String>,
    },
}

/// `airlock tools …`.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the tools in the tools directory, and whether each can run.
    List {
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
    /// Check manifests (all in the tools directory when none are named).
    Validate {
        /// Manifest paths or tool names.
        tools: Vec<String>,
    },
    /// Print the JSON Schema of a tool's arguments.
    Schema {
        /// A manifest path or tool name.
        tool: String,
    },
}

/// `airlock journal …`.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Check every signature and the hash chain from the public key alone.
    Verify {
        /// Pinned public key file (`ed25519:HEX`); default: the state dir's journal.pub.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
        /// One journal file to check (a segment, or an exported copy);
        /// default: every segment in the state dir, as one chain.
        #[arg(long, value_name = "FILE")]
        journal: Option<PathBuf>,
        /// Also compare every kept record with the cluster's journal stream
        /// (`[cluster]`): a record the stream holds that is missing here or
        /// differs is `journal.stream_mismatch`.
        #[arg(long, conflicts_with = "journal")]
        against_stream: bool,
        /// The cluster's NATS URL(s) for --against-stream (default: `[cluster] nats`).
        #[arg(long, value_name = "URL", requires = "against_stream")]
        nats: Option<String>,
    },
    /// Append the records the cluster's journal stream lacks (each call does
    /// this when `[cluster] journal` is not "off").
    Push {
        /// The cluster's NATS URL(s) (default: `[cluster] nats`).
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
    /// Print the journal, one record a line on a terminal (else one envelope holding every record).
    Show {
        /// Print the JSON envelope even on a terminal (the default when stdout is not a terminal).
        #[arg(long)]
        json: bool,
    },
    /// Copy sealed segment N to FILE (created, never replaced) and mark it
    /// exported, so `prune` may remove it.
    Export {
        /// The sealed segment's number.
        #[arg(long, value_name = "N")]
        segment: u64,
        /// Where to write it.
        file: PathBuf,
    },
    /// Remove the sealed segments numbered below N (exported ones only,
    /// unless --allow-unexported); a signed JournalPruned record says so.
    Prune {
        /// Keep segment N and later.
        #[arg(long, value_name = "N")]
        before: u64,
        /// Also remove segments that were never exported.
        #[arg(long)]
        allow_unexported: bool,
    },
}

/// `airlock invocation …`.
#[derive(Debug, Subcommand)]
pub enum InvocationCommand {
    /// Where an invocation's publication stands: settled, ready_to_publish,
    /// published, unannounced, missing or conflict.
    Inspect {
        /// Invocation id.
        id: String,
    },
    /// Finish or discard an interrupted publication (never re-runs the tool).
    Recover {
        /// Invocation id.
        id: String,
        /// Give up the candidate when the state is missing or conflict.
        #[arg(long)]
        discard: bool,
    },
}

/// `airlock mcp …` besides serving.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Discover the upstream tool of an [mcp] tool (in a worker with no
    /// call's files) and print its schema, its SchemaPin digest and the
    /// signature request for `[mcp.schema_pin]`.
    Pin {
        /// The [mcp] tool (name or manifest path).
        tool: String,
    },
}

/// `airlock policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// The Cedar schema policies are validated against (from the tools directory).
    Schema,
    /// The built-in policy used when `[policy] files` names none.
    ShowDefault,
}

/// `airlock schema …`.
#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// The envelope every call answers with (DESIGN.md §3, "Envelope").
    Envelope,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn argv(line: &str) -> Vec<&str> {
        std::iter::once("airlock").chain(line.split_whitespace()).collect()
    }

    #[test]
    fn both_command_lines_are_well_formed() {
        Cli::command().debug_assert();
        OneShotCli::command().debug_assert();
    }

    #[test]
    fn a_one_shot_call_parses_as_the_whole_command_line_parses_it() {
        for line in [
            "run copy data/in.txt results/out.txt",
            "--pretty run copy data/in.txt results/out.txt --principal ada",
            "run --tier native --invocation-id inv-1 copy a b --arg x=1 --arg y=2",
            "--config c.toml --verbose run copy -- -a -b",
            "query git_status path=data/repo",
            "query grep_files pattern=x path=data --invocation-id q-1 --pretty",
        ] {
            let one_shot = OneShotCli::try_parse_from(argv(line)).map(Cli::from).unwrap();
            let whole = Cli::try_parse_from(argv(line)).unwrap();
            assert_eq!(format!("{one_shot:?}"), format!("{whole:?}"), "{line}");
        }
    }

    #[test]
    fn what_the_one_shot_command_line_refuses_is_the_whole_command_line_s_to_answer() {
        // Each is refused by the one-shot parser; the answer (a value, help,
        // the version, or the error) must be the whole command line's.
        for line in ["--version", "run --help", "help run", "doctor", "journal verify", "run", "run copy --tier moon"] {
            assert!(OneShotCli::try_parse_from(argv(line)).is_err(), "{line}");
            let ours = Cli::parse_from_args(argv(line));
            let whole = Cli::try_parse_from(argv(line));
            match (ours, whole) {
                (Ok(ours), Ok(whole)) => assert_eq!(format!("{ours:?}"), format!("{whole:?}"), "{line}"),
                (Err(ours), Err(whole)) => {
                    assert_eq!(ours.kind(), whole.kind(), "{line}");
                    assert_eq!(ours.to_string(), whole.to_string(), "{line}");
                }
                (ours, whole) => panic!("{line}: {ours:?} vs {whole:?}"),
            }
        }
    }
}
