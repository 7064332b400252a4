//! `[output] schema`: the JSON Schema of a tool's parsed output, compiled
//! at parse (an invalid schema is `manifest.invalid`) and checked on every
//! answer: parsed output that violates it fails the call with
//! `output.schema` and nothing is published. The same schema is the
//! `content` of the tool's MCP `outputSchema`.
//!
//! Compiled with the `jsonschema` crate without its remote features: a
//! `$ref` to anything outside the schema itself does not resolve.

use crate::reason::{ReasonCode, Refusal};
use serde_json::Value;
use std::sync::Arc;

/// Violations named in a refusal, at most.
const NAMED_VIOLATIONS: usize = 3;

/// A compiled `[output] schema`.
#[derive(Debug, Clone)]
pub(crate) struct OutputSchema {
    validator: Arc<jsonschema::Validator>,
}

impl OutputSchema {
    /// Compiles `schema` as written in the manifest.
    pub(crate) fn compile(schema: &toml::Table) -> Result<OutputSchema, Refusal> {
        let invalid = |why: String| Refusal::new(ReasonCode::ManifestInvalid, format!("[output] schema: {why}"));
        let json = serde_json::to_value(schema).map_err(|e| invalid(e.to_string()))?;
        let validator =
            jsonschema::validator_for(&json).map_err(|e| invalid(format!("not a valid JSON Schema: {e}")))?;
        Ok(OutputSchema { validator: Arc::new(validator) })
    }

    /// `Ok` when `content` satisfies the schema; otherwise `output.schema`
    /// naming the first few violations and where they are.
    pub(crate) fn check(&self, content: &Value) -> Result<(), Refusal> {
        let violations: Vec<String> = self
            .validator
            .iter_errors(content)
            .take(NAMED_VIOLATIONS + 1)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {e}", if at.is_empty() { "/" } else { at.as_str() })
            })
            .collect();
        if violations.is_empty() {
            return Ok(());
        }
        let more = if violations.len() > NAMED_VIOLATIONS { "; …" } else { "" };
        let shown: Vec<&str> = violations.iter().take(NAMED_VIOLATIONS).map(String::as_str).collect();
        Err(Refusal::new(
            ReasonCode::OutputSchema,
            format!(
                "the tool's parsed output does not match its [output] schema ({}{more}); nothing was published — fix \
                 the tool or the schema",
                shown.join("; ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(text: &str) -> Result<OutputSchema, Refusal> {
        OutputSchema::compile(&toml::from_str(text).unwrap())
    }

    #[test]
    fn violations_are_output_schema_and_name_the_place() {
        let s = schema("type = \"object\"\nrequired = [\"n\"]\n[properties.n]\ntype = \"integer\"").unwrap();
        assert!(s.check(&json!({"n": 3})).is_ok());
        let err = s.check(&json!({"n": "three"})).unwrap_err();
        assert_eq!(err.code, ReasonCode::OutputSchema);
        assert!(err.message.contains("/n"), "{}", err.message);
        assert_eq!(s.check(&json!([1])).unwrap_err().code, ReasonCode::OutputSchema);
    }

    #[test]
    fn an_invalid_schema_is_refused_at_parse() {
        assert_eq!(schema("type = 7").unwrap_err().code, ReasonCode::ManifestInvalid);
        assert_eq!(schema("minimum = \"x\"").unwrap_err().code, ReasonCode::ManifestInvalid);
    }
}
