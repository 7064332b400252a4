//! `scope_target`: a network target (host name, IP address or IPv4 CIDR),
//! checked by ToolClad's rules in ToolClad's order (so each attack shape gets
//! its own message): at most 253 bytes, no wildcard, no path traversal, a `/`
//! only in a CIDR, no backslash, ASCII only, no punycode (`xn--`) label; then
//! it must be an IPv4 address, an IPv6 address, an IPv4 CIDR or a host name.
//!
//! A tool with a scope target reaches the network, so it is refused at run
//! time until airlock has a network grant (see `unsupported.rs`); the value
//! is still validated so `airlock check` and the conformance tests see the
//! same refusals as the reference.

use crate::reason::{ReasonCode, Refusal};
use regex::Regex;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::LazyLock;

/// Longest scope target, in bytes (RFC 1035 §2.3.4).
pub const SCOPE_TARGET_MAX_LEN: usize = 253;

static IPV4: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$").expect("static"));
static CIDR_V4: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})/(\d{1,2})$").expect("static"));
static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)*$")
        .expect("static")
});

fn has_punycode_label(host: &str) -> bool {
    host.split('.').any(|label| label.len() >= 4 && label.as_bytes()[..4].eq_ignore_ascii_case(b"xn--"))
}

/// Checks `value` as a `scope_target` (the string-like checks — length,
/// metacharacters, control characters, blanks — have already run).
pub(crate) fn validate_scope_target(label: &str, value: &str) -> Result<(), Refusal> {
    let refuse = |why: &str| Err(Refusal::new(ReasonCode::ArgInvalid, format!("{label} {value:?} {why}")));
    if value.is_empty() {
        return refuse("is empty; a scope target is a host name, IP address or IPv4 CIDR");
    }
    if value.len() > SCOPE_TARGET_MAX_LEN {
        return refuse(&format!("is longer than {SCOPE_TARGET_MAX_LEN} bytes (RFC 1035 §2.3.4)"));
    }
    if value.contains('*') {
        return refuse("contains a wildcard; name one host or a CIDR");
    }
    if value.contains("../") || value.contains("..\\") || value.contains("/..") {
        return refuse("contains a path traversal sequence");
    }
    if value.contains('/') && !CIDR_V4.is_match(value) && value.parse::<IpAddr>().is_err() {
        return refuse("contains `/` outside CIDR notation (write a range as a.b.c.d/n)");
    }
    if value.contains('\\') {
        return refuse("contains a backslash");
    }
    if !value.is_ascii() {
        return refuse("is not ASCII (IDN host names, homoglyphs included, are refused)");
    }
    if has_punycode_label(value) {
        return refuse("has a punycode (xn--) label (IDN host names are refused to prevent homoglyph bypass)");
    }
    let ok = IPV4.is_match(value)
        || value.parse::<Ipv6Addr>().is_ok()
        || CIDR_V4.is_match(value)
        || HOSTNAME.is_match(value);
    if ok {
        Ok(())
    } else {
        refuse("is not a host name, IP address or IPv4 CIDR")
    }
}
