//! The descriptor (as JSON) to a Cedar value of the schema's type.

use crate::schema::Ty;
use crate::ArgKind;
use cedar_policy::RestrictedExpression;
use serde_json::Value;

/// Converts `value` to `ty`. `at` is the attribute path, for messages.
///
/// JSON `null` and absence are the same: an optional attribute is left out,
/// a required one is an error. Object keys the type does not declare are
/// not passed to Cedar (no policy could name them: it would not validate).
pub(crate) fn to_expr(ty: &Ty, value: &Value, at: &str) -> Result<RestrictedExpression, String> {
    match (ty, value) {
        (Ty::Str, Value::String(s)) => Ok(RestrictedExpression::new_string(s.clone())),
        (Ty::Long, Value::Number(n)) => {
            n.as_i64().map(RestrictedExpression::new_long).ok_or_else(|| format!("{at}: {n} is not a 64-bit integer"))
        }
        (Ty::Bool, Value::Bool(b)) => Ok(RestrictedExpression::new_bool(*b)),
        (Ty::Set(inner), Value::Array(items)) => {
            let items: Result<Vec<_>, _> =
                items.iter().enumerate().map(|(i, v)| to_expr(inner, v, &format!("{at}[{i}]"))).collect();
            Ok(RestrictedExpression::new_set(items?))
        }
        (Ty::Named(_, inner), v) => to_expr(inner, v, at),
        (Ty::Record(fields), Value::Object(map)) => {
            let mut pairs = Vec::with_capacity(fields.len());
            for f in fields {
                match map.get(&f.name) {
                    None | Some(Value::Null) if f.optional => {}
                    None | Some(Value::Null) => return Err(format!("{at}.{}: missing", f.name)),
                    Some(v) => pairs.push((f.name.clone(), to_expr(&f.ty, v, &format!("{at}.{}", f.name))?)),
                }
            }
            RestrictedExpression::new_record(pairs).map_err(|e| format!("{at}: {e}"))
        }
        (Ty::Arg(kind), v) => arg(*kind, v, at),
        (ty, v) => Err(format!("{at}: expected {}, found {}", ty_name(ty), json_kind(v))),
    }
}

/// An argument value: the descriptor holds the string substituted into argv.
fn arg(kind: ArgKind, value: &Value, at: &str) -> Result<RestrictedExpression, String> {
    match (kind, value) {
        (ArgKind::String, Value::String(s)) => Ok(RestrictedExpression::new_string(s.clone())),
        (ArgKind::String, Value::Number(n)) => Ok(RestrictedExpression::new_string(n.to_string())),
        (ArgKind::String, Value::Bool(b)) => Ok(RestrictedExpression::new_string(b.to_string())),
        (ArgKind::Long, Value::String(s)) => s
            .parse::<i64>()
            .map(RestrictedExpression::new_long)
            .map_err(|_| format!("{at}: {s:?} is not a 64-bit integer")),
        (ArgKind::Long, Value::Number(n)) => {
            n.as_i64().map(RestrictedExpression::new_long).ok_or_else(|| format!("{at}: {n} is not a 64-bit integer"))
        }
        (ArgKind::Bool, Value::String(s)) => match s.as_str() {
            "true" => Ok(RestrictedExpression::new_bool(true)),
            "false" => Ok(RestrictedExpression::new_bool(false)),
            _ => Err(format!("{at}: {s:?} is neither \"true\" nor \"false\"")),
        },
        (ArgKind::Bool, Value::Bool(b)) => Ok(RestrictedExpression::new_bool(*b)),
        (kind, v) => Err(format!("{at}: expected {kind:?} argument, found {}", json_kind(v))),
    }
}

fn ty_name(ty: &Ty) -> &'static str {
    match ty {
        Ty::Str => "a string",
        Ty::Long => "an integer",
        Ty::Bool => "a boolean",
        Ty::Set(_) => "an array",
        Ty::Record(_) | Ty::Named(..) => "an object",
        Ty::Arg(_) => "an argument value",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
