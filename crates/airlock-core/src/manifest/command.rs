//! `[command]`: the words of argv as written, checked at parse, and the argv
//! of one call.
//!
//! `exec` gives one word an element; `template` is split once with
//! shell-like quoting (see `template`). Either way each word is then a list
//! of literal text and `{placeholders}`, and a value is substituted into its
//! word without ever being split. argv[0] is always literal manifest text.

use super::args::{scalar_string, ShellReach};
use super::bind::BoundArgs;
use super::mapping::{stands_alone, Extras, Fragment, Resolved};
use super::model::{ArgDef, CommandDef};
use super::template::{parse_word, split_template, Segment, Word, OUTPUT_FILE_PLACEHOLDER};
use crate::path::{is_arg_name, RelPath};
use crate::reason::{ReasonCode, Refusal};
use std::collections::BTreeMap;

/// The end-of-options marker inserted when `end_of_options = true`.
pub const END_OF_OPTIONS: &str = "--";

/// A `[command]` after parse.
#[derive(Debug, Clone)]
pub(crate) struct CompiledCommand {
    /// The words of `exec` or `template`; empty for an `executor`.
    pub(crate) words: Vec<Word>,
    /// `[command.defaults]` as strings.
    pub(crate) defaults: BTreeMap<String, String>,
    /// Where `--` goes: before this word (the first with a placeholder).
    pub(crate) end_of_options_at: Option<usize>,
    /// Whether the words came from `exec` (one word an element) rather
    /// than a `template`.
    exec_form: bool,
    /// `[command.mappings]` and `[command.conditionals]`.
    extras: Extras,
}

/// Programs that run a shell, or run their arguments as a command line
/// through one (matched on a literal word's last path component).
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "posh", "rbash", "busybox", "toybox", "fish",
    "csh", "tcsh", "su", "sudo", "runuser", "ssh", "eval",
];

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ManifestInvalid, message)
}

/// Structural checks of `[command]`: exactly one form, words parse, argv[0]
/// is literal and non-empty, no NUL, every placeholder resolvable (an
/// argument, a `[command.defaults]` key, or a reserved `_` name).
pub(crate) fn compile(cmd: &CommandDef, args: &BTreeMap<String, ArgDef>) -> Result<CompiledCommand, Refusal> {
    let forms = [cmd.exec.is_some(), cmd.template.is_some(), cmd.executor.is_some()];
    if forms.iter().filter(|f| **f).count() != 1 {
        return Err(invalid("[command] needs exactly one of exec, template or executor".to_owned()));
    }
    let mut defaults = BTreeMap::new();
    for (key, value) in &cmd.defaults {
        if !is_arg_name(key) {
            return Err(invalid(format!("[command.defaults] key {key:?} is not a valid placeholder name")));
        }
        let text = scalar_string(value)
            .ok_or_else(|| invalid(format!("[command.defaults] {key} must be a string, integer, float or boolean")))?;
        if text.contains('\0') {
            return Err(invalid(format!("[command.defaults] {key} contains NUL")));
        }
        defaults.insert(key.clone(), text);
    }
    let raw_words: Vec<String> = match (&cmd.exec, &cmd.template) {
        (Some(exec), _) => exec.clone(),
        (None, Some(template)) => {
            split_template(template).map_err(|why| invalid(format!("[command] template: {why}")))?
        }
        (None, None) => {
            return Ok(CompiledCommand {
                words: Vec::new(),
                defaults,
                end_of_options_at: None,
                exec_form: false,
                extras: Extras::default(),
            })
        }
    };
    let form = if cmd.exec.is_some() { "exec" } else { "template" };
    let extras =
        Extras::compile(cmd.mappings.as_ref(), cmd.conditionals.as_ref(), args, &defaults, cmd.exec.is_some())?;
    if raw_words.is_empty() {
        return Err(invalid(format!("[command] {form} has no words")));
    }
    let mut words = Vec::with_capacity(raw_words.len());
    for raw in &raw_words {
        if raw.contains('\0') {
            return Err(invalid(format!("[command] {form}: the word {raw:?} contains NUL")));
        }
        let word = parse_word(raw).map_err(|why| invalid(format!("[command] {form}: {why}")))?;
        for name in word.placeholders() {
            if extras.offers(name) && cmd.exec.is_none() && !stands_alone(&word) {
                return Err(invalid(format!(
                    "[command] template: {{{name}}} (a mapping or conditional) must be a word of its own, as in `… {{{name}}} …`"
                )));
            }
            let known = name.starts_with('_') || args.contains_key(name) || defaults.contains_key(name);
            if !known {
                return Err(invalid(format!(
                    "[command] {form}: the placeholder {{{name}}} names no declared argument and no [command.defaults] key"
                )));
            }
        }
        words.push(word);
    }
    let program = &raw_words[0];
    if words[0].has_placeholder() {
        let why = "must come from the manifest, not from a placeholder";
        return Err(invalid(format!("[command] {form}: the program (the first word, {program:?}) {why}")));
    }
    if program.is_empty() {
        return Err(invalid(format!("[command] {form}: the program (the first word) is empty")));
    }
    // Mapped flags are manifest text: `--` goes before the first word that
    // can carry a value.
    let end_of_options_at = if cmd.end_of_options {
        words.iter().position(|w| w.placeholders().any(|p| !extras.is_mapping(p)))
    } else {
        None
    };
    Ok(CompiledCommand { words, defaults, end_of_options_at, exec_form: cmd.exec.is_some(), extras })
}

