//! The rules of a source manifest (`[source] operation = "…"`).
//!
//! A source tool is served by the fixed broker (or, for the Git operations,
//! by the Git driver in a worker airlock starts itself), so everything that
//! would make it something else is refused (`source.conflict`): a `[tool]
//! binary`, `[command]`, `[filesystem]`, `[mcp]`, `[session]`, `[http]`,
//! `[browser]`, a mode other than oneshot, callback dispatch, evidence
//! capture, `[tool.limits]` (no worker of its own runs), and output other
//! than `format = "json"` with the builtin parser. An unknown operation is
//! `source.operation_unknown`; arguments must be parameters of the
//! operation (`read_file`: path, offset, limit; `list_files`: path;
//! `grep_files`: pattern, path; the Git operations: path and, for
//! `git_log`, max_count), and its required parameters must be declared.
//! Values are checked by the manifest, then again by the engine that serves
//! the operation. A leading `-` in a source argument is data: no argv is
//! built.
//!
//! A Git operation with `human_approval` or risk tier high or critical is
//! refused (`manifest.unsupported`): its result is released only inside the
//! call that prepared it. A `read_file`, `list_files` or `grep_files` tool
//! with them waits for an exact-call approval: its sealed result is kept
//! and released by `airlock dispatch` once approved (issue 24). `airlock
//! prepare` of a source tool is refused either way.

use super::model::{Dispatch, Mode, OutputFormat};
use super::Manifest;
use crate::reason::{ReasonCode, Refusal};
use crate::source::SourceOp;

/// The operation of a source manifest, after every rule above.
pub(crate) fn check(m: &Manifest) -> Result<SourceOp, Refusal> {
    let Some(def) = &m.source else {
        return Err(Refusal::new(ReasonCode::ManifestInvalid, format!("{}: no [source] section", m.origin)));
    };
    let op = SourceOp::parse(&def.operation).ok_or_else(|| {
        let known: Vec<&str> = SourceOp::ALL.iter().map(|o| o.as_str()).collect();
        Refusal::new(
            ReasonCode::SourceOperationUnknown,
            format!("{}: [source] operation {:?} is not one of {}", m.origin, def.operation, known.join(", ")),
        )
    })?;
    let conflicts = conflicts(m);
    if !conflicts.is_empty() {
        return Err(Refusal::new(
            ReasonCode::SourceConflict,
            format!(
                "{}: a [source] tool is served by the fixed broker and cannot also declare: {}",
                m.origin,
                conflicts.join("; ")
            ),
        ));
    }
    if op.is_git() && (m.tool.human_approval || m.tool.risk_tier >= super::RiskTier::High) {
        return Err(Refusal::new(
            ReasonCode::ManifestUnsupported,
            format!(
                "{}: exact-call approval of a Git query (human_approval, or risk_tier high or critical) is not \
                 supported: the result is released only within the call that prepared it",
                m.origin
            ),
        ));
    }
    let params = op.parameters();
    for name in m.args.keys() {
        if !params.iter().any(|(p, _)| p == name) {
            let names: Vec<&str> = params.iter().map(|(p, _)| *p).collect();
            return Err(Refusal::new(
                ReasonCode::SourceConflict,
                format!(
                    "{}: [args.{name}] is not a parameter of {op} (its parameters: {})",
                    m.origin,
                    names.join(", ")
                ),
            ));
        }
    }
    for (name, required) in params {
        if *required && !m.args.contains_key(*name) {
            return Err(Refusal::new(
                ReasonCode::ManifestInvalid,
                format!("{}: {op} needs the argument {name:?}; declare [args.{name}]", m.origin),
            ));
        }
    }
    Ok(op)
}

