//! `airlock tools list|validate|schema`.

use super::Answer;
use crate::cli::ToolsCommand;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::{catalog, Runtime};
use serde_json::{json, Value};

/// Runs a `tools` subcommand.
pub fn run(runtime: &Runtime, cmd: ToolsCommand) -> Result<Answer, Refusal> {
    Ok(match cmd {
        ToolsCommand::List { json } => super::report::status(json, list(runtime)?, table),
        ToolsCommand::Validate { tools } => validate(runtime, tools)?.into(),
        ToolsCommand::Schema { tool } => {
            let loaded = runtime.load_tool(&tool)?;
            Envelope {
                tool: Some(loaded.manifest.name().to_owned()),
                content: Some(loaded.manifest.input_schema()),
                ..Envelope::ok()
            }
            .into()
        }
    })
}

/// `tools list` for people: one line a tool (name, runnable, risk tier, description).
fn table(envelope: &Envelope) -> String {
    let content = envelope.content.as_ref().unwrap_or(&Value::Null);
    let mut out = format!("tools in {}\n", content["tools_dir"].as_str().unwrap_or_default());
    for t in content["tools"].as_array().into_iter().flatten() {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        if let Some(e) = t.get("error") {
            out.push_str(&format!(
                "{:<24} invalid: {}: {}\n",
                text(&t["manifest"]),
                text(&e["code"]),
                text(&e["message"])
            ));
            continue;
        }
        let runnable = super::report::yes_no(t["runnable"] == true, &text(&t["unsupported"]["message"]));
        out.push_str(&format!(
            "{:<24} {:<8} runnable: {runnable}\n{:<24} {}\n",
            text(&t["name"]),
            text(&t["risk_tier"]),
            "",
            text(&t["description"])
        ));
    }
    out
}

/// Describes `tool` (a path, or the name of a bundled source tool, which
/// loads with the shadowing rule); `label` is shown as its manifest.
fn describe(runtime: &Runtime, tool: &str, label: &str) -> Value {
    match runtime.load_tool(tool) {
        Ok(t) => {
            let m = &t.manifest;
            let runnable = m.check_executable();
            json!({
                "name": m.name(),
                "version": m.tool.version,
                "description": m.tool.description,
                "risk_tier": m.tool.risk_tier.to_string(),
                "manifest": label,
                "runnable": runnable.is_ok(),
                "unsupported": runnable.err().map(|r| json!({"code": r.code, "message": r.message})),
            })
        }
        Err(r) => json!({
            "manifest": label,
            "error": {"code": r.code, "message": r.message},
        }),
    }
}

fn list(runtime: &Runtime) -> Result<Envelope, Refusal> {
    let found = catalog::list_manifests(runtime.authority(), &runtime.config().tools_dir);
    let bundled_name = |p: &std::path::Path| {
        let file = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        airlock_source::BUNDLED.iter().map(|(n, _)| *n).find(|n| file == format!("{n}.clad.toml"))
    };
    let mut items: Vec<Value> = found
        .iter()
        .map(|p| {
            let label = p.display().to_string();
            // A manifest named like a bundled source tool is judged as
            // `run NAME` would load it (source.shadowed unless it is one).
            describe(runtime, bundled_name(p).unwrap_or(&label), &label)
        })
        .collect();
    for (name, _) in airlock_source::BUNDLED {
        if !found.iter().any(|p| bundled_name(p) == Some(name)) {
            items.push(describe(runtime, name, &format!("bundled:{name}.clad.toml")));
        }
    }
    Ok(Envelope {
        content: Some(json!({ "tools_dir": runtime.config().tools_dir.display().to_string(), "tools": items })),
        ..Envelope::ok()
    })
}

fn validate(runtime: &Runtime, names: Vec<String>) -> Result<Envelope, Refusal> {
    let paths: Vec<std::path::PathBuf> = if names.is_empty() {
        catalog::list_manifests(runtime.authority(), &runtime.config().tools_dir)
    } else {
        names.iter().map(|n| catalog::locate(n, &runtime.config().tools_dir)).collect::<Result<_, _>>()?
    };
    let mut results = Vec::with_capacity(paths.len());
    let mut first_error: Option<Refusal> = None;
    for path in &paths {
        match runtime.load_tool(&path.display().to_string()) {
            Ok(t) => {
                results.push(json!({"manifest": path.display().to_string(), "name": t.manifest.name(), "valid": true}))
            }
            Err(r) => {
                results.push(json!({"manifest": path.display().to_string(), "valid": false, "error": {"code": r.code, "message": r.message}}));
                first_error.get_or_insert(r);
            }
        }
    }
    let content = Some(json!({ "results": results }));
    Ok(match first_error {
        None => Envelope { content, ..Envelope::ok() },
        Some(r) => {
            let msg = format!(
                "{} of {} manifests are invalid; first: {}",
                results.iter().filter(|v| v["valid"] == false).count(),
                results.len(),
                r.message
            );
            Envelope { content, ..Envelope::from_refusal(&Refusal::new(r.code, msg)) }
        }
    })
}
