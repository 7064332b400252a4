//! The JSON Schema (draft 2020-12 style) of a tool's arguments, as an MCP
//! client wants it for `inputSchema`.

use super::args::{ArgRule, ArgType, MAX_VALUE_BYTES};
use super::model::ArgDef;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// `{"type":"object","properties":…,"required":[…],"additionalProperties":false}`.
pub(crate) fn input_schema(defs: &BTreeMap<String, ArgDef>, rules: &BTreeMap<String, ArgRule>) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, def) in defs {
        let rule = rules.get(name);
        properties.insert(name.clone(), property(def, rule));
        if def.required && rule.is_none_or(|r| r.default.is_none()) {
            required.push(Value::String(name.clone()));
        }
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn property(def: &ArgDef, rule: Option<&ArgRule>) -> Value {
    let ty = ArgType::parse(&def.type_name);
    let mut p = Map::new();
    let mut put = |k: &str, v: Value| {
        p.insert(k.to_owned(), v);
    };
    match ty {
        ArgType::Integer | ArgType::Port => {
            put("type", json!("integer"));
            let (lo, hi) = if ty == ArgType::Port {
                (Some(def.min.map_or(1, |m| m.max(1))), Some(def.max.map_or(65535, |m| m.min(65535))))
            } else {
                (def.min, def.max)
            };
            if let Some(lo) = lo {
                put("minimum", json!(lo));
            }
            if let Some(hi) = hi {
                put("maximum", json!(hi));
            }
        }
        ArgType::Number => {
            put("type", json!("number"));
            if let Some(lo) = def.min_float.or(def.min.map(|m| m as f64)) {
                put("minimum", json!(lo));
            }
            if let Some(hi) = def.max_float.or(def.max.map(|m| m as f64)) {
                put("maximum", json!(hi));
            }
        }
        ArgType::Boolean => put("type", json!("boolean")),
        ArgType::Duration => {
            put("type", json!("string"));
            put("pattern", json!("^[0-9]+[smh]?$"));
        }
        _ => {
            put("type", json!("string"));
            put("maxLength", json!(MAX_VALUE_BYTES));
        }
    }
    if let Some(allowed) = &def.allowed {
        put("enum", json!(allowed));
    }
    if let Some(pattern) = &def.pattern {
        let anchored = if ty == ArgType::LiteralText { pattern.clone() } else { format!("^(?:{pattern})$") };
        put("pattern", json!(anchored));
    }
    if ty == ArgType::Url {
        put("format", json!("uri"));
    }
    if let Some(d) = &def.description {
        put("description", json!(d));
    }
    if let Some(default) = rule.and_then(|r| r.default.as_deref()) {
        put("default", typed_default(&ty, default));
    }
    Value::Object(p)
}

/// The default in the JSON type of the property (a string when it does not
/// convert; validation at bind time has the last word).
fn typed_default(ty: &ArgType, text: &str) -> Value {
    let converted = match ty {
        ArgType::Integer | ArgType::Port => text.parse::<i64>().ok().map(Value::from),
        ArgType::Number => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number),
        ArgType::Boolean => text.parse::<bool>().ok().map(Value::Bool),
        _ => None,
    };
    converted.unwrap_or_else(|| Value::String(text.to_owned()))
}
