//! `[command.mappings]` and `[command.conditionals]`, as ToolClad defines
//! them, compiled at parse into fragments of words.
//!
//! A mapping `[command.mappings.ARG]` turns the value of argument `ARG` into
//! manifest-written flags, offered to the command as `{_ARG_flags}` and
//! `{_ARG}`, and, when `ARG` ends in `_type`, also as `{_PREFIX_flags}`
//! (`scan_type` → `{_scan_flags}`). A conditional `[command.conditionals.NAME]`
//! offers `{_NAME}`: its `template` when `when` holds, else nothing. `when` is
//! a closed vocabulary (ToolClad's): `VAR == LIT`, `VAR != LIT`, a bare `VAR`
//! (non-empty), joined by `and` / `or` (`and` binds tighter). Nothing is
//! evaluated as code.
//!
//! The fragments are split like the command itself *before* any value
//! exists: in a `template`, a placeholder that stands as a word of its own
//! expands into the fragment's words (none when the condition is false); in
//! an `exec` array, where an element is one argv word, the fragment is
//! substituted as text. A value inside a conditional fragment is one word (or
//! part of one), never re-split.

use super::model::ArgDef;
use super::template::{parse_word, split_template, Segment, Word};
use crate::path::is_arg_name;
use crate::reason::{ReasonCode, Refusal};
use std::collections::BTreeMap;

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ManifestInvalid, message)
}

/// The words a mapping or conditional contributes: whole words in a
/// `template`, one text fragment in an `exec` array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Template form: the fragment split into words.
    Words(Vec<Word>),
    /// Exec form: the fragment as one piece of a word.
    Text(Word),
}

impl Fragment {
    fn compile(text: &str, exec_form: bool, what: &str) -> Result<Fragment, Refusal> {
        if text.contains('\0') {
            return Err(invalid(format!("{what} contains NUL")));
        }
        if exec_form {
            return parse_word(text).map(Fragment::Text).map_err(|why| invalid(format!("{what}: {why}")));
        }
        let words = split_template(text).map_err(|why| invalid(format!("{what}: {why}")))?;
        let words = words
            .iter()
            .map(|w| parse_word(w))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| invalid(format!("{what}: {why}")))?;
        Ok(Fragment::Words(words))
    }

    fn placeholders(&self) -> Vec<&str> {
        match self {
            Fragment::Words(ws) => ws.iter().flat_map(Word::placeholders).collect(),
            Fragment::Text(w) => w.placeholders().collect(),
        }
    }
}

/// One compiled `[command.mappings.ARG]`.
#[derive(Debug, Clone)]
struct Mapping {
    arg: String,
    table: BTreeMap<String, Fragment>,
}

/// One side of a comparison in `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Atom {
    /// `VAR == LIT` (`eq = true`) or `VAR != LIT`.
    Compare { var: String, eq: bool, literal: String },
    /// A bare `VAR`: true when non-empty.
    NonEmpty(String),
}

/// `when`, as alternatives of conjunctions.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    any_of: Vec<Vec<Atom>>,
}

impl Condition {
    fn parse(text: &str, known: &dyn Fn(&str) -> bool, what: &str) -> Result<Condition, Refusal> {
        let mut any_of = Vec::new();
        for alternative in text.split(" or ") {
            let mut all_of = Vec::new();
            for part in alternative.split(" and ") {
                all_of.push(parse_atom(part.trim(), known, what)?);
            }
            any_of.push(all_of);
        }
        Ok(Condition { any_of })
    }

    fn holds(&self, value: &dyn Fn(&str) -> String) -> bool {
        self.any_of.iter().any(|all| {
            all.iter().all(|atom| match atom {
                Atom::Compare { var, eq, literal } => (value(var) == *literal) == *eq,
                Atom::NonEmpty(var) => !value(var).is_empty(),
            })
        })
    }
}

