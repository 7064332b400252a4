//! What a model reads before it calls: each tool's `outputSchema` (the
//! envelope's JSON Schema, with the manifest's `[output] schema` as the
//! schema of `content`), its path arguments described with the virtual
//! roots they may name, and the server's `instructions`, which summarise
//! the operator's ceilings (roots, modes, limits).
//!
//! A path argument's `description` names the roots it may name (read-only
//! or read-write) and, for the output, that it must not exist yet; its
//! `pattern` admits exactly the paths under those roots (left out when a
//! root is the working directory itself, which admits any relative path).
//! The grammar the runtime enforces (no `..`, no absolute path, no link) is
//! only described: the runtime's refusal has the last word.

use airlock_core::envelope_schema;
use airlock_core::manifest::{ArgType, Manifest};
use airlock_core::{CeilingMode, Config};
use serde_json::{json, Map, Value};

/// The `outputSchema` of a tool: the envelope's schema, with `content`
/// described by the manifest's `[output] schema` when it has one (at
/// `content.parsed` for a tool whose stdout is its output file, whose
/// content describes the file), and the `approval` object MCP adds to an
/// `approval.required` result.
pub fn output_schema(m: &Manifest) -> Map<String, Value> {
    let declared = m.output.as_ref().and_then(|o| o.schema.as_ref()).and_then(|t| serde_json::to_value(t).ok());
    let mut schema = match declared {
        Some(parsed) if m.stdout_is_output() => {
            envelope_schema::with_content(json!({ "type": "object", "properties": { "parsed": parsed } }))
        }
        Some(content) => envelope_schema::with_content(content),
        None => envelope_schema::schema(),
    };
    schema["properties"]["approval"] = json!({
        "type": "object",
        "description": "an approval.required call: what waits for an approver (never a command to run)",
        "properties": {
            "descriptor_sha256": { "type": "string" },
            "invocation_id": { "type": "string" },
            "waiting_for": { "const": "approver" }
        }
    });
    match schema {
        Value::Object(o) => o,
        _ => Map::new(),
    }
}

/// `input` (a manifest's input schema) with every `path` argument described
/// by the roots of `config` it may name: the output (`[filesystem]
/// create`) a new file under a read-write root, anything else a file or
/// directory under any root.
pub fn describe_paths(mut input: Map<String, Value>, m: &Manifest, config: &Config) -> Map<String, Value> {
    let Some(Value::Object(properties)) = input.get_mut("properties") else {
        return input;
    };
    for (name, def) in &m.args {
        if ArgType::parse(&def.type_name) != ArgType::Path {
            continue;
        }
        let Some(Value::Object(property)) = properties.get_mut(name) else { continue };
        let creates = m.creates_from_arg(name);
        let parents = m.filesystem.as_ref().is_some_and(|f| f.create_parents);
        let (text, pattern) = path_rule(config, creates, parents);
        let text = match property.get("description").and_then(Value::as_str) {
            Some(own) => format!("{own}. {text}"),
            None => text,
        };
        property.insert("description".into(), Value::String(text));
        if let Some(pattern) = pattern {
            property.insert("pattern".into(), Value::String(pattern));
        }
    }
    input
}

/// The words and the pattern of one path argument.
fn path_rule(config: &Config, creates: bool, parents: bool) -> (String, Option<String>) {
    let roots: Vec<(String, CeilingMode)> = config
        .ceilings
        .iter()
        .filter(|c| if creates { c.mode.creates() } else { c.mode.reads() })
        .map(|c| (c.virtual_root.as_ref().map_or(".", |r| r.as_str()).to_owned(), c.mode))
        .collect();
    if roots.is_empty() {
        let what = if creates { "read-write root" } else { "root" };
        return (format!("No {what} is configured: every call naming a path is refused."), None);
    }
    let named = roots.iter().map(|(r, mode)| format!("{r} ({})", mode_words(*mode))).collect::<Vec<_>>().join(", ");
    let text = if creates {
        let parent = if parents { "missing parent directories are made" } else { "its parent directory must exist" };
        format!(
            "The output: a new file, relative to the working directory, under a read-write root: {named}. It must \
             not exist yet (an existing file is never overwritten: output.exists); {parent}. No '..', no absolute \
             path, no symbolic link."
        )
    } else {
        format!(
            "A path relative to the working directory, under one of the roots: {named}. No '..', no absolute path, \
             no symbolic link."
        )
    };
    let pattern = if roots.iter().any(|(r, _)| r == ".") {
        None
    } else {
        let names = roots.iter().map(|(r, _)| escape(r)).collect::<Vec<_>>().join("|");
        Some(if creates { format!("^(?:{names})/.+$") } else { format!("^(?:{names})(?:/.*)?$") })
    };
    (text, pattern)
}

fn mode_words(mode: CeilingMode) -> &'static str {
    match mode {
        CeilingMode::Ro => "read-only",
        CeilingMode::Rw => "read-write",
        CeilingMode::Create => "create-only",
    }
}

/// `text` with every regular-expression metacharacter escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The server's `instructions`: what the tools are, the ceilings (roots and
/// their modes, the per-call limits) and how answers and errors read.
pub fn instructions(config: &Config) -> String {
    let roots = if config.ceilings.is_empty() {
        "none (no call can name a path)".to_owned()
    } else {
        config
            .ceilings
            .iter()
            .map(|c| format!("{} ({})", c.virtual_root.as_ref().map_or(".", |r| r.as_str()), mode_words(c.mode)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let l = &config.limits;
    format!(
        "airlock runs each tool once, in a sandbox, on exactly the files its arguments name, after policy allows \
         the call.\n\
         Roots (paths are relative to the working directory, never '..', absolute or through a symbolic link): \
         {roots}.\n\
         Outputs are new files under a read-write root; an existing file is never overwritten (output.exists).\n\
         Per call: at most {} input files, each at most {} bytes and {} bytes in all; an output at most {} bytes.\n\
         structuredContent is airlock's envelope (`airlock schema envelope`): content, stdout_tail, stderr_tail, \
         created_files, evidence. A failure has isError and a text with the reason code, the message and the \
         tool's last standard error.",
        l.max_inputs, l.max_input_file_bytes, l.max_input_bytes, l.max_file_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metacharacters_are_escaped() {
        assert_eq!(escape("a.b+c"), "a\\.b\\+c");
    }
}
