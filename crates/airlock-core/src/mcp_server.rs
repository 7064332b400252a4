//! `[mcp]` in `airlock.toml`: who may talk to `airlock mcp --http` and
//! `airlock mcp --unix`, and how much they may hold.
//!
//! ```toml
//! [mcp]
//! token_principal = "agent"          # calls made with the bearer token; default [policy] principal
//! allowed_origins = ["http://localhost:3000"]   # an absent Origin is always accepted
//! max_sessions = 256                 # live sessions at once, 1 … 4096
//! session_idle_seconds = 600         # a session unused this long is closed, 1 … 86400
//! [mcp.principals]                   # Unix-socket peers: uid = principal; any other uid is refused
//! 1000 = "alice"
//! ```

use crate::reason::{ReasonCode, Refusal};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Live sessions at once unless `[mcp] max_sessions` says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// The most `[mcp] max_sessions` may be.
pub const MAX_SESSIONS_LIMIT: usize = 4096;
/// Idle expiry of a session unless `[mcp] session_idle_seconds` says otherwise.
pub const DEFAULT_SESSION_IDLE_SECONDS: u64 = 600;
/// The most `[mcp] session_idle_seconds` may be (one day).
pub const SESSION_IDLE_LIMIT_SECONDS: u64 = 86_400;
/// The largest HTTP request body the server reads (4 MiB).
pub const MAX_BODY_BYTES: usize = 4 << 20;
/// The longest principal name.
pub const MAX_PRINCIPAL_BYTES: usize = 128;

/// `[mcp]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpServer {
    token_principal: Option<String>,
    #[serde(default)]
    principals: BTreeMap<String, String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    max_sessions: Option<usize>,
    session_idle_seconds: Option<u64>,
}

/// The MCP server front's settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The principal of calls made with the bearer token; `None` is the
    /// runtime's principal (`[policy] principal` or `--principal`).
    pub token_principal: Option<String>,
    /// Unix-socket peers by uid; an unmapped uid is refused.
    pub principals: BTreeMap<u32, String>,
    /// Accepted `Origin` values, normalized by [`normalize_origin`].
    pub allowed_origins: Vec<String>,
    /// Live sessions at once.
    pub max_sessions: usize,
    /// A session unused this long is closed.
    pub session_idle: Duration,
}

impl Default for McpServerConfig {
    /// No token principal of its own, no mapped uids, no origins, 256
    /// sessions, 600 s idle expiry.
    fn default() -> Self {
        McpServerConfig {
            token_principal: None,
            principals: BTreeMap::new(),
            allowed_origins: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECONDS),
        }
    }
}