fn parse_atom(part: &str, known: &dyn Fn(&str) -> bool, what: &str) -> Result<Atom, Refusal> {
    let check = |var: &str| -> Result<String, Refusal> {
        if is_arg_name(var) && known(var) {
            Ok(var.to_owned())
        } else {
            Err(invalid(format!(
                "{what}: {var:?} is not a declared argument or [command.defaults] key (a condition is `VAR == 'text'`, \
                 `VAR != 'text'` or `VAR`, joined by `and` / `or`)"
            )))
        }
    };
    let (split, eq) = match (part.find("!="), part.find("==")) {
        (Some(i), _) => (Some((i, 2)), false),
        (None, Some(i)) => (Some((i, 2)), true),
        (None, None) => (None, false),
    };
    let Some((at, len)) = split else {
        return Ok(Atom::NonEmpty(check(part)?));
    };
    let var = check(part[..at].trim())?;
    let literal = part[at + len..].trim().trim_matches('\'').trim_matches('"').to_owned();
    Ok(Atom::Compare { var, eq, literal })
}

/// One compiled `[command.conditionals.NAME]`.
#[derive(Debug, Clone)]
struct Conditional {
    when: Condition,
    fragment: Fragment,
}

/// Every mapping and conditional of a command, by the placeholder each offers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Extras {
    mappings: BTreeMap<String, Mapping>,
    conditionals: BTreeMap<String, Conditional>,
}

/// What a placeholder offered by [`Extras`] resolves to for one call.
pub(crate) enum Resolved<'a> {
    /// The fragment to substitute (for a conditional, with its own
    /// placeholders still to resolve).
    Fragment(&'a Fragment),
    /// A conditional that does not hold: nothing.
    Nothing,
    /// The mapped argument is absent.
    Absent,
}

/// The placeholder names a mapping of argument `arg` offers.
fn mapping_names(arg: &str) -> Vec<String> {
    let mut names = vec![format!("_{arg}_flags"), format!("_{arg}")];
    if let Some(prefix) = arg.strip_suffix("_type").filter(|p| !p.is_empty()) {
        names.push(format!("_{prefix}_flags"));
    }
    names
}

impl Extras {
    /// Compiles the mappings and conditionals; `known` says whether a name is
    /// an argument or a `[command.defaults]` key.
    pub(crate) fn compile(
        mappings: Option<&BTreeMap<String, BTreeMap<String, String>>>,
        conditionals: Option<&BTreeMap<String, super::model::ConditionalDef>>,
        args: &BTreeMap<String, ArgDef>,
        defaults: &BTreeMap<String, String>,
        exec_form: bool,
    ) -> Result<Extras, Refusal> {
        let mut extras = Extras::default();
        for (arg, table) in mappings.into_iter().flatten() {
            if !args.contains_key(arg) {
                return Err(invalid(format!("[command.mappings.{arg}] names no declared argument")));
            }
            let mut compiled = BTreeMap::new();
            for (value, flags) in table {
                let what = format!("[command.mappings.{arg}] {value}");
                let fragment = Fragment::compile(flags, exec_form, &what)?;
                if !fragment.placeholders().is_empty() {
                    return Err(invalid(format!("{what}: mapped flags are literal text (write `{{{{` for a brace)")));
                }
                compiled.insert(value.clone(), fragment);
            }
            for name in mapping_names(arg) {
                let mapping = Mapping { arg: arg.clone(), table: compiled.clone() };
                if extras.mappings.insert(name.clone(), mapping).is_some() {
                    return Err(invalid(format!("[command.mappings]: two mappings offer {{{name}}}")));
                }
            }
        }
        let known = |v: &str| args.contains_key(v) || defaults.contains_key(v);
        for (name, def) in conditionals.into_iter().flatten() {
            let what = format!("[command.conditionals.{name}]");
            if !is_arg_name(name) {
                return Err(invalid(format!(
                    "{what}: a conditional name is a letter followed by letters, digits or `_`"
                )));
            }
            let offered = format!("_{name}");
            if extras.mappings.contains_key(&offered) {
                return Err(invalid(format!("{what} offers {{{offered}}}, which a mapping offers too")));
            }
            let when = Condition::parse(&def.when, &known, &format!("{what} when"))?;
            let fragment = Fragment::compile(&def.template, exec_form, &format!("{what} template"))?;
            if let Fragment::Words(words) = &fragment {
                if let Some(w) = words.iter().find(|w| w.placeholders().any(|p| extras.offers(p)) && !stands_alone(w)) {
                    return Err(invalid(format!(
                        "{what} template: a mapping must be a word of its own, not part of {:?}",
                        w.placeholders().collect::<Vec<_>>()
                    )));
                }
            }
            for p in fragment.placeholders() {
                let ok = known(p) || p == super::template::OUTPUT_FILE_PLACEHOLDER || extras.mappings.contains_key(p);
                if !ok {
                    return Err(invalid(format!(
                        "{what} template: the placeholder {{{p}}} names no argument, [command.defaults] key or mapping"
                    )));
                }
            }
            extras.conditionals.insert(offered, Conditional { when, fragment });
        }
        Ok(extras)
    }

