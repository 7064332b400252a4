//! RFC 8785 canonical JSON of a [`serde_json::Value`], written in one pass.
//!
//! [`crate::canonical_json`] serializes any value through
//! `serde_json_canonicalizer`, which buffers every property and parses
//! every key again to sort it: fine for a descriptor, slow for a source
//! query's result of thousands of entries. [`canonical_value`] writes the
//! same bytes directly: keys sorted by UTF-16 code units, strings escaped as
//! `serde_json` escapes them (`"`, `\`, and control characters as `\b`,
//! `\t`, `\n`, `\f`, `\r` or `\u00xx`), integers up to 2^53 in magnitude as
//! decimal digits (what ECMAScript prints for them). Any other number (a
//! fraction, or an integer a double cannot hold exactly) hands the whole
//! value to [`crate::canonical_json`], so the bytes are always its bytes.

use serde_json::Value;

/// The largest magnitude of an integer a double holds exactly.
const EXACT: u64 = 1 << 53;

/// The RFC 8785 form of `value`: byte for byte [`crate::canonical_json`]'s.
pub fn canonical_value(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    if write(value, &mut out) {
        out
    } else {
        crate::canonical_json(value)
    }
}

/// Writes `value`; `false` at a number this writer leaves to the library.
fn write(value: &Value, out: &mut Vec<u8>) -> bool {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64().filter(|u| *u <= EXACT) {
                out.extend_from_slice(u.to_string().as_bytes());
            } else if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= EXACT) {
                out.extend_from_slice(i.to_string().as_bytes());
            } else {
                return false;
            }
        }
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write(item, out) {
                    return false;
                }
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(key, out);
                out.push(b':');
                if !map.get(key).is_some_and(|v| write(v, out)) {
                    return false;
                }
            }
            out.push(b'}');
        }
    }
    true
}

/// A JSON string as `serde_json` escapes it (the canonicalizer keeps that).
fn string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => &[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (0u64..=EXACT + 2).prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "\\PC{0,12}|[\\x00-\\x1f\"\\\\/\\x7f\u{2028}\u{e9}\u{1F600}\u{FF61}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}|[a-zA-Z\u{e9}\u{1F600}\u{FF61}_]{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The same bytes as the library, whatever the value.
        #[test]
        fn the_same_bytes_as_the_canonicalizer(v in value()) {
            prop_assert_eq!(canonical_value(&v), crate::canonical_json(&v));
        }
    }

    #[test]
    fn keys_sort_by_utf16_and_controls_escape_as_the_library_does() {
        // U+FF61 sorts before U+1F600 in UTF-16 (a surrogate), after it in UTF-8.
        let v = json!({"\u{1F600}": 1, "\u{FF61}": 2, "b": "\u{1}\u{8}\t\n\u{c}\r\"\\/\u{7f}", "a": [9007199254740993u64, -3]});
        assert_eq!(canonical_value(&v), crate::canonical_json(&v));
        assert!(String::from_utf8(canonical_value(&v)).unwrap().starts_with("{\"a\":"));
    }
}