impl CompiledCommand {
    /// argv\[0\]: literal manifest text (checked at compile); `None` for an
    /// `executor`, which has no words.
    pub(crate) fn program(&self) -> Option<String> {
        let first = self.words.first()?;
        Some(first.segments.iter().map(|s| if let Segment::Text(t) = s { t.as_str() } else { "" }).collect())
    }

    /// Whether a leading `-` in argument `name` is safe: `end_of_options` is on
    /// and every word using `name` comes at or after the `--`.
    pub(crate) fn dash_ok(&self, end_of_options: bool, name: &str) -> bool {
        end_of_options
            && self
                .words
                .iter()
                .enumerate()
                .all(|(i, w)| !self.word_uses(w, name) || self.end_of_options_at.is_some_and(|at| i >= at))
    }

    /// Whether values substituted into this command can reach a shell: an
    /// `executor` or `template` may; an exec form may only when one of its
    /// literal words names a shell (`sh -c …`, `env bash -c …`).
    pub(crate) fn shell_reach(&self) -> ShellReach {
        if !self.exec_form {
            return ShellReach::Template;
        }
        let shell = self.words.iter().filter(|w| !w.has_placeholder()).find_map(|w| {
            let text = word_source(w);
            let base = text.rsplit('/').next().unwrap_or(&text).to_owned();
            SHELLS.contains(&base.as_str()).then_some(base)
        });
        shell.map_or(ShellReach::Never, ShellReach::ShellProgram)
    }

    /// Whether `word` substitutes argument `name`, directly or through a
    /// mapping or conditional.
    fn word_uses(&self, word: &Word, name: &str) -> bool {
        word.placeholders().any(|p| p == name || self.extras.uses(p, name))
    }

    /// Every placeholder name used that is neither a mapping nor a
    /// conditional, in order of first use (a conditional's own
    /// placeholders included).
    pub(crate) fn plain_placeholders(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for name in self.placeholders() {
            let inner = if self.extras.offers(name) { self.extras.inner_placeholders(name) } else { vec![name] };
            for n in inner {
                if !seen.contains(&n) && !self.extras.offers(n) {
                    seen.push(n);
                }
            }
        }
        seen
    }

    /// Every placeholder name used, in order of first use.
    pub(crate) fn placeholders(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for name in self.words.iter().flat_map(Word::placeholders) {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        seen
    }

    /// The argv of one call. `output_file` is the create path of the
    /// filesystem plan.
    pub(crate) fn build(&self, args: &BoundArgs, output_file: Option<&RelPath>) -> Result<Vec<String>, Refusal> {
        let mut argv = Vec::with_capacity(self.words.len() + 1);
        for (i, word) in self.words.iter().enumerate() {
            if self.end_of_options_at == Some(i) {
                argv.push(END_OF_OPTIONS.to_owned());
            }
            self.expand(&mut argv, word, args, output_file)?;
        }
        Ok(argv)
    }

    fn resolve_extra(
        &self,
        name: &str,
        args: &BoundArgs,
        output_file: Option<&RelPath>,
    ) -> Result<Resolved<'_>, Refusal> {
        let arg = |n: &str| args.get(n).map(str::to_owned);
        let value = |n: &str| {
            let found = if n == OUTPUT_FILE_PLACEHOLDER { output_file.map(RelPath::as_str) } else { args.get(n) };
            found.or_else(|| self.defaults.get(n).map(String::as_str)).unwrap_or_default().to_owned()
        };
        self.extras.resolve(name, &arg, &value)
    }