/// Everything a source manifest declares that a source tool cannot have.
fn conflicts(m: &Manifest) -> Vec<String> {
    let mut found = Vec::new();
    for (present, what) in [
        (m.tool.binary.is_some(), "[tool] binary"),
        (m.command.is_some(), "[command]"),
        (m.filesystem.is_some(), "[filesystem]"),
        (m.mcp.is_some(), "[mcp]"),
        (m.session.is_some(), "[session]"),
        (m.http.is_some(), "[http]"),
        (m.browser.is_some(), "[browser]"),
        (m.tool.mode != Mode::Oneshot, "a mode other than oneshot"),
        (m.tool.dispatch == Dispatch::Callback, "dispatch = \"callback\""),
        (m.tool.evidence.as_ref().is_some_and(|e| e.capture), "[tool.evidence] capture"),
        (m.tool.limits.is_some(), "[tool.limits] (no worker runs)"),
    ] {
        if present {
            found.push(what.to_owned());
        }
    }
    match &m.output {
        None => found.push("no [output] (format = \"json\" is required)".to_owned()),
        Some(out) => {
            if out.format != OutputFormat::Json {
                found.push(format!("[output] format = {:?} (only \"json\")", out.format.as_str()));
            }
            if out.parser.as_deref().is_some_and(|p| p != "builtin:json") {
                found.push("[output] parser (a custom parser)".to_owned());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "[tool]\nname = \"q\"\nversion = \"1\"\ndescription = \"d\"\n";
    const OUT: &str = "[output]\nformat = \"json\"\n";

    fn parse(text: &str) -> Manifest {
        Manifest::parse(text, "q.clad.toml").unwrap()
    }

    fn code(text: &str) -> ReasonCode {
        parse(text).check_executable().unwrap_err().code
    }

    #[test]
    fn bundled_shapes_are_executable() {
        let read = format!(
            "{HEAD}[source]\noperation = \"read_file\"\n[args.path]\ntype = \"path\"\nrequired = true\n\
             [args.offset]\ntype = \"integer\"\n{OUT}"
        );
        let m = parse(&read);
        m.check_executable().unwrap();
        assert_eq!(m.source_operation().unwrap().unwrap(), SourceOp::ReadFile);
        let list = format!("{HEAD}[source]\noperation = \"list_files\"\n{OUT}");
        parse(&list).check_executable().unwrap();
    }

    #[test]
    fn every_conflicting_backend_is_refused_with_its_own_code() {
        let base = format!("{HEAD}[source]\noperation = \"list_files\"\n{OUT}");
        for extra in [
            "[command]\nexec = [\"ls\"]\n",
            "[filesystem]\nread = [\"data/x\"]\n",
            "[mcp]\nserver = \"x\"\n",
            "[session]\nstartup_command = \"x\"\nready_pattern = \"> \"\n[session.commands.a]\npattern = \"a\"\n",
            "[http]\nurl = \"x\"\n",
            "[browser]\nengine = \"x\"\n",
        ] {
            assert_eq!(code(&format!("{base}{extra}")), ReasonCode::SourceConflict, "{extra}");
        }
        let with_binary = base.replace("version = \"1\"", "version = \"1\"\nbinary = \"ls\"");
        assert_eq!(code(&with_binary), ReasonCode::SourceConflict);
        let session = base.replace("version = \"1\"", "version = \"1\"\nmode = \"session\"");
        assert_eq!(code(&session), ReasonCode::SourceConflict);
        let text = base.replace("format = \"json\"", "format = \"text\"");
        assert_eq!(code(&text), ReasonCode::SourceConflict);
        let no_output = format!("{HEAD}[source]\noperation = \"list_files\"\n");
        assert_eq!(code(&no_output), ReasonCode::SourceConflict);
    }

    #[test]
    fn operations_and_arguments_are_checked() {
        let unknown = format!("{HEAD}[source]\noperation = \"write_file\"\n{OUT}");
        assert_eq!(code(&unknown), ReasonCode::SourceOperationUnknown);
        let git = format!("{HEAD}[source]\noperation = \"git_log\"\n[args.max_count]\ntype = \"integer\"\n{OUT}");
        assert!(crate::manifest::Manifest::parse(&git, "t").unwrap().check_executable().is_ok());
        let git_extra =
            format!("{HEAD}[source]\noperation = \"git_status\"\n[args.max_count]\ntype = \"integer\"\n{OUT}");
        assert_eq!(code(&git_extra), ReasonCode::SourceConflict);
        let extra_arg = format!("{HEAD}[source]\noperation = \"list_files\"\n[args.depth]\ntype = \"integer\"\n{OUT}");
        assert_eq!(code(&extra_arg), ReasonCode::SourceConflict);
        let missing = format!("{HEAD}[source]\noperation = \"grep_files\"\n{OUT}");
        assert_eq!(code(&missing), ReasonCode::ManifestInvalid);
        let high = format!("{HEAD}risk_tier = \"high\"\n[source]\noperation = \"git_status\"\n{OUT}");
        assert_eq!(code(&high), ReasonCode::ManifestUnsupported);
        let high = format!("{HEAD}risk_tier = \"high\"\n[source]\noperation = \"list_files\"\n{OUT}");
        assert!(crate::manifest::Manifest::parse(&high, "t").unwrap().check_executable().is_ok());
    }

    #[test]
    fn a_needle_may_start_with_a_dash() {
        let grep = format!(
            "{HEAD}[source]\noperation = \"grep_files\"\n[args.pattern]\ntype = \"literal_text\"\nrequired = true\n{OUT}"
        );
        let m = parse(&grep);
        let args = m.bind_args(&[], &[("pattern".into(), serde_json::Value::String("--flag".into()))]).unwrap();
        assert_eq!(args.as_strings()["pattern"], "--flag");
    }
}
