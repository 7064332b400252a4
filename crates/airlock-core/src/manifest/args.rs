//! Argument types and value validation.
//!
//! A value is accepted exactly as written or refused; it is never trimmed,
//! unquoted or decoded. The accepted value is the string substituted into
//! argv (numbers are normalised: `+007` becomes `7`, `5m` becomes `300`).
//!
//! String-like types (`string`, `path`, `url`, `enum`, `regex_match`,
//! `ip_address`, `cidr`) refuse control characters and surrounding
//! whitespace (`arg.invalid`) and a leading `-` (`arg.leading_dash`) unless
//! `[command] end_of_options = true` puts every use of the argument after
//! the `--` airlock inserts.
//!
//! They also refuse shell metacharacters (`arg.injection`), with one
//! exception: a `string` used by an exec-form command (`[command] exec =
//! [...]`, one argv word an element, run without a shell) whose words name
//! no shell accepts them, so `jq '[.users[] | select(.age > 30)]'` needs no
//! wrapper ([`ShellReach`]). A `template` keeps the refusal (ToolClad
//! runtimes may hand a template to a shell, and a manifest must mean the
//! same everywhere), as do an exec form that names a shell (`sh -c …`, also
//! behind `env` or `timeout`), tools without a command, and any argument
//! whose manifest asks for `sanitize = ["injection"]`. Every refusal names
//! the type that would accept the value.

use super::model::ArgDef;
use crate::path::{is_arg_name, RelPath};
use crate::reason::{ReasonCode, Refusal};
use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};

/// Longest accepted value of any argument, in bytes.
pub const MAX_VALUE_BYTES: usize = 32_768;

/// Characters a shell would treat specially; refused in string-like values.
pub const SHELL_METACHARACTERS: &[char] =
    &[';', '|', '&', '$', '`', '(', ')', '{', '}', '[', ']', '<', '>', '!', '\n', '\r'];

/// Compiled size limit of one `pattern` (bytes of automaton).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The type of an argument, from `[args.NAME] type`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ArgType {
    /// Text without metacharacters.
    String,
    /// A signed 64-bit integer.
    Integer,
    /// A finite floating-point number.
    Number,
    /// Exactly `true` or `false`.
    Boolean,
    /// One of `allowed`.
    Enum,
    /// A relative path under [`RelPath`]'s grammar.
    Path,
    /// 1 … 65535.
    Port,
    /// An `http` or `https` URL.
    Url,
    /// A positive integer with an optional `s`, `m` or `h` suffix, in seconds.
    Duration,
    /// Text that fully matches `pattern`.
    RegexMatch,
    /// Any UTF-8 text without NUL, metacharacters allowed.
    LiteralText,
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// An IPv4 network, `a.b.c.d/n`.
    Cidr,
    /// A network target (host name, IP address or IPv4 CIDR) under
    /// ToolClad's `scope_target` rules (see `scope.rs`).
    ScopeTarget,
    /// A ToolClad type airlock does not execute (`credential_file`,
    /// `msf_options`) or a custom type.
    Unsupported(String),
}

impl ArgType {
    /// Reads a type name.
    pub fn parse(name: &str) -> ArgType {
        match name {
            "string" => ArgType::String,
            "integer" => ArgType::Integer,
            "number" => ArgType::Number,
            "boolean" => ArgType::Boolean,
            "enum" => ArgType::Enum,
            "path" => ArgType::Path,
            "port" => ArgType::Port,
            "url" => ArgType::Url,
            "duration" => ArgType::Duration,
            "regex_match" => ArgType::RegexMatch,
            "literal_text" => ArgType::LiteralText,
            "ip_address" => ArgType::IpAddress,
            "cidr" => ArgType::Cidr,
            "scope_target" => ArgType::ScopeTarget,
            other => ArgType::Unsupported(other.to_owned()),
        }
    }

    /// Whether airlock validates and executes this type.
    pub fn is_supported(&self) -> bool {
        !matches!(self, ArgType::Unsupported(_))
    }

    fn is_string_like(&self) -> bool {
        matches!(
            self,
            ArgType::String
                | ArgType::Path
                | ArgType::Url
                | ArgType::Enum
                | ArgType::RegexMatch
                | ArgType::IpAddress
                | ArgType::Cidr
                | ArgType::ScopeTarget
        )
    }
}

/// Whether an argument's value can reach a shell, which decides whether a
/// `string` may hold shell metacharacters and what a refusal says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShellReach {
    /// An exec-form command naming no shell: argv words go to `execve`
    /// unchanged, so a `string` accepts metacharacters.
    Never,
    /// A `template` command: another ToolClad runtime may run it through a shell.
    Template,
    /// An exec-form command with this shell among its words.
    ShellProgram(String),
    /// No `[command]` (source and MCP tools): refused as always.
    NoCommand,
    /// The manifest asks for `sanitize = ["injection"]`.
    Sanitized,
}

impl ShellReach {
    /// Whether a value of type `ty` may hold shell metacharacters.
    fn accepts_metacharacters(&self, ty: &ArgType) -> bool {
        *self == ShellReach::Never && *ty == ArgType::String
    }

