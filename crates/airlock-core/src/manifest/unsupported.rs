//! What a manifest may say but airlock does not execute.
//!
//! An existing ToolClad manifest loads unchanged; running it is refused with
//! `manifest.unsupported` and a list of every feature in the way. A section
//! airlock does not execute is refused, never ignored.

use super::args::ArgType;
use super::model::{Dispatch, Mode};
use super::template::OUTPUT_FILE_PLACEHOLDER;
use super::Manifest;
use crate::reason::{ReasonCode, Refusal};

/// Every feature of `m` that airlock does not execute, for people.
pub(crate) fn features(m: &Manifest) -> Vec<String> {
    let mut found = Vec::new();
    for (present, what) in
        [(m.http.is_some(), "[http] (HTTP backend)"), (m.browser.is_some(), "[browser] (browser mode)")]
    {
        if present {
            found.push(what.to_owned());
        }
    }
    let session_mode = m.tool.mode == Mode::Session && m.session.is_some();
    if m.tool.mode != Mode::Oneshot && !session_mode {
        found.push(format!("[tool] mode = {:?}", m.tool.mode.as_str()));
    }
    if m.tool.dispatch == Dispatch::Callback {
        found.push("[tool] dispatch = \"callback\"".to_owned());
    }
    command_features(m, &mut found);
    output_features(m, &mut found);
    for (name, def) in &m.args {
        let ty = ArgType::parse(&def.type_name);
        if !ty.is_supported() {
            found.push(format!("[args.{name}] type = {:?}", def.type_name));
        }
        const NETWORK: &str = "(the tool reaches the network, and airlock has no network grant yet)";
        if ty == ArgType::ScopeTarget {
            found.push(format!("[args.{name}] type = \"scope_target\" {NETWORK}"));
        }
        if def.scope_check {
            found.push(format!("[args.{name}] scope_check = true {NETWORK}"));
        }
        if def.block_internal {
            found.push(format!("[args.{name}] block_internal = true {NETWORK}"));
        }
        for s in def.sanitize.iter().flatten().filter(|s| *s != "injection") {
            found.push(format!("[args.{name}] sanitize {s:?} (only \"injection\" is supported)"));
        }
        if ty == ArgType::Url {
            for s in def.schemes.iter().flatten().filter(|s| !matches!(s.as_str(), "http" | "https")) {
                found.push(format!("[args.{name}] schemes {s:?} (only http and https)"));
            }
        }
    }
    found
}

fn command_features(m: &Manifest, found: &mut Vec<String>) {
    let Some(cmd) = &m.command else {
        // An [mcp] tool runs its server (checked by `mcp::spec`); a
        // [session] tool its startup_command.
        if m.mcp.is_none() && m.session.is_none() {
            found.push("no command ([command] is missing, so there is nothing to run)".to_owned());
        }
        return;
    };
    if cmd.executor.is_some() {
        found.push("[command] executor".to_owned());
    }
    let Some(compiled) = &m.compiled.command else { return };
    for name in compiled.plain_placeholders() {
        if name == OUTPUT_FILE_PLACEHOLDER {
            if !m.compiled.filesystem.has_create() {
                found.push(format!("{{{OUTPUT_FILE_PLACEHOLDER}}} without a [filesystem] create entry"));
            }
        } else if name.starts_with('_') {
            found.push(format!("the placeholder {{{name}}}"));
        }
    }
}

fn output_features(m: &Manifest, found: &mut Vec<String>) {
    let Some(out) = &m.output else { return };
    if let Some(parser) = &out.parser {
        if out.builtin().is_none() && out.custom_parser().is_none() {
            found.push(format!(
                "[output] parser = {parser:?} (a builtin parser is builtin:text, builtin:json, builtin:jsonl, \
                 builtin:csv or builtin:xml; a custom parser must be the absolute path of a program in the worker \
                 image, and host scripts are never mounted)"
            ));
        }
    }
}

/// `Ok` when airlock can run `m`: no unsupported feature, and every default
/// passes its argument's validation.
pub(crate) fn check(m: &Manifest) -> Result<(), Refusal> {
    let found = features(m);
    if !found.is_empty() {
        return Err(Refusal::new(
            ReasonCode::ManifestUnsupported,
            format!("{}: airlock does not execute: {}", m.origin, found.join("; ")),
        ));
    }
    super::mcp::spec(m)?;
    for (name, def) in &m.args {
        let Some(rule) = m.compiled.args.get(name) else {
            continue;
        };
        if let Some(default) = &rule.default {
            rule.validate(&format!("[args.{name}] default"), def, default).map_err(|r| {
                Refusal::new(ReasonCode::ManifestInvalid, format!("{}: {} ({})", m.origin, r.message, r.code))
            })?;
        }
    }
    Ok(())
}