    /// Appends the words of `word`: in a template, a mapping or conditional
    /// standing alone expands into its fragment's words (and those words
    /// likewise); any other word is substituted into one argv word.
    fn expand(
        &self,
        argv: &mut Vec<String>,
        word: &Word,
        args: &BoundArgs,
        output_file: Option<&RelPath>,
    ) -> Result<(), Refusal> {
        if let (false, [Segment::Placeholder(name)]) = (self.exec_form, word.segments.as_slice()) {
            if self.extras.offers(name) {
                if let Resolved::Fragment(Fragment::Words(words)) = self.resolve_extra(name, args, output_file)? {
                    for w in words {
                        self.expand(argv, w, args, output_file)?;
                    }
                }
                return Ok(());
            }
        }
        self.push_word(argv, word, args, output_file)
    }

    /// Substitutes `word` and appends it as one argv word.
    fn push_word(
        &self,
        argv: &mut Vec<String>,
        word: &Word,
        args: &BoundArgs,
        output_file: Option<&RelPath>,
    ) -> Result<(), Refusal> {
        let mut text = String::new();
        let mut absent: Vec<&str> = Vec::new();
        self.substitute(word, args, output_file, &mut text, &mut absent)?;
        match absent.first() {
            None if text.is_empty() && self.exec_form && word.segments.iter().all(|s| self.is_extra(s)) => {}
            None => argv.push(text),
            Some(_) if word.only_placeholders() && absent.len() == word.segments.len() => {}
            Some(name) => {
                return Err(Refusal::new(
                    ReasonCode::ArgMissing,
                    format!("argument `{name}` is absent but the command word {:?} needs it", word_source(word)),
                ))
            }
        }
        Ok(())
    }

    fn is_extra(&self, segment: &Segment) -> bool {
        matches!(segment, Segment::Placeholder(p) if self.extras.offers(p))
    }

    fn substitute<'w>(
        &self,
        word: &'w Word,
        args: &BoundArgs,
        output_file: Option<&RelPath>,
        text: &mut String,
        absent: &mut Vec<&'w str>,
    ) -> Result<(), Refusal> {
        for segment in &word.segments {
            match segment {
                Segment::Text(t) => text.push_str(t),
                Segment::Placeholder(name) if self.extras.offers(name) => {
                    match self.resolve_extra(name, args, output_file)? {
                        Resolved::Fragment(Fragment::Text(inner)) => {
                            let mut inner_absent = Vec::new();
                            self.substitute(inner, args, output_file, text, &mut inner_absent)?;
                            if let Some(missing) = inner_absent.first() {
                                return Err(Refusal::new(
                                    ReasonCode::ArgMissing,
                                    format!("argument `{missing}` is absent but {{{name}}} needs it"),
                                ));
                            }
                        }
                        Resolved::Fragment(Fragment::Words(_)) => {
                            // Compile keeps a template's mappings and conditionals whole words.
                            return Err(Refusal::new(
                                ReasonCode::Internal,
                                format!("{{{name}}} is inside a larger template word"),
                            ));
                        }
                        Resolved::Nothing => {}
                        Resolved::Absent => absent.push(name),
                    }
                }
                Segment::Placeholder(name) => match self.resolve(name, args, output_file)? {
                    Some(value) => text.push_str(value),
                    None => absent.push(name),
                },
            }
        }
        Ok(())
    }

    fn resolve<'a>(
        &'a self,
        name: &str,
        args: &'a BoundArgs,
        output_file: Option<&'a RelPath>,
    ) -> Result<Option<&'a str>, Refusal> {
        if name == OUTPUT_FILE_PLACEHOLDER {
            return output_file.map(|p| Some(p.as_str())).ok_or_else(|| {
                Refusal::new(
                    ReasonCode::ManifestInvalid,
                    format!("the command uses {{{OUTPUT_FILE_PLACEHOLDER}}} but this call creates no file"),
                )
            });
        }
        if name.starts_with('_') {
            return Err(Refusal::new(
                ReasonCode::ManifestUnsupported,
                format!("the placeholder {{{name}}} is not supplied by airlock"),
            ));
        }
        if let Some(value) = args.get(name) {
            return Ok(Some(value));
        }
        Ok(self.defaults.get(name).map(String::as_str))
    }
}