    /// Why the value was refused, and which type would accept it.
    fn advice(&self) -> String {
        const EXEC: &str = "an argument of type `string` in an exec-form command (`[command] exec = [...]`)";
        match self {
            ShellReach::Never => format!("{EXEC} accepts it"),
            ShellReach::Template => {
                format!("a `template` command may reach a shell; {EXEC}, or one of type `literal_text`, accepts it")
            }
            ShellReach::ShellProgram(shell) => format!(
                "the command runs the shell `{shell}`; an argument of type `literal_text` accepts it (pass it as a \
                 positional parameter such as \"$1\", never inside the script)"
            ),
            ShellReach::NoCommand => "an argument of type `literal_text` accepts it".to_owned(),
            ShellReach::Sanitized => {
                "the manifest asks for sanitize = [\"injection\"]; an argument of type `literal_text` accepts it"
                    .to_owned()
            }
        }
    }
}

/// An argument as compiled at parse: its type, its pattern, its default as a
/// string, whether a leading `-` is safe and whether its value can reach a
/// shell.
#[derive(Debug, Clone)]
pub(crate) struct ArgRule {
    pub(crate) ty: ArgType,
    pattern: Option<Regex>,
    pub(crate) dash_ok: bool,
    reach: ShellReach,
    pub(crate) default: Option<String>,
}

fn invalid(message: String) -> Refusal {
    Refusal::new(ReasonCode::ManifestInvalid, message)
}

/// Normalises a TOML scalar to its string form; `None` for arrays, tables
/// and datetimes.
pub(crate) fn scalar_string(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(_) | toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

fn compile_pattern(name: &str, pattern: &str, anchored: bool) -> Result<Regex, Refusal> {
    let build =
        |p: &str| RegexBuilder::new(p).size_limit(PATTERN_SIZE_LIMIT).dfa_size_limit(PATTERN_SIZE_LIMIT).build();
    // Compile it alone first so that `a)(b` cannot reshape the anchoring group.
    build(pattern).map_err(|e| invalid(format!("[args.{name}] pattern {pattern:?} does not compile: {e}")))?;
    if anchored {
        build(&format!("^(?:{pattern})$"))
            .map_err(|e| invalid(format!("[args.{name}] pattern {pattern:?} does not compile: {e}")))
    } else {
        build(pattern).map_err(|e| invalid(format!("[args.{name}] pattern {pattern:?} does not compile: {e}")))
    }
}

/// Structural checks of one `[args.NAME]`. `fallback` is the
/// `[command.defaults]` entry of the same name, used when the argument has
/// no `default` of its own; `reach` is what the command does with values
/// (`sanitize = ["injection"]` overrides it).
pub(crate) fn compile(
    name: &str,
    def: &ArgDef,
    fallback: Option<&toml::Value>,
    dash_ok: bool,
    reach: ShellReach,
) -> Result<ArgRule, Refusal> {
    if !is_arg_name(name) {
        return Err(invalid(format!(
            "[args.{name}]: an argument name is a letter followed by at most 63 letters, digits or `_`"
        )));
    }
    let ty = ArgType::parse(&def.type_name);
    match (&ty, &def.allowed) {
        (ArgType::Enum, None) => return Err(invalid(format!("[args.{name}] is an enum without `allowed`"))),
        (_, Some(list)) if list.is_empty() => return Err(invalid(format!("[args.{name}] allowed is empty"))),
        _ => {}
    }
    if ty == ArgType::RegexMatch && def.pattern.is_none() {
        return Err(invalid(format!("[args.{name}] is a regex_match without `pattern`")));
    }
    let pattern = match &def.pattern {
        Some(p) => Some(compile_pattern(name, p, ty != ArgType::LiteralText)?),
        None => None,
    };
    if let (Some(lo), Some(hi)) = (def.min, def.max) {
        if lo > hi {
            return Err(invalid(format!("[args.{name}] min = {lo} is greater than max = {hi}")));
        }
    }
    for (key, v) in [("min_float", def.min_float), ("max_float", def.max_float)] {
        if v.is_some_and(|f| !f.is_finite()) {
            return Err(invalid(format!("[args.{name}] {key} is not a finite number")));
        }
    }
    let (lo, hi) = float_bounds(def);
    if let (Some(lo), Some(hi)) = (lo, hi) {
        if lo > hi {
            return Err(invalid(format!("[args.{name}] the lower bound {lo} is greater than the upper bound {hi}")));
        }
    }
    let default =
        match def.default.as_ref().map(|v| ("default", v)).or(fallback.map(|v| ("[command.defaults] entry", v))) {
            Some((what, v)) => {
                Some(scalar_string(v).ok_or_else(|| {
                    invalid(format!("[args.{name}] {what} must be a string, integer, float or boolean"))
                })?)
            }
            None => None,
        };
    let reach = if def.sanitize.iter().flatten().any(|s| s == "injection") { ShellReach::Sanitized } else { reach };
    Ok(ArgRule { ty, pattern, dash_ok, reach, default })
}

fn float_bounds(def: &ArgDef) -> (Option<f64>, Option<f64>) {
    (def.min_float.or(def.min.map(|m| m as f64)), def.max_float.or(def.max.map(|m| m as f64)))
}

/// A validated value: the argv string and its JSON form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoundValue {
    pub(crate) text: String,
    pub(crate) json: Value,
}

