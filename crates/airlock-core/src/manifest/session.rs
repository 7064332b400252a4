//! `[session]`: a long-lived interactive program driven over a terminal
//! (ToolClad session mode).
//!
//! ```toml
//! [session]
//! startup_command = "python3 -q -i"      # split like [command] template
//! ready_pattern = '^>>> $'               # the prompt: matched on the last line
//! startup_timeout_seconds = 30
//! interaction_timeout_seconds = 60
//! [session.commands.eval]
//! pattern = '[ -~]{1,400}'               # the WHOLE argument must match
//! [session.commands.save]
//! pattern = 'save\(\)'
//! finalize = true                        # runs, waits for the prompt, publishes
//! ```
//!
//! The startup command is the call's argv (substituted like `[command]
//! template`); `[session]` beside `[command]` is refused. Each command's
//! `pattern` is compiled anchored (`^(?:…)$`, the `regex` crate, bounded in
//! size), so an argument is written to the terminal only when all of it
//! matches; control characters other than tab never are. A manifest with a
//! `[filesystem] create` must declare a `finalize = true` command.
//!
//! Beside `[mcp]`, `[session]` holds the upstream MCP server as a session:
//! the server is `[mcp] server` and it is ready once it answered
//! `initialize`, so `startup_command` and `ready_pattern` are refused there;
//! each command names an upstream tool the session may call, its `pattern`
//! matched on the whole JSON text of that call's arguments; finalize closes
//! the server (no command has `finalize = true`).

use super::model::RiskTier;
use crate::reason::{ReasonCode, Refusal};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Longest pattern text, in bytes.
const MAX_PATTERN_BYTES: usize = 1024;
/// Compiled size bound of one pattern (the `regex` crate's `size_limit`).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;
/// Most commands a session declares.
const MAX_COMMANDS: usize = 64;
/// Default bytes of output read for one interaction (4 MiB, as Symbiont).
pub const DEFAULT_MAX_INTERACTION_BYTES: u64 = 4 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSession {
    startup_command: Option<String>,
    ready_pattern: Option<String>,
    #[serde(default = "default_startup")]
    startup_timeout_seconds: u64,
    #[serde(default = "default_interaction")]
    interaction_timeout_seconds: u64,
    #[serde(default = "default_idle")]
    idle_timeout_seconds: u64,
    #[serde(default = "default_session")]
    session_timeout_seconds: u64,
    max_interactions: Option<u64>,
    max_interaction_bytes: Option<u64>,
    #[serde(default)]
    commands: BTreeMap<String, RawCommand>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    pattern: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    finalize: bool,
    risk_tier: Option<RiskTier>,
    #[serde(default)]
    human_approval: bool,
}

fn default_startup() -> u64 {
    30
}
fn default_interaction() -> u64 {
    60
}
fn default_idle() -> u64 {
    1800
}
fn default_session() -> u64 {
    7200
}

/// A compiled `[session]`.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// `startup_command`, as written (empty for an `[mcp]` session: its
    /// argv is `[mcp] server`).
    pub startup_command: String,
    /// `ready_pattern`, matched on the last line of the output (`None` for
    /// an `[mcp]` session: it is ready once `initialize` is answered).
    pub ready: Option<Regex>,
    /// The session holds an `[mcp]` upstream server: each command is one
    /// `tools/call` of the upstream tool of its name.
    pub mcp: bool,
    /// Seconds for the program to show its prompt after start.
    pub startup_timeout_seconds: u64,
    /// Seconds for one interaction's prompt to return.
    pub interaction_timeout_seconds: u64,
    /// Seconds a session may sit unused before it is discarded.
    pub idle_timeout_seconds: u64,
    /// Seconds a session may live at all.
    pub session_timeout_seconds: u64,
    /// Most interactions in one session (`None`: no bound).
    pub max_interactions: Option<u64>,
    /// Most output bytes read for one interaction.
    pub max_interaction_bytes: u64,
    /// `[session.commands.NAME]`, by name.
    pub commands: BTreeMap<String, SessionCommand>,
}

/// One `[session.commands.NAME]`.
#[derive(Debug, Clone)]
pub struct SessionCommand {
    /// The whole-string pattern of its argument (anchored at compile).
    pub pattern: Regex,
    /// `pattern` as written.
    pub pattern_text: String,
    /// For people.
    pub description: String,
    /// Runs, waits for the prompt, ends the session and publishes its output.
    pub finalize: bool,
    /// The command's risk tier (`None`: the tool's).
    pub risk_tier: Option<RiskTier>,
    /// The command needs an exact-call approval.
    pub human_approval: bool,
}

