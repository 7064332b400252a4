//! Policy text to a validated Cedar policy set, with every problem located
//! in its file.

use crate::PolicyError;
use cedar_policy as cedar;
use miette::Diagnostic;
use std::collections::HashMap;
use std::str::FromStr;

/// Policies parsed from every source, renamed to their airlock ids.
pub(crate) struct Parsed {
    /// The merged set.
    pub(crate) set: cedar::PolicySet,
    /// Ids in load order (file order, then position in the file).
    pub(crate) ids: Vec<String>,
    /// Where each id came from: source index and byte offset of the policy.
    origins: HashMap<String, (usize, usize)>,
}

/// `line:column` (both from 1, column in characters) of byte `offset` in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `FILE:LINE:COLUMN: ` for `offset`, or `FILE: ` without one.
fn place(file: &str, text: &str, offset: Option<usize>) -> String {
    match offset {
        Some(o) => {
            let (line, column) = line_col(text, o);
            format!("{file}:{line}:{column}: ")
        }
        None => format!("{file}: "),
    }
}

/// The first labelled source offset of a diagnostic.
fn first_offset(d: &dyn Diagnostic) -> Option<usize> {
    d.labels().and_then(|mut labels| labels.next()).map(|l| l.offset())
}

/// The diagnostic's message, with its help when it has one.
fn describe(d: &dyn Diagnostic) -> String {
    let mut text = d.to_string();
    if let Some(help) = d.help() {
        text.push_str(&format!(" (help: {help})"));
    }
    text
}

/// Cedar numbers the policies of one text `policy0`, `policy1`, … in order.
fn ordinal(id: &cedar::PolicyId) -> usize {
    id.to_string().strip_prefix("policy").and_then(|n| n.parse().ok()).unwrap_or(usize::MAX)
}

/// Parses every source. A policy's id is its `@id("…")` annotation, else
/// `FILE#policyN`.
pub(crate) fn parse(sources: &[(String, String)]) -> Result<Parsed, PolicyError> {
    let mut set = cedar::PolicySet::new();
    let mut ids = Vec::new();
    let mut origins: HashMap<String, (usize, usize)> = HashMap::new();
    let mut problems = Vec::new();
    for (index, (file, text)) in sources.iter().enumerate() {
        let parsed = match cedar::PolicySet::from_str(text) {
            Ok(parsed) => parsed,
            Err(errors) => {
                for e in errors.iter() {
                    problems.push(format!("{}{}", place(file, text, first_offset(e)), describe(e)));
                }
                continue;
            }
        };
        for t in parsed.templates() {
            let offset = text.find(&t.to_cedar());
            problems.push(format!(
                "{}policy {} has a slot (?principal or ?resource): templates are not supported, write a static \
                 policy",
                place(file, text, offset),
                t.annotation("id").unwrap_or(t.id().as_ref())
            ));
        }
        let mut policies: Vec<&cedar::Policy> = parsed.policies().collect();
        policies.sort_by_key(|p| ordinal(p.id()));
        let mut from = 0;
        for policy in policies {
            // The policy's own text, found after the previous one's.
            let offset = policy.to_cedar().and_then(|src| {
                let at = text.get(from..)?.find(&src)? + from;
                from = at + src.len();
                Some(at)
            });
            let id = match policy.annotation("id") {
                Some(id) if !id.trim().is_empty() => id.to_owned(),
                Some(_) => {
                    problems.push(format!("{}@id is empty", place(file, text, offset)));
                    continue;
                }
                None => format!("{file}#{}", policy.id()),
            };
            if let Some(&(other, other_offset)) = origins.get(&id) {
                let (ofile, otext) = &sources[other];
                let (line, column) = line_col(otext, other_offset);
                problems.push(format!(
                    "{}policy id {id:?} is already used at {ofile}:{line}:{column}",
                    place(file, text, offset)
                ));
                continue;
            }
            origins.insert(id.clone(), (index, offset.unwrap_or(0)));
            if let Err(e) = set.add(policy.new_id(cedar::PolicyId::new(&id))) {
                problems.push(format!("{}{e}", place(file, text, offset)));
                continue;
            }
            ids.push(id);
        }
    }
    if problems.is_empty() {
        Ok(Parsed { set, ids, origins })
    } else {
        Err(PolicyError::invalid(problems.join("\n")))
    }
}

/// Strict validation against `schema`; each error names the policy, its
/// file and the line and column of the offending expression. Cedar checks
/// a policy once per action it may apply to, so one bad expression yields
/// the same error for every tool: those are said once, with how many
/// actions it failed for.
pub(crate) fn validate(
    parsed: &Parsed,
    validator: &cedar::Validator,
    sources: &[(String, String)],
) -> Result<(), PolicyError> {
    let result = validator.validate(&parsed.set, cedar::ValidationMode::Strict);
    // (file, offset, policy, kind of error) → the first message and how many repeat it.
    type Place = (usize, usize, String, std::mem::Discriminant<cedar::ValidationError>);
    let mut problems: Vec<(Place, String, usize)> = Vec::new();
    for e in result.validation_errors() {
        let id = e.policy_id().to_string();
        let (index, policy_offset) = parsed.origins.get(&id).copied().unwrap_or((usize::MAX, 0));
        let (offset, message) = match sources.get(index) {
            None => (0, format!("policy {id}: {}", describe(e))),
            Some((file, text)) => {
                // An offset inside the policy's file; otherwise the policy's start.
                let offset = first_offset(e).filter(|o| *o <= text.len()).unwrap_or(policy_offset);
                let message = describe(e);
                let message = message.strip_prefix(&format!("for policy `{id}`, ")).unwrap_or(&message);
                (offset, format!("{}policy {id}: {message}", place(file, text, Some(offset))))
            }
        };
        let key = (index, offset, id, std::mem::discriminant(e));
        // The first message by text stands for the rest (Cedar's order is not stable).
        match problems.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, first, count)) => {
                *count += 1;
                if message < *first {
                    *first = message;
                }
            }
            None => problems.push((key, message, 1)),
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    problems.sort_by(|a, b| (a.0 .0, a.0 .1, &a.1).cmp(&(b.0 .0, b.0 .1, &b.1)));
    let lines: Vec<String> = problems
        .into_iter()
        .map(|(_, message, count)| match count {
            1 => message,
            n => format!("{message} (and the same for {} more actions)", n - 1),
        })
        .collect();
    Err(PolicyError::invalid(lines.join("\n")))
}