/// The word as the manifest wrote it (for messages).
fn word_source(word: &Word) -> String {
    word.segments
        .iter()
        .map(|s| match s {
            Segment::Text(t) => t.replace('{', "{{").replace('}', "}}"),
            Segment::Placeholder(p) => format!("{{{p}}}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(toml_text: &str) -> CommandDef {
        toml::from_str(toml_text).unwrap()
    }

    fn arg(ty: &str) -> ArgDef {
        toml::from_str(&format!("type = {ty:?}")).unwrap()
    }

    fn args(names: &[&str]) -> BTreeMap<String, ArgDef> {
        names.iter().map(|n| (n.to_string(), arg("string"))).collect()
    }

    fn err(c: &str, a: &[&str]) -> String {
        compile(&cmd(c), &args(a)).unwrap_err().message
    }

    #[test]
    fn exactly_one_form() {
        assert!(err("", &[]).contains("exactly one"));
        assert!(err("exec = [\"a\"]\ntemplate = \"a\"", &[]).contains("exactly one"));
        assert!(compile(&cmd("executor = \"x.sh\""), &args(&[])).unwrap().words.is_empty());
    }

    #[test]
    fn program_comes_from_the_manifest() {
        assert!(err("exec = [\"{prog}\", \"x\"]", &["prog"]).contains("program"));
        assert!(err("exec = [\"/bin/{prog}\"]", &["prog"]).contains("program"));
        assert!(err("exec = [\"\", \"x\"]", &[]).contains("empty"));
        assert!(err("exec = []", &[]).contains("no words"));
        assert!(err("template = \"  \"", &[]).contains("no words"));
        assert!(err("template = \"'' x\"", &[]).contains("empty"));
    }

    #[test]
    fn placeholders_must_resolve() {
        assert!(err("exec = [\"a\", \"{nope}\"]", &["x"]).contains("{nope}"));
        assert!(compile(&cmd("exec = [\"a\", \"{x}\", \"{_output_file}\", \"{_scan_id}\"]"), &args(&["x"])).is_ok());
        let c = compile(&cmd("exec = [\"a\", \"{rate}\"]\n[defaults]\nrate = 1000"), &args(&[])).unwrap();
        assert_eq!(c.defaults["rate"], "1000");
        assert!(err("exec = [\"a\", \"b\\u0000\"]", &[]).contains("NUL"));
        assert!(err("exec = [\"a\", \"{x\"]", &["x"]).contains("not closed"));
        assert!(err("template = \"a 'b\"", &[]).contains("not closed"));
        assert!(err("exec = [\"a\"]\n[defaults]\nx = [1]", &[]).contains("[command.defaults] x"));
    }

    #[test]
    fn end_of_options_position() {
        let c = compile(&cmd("exec = [\"grep\", \"-n\", \"{p}\", \"{f}\"]\nend_of_options = true"), &args(&["p", "f"]))
            .unwrap();
        assert_eq!(c.end_of_options_at, Some(2));
        assert!(c.dash_ok(true, "p") && c.dash_ok(true, "f"));
        assert!(!c.dash_ok(false, "p"));
        let c = compile(&cmd("exec = [\"grep\", \"{p}\"]"), &args(&["p"])).unwrap();
        assert_eq!(c.end_of_options_at, None);
    }

    #[test]
    fn values_reach_a_shell_only_through_a_template_or_a_named_shell() {
        let reach = |c: &str| compile(&cmd(c), &args(&["q", "f"])).unwrap().shell_reach();
        assert_eq!(reach("exec = [\"jq\", \"{q}\", \"{f}\"]"), ShellReach::Never);
        assert_eq!(
            reach("exec = [\"/usr/bin/jq\", \"--arg\", \"sh\", \"{q}\"]"),
            ShellReach::ShellProgram("sh".into())
        );
        assert_eq!(reach("template = \"jq {q} {f}\""), ShellReach::Template);
        assert_eq!(reach("executor = \"x.sh\""), ShellReach::Template);
        assert_eq!(reach("exec = [\"/bin/sh\", \"-c\", \"jq {q}\"]"), ShellReach::ShellProgram("sh".into()));
        assert_eq!(
            reach("exec = [\"env\", \"bash\", \"-c\", \"x\", \"{q}\"]"),
            ShellReach::ShellProgram("bash".into())
        );
        assert_eq!(
            reach("exec = [\"timeout\", \"5\", \"dash\", \"-c\", \"{q}\"]"),
            ShellReach::ShellProgram("dash".into())
        );
        // A shell's name inside a value's word is the value, not a program.
        assert_eq!(reach("exec = [\"grep\", \"sh{q}\"]"), ShellReach::Never);
    }

    #[test]
    fn placeholders_listed_once() {
        let c = compile(&cmd("template = \"t {a} {b}x{a} {_output_file}\""), &args(&["a", "b"])).unwrap();
        assert_eq!(c.placeholders(), ["a", "b", "_output_file"]);
    }
}