impl SessionCommand {
    /// `Ok` when `arg` may be written to the terminal: all of it matches
    /// the pattern and it holds no control character but tab.
    pub fn check(&self, name: &str, arg: &str) -> Result<(), Refusal> {
        if let Some(c) = arg.chars().find(|c| c.is_control() && *c != '\t') {
            return Err(Refusal::new(
                ReasonCode::SessionArgument,
                format!("the argument of {name} holds the control character {c:?}; nothing was written"),
            ));
        }
        if !self.pattern.is_match(arg) {
            return Err(Refusal::new(
                ReasonCode::SessionArgument,
                format!(
                    "the argument of {name} does not match its whole-string pattern {:?}; nothing was written",
                    self.pattern_text
                ),
            ));
        }
        Ok(())
    }
}

impl SessionSpec {
    /// Whether the last line of `text` (its `\r` removed) matches the ready pattern.
    pub fn is_ready(&self, text: &str) -> bool {
        let last = text.rsplit('\n').next().unwrap_or("");
        let last = last.replace('\r', "");
        self.ready.as_ref().is_some_and(|r| r.is_match(&last))
    }

    /// The command named `name`.
    pub fn command(&self, name: &str) -> Result<&SessionCommand, Refusal> {
        self.commands.get(name).ok_or_else(|| {
            Refusal::new(
                ReasonCode::SessionCommandUnknown,
                format!(
                    "the session declares no command {name:?} (it has: {})",
                    self.commands.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }
}

fn compile_pattern(what: &str, text: &str, anchored: bool) -> Result<Regex, Refusal> {
    if text.len() > MAX_PATTERN_BYTES {
        return Err(invalid(format!("{what} is longer than {MAX_PATTERN_BYTES} bytes")));
    }
    let source = if anchored { format!("^(?:{text})$") } else { text.to_owned() };
    RegexBuilder::new(&source)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| invalid(format!("{what} {text:?}: {e}")))
}

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ManifestInvalid, message)
}

/// The startup command as a `[command] template`, for the argv.
pub(crate) fn startup_command(table: &toml::Table) -> Result<super::model::CommandDef, Refusal> {
    let text = table
        .get("startup_command")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| invalid("[session] startup_command (a string) is missing".into()))?;
    Ok(super::model::CommandDef {
        exec: None,
        template: Some(text.to_owned()),
        executor: None,
        end_of_options: false,
        defaults: BTreeMap::new(),
        mappings: None,
        conditionals: None,
    })
}