impl RawMcpServer {
    /// Checks every entry; anything wrong is `config.invalid` naming it.
    pub(crate) fn check(self) -> Result<McpServerConfig, Refusal> {
        let bad = |what: String| Refusal::new(ReasonCode::ConfigInvalid, format!("[mcp] {what}"));
        if let Some(p) = &self.token_principal {
            check_principal(p).map_err(|why| bad(format!("token_principal {p:?}: {why}")))?;
        }
        let token_principal = self.token_principal;
        let mut principals = BTreeMap::new();
        for (uid, principal) in self.principals {
            let parsed = parse_uid(&uid).ok_or_else(|| {
                bad(format!("principals key {uid:?} is not a uid (a decimal number below 4294967295)"))
            })?;
            check_principal(&principal).map_err(|why| bad(format!("principals.{uid} = {principal:?}: {why}")))?;
            if principals.insert(parsed, principal).is_some() {
                return Err(bad(format!("principals names uid {parsed} twice")));
            }
        }
        let allowed_origins = self
            .allowed_origins
            .iter()
            .map(|o| {
                normalize_origin(o).ok_or_else(|| {
                    bad(format!(
                        "allowed_origins entry {o:?} is not an origin: write scheme://host[:port] (http or https, \
                         no path), e.g. \"http://localhost:3000\""
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max_sessions = match self.max_sessions {
            None => DEFAULT_MAX_SESSIONS,
            Some(n) if (1..=MAX_SESSIONS_LIMIT).contains(&n) => n,
            Some(n) => return Err(bad(format!("max_sessions = {n}: must be between 1 and {MAX_SESSIONS_LIMIT}"))),
        };
        let idle = match self.session_idle_seconds {
            None => DEFAULT_SESSION_IDLE_SECONDS,
            Some(s) if (1..=SESSION_IDLE_LIMIT_SECONDS).contains(&s) => s,
            Some(s) => {
                return Err(bad(format!(
                    "session_idle_seconds = {s}: must be between 1 and {SESSION_IDLE_LIMIT_SECONDS}"
                )))
            }
        };
        Ok(McpServerConfig {
            token_principal,
            principals,
            allowed_origins,
            max_sessions,
            session_idle: Duration::from_secs(idle),
        })
    }
}

/// A decimal uid; `u32::MAX` is `(uid_t)-1`, never a user.
fn parse_uid(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse::<u32>().ok().filter(|&uid| uid != u32::MAX)
}

/// A principal name: 1 … 128 bytes, no control characters, no leading or
/// trailing white space.
pub fn check_principal(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_PRINCIPAL_BYTES {
        return Err("a principal has 1 to 128 bytes");
    }
    if name.chars().any(char::is_control) {
        return Err("a principal has no control characters");
    }
    if name.trim() != name {
        return Err("a principal does not start or end with white space");
    }
    Ok(())
}

/// The serialized form of a web origin, `scheme://host[:port]`, lower case,
/// with the scheme's default port left out (browsers leave it out of
/// `Origin`). `None` for anything else: another scheme, a path, user
/// information, an empty host or a bad port.
pub fn normalize_origin(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://")?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let (host, port) = if rest.starts_with('[') {
        let end = rest.find(']')?;
        let inside = &rest[1..end];
        if inside.is_empty() || !inside.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        let after = &rest[end + 1..];
        let port = if after.is_empty() { None } else { Some(after.strip_prefix(':')?) };
        (&rest[..=end], port)
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let host_ok = !host.is_empty()
        && (host.starts_with('[')
            || host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_'));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u16 = p.parse().ok().filter(|&n| n > 0)?;
            (n.to_string() != default_port).then(|| n.to_string())
        }
        Some(_) => return None,
    };
    Some(match port {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<McpServerConfig, Refusal> {
        let raw: RawMcpServer =
            toml::from_str(text).map_err(|e| Refusal::new(ReasonCode::ConfigInvalid, e.to_string()))?;
        raw.check()
    }

    #[test]
    fn defaults() {
        let c = check("").unwrap();
        assert_eq!(c, McpServerConfig::default());
        assert_eq!(c.max_sessions, 256);
        assert_eq!(c.session_idle, Duration::from_secs(600));
    }

    #[test]
    fn a_full_section_parses() {
        let c = check(
            r#"
            token_principal = "agent"
            allowed_origins = ["HTTP://LocalHost:3000", "https://app.example:443", "http://[::1]:8080"]
            max_sessions = 4
            session_idle_seconds = 30
            [principals]
            1000 = "alice"
            0 = "root ops"
        "#,
        )
        .unwrap();
        assert_eq!(c.token_principal.as_deref(), Some("agent"));
        assert_eq!(c.principals.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(c.principals.get(&0).map(String::as_str), Some("root ops"));
        assert_eq!(c.allowed_origins, ["http://localhost:3000", "https://app.example", "http://[::1]:8080"]);
        assert_eq!((c.max_sessions, c.session_idle), (4, Duration::from_secs(30)));
    }

    #[test]
    fn refusals_name_the_entry() {
        let cases = [
            ("max_sessions = 0", "max_sessions"),
            ("max_sessions = 4097", "max_sessions"),
            ("session_idle_seconds = 0", "session_idle_seconds"),
            ("session_idle_seconds = 86401", "session_idle_seconds"),
            ("allowed_origins = [\"localhost:3000\"]", "allowed_origins"),
            ("allowed_origins = [\"http://localhost:3000/\"]", "allowed_origins"),
            ("allowed_origins = [\"ftp://localhost\"]", "allowed_origins"),
            ("allowed_origins = [\"http://user@host\"]", "allowed_origins"),
            ("allowed_origins = [\"http://host:0\"]", "allowed_origins"),
            ("allowed_origins = [\"http://host:99999\"]", "allowed_origins"),
            ("token_principal = \"\"", "token_principal"),
            ("token_principal = \" padded\"", "token_principal"),
            ("[principals]\nalice = \"alice\"", "principals key"),
            ("[principals]\n-1 = \"x\"", "principals key"),
            ("[principals]\n01000 = \"x\"", "principals key"),
            ("[principals]\n4294967295 = \"x\"", "principals key"),
            ("[principals]\n1000 = \"a\\nb\"", "principals.1000"),
            ("principal = \"x\"", "principal"),
        ];
        for (text, named) in cases {
            let err = check(text).unwrap_err();
            assert_eq!(err.code, ReasonCode::ConfigInvalid, "{text}");
            assert!(err.message.contains(named), "{text}: {}", err.message);
        }
    }

    #[test]
    fn origins_normalize_like_browsers_send_them() {
        assert_eq!(normalize_origin("http://localhost:80").as_deref(), Some("http://localhost"));
        assert_eq!(normalize_origin("https://Example.COM").as_deref(), Some("https://example.com"));
        assert_eq!(normalize_origin("https://example.com:8443").as_deref(), Some("https://example.com:8443"));
        assert_eq!(normalize_origin("http://[::1]").as_deref(), Some("http://[::1]"));
        for bad in ["null", "", "http://", "http://a b", "http://[zz]", "http://[::1]x", "http://host:", "file:///x"] {
            assert_eq!(normalize_origin(bad), None, "{bad:?}");
        }
    }
}
