//! Binding the values of one call to the declared arguments.
//!
//! Positional values fill the arguments that have a `position`, in ascending
//! order; named values (JSON strings, numbers or booleans, as MCP sends
//! them) fill the rest. Every value, and every default used in place of one,
//! passes its argument's validation.

use super::args::{ArgRule, BoundValue};
use super::model::ArgDef;
use crate::reason::{ReasonCode, Refusal};
use serde_json::Value;
use std::collections::BTreeMap;

/// The arguments of one call after validation: for each present argument,
/// the exact string substituted into argv and its JSON form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoundArgs {
    values: BTreeMap<String, BoundValue>,
}

impl BoundArgs {
    /// The argv string of `name`, or `None` when the argument is absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|v| v.text.as_str())
    }

    /// The JSON form of `name` (a number for `integer`, `number`, `port` and
    /// `duration`, a boolean for `boolean`, otherwise a string).
    pub fn json(&self, name: &str) -> Option<&Value> {
        self.values.get(name).map(|v| &v.json)
    }

    /// Every present argument and its argv string.
    pub fn as_strings(&self) -> BTreeMap<String, String> {
        self.values.iter().map(|(k, v)| (k.clone(), v.text.clone())).collect()
    }

    /// Every present argument as one JSON object.
    pub fn to_json(&self) -> Value {
        Value::Object(self.values.iter().map(|(k, v)| (k.clone(), v.json.clone())).collect())
    }

    /// Number of present arguments.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no argument is present.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

fn json_text(name: &str, value: &Value) -> Result<String, Refusal> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => {
            Err(Refusal::new(ReasonCode::ArgInvalid, format!("argument `{name}` must be a string, number or boolean")))
        }
    }
}

/// Binds positional and named values to the declared arguments and validates
/// every one (see [`Manifest::bind_args`](super::Manifest::bind_args)).
pub(crate) fn bind(
    defs: &BTreeMap<String, ArgDef>,
    rules: &BTreeMap<String, ArgRule>,
    positional: &[String],
    named: &[(String, Value)],
) -> Result<BoundArgs, Refusal> {
    let order = positional_order(defs);
    if positional.len() > order.len() {
        return Err(Refusal::new(
            ReasonCode::ArgUnknown,
            format!(
                "{} positional values given; the tool takes at most {} ({})",
                positional.len(),
                order.len(),
                order.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let mut given: BTreeMap<&str, String> = order.iter().copied().zip(positional.iter().cloned()).collect();
    for (name, value) in named {
        if !defs.contains_key(name) {
            return Err(Refusal::new(ReasonCode::ArgUnknown, format!("the tool has no argument `{name}`")));
        }
        if given.contains_key(name.as_str()) {
            return Err(Refusal::new(ReasonCode::ArgInvalid, format!("argument `{name}` is given twice")));
        }
        given.insert(name, json_text(name, value)?);
    }
    let mut values = BTreeMap::new();
    for (name, def) in defs {
        let rule = rules.get(name).ok_or_else(|| {
            Refusal::new(ReasonCode::Internal, format!("argument `{name}` was added after the manifest was parsed"))
        })?;
        let bound = match (given.get(name.as_str()), &rule.default) {
            (Some(v), _) if v.is_empty() && def.required => {
                return Err(Refusal::new(ReasonCode::ArgMissing, format!("required argument `{name}` is empty")))
            }
            (Some(v), _) => rule.validate(&format!("argument `{name}`"), def, v)?,
            (None, Some(d)) => rule.validate(&format!("the default of argument `{name}`"), def, d)?,
            (None, None) if def.required => {
                return Err(Refusal::new(ReasonCode::ArgMissing, format!("required argument `{name}` is missing")))
            }
            (None, None) => continue,
        };
        values.insert(name.clone(), bound);
    }
    Ok(BoundArgs { values })
}

/// Argument names with a `position`, in ascending position order.
pub(crate) fn positional_order(defs: &BTreeMap<String, ArgDef>) -> Vec<&str> {
    let mut with_pos: Vec<(u32, &str)> = defs.iter().filter_map(|(n, d)| d.position.map(|p| (p, n.as_str()))).collect();
    with_pos.sort();
    with_pos.into_iter().map(|(_, n)| n).collect()
}
