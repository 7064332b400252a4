//! `builtin:xml`: XML into JSON by ToolClad's rules (its reference
//! implementation's `parse_xml_to_json`), read with `quick-xml`.
//!
//! - An element is an object; its attributes are `"@name": "value"` strings.
//! - Its children are keys by element name; a name seen twice becomes an
//!   array of the objects, in document order.
//! - Text (trimmed) is `"#text"`; when text is split by child elements the
//!   last non-blank piece wins, as in the reference.
//! - The document is `{ "root": {…} }`; the XML declaration, comments,
//!   processing instructions and the doctype are skipped; an empty
//!   document is `{"raw_output": ""}`.
//!
//! Unlike the reference's scanner, entities and character references are
//! decoded, CDATA is text, and malformed XML (a mismatched end tag, an
//! unclosed element) is `output.parse`. Nesting is bounded by
//! [`MAX_XML_DEPTH`] so neither parsing nor the JSON built can exhaust the
//! stack.

use crate::reason::{ReasonCode, Refusal};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use serde_json::{Map, Value};

/// Deepest element nesting accepted.
pub const MAX_XML_DEPTH: usize = 128;

fn parse_error(why: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::OutputParse, format!("the tool's output is not valid XML: {why}"))
}

/// Adds `child` under `name` in `parent`, turning a repeated name into an array.
fn insert_child(parent: &mut Map<String, Value>, name: String, child: Value) {
    match parent.get_mut(&name) {
        Some(Value::Array(items)) => items.push(child),
        Some(existing) => {
            let first = existing.take();
            *existing = Value::Array(vec![first, child]);
        }
        None => {
            parent.insert(name, child);
        }
    }
}

fn attributes(start: &BytesStart<'_>) -> Result<Map<String, Value>, Refusal> {
    let mut attrs = Map::new();
    for attr in start.attributes() {
        let attr = attr.map_err(parse_error)?;
        let key: &str = attr.key.as_ref();
        let value = attr.normalized_value(quick_xml::XmlVersion::Implicit1_0).map_err(parse_error)?;
        attrs.insert(format!("@{key}"), Value::String(value.into_owned()));
    }
    Ok(attrs)
}

fn name_of(start: &BytesStart<'_>) -> String {
    let name = start.name();
    let s: &str = name.as_ref();
    s.to_owned()
}

/// Sets the pending text (trimmed, when not blank) as `#text` of `obj`.
fn flush_text(text: &mut String, obj: Option<&mut Map<String, Value>>) {
    let trimmed = text.trim();
    if let (false, Some(obj)) = (trimmed.is_empty(), obj) {
        obj.insert("#text".to_owned(), Value::String(trimmed.to_owned()));
    }
    text.clear();
}

/// The innermost open element, if any (the bottom of `stack` is the document).
fn open_element(stack: &mut [(String, Map<String, Value>)]) -> Option<&mut Map<String, Value>> {
    match stack {
        [_, .., (_, obj)] => Some(obj),
        _ => None,
    }
}