fn refuse(code: ReasonCode, label: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(code, format!("{label} {why}"))
}

fn is_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn check_injection(label: &str, value: &str, reach: &ShellReach) -> Result<(), Refusal> {
    match value.chars().find(|c| SHELL_METACHARACTERS.contains(c)) {
        Some(c) => Err(refuse(
            ReasonCode::ArgInjection,
            label,
            format_args!("contains the shell metacharacter {c:?}; {}", reach.advice()),
        )),
        None => Ok(()),
    }
}

fn check_control(label: &str, value: &str) -> Result<(), Refusal> {
    match value.chars().find(|c| is_control(*c)) {
        Some(c) => Err(refuse(
            ReasonCode::ArgInvalid,
            label,
            format_args!("contains the control character U+{:04X}", c as u32),
        )),
        None => Ok(()),
    }
}

fn check_surrounding_whitespace(label: &str, value: &str) -> Result<(), Refusal> {
    let starts = value.chars().next().is_some_and(char::is_whitespace);
    let ends = value.chars().next_back().is_some_and(char::is_whitespace);
    if starts || ends {
        return Err(refuse(
            ReasonCode::ArgInvalid,
            label,
            "has leading or trailing whitespace (values are never trimmed)",
        ));
    }
    Ok(())
}

fn check_dash(label: &str, value: &str, dash_ok: bool) -> Result<(), Refusal> {
    if value.starts_with('-') && !dash_ok {
        return Err(refuse(
            ReasonCode::ArgLeadingDash,
            label,
            "starts with `-`, which the tool could read as an option (the manifest can allow it with [command] end_of_options = true)",
        ));
    }
    Ok(())
}

fn check_string_like(label: &str, value: &str, rule: &ArgRule) -> Result<(), Refusal> {
    if !rule.reach.accepts_metacharacters(&rule.ty) {
        check_injection(label, value, &rule.reach)?;
    }
    check_control(label, value)?;
    check_surrounding_whitespace(label, value)?;
    check_dash(label, value, rule.dash_ok)
}

/// Integer text: an optional sign and ASCII digits.
fn parse_i64(label: &str, value: &str) -> Result<i64, Refusal> {
    let digits = value.strip_prefix(['+', '-']).unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(ReasonCode::ArgInvalid, label, format_args!("{value:?} is not an integer")));
    }
    value.parse::<i64>().map_err(|_| {
        refuse(ReasonCode::ArgOutOfRange, label, format_args!("{value:?} is outside the 64-bit integer range"))
    })
}

fn bound_i64(label: &str, def: &ArgDef, n: i64) -> Result<i64, Refusal> {
    if let Some(lo) = def.min.filter(|lo| n < *lo) {
        if def.clamp {
            return Ok(lo);
        }
        return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{n} is below the minimum {lo}")));
    }
    if let Some(hi) = def.max.filter(|hi| n > *hi) {
        if def.clamp {
            return Ok(hi);
        }
        return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{n} is above the maximum {hi}")));
    }
    Ok(n)
}

fn validate_number(label: &str, def: &ArgDef, value: &str) -> Result<BoundValue, Refusal> {
    let well_formed = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
        && value.bytes().any(|b| b.is_ascii_digit());
    let n: f64 = match value.parse::<f64>() {
        Ok(n) if well_formed => n,
        _ => return Err(refuse(ReasonCode::ArgInvalid, label, format_args!("{value:?} is not a number"))),
    };
    if !n.is_finite() {
        return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{value:?} is not a finite number")));
    }
    let (lo, hi) = float_bounds(def);
    let mut n = n;
    if let Some(lo) = lo.filter(|lo| n < *lo) {
        if !def.clamp {
            return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{n} is below the minimum {lo}")));
        }
        n = lo;
    }
    if let Some(hi) = hi.filter(|hi| n > *hi) {
        if !def.clamp {
            return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{n} is above the maximum {hi}")));
        }
        n = hi;
    }
    let json = serde_json::Number::from_f64(n).map(Value::Number).unwrap_or(Value::Null);
    Ok(BoundValue { text: n.to_string(), json })
}

fn validate_port(label: &str, def: &ArgDef, value: &str) -> Result<BoundValue, Refusal> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(ReasonCode::ArgInvalid, label, format_args!("{value:?} is not a port number")));
    }
    let n = match value.parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => i64::from(n),
        _ => {
            return Err(refuse(ReasonCode::ArgOutOfRange, label, format_args!("{value:?} is not a port in 1 … 65535")))
        }
    };
    let n = bound_i64(label, def, n)?;
    Ok(BoundValue { text: n.to_string(), json: Value::from(n) })
}