/// Compiles `[session]`; `creates`: the manifest declares an output;
/// `mcp`: it is beside `[mcp]`.
pub(crate) fn compile(table: &toml::Table, creates: bool, mcp: bool) -> Result<SessionSpec, Refusal> {
    let raw: RawSession =
        toml::Value::Table(table.clone()).try_into().map_err(|e| invalid(format!("[session]: {e}")))?;
    let (startup_command, ready_pattern) =
        match (mcp, raw.startup_command, raw.ready_pattern) {
            (true, None, None) => (String::new(), None),
            (true, _, _) => return Err(invalid(
                "[session] beside [mcp]: the server is [mcp] server and it is ready once it answers initialize, so \
                 startup_command and ready_pattern do not apply"
                    .into(),
            )),
            (false, Some(s), Some(r)) if !s.trim().is_empty() => (s, Some(r)),
            (false, Some(_), Some(_)) => return Err(invalid("[session] startup_command is empty".into())),
            (false, _, _) => return Err(invalid("[session] needs startup_command and ready_pattern".into())),
        };
    for (key, v) in [
        ("startup_timeout_seconds", raw.startup_timeout_seconds),
        ("interaction_timeout_seconds", raw.interaction_timeout_seconds),
        ("idle_timeout_seconds", raw.idle_timeout_seconds),
        ("session_timeout_seconds", raw.session_timeout_seconds),
    ] {
        if v == 0 || v > crate::limits::hard::MAX_TIMEOUT_SECONDS {
            return Err(invalid(format!(
                "[session] {key} = {v}: from 1 to {}",
                crate::limits::hard::MAX_TIMEOUT_SECONDS
            )));
        }
    }
    let max_interaction_bytes = raw.max_interaction_bytes.unwrap_or(DEFAULT_MAX_INTERACTION_BYTES);
    if max_interaction_bytes == 0 || max_interaction_bytes > 64 << 20 {
        return Err(invalid(format!("[session] max_interaction_bytes = {max_interaction_bytes}: from 1 to 64 MiB")));
    }
    if raw.commands.is_empty() || raw.commands.len() > MAX_COMMANDS {
        return Err(invalid(format!("[session] declares {} commands: from 1 to {MAX_COMMANDS}", raw.commands.len())));
    }
    let ready = ready_pattern.map(|r| compile_pattern("[session] ready_pattern", &r, false)).transpose()?;
    let mut commands = BTreeMap::new();
    for (name, c) in raw.commands {
        if !super::is_tool_name(&name) {
            return Err(invalid(format!("[session.commands.{name}]: a command name is like a tool name")));
        }
        let pattern = compile_pattern(&format!("[session.commands.{name}] pattern"), &c.pattern, true)?;
        if mcp && c.finalize {
            return Err(invalid(format!(
                "[session.commands.{name}] finalize = true beside [mcp]: an MCP session's finalize closes its server"
            )));
        }
        commands.insert(
            name,
            SessionCommand {
                pattern,
                pattern_text: c.pattern,
                description: c.description,
                finalize: c.finalize,
                risk_tier: c.risk_tier,
                human_approval: c.human_approval,
            },
        );
    }
    if creates && !mcp && !commands.values().any(|c| c.finalize) {
        return Err(invalid(
            "[session] has an output ([filesystem] create) but no command with finalize = true: nothing could \
             publish it"
                .into(),
        ));
    }
    Ok(SessionSpec {
        startup_command,
        ready,
        mcp,
        startup_timeout_seconds: raw.startup_timeout_seconds,
        interaction_timeout_seconds: raw.interaction_timeout_seconds,
        idle_timeout_seconds: raw.idle_timeout_seconds,
        session_timeout_seconds: raw.session_timeout_seconds,
        max_interactions: raw.max_interactions,
        max_interaction_bytes,
        commands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str, creates: bool) -> Result<SessionSpec, Refusal> {
        let text = format!(
            "startup_command = \"python3 -i\"\nready_pattern = '^>>> $'\n[commands.eval]\npattern = '[0-9+]+'\n{extra}"
        );
        compile(&toml::from_str(&text).unwrap(), creates, false)
    }

    #[test]
    fn a_command_pattern_matches_the_whole_argument_only() {
        let s = spec("", false).unwrap();
        let eval = s.command("eval").unwrap();
        assert!(eval.check("eval", "1+1").is_ok());
        assert_eq!(eval.check("eval", "1+1; import os").unwrap_err().code, ReasonCode::SessionArgument);
        assert_eq!(eval.check("eval", "1\n2").unwrap_err().code, ReasonCode::SessionArgument);
        assert_eq!(s.command("rm").unwrap_err().code, ReasonCode::SessionCommandUnknown);
    }

    #[test]
    fn an_output_needs_a_finalize_command() {
        assert_eq!(spec("", true).unwrap_err().code, ReasonCode::ManifestInvalid);
        assert!(spec("[commands.save]\npattern = 'save\\(\\)'\nfinalize = true\n", true).is_ok());
    }

    #[test]
    fn the_prompt_is_matched_on_the_last_line() {
        let s = spec("", false).unwrap();
        assert!(s.is_ready("2\r\n>>> "));
        assert!(!s.is_ready(">>> \r\n2"));
    }

    #[test]
    fn unknown_keys_and_huge_patterns_are_refused() {
        assert!(spec("[commands.x]\npattern = 'a'\nshell = true\n", false).is_err());
        let huge = format!("[commands.x]\npattern = '{}'\n", "a".repeat(2000));
        assert!(spec(&huge, false).is_err());
    }

    #[test]
    fn beside_mcp_there_is_no_startup_command_and_no_finalize_command() {
        let table = |t: &str| toml::from_str::<toml::Table>(t).unwrap();
        let s = compile(&table("[commands.read_file]\npattern = '.*'\n"), true, true).unwrap();
        assert!(s.mcp && s.ready.is_none() && !s.is_ready(">>> "));
        let startup = "startup_command = \"x\"\n[commands.a]\npattern = 'a'\n";
        assert_eq!(compile(&table(startup), false, true).unwrap_err().code, ReasonCode::ManifestInvalid);
        let fin = "[commands.a]\npattern = 'a'\nfinalize = true\n";
        assert_eq!(compile(&table(fin), false, true).unwrap_err().code, ReasonCode::ManifestInvalid);
    }
}