/// Parses `xml` (already bounded by `[output] max_bytes`).
pub fn xml_to_json(xml: &[u8]) -> Result<Value, Refusal> {
    let xml = std::str::from_utf8(xml).map_err(parse_error)?;
    if xml.trim().is_empty() {
        return Ok(serde_json::json!({ "raw_output": "" }));
    }
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    // The open elements: name and object; the bottom is the document.
    let mut stack: Vec<(String, Map<String, Value>)> = vec![(String::new(), Map::new())];
    let mut text = String::new();
    loop {
        let event =
            reader.read_event().map_err(|e| parse_error(format!("at byte {}: {e}", reader.error_position())))?;
        match event {
            Event::Start(start) => {
                flush_text(&mut text, open_element(&mut stack));
                if stack.len() > MAX_XML_DEPTH {
                    return Err(parse_error(format!("elements nest deeper than {MAX_XML_DEPTH}")));
                }
                stack.push((name_of(&start), attributes(&start)?));
            }
            Event::Empty(start) => {
                flush_text(&mut text, open_element(&mut stack));
                let attrs = attributes(&start)?;
                if let Some((_, parent)) = stack.last_mut() {
                    insert_child(parent, name_of(&start), Value::Object(attrs));
                }
            }
            Event::End(_) => {
                if stack.len() < 2 {
                    return Err(parse_error("an end tag closes no element"));
                }
                let Some((name, mut obj)) = stack.pop() else { continue };
                flush_text(&mut text, Some(&mut obj));
                if let Some((_, parent)) = stack.last_mut() {
                    insert_child(parent, name, Value::Object(obj));
                }
            }
            Event::Text(t) => text.push_str(&t.xml10_content()),
            Event::CData(c) => text.push_str(&c.xml10_content()),
            Event::GeneralRef(r) => {
                if let Some(ch) = r.resolve_char_ref().map_err(parse_error)? {
                    text.push(ch);
                } else {
                    let name = r.xml10_content();
                    let known = quick_xml::escape::resolve_predefined_entity(&name)
                        .ok_or_else(|| parse_error(format!("the entity &{name}; is not defined")))?;
                    text.push_str(known);
                }
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if stack.len() != 1 {
        return Err(parse_error(format!("the element <{}> is not closed", stack.last().map_or("", |(n, _)| n))));
    }
    let (_, document) = stack.pop().unwrap_or_default();
    Ok(Value::Object(document))
}

/// Checks that what `reader` holds is well-formed by the same rules
/// (matching end tags, the nesting bound, known entities), streaming it
/// with bounded memory and building no JSON: for output files too large to
/// parse into an answer.
pub fn check_xml(reader: impl std::io::BufRead) -> Result<(), Refusal> {
    let mut reader = Reader::from_reader(reader);
    reader.config_mut().check_end_names = true;
    let mut buf = Vec::new();
    let mut depth = 0usize;
    loop {
        let event = reader.read_event_into(&mut buf).map_err(parse_error)?;
        match event {
            Event::Start(_) => {
                depth += 1;
                if depth > MAX_XML_DEPTH {
                    return Err(parse_error(format!("elements nest deeper than {MAX_XML_DEPTH}")));
                }
            }
            Event::End(_) => {
                depth = depth.checked_sub(1).ok_or_else(|| parse_error("an end tag closes no element"))?;
            }
            Event::GeneralRef(r) => {
                let name = r.xml10_content();
                if r.resolve_char_ref().map_err(parse_error)?.is_none()
                    && quick_xml::escape::resolve_predefined_entity(&name).is_none()
                {
                    return Err(parse_error(format!("the entity &{name}; is not defined")));
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    if depth != 0 {
        return Err(parse_error("an element is not closed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn elements_attributes_text_and_repeats() {
        let xml = br#"<?xml version="1.0"?>
<!DOCTYPE nmaprun>
<nmaprun scanner="nmap" args="nmap -sV">
  <!-- a comment -->
  <host><address addr="10.0.0.1" addrtype="ipv4"/>
    <ports><port protocol="tcp" portid="22"><state state="open"/></port>
           <port protocol="tcp" portid="80"/></ports></host>
  <runstats>done &amp; dusted &#x41;</runstats>
</nmaprun>"#;
        let want = json!({"nmaprun": {
            "@scanner": "nmap", "@args": "nmap -sV",
            "host": {
                "address": {"@addr": "10.0.0.1", "@addrtype": "ipv4"},
                "ports": {"port": [
                    {"@protocol": "tcp", "@portid": "22", "state": {"@state": "open"}},
                    {"@protocol": "tcp", "@portid": "80"}
                ]}
            },
            "runstats": {"#text": "done & dusted A"}
        }});
        assert_eq!(xml_to_json(xml).unwrap(), want);
        assert_eq!(xml_to_json(b"  \n").unwrap(), json!({"raw_output": ""}));
        assert_eq!(xml_to_json(b"<a><![CDATA[x<y]]></a>").unwrap(), json!({"a": {"#text": "x<y"}}));
    }

    #[test]
    fn malformed_and_deep_documents_are_refused() {
        for bad in [&b"<a><b></a>"[..], b"<a>", b"</a>", b"<a>&nope;</a>", b"\xff"] {
            assert_eq!(xml_to_json(bad).unwrap_err().code, ReasonCode::OutputParse, "{bad:?}");
        }
        let deep = "<a>".repeat(MAX_XML_DEPTH + 1) + &"</a>".repeat(MAX_XML_DEPTH + 1);
        assert!(xml_to_json(deep.as_bytes()).unwrap_err().message.contains("deeper"));
        assert!(check_xml(deep.as_bytes()).is_err());
        let ok = "<a>".repeat(MAX_XML_DEPTH) + &"</a>".repeat(MAX_XML_DEPTH);
        assert!(xml_to_json(ok.as_bytes()).is_ok());
        assert!(check_xml(ok.as_bytes()).is_ok());
        for bad in [&b"<a><b></a>"[..], b"<a>", b"</a>", b"<a>&nope;</a>"] {
            assert!(check_xml(bad).is_err(), "{bad:?}");
        }
    }
}
