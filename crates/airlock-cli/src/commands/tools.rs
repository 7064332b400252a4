//! `airlock tools list|validate|schema`.

use crate::cli::ToolsCommand;
use airlock_core::{Envelope, Refusal};
use airlock_runtime::{tools, Runtime};
use serde_json::{json, Value};

/// Runs a `tools` subcommand.
pub fn run(runtime: &Runtime, cmd: ToolsCommand) -> Result<Envelope, Refusal> {
    match cmd {
        ToolsCommand::List => list(runtime),
        ToolsCommand::Validate { tools } => validate(runtime, tools),
        ToolsCommand::Schema { tool } => {
            let loaded = runtime.load_tool(&tool)?;
            Ok(Envelope {
                tool: Some(loaded.manifest.name().to_owned()),
                content: Some(loaded.manifest.input_schema()),
                ..Envelope::ok()
            })
        }
    }
}

fn describe(runtime: &Runtime, path: &std::path::Path) -> Value {
    match runtime.load_tool(&path.display().to_string()) {
        Ok(t) => {
            let m = &t.manifest;
            let runnable = m.check_executable();
            json!({
                "name": m.name(),
                "version": m.tool.version,
                "description": m.tool.description,
                "risk_tier": m.tool.risk_tier.to_string(),
                "manifest": path.display().to_string(),
                "runnable": runnable.is_ok(),
                "unsupported": runnable.err().map(|r| json!({"code": r.code, "message": r.message})),
            })
        }
        Err(r) => json!({
            "manifest": path.display().to_string(),
            "error": {"code": r.code, "message": r.message},
        }),
    }
}

fn list(runtime: &Runtime) -> Result<Envelope, Refusal> {
    let found = tools::list_manifests(&runtime.config().tools_dir);
    let items: Vec<Value> = found.iter().map(|p| describe(runtime, p)).collect();
    Ok(Envelope {
        content: Some(json!({ "tools_dir": runtime.config().tools_dir.display().to_string(), "tools": items })),
        ..Envelope::ok()
    })
}

fn validate(runtime: &Runtime, names: Vec<String>) -> Result<Envelope, Refusal> {
    let paths: Vec<std::path::PathBuf> = if names.is_empty() {
        tools::list_manifests(&runtime.config().tools_dir)
    } else {
        names.iter().map(|n| tools::locate(n, &runtime.config().tools_dir)).collect::<Result<_, _>>()?
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