    /// Whether the placeholder `offered` substitutes argument `arg`: a
    /// mapping of `arg`, or a conditional whose fragment names `arg`
    /// (directly or through a mapping).
    pub(crate) fn uses(&self, offered: &str, arg: &str) -> bool {
        if let Some(m) = self.mappings.get(offered) {
            return m.arg == arg;
        }
        self.conditionals.get(offered).is_some_and(|c| {
            c.fragment.placeholders().iter().any(|p| *p == arg || self.mappings.get(*p).is_some_and(|m| m.arg == arg))
        })
    }

    /// The placeholders a mapping or conditional substitutes itself (a
    /// conditional's fragment; none for a mapping, whose flags are literal).
    pub(crate) fn inner_placeholders(&self, offered: &str) -> Vec<&str> {
        self.conditionals.get(offered).map(|c| c.fragment.placeholders()).unwrap_or_default()
    }

    /// Whether `name` is a placeholder offered by a mapping (literal flags).
    pub(crate) fn is_mapping(&self, name: &str) -> bool {
        self.mappings.contains_key(name)
    }

    /// Whether `name` is a placeholder offered by a mapping or conditional.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.mappings.contains_key(name) || self.conditionals.contains_key(name)
    }

    /// Resolves `name` (which [`Extras::offers`]) for one call; `value` gives
    /// the text of an argument or default ("" when absent), `arg` the bound
    /// value of an argument.
    pub(crate) fn resolve<'a>(
        &'a self,
        name: &str,
        arg: &dyn Fn(&str) -> Option<String>,
        value: &dyn Fn(&str) -> String,
    ) -> Result<Resolved<'a>, Refusal> {
        if let Some(m) = self.mappings.get(name) {
            let Some(v) = arg(&m.arg) else { return Ok(Resolved::Absent) };
            return m.table.get(&v).map(Resolved::Fragment).ok_or_else(|| {
                Refusal::new(
                    ReasonCode::ArgInvalid,
                    format!(
                        "argument `{}` = {v:?} has no entry in [command.mappings.{}] (mapped values: {})",
                        m.arg,
                        m.arg,
                        m.table.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                    ),
                )
            });
        }
        match self.conditionals.get(name) {
            Some(c) if c.when.holds(value) => Ok(Resolved::Fragment(&c.fragment)),
            Some(_) => Ok(Resolved::Nothing),
            None => Err(Refusal::new(ReasonCode::Internal, format!("{{{name}}} is not a mapping or conditional"))),
        }
    }
}

/// Whether a template word may carry a mapping or conditional: it must be
/// that one placeholder alone, so the fragment's words stay whole words.
pub(crate) fn stands_alone(word: &Word) -> bool {
    matches!(word.segments.as_slice(), [Segment::Placeholder(_)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_names_follow_the_type_suffix_rule() {
        assert_eq!(mapping_names("scan_type"), ["_scan_type_flags", "_scan_type", "_scan_flags"]);
        assert_eq!(mapping_names("mode"), ["_mode_flags", "_mode"]);
        assert_eq!(mapping_names("_type").len(), 2);
    }

    #[test]
    fn conditions_are_a_closed_vocabulary() {
        let known = |v: &str| ["a", "b"].contains(&v);
        let c = Condition::parse("a != '' and b == 'x' or a == 7", &known, "w").unwrap();
        let vals = |a: &'static str, b: &'static str| move |v: &str| if v == "a" { a.into() } else { b.into() };
        assert!(c.holds(&vals("1", "x")));
        assert!(!c.holds(&vals("", "x")));
        assert!(!c.holds(&vals("1", "y")));
        assert!(c.holds(&vals("7", "y")));
        assert!(Condition::parse("a", &known, "w").unwrap().holds(&vals("z", "")));
        assert!(Condition::parse("nope != ''", &known, "w").is_err());
        assert!(Condition::parse("system('x') != ''", &known, "w").is_err());
    }
}