fn validate_duration(label: &str, def: &ArgDef, value: &str) -> Result<BoundValue, Refusal> {
    let (digits, scale) = match value.as_bytes().last() {
        Some(b's') => (&value[..value.len() - 1], 1),
        Some(b'm') => (&value[..value.len() - 1], 60),
        Some(b'h') => (&value[..value.len() - 1], 3600),
        _ => (value, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(
            ReasonCode::ArgInvalid,
            label,
            format_args!("{value:?} is not a duration (a positive integer with an optional s, m or h suffix)"),
        ));
    }
    let seconds =
        digits.parse::<i64>().ok().and_then(|n| n.checked_mul(scale)).ok_or_else(|| {
            refuse(ReasonCode::ArgOutOfRange, label, format_args!("{value:?} is too long a duration"))
        })?;
    if seconds == 0 {
        return Err(refuse(ReasonCode::ArgOutOfRange, label, "must be a positive duration"));
    }
    let seconds = bound_i64(label, def, seconds)?;
    Ok(BoundValue { text: seconds.to_string(), json: Value::from(seconds) })
}

fn validate_url(label: &str, def: &ArgDef, value: &str) -> Result<(), Refusal> {
    let (scheme, rest) = value
        .split_once("://")
        .ok_or_else(|| refuse(ReasonCode::ArgInvalid, label, "is not a URL (scheme://host…)"))?;
    let allowed: Vec<&str> = match def.schemes.as_deref() {
        Some(list) if !list.is_empty() => {
            list.iter().map(String::as_str).filter(|s| matches!(*s, "http" | "https")).collect()
        }
        _ => vec!["http", "https"],
    };
    if !allowed.contains(&scheme) {
        return Err(refuse(
            ReasonCode::ArgNotAllowed,
            label,
            format_args!("has the scheme {scheme:?}; allowed: {}", allowed.join(", ")),
        ));
    }
    if value.chars().any(char::is_whitespace) {
        return Err(refuse(ReasonCode::ArgInvalid, label, "contains whitespace"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    if authority.contains('@') {
        return Err(refuse(ReasonCode::ArgInvalid, label, "has user information (`user@`) in its URL"));
    }
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-') {
        return Err(refuse(
            ReasonCode::ArgInvalid,
            label,
            format_args!("has the host {host:?}, which is not [A-Za-z0-9.-]+"),
        ));
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !ok {
            return Err(refuse(
                ReasonCode::ArgInvalid,
                label,
                format_args!("has the port {port:?}, which is not 1 … 65535"),
            ));
        }
    }
    Ok(())
}

fn validate_cidr(label: &str, value: &str) -> Result<(), Refusal> {
    let bad = || refuse(ReasonCode::ArgInvalid, label, format_args!("{value:?} is not an IPv4 network (a.b.c.d/0-32)"));
    let (ip, prefix) = value.split_once('/').ok_or_else(bad)?;
    ip.parse::<Ipv4Addr>().map_err(|_| bad())?;
    let canonical = prefix == "0" || (!prefix.starts_with('0') && prefix.len() <= 2);
    if !canonical || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.parse::<u8>().map_or(true, |p| p > 32) {
        return Err(bad());
    }
    Ok(())
}

impl ArgRule {
    /// Validates `value` for argument `name`. `label` opens every message
    /// (``argument `name` `` or ``the default of argument `name` ``).
    pub(crate) fn validate(&self, label: &str, def: &ArgDef, value: &str) -> Result<BoundValue, Refusal> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(refuse(
                ReasonCode::ArgInvalid,
                label,
                format_args!("is {} bytes, more than {MAX_VALUE_BYTES}", value.len()),
            ));
        }
        let string = |v: &str| BoundValue { text: v.to_owned(), json: Value::String(v.to_owned()) };
        let bound = match &self.ty {
            ArgType::Integer => {
                let n = bound_i64(label, def, parse_i64(label, value)?)?;
                BoundValue { text: n.to_string(), json: Value::from(n) }
            }
            ArgType::Number => validate_number(label, def, value)?,
            ArgType::Boolean => match value {
                "true" => BoundValue { text: value.to_owned(), json: Value::Bool(true) },
                "false" => BoundValue { text: value.to_owned(), json: Value::Bool(false) },
                _ => {
                    return Err(refuse(
                        ReasonCode::ArgInvalid,
                        label,
                        format_args!("{value:?} is not exactly true or false"),
                    ))
                }
            },
            ArgType::Port => validate_port(label, def, value)?,
            ArgType::Duration => validate_duration(label, def, value)?,
            ArgType::Path => {
                // The grammar speaks first so a path gets its path code
                // (`path.control_char` for CR/LF, `path.absolute`, …).
                RelPath::parse(value).map_err(|r| Refusal::new(r.code, format!("{label}: {}", r.message)))?;
                check_injection(label, value, &self.reach)?;
                check_surrounding_whitespace(label, value)?;
                check_dash(label, value, self.dash_ok)?;
                string(value)
            }
            ArgType::LiteralText => {
                if value.contains('\0') {
                    return Err(refuse(ReasonCode::ArgInvalid, label, "contains NUL"));
                }
                check_dash(label, value, self.dash_ok)?;
                string(value)
            }
            ArgType::Unsupported(t) => {
                return Err(refuse(
                    ReasonCode::ManifestUnsupported,
                    label,
                    format_args!("has the type {t:?}, which airlock does not execute"),
                ))
            }
            ty => {
                debug_assert!(ty.is_string_like());
                check_string_like(label, value, self)?;
                match ty {
                    ArgType::Url => validate_url(label, def, value)?,
                    ArgType::IpAddress => {
                        value.parse::<IpAddr>().map_err(|_| {
                            refuse(ReasonCode::ArgInvalid, label, format_args!("{value:?} is not an IP address"))
                        })?;
                    }
                    ArgType::Cidr => validate_cidr(label, value)?,
                    ArgType::ScopeTarget => super::scope::validate_scope_target(label, value)?,
                    _ => {}
                }
                string(value)
            }
        };
        if let Some(re) = &self.pattern {
            if !re.is_match(value) {
                let how =
                    if self.ty == ArgType::LiteralText { "does not contain a match for" } else { "does not match" };
                let pattern = def.pattern.as_deref().unwrap_or_default();
                return Err(refuse(ReasonCode::ArgPattern, label, format_args!("{how} the pattern {pattern:?}")));
            }
        }
        if let Some(allowed) = &def.allowed {
            if !allowed.iter().any(|a| a == value) {
                return Err(refuse(
                    ReasonCode::ArgNotAllowed,
                    label,
                    format_args!("{value:?} is not one of: {}", allowed.join(", ")),
                ));
            }
        }
        Ok(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(ty: &str) -> ArgDef {
        ArgDef {
            position: None,
            required: false,
            default: None,
            description: None,
            type_name: ty.to_owned(),
            allowed: None,
            pattern: None,
            sanitize: None,
            min: None,
            max: None,
            min_float: None,
            max_float: None,
            clamp: false,
            schemes: None,
            scope_check: false,
            block_internal: false,
        }
    }

    fn check_with(d: &ArgDef, dash_ok: bool, value: &str) -> Result<String, ReasonCode> {
        let rule = compile("x", d, None, dash_ok, ShellReach::Template).expect("compiles");
        rule.validate("argument `x`", d, value).map(|b| b.text).map_err(|r| r.code)
    }

    fn check(d: &ArgDef, value: &str) -> Result<String, ReasonCode> {
        check_with(d, false, value)
    }

    fn ok(d: &ArgDef, value: &str) -> String {
        check(d, value).unwrap_or_else(|c| panic!("{value:?} refused: {c}"))
    }

    use ReasonCode::*;

    #[test]
    fn string() {
        let d = def("string");
        assert_eq!(ok(&d, "hello world"), "hello world");
        assert_eq!(ok(&d, ""), "");
        assert_eq!(ok(&d, "a-b_c.d/e:f=g,h+i%j@k"), "a-b_c.d/e:f=g,h+i%j@k");
        for (v, code) in [
            ("a;b", ArgInjection),
            ("a|b", ArgInjection),
            ("a&b", ArgInjection),
            ("$HOME", ArgInjection),
            ("`id`", ArgInjection),
            ("(x)", ArgInjection),
            ("{x}", ArgInjection),
            ("[x]", ArgInjection),
            ("<x", ArgInjection),
            ("x>", ArgInjection),
            ("x!", ArgInjection),
            ("a\nb", ArgInjection),
            ("a\rb", ArgInjection),
            ("a\0b", ArgInvalid),
            ("a\tb", ArgInvalid),
            ("a\u{7}b", ArgInvalid),
            ("a\u{202e}b", ArgInvalid),
            (" x", ArgInvalid),
            ("x ", ArgInvalid),
            ("x\u{a0}", ArgInvalid),
            ("-x", ArgLeadingDash),
            ("--help", ArgLeadingDash),
        ] {
            assert_eq!(check(&d, v), Err(code), "{v:?}");
        }
        assert_eq!(check_with(&d, true, "-x"), Ok("-x".into()));
        assert_eq!(check_with(&d, true, "-x;"), Err(ArgInjection));
    }

    fn check_in(d: &ArgDef, reach: ShellReach, value: &str) -> Result<String, Refusal> {
        compile("x", d, None, false, reach).expect("compiles").validate("argument `x`", d, value).map(|b| b.text)
    }

    #[test]
    fn an_exec_form_string_takes_metacharacters_and_keeps_every_other_rule() {
        let d = def("string");
        let jq = "[.users[] | select(.age > 30)] | {n: length} | $x < !y & `z`; (w)";
        assert_eq!(check_in(&d, ShellReach::Never, jq).unwrap(), jq);
        for (v, code) in [
            ("a\0b", ArgInvalid),
            ("a\nb", ArgInvalid),
            ("a\rb", ArgInvalid),
            (" [x]", ArgInvalid),
            ("-[x]", ArgLeadingDash),
        ] {
            assert_eq!(check_in(&d, ShellReach::Never, v).unwrap_err().code, code, "{v:?}");
        }
        // Other string-like types keep the refusal, and say which type takes it.
        let e = check_in(&def("url"), ShellReach::Never, "http://example.com/a|b").unwrap_err();
        assert_eq!(e.code, ArgInjection);
        assert!(e.message.contains("'|'") && e.message.contains("type `string` in an exec-form"), "{}", e.message);
    }

    #[test]
    fn a_value_that_can_reach_a_shell_keeps_the_refusal_and_names_the_type_that_takes_it() {
        let d = def("string");
        let mut sanitized = def("string");
        sanitized.sanitize = Some(vec!["injection".into()]);
        for (d, reach, says) in [
            (&d, ShellReach::Template, "type `string` in an exec-form command"),
            (&d, ShellReach::ShellProgram("sh".into()), "runs the shell `sh`"),
            (&d, ShellReach::NoCommand, "type `literal_text`"),
            (&sanitized, ShellReach::Never, "sanitize = [\"injection\"]"),
        ] {
            let e = check_in(d, reach.clone(), "a|b").unwrap_err();
            assert_eq!(e.code, ArgInjection, "{reach:?}");
            assert!(e.message.contains("'|'") && e.message.contains(says), "{reach:?}: {}", e.message);
            assert!(e.message.contains("literal_text") || reach == ShellReach::Never, "{}", e.message);
        }
        assert_eq!(check_in(&def("literal_text"), ShellReach::Template, "a|b").unwrap(), "a|b");
    }

    #[test]
    fn length_is_inclusive_at_32768_bytes() {
        let d = def("string");
        assert!(check(&d, &"a".repeat(MAX_VALUE_BYTES)).is_ok());
        assert_eq!(check(&d, &"a".repeat(MAX_VALUE_BYTES + 1)), Err(ArgInvalid));
        let lt = def("literal_text");
        assert!(check(&lt, &"🌍".repeat(MAX_VALUE_BYTES / 4)).is_ok());
        assert_eq!(check(&lt, &"🌍".repeat(MAX_VALUE_BYTES / 4 + 1)), Err(ArgInvalid));
        let i = def("integer");
        assert_eq!(check(&i, &"1".repeat(MAX_VALUE_BYTES + 1)), Err(ArgInvalid));
    }

    #[test]
    fn string_pattern_is_a_full_match() {
        let mut d = def("string");
        d.pattern = Some("[a-z]+".into());
        assert_eq!(ok(&d, "abc"), "abc");
        assert_eq!(check(&d, "abc1"), Err(ArgPattern));
        assert_eq!(check(&d, "1abc"), Err(ArgPattern));
        d.pattern = Some("a|b".into());
        assert_eq!(check(&d, "ab"), Err(ArgPattern), "alternation stays inside the anchors");
        assert_eq!(ok(&d, "b"), "b");
    }

    #[test]
    fn string_allowed_is_enforced() {
        let mut d = def("string");
        d.allowed = Some(vec!["x".into()]);
        assert_eq!(check(&d, "y"), Err(ArgNotAllowed));
    }

    #[test]
    fn integer() {
        let mut d = def("integer");
        assert_eq!(ok(&d, "42"), "42");
        assert_eq!(ok(&d, "-42"), "-42");
        assert_eq!(ok(&d, "+007"), "7");
        assert_eq!(ok(&d, "9223372036854775807"), "9223372036854775807");
        assert_eq!(ok(&d, "-9223372036854775808"), "-9223372036854775808");
        assert_eq!(check(&d, "9223372036854775808"), Err(ArgOutOfRange));
        for v in ["", "-", "1.5", "1e3", " 1", "1 ", "0x10", "one", "1;"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
        d.min = Some(1);
        d.max = Some(64);
        assert_eq!(ok(&d, "1"), "1");
        assert_eq!(ok(&d, "64"), "64");
        assert_eq!(check(&d, "0"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "65"), Err(ArgOutOfRange));
        d.clamp = true;
        assert_eq!(ok(&d, "0"), "1");
        assert_eq!(ok(&d, "-5"), "1");
        assert_eq!(ok(&d, "500"), "64");
    }

    #[test]
    fn number() {
        let mut d = def("number");
        assert_eq!(ok(&d, "1.5"), "1.5");
        assert_eq!(ok(&d, "-0.25"), "-0.25");
        assert_eq!(ok(&d, "1e3"), "1000");
        assert_eq!(ok(&d, "3"), "3");
        assert_eq!(check(&d, "1e999"), Err(ArgOutOfRange));
        for v in ["", "inf", "NaN", "infinity", "1,5", " 1", "abc", ".", "e"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
        d.min = Some(0);
        d.max = Some(10);
        assert_eq!(check(&d, "10.5"), Err(ArgOutOfRange), "falls back to min/max");
        d.min_float = Some(0.5);
        d.max_float = Some(1.5);
        assert_eq!(ok(&d, "0.5"), "0.5");
        assert_eq!(ok(&d, "1.5"), "1.5");
        assert_eq!(check(&d, "0.4"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "1.6"), Err(ArgOutOfRange));
        d.clamp = true;
        assert_eq!(ok(&d, "0.1"), "0.5");
        assert_eq!(ok(&d, "99"), "1.5");
    }

    #[test]
    fn boolean() {
        let d = def("boolean");
        assert_eq!(ok(&d, "true"), "true");
        assert_eq!(ok(&d, "false"), "false");
        for v in ["True", "TRUE", "1", "yes", "", " true"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
    }

    #[test]
    fn enumeration() {
        let mut d = def("enum");
        d.allowed = Some(vec!["fast".into(), "slow".into(), "-v".into(), "a;b".into()]);
        assert_eq!(ok(&d, "fast"), "fast");
        assert_eq!(check(&d, "Fast"), Err(ArgNotAllowed));
        assert_eq!(check(&d, "fast "), Err(ArgInvalid));
        assert_eq!(check(&d, "medium"), Err(ArgNotAllowed));
        assert_eq!(check(&d, "-v"), Err(ArgLeadingDash), "enum values are string-like too");
        assert_eq!(check(&d, "a;b"), Err(ArgInjection));
        assert_eq!(check_with(&d, true, "-v"), Ok("-v".into()));
    }

    #[test]
    fn path_keeps_grammar_codes() {
        let d = def("path");
        assert_eq!(ok(&d, "data/in.csv"), "data/in.csv");
        assert_eq!(ok(&d, "data/with space.csv"), "data/with space.csv");
        for (v, code) in [
            ("../etc/passwd", PathTraversal),
            ("a/../b", PathTraversal),
            ("/etc/passwd", PathAbsolute),
            ("", PathEmpty),
            ("a//b", PathEmptyComponent),
            ("./a", PathDotComponent),
            ("a\\b", PathBackslash),
            ("c:x", PathMountDelimiter),
            ("a\0b", PathControlChar),
            ("a\tb", PathControlChar),
            (".git/config", PathControlDir),
            ("a*", PathReservedChar),
            ("x ", PathTrailingDotOrSpace),
            ("a;b", ArgInjection),
            ("a|b", PathReservedChar),
            ("a\rb", PathControlChar),
            ("$x", ArgInjection),
            (" x", ArgInvalid),
            ("-rf", ArgLeadingDash),
        ] {
            assert_eq!(check(&d, v), Err(code), "{v:?}");
        }
        assert_eq!(check_with(&d, true, "-rf"), Ok("-rf".into()));
    }

    #[test]
    fn port() {
        let mut d = def("port");
        assert_eq!(ok(&d, "1"), "1");
        assert_eq!(ok(&d, "65535"), "65535");
        assert_eq!(ok(&d, "0080"), "80");
        assert_eq!(check(&d, "0"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "65536"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "99999999999"), Err(ArgOutOfRange));
        for v in ["", "+80", "-1", "80a", " 80", "http"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
        d.min = Some(1024);
        assert_eq!(check(&d, "80"), Err(ArgOutOfRange));
        d.clamp = true;
        assert_eq!(ok(&d, "80"), "1024");
    }

    #[test]
    fn url() {
        let mut d = def("url");
        for v in [
            "http://example.com",
            "https://example.com/",
            "https://a-b.example.com:8443/path/x.json?q=1#frag",
            "http://10.0.0.1:80",
        ] {
            assert_eq!(ok(&d, v), v);
        }
        for (v, code) in [
            ("ftp://example.com", ArgNotAllowed),
            ("file:///etc/passwd", ArgNotAllowed),
            ("HTTP://example.com", ArgNotAllowed),
            ("example.com", ArgInvalid),
            ("http://", ArgInvalid),
            ("http://user:pw@example.com/", ArgInvalid),
            ("http://@example.com/", ArgInvalid),
            ("http://exa_mple.com/", ArgInvalid),
            ("http://example.com:0/", ArgInvalid),
            ("http://example.com:65536/", ArgInvalid),
            ("http://example.com:/", ArgInvalid),
            ("http://example.com/a b", ArgInvalid),
            ("http://[::1]/", ArgInjection),
            ("http://example.com/?a=1&b=2", ArgInjection),
            ("http://example.com/$x", ArgInjection),
            (" http://example.com", ArgInvalid),
        ] {
            assert_eq!(check(&d, v), Err(code), "{v:?}");
        }
        d.schemes = Some(vec!["https".into()]);
        assert_eq!(check(&d, "http://example.com"), Err(ArgNotAllowed));
        assert!(check(&d, "https://example.com").is_ok());
        d.schemes = Some(vec!["ftp".into()]);
        assert_eq!(check(&d, "ftp://example.com"), Err(ArgNotAllowed), "schemes only narrow");
    }

    #[test]
    fn duration() {
        let mut d = def("duration");
        assert_eq!(ok(&d, "30"), "30");
        assert_eq!(ok(&d, "30s"), "30");
        assert_eq!(ok(&d, "5m"), "300");
        assert_eq!(ok(&d, "2h"), "7200");
        assert_eq!(check(&d, "0"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "0m"), Err(ArgOutOfRange));
        assert_eq!(check(&d, "9223372036854775807h"), Err(ArgOutOfRange));
        for v in ["", "s", "1d", "-5", "+5", "1.5m", "5 m", "5ms", "5M"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
        d.max = Some(600);
        assert_eq!(check(&d, "11m"), Err(ArgOutOfRange));
        d.clamp = true;
        assert_eq!(ok(&d, "11m"), "600");
    }

    #[test]
    fn regex_match() {
        let mut d = def("regex_match");
        assert!(compile("x", &d, None, false, ShellReach::Template).is_err(), "pattern is mandatory");
        d.pattern = Some("[A-Z]{2}-[0-9]+".into());
        assert_eq!(ok(&d, "AB-12"), "AB-12");
        assert_eq!(check(&d, "AB-12x"), Err(ArgPattern));
        assert_eq!(check(&d, "xAB-12"), Err(ArgPattern));
        assert_eq!(check(&d, "AB-1;2"), Err(ArgInjection), "string-like checks come first");
    }

    #[test]
    fn literal_text() {
        let mut d = def("literal_text");
        for v in ["", " \t\r\n", "$(touch trap); `id` | & <> [] ! {x} {_secret:t}", "héllo 🌍"] {
            assert_eq!(ok(&d, v), v, "not trimmed, metacharacters allowed");
        }
        assert_eq!(check(&d, "a\0b"), Err(ArgInvalid));
        assert_eq!(check(&d, "-n"), Err(ArgLeadingDash));
        assert_eq!(check_with(&d, true, "-n"), Ok("-n".into()));
        d.pattern = Some("valid".into());
        assert_eq!(ok(&d, "prefix valid suffix"), "prefix valid suffix");
        assert_eq!(check(&d, "nope"), Err(ArgPattern));
    }

    #[test]
    fn ip_address() {
        let d = def("ip_address");
        for v in ["10.0.0.1", "255.255.255.255", "::1", "fe80::1", "2001:db8::8a2e:370:7334"] {
            assert_eq!(ok(&d, v), v);
        }
        for v in ["", "256.0.0.1", "10.0.0", "010.0.0.1", "example.com", "fe80::1%eth0", "10.0.0.1/8"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
        assert_eq!(check(&d, " 10.0.0.1"), Err(ArgInvalid));
    }

    #[test]
    fn cidr() {
        let d = def("cidr");
        for v in ["10.0.0.0/8", "0.0.0.0/0", "192.168.1.0/24", "1.2.3.4/32"] {
            assert_eq!(ok(&d, v), v);
        }
        for v in ["10.0.0.0", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/+8", "::1/128", "10.0.0/8", "/8"] {
            assert_eq!(check(&d, v), Err(ArgInvalid), "{v:?}");
        }
    }

    #[test]
    fn unsupported_type_is_refused_at_validation() {
        let d = def("msf_options");
        assert_eq!(check(&d, "RHOSTS x"), Err(ManifestUnsupported));
        assert!(ArgType::parse("scope_target").is_supported());
        assert!(!ArgType::parse("credential_file").is_supported());
        assert!(ArgType::parse("cidr").is_supported());
    }

    #[test]
    fn structural_checks() {
        let code = |d: &ArgDef| compile("x", d, None, false, ShellReach::Template).err().map(|r| r.code);
        assert_eq!(code(&def("enum")), Some(ManifestInvalid));
        let mut d = def("string");
        d.pattern = Some("a)(b".into());
        assert_eq!(code(&d), Some(ManifestInvalid), "cannot break out of the anchoring group");
        d.pattern = Some("(".into());
        assert_eq!(code(&d), Some(ManifestInvalid));
        d.pattern = Some("a{1000}{1000}".into());
        assert_eq!(code(&d), Some(ManifestInvalid), "size-limited");
        let mut d = def("integer");
        d.min = Some(5);
        d.max = Some(1);
        assert_eq!(code(&d), Some(ManifestInvalid));
        let mut d = def("number");
        d.min_float = Some(f64::NAN);
        assert_eq!(code(&d), Some(ManifestInvalid));
        let mut d = def("string");
        d.default = Some(toml::Value::Array(vec![]));
        assert_eq!(code(&d), Some(ManifestInvalid));
        assert_eq!(compile("_x", &def("string"), None, false, ShellReach::Template).unwrap_err().code, ManifestInvalid);
        assert_eq!(compile("9x", &def("string"), None, false, ShellReach::Template).unwrap_err().code, ManifestInvalid);
    }

    #[test]
    fn scalar_defaults_normalise() {
        assert_eq!(scalar_string(&toml::Value::Integer(4)).unwrap(), "4");
        assert_eq!(scalar_string(&toml::Value::Float(1.5)).unwrap(), "1.5");
        assert_eq!(scalar_string(&toml::Value::Boolean(true)).unwrap(), "true");
        assert_eq!(scalar_string(&toml::Value::String("x".into())).unwrap(), "x");
    }
}
