//! Turning a tool's bounded standard output into the envelope's `content`,
//! by the manifest's `[output] format` (ToolClad's builtin parsers).

use crate::manifest::OutputFormat;
use crate::reason::{ReasonCode, Refusal};
use serde_json::Value;

/// `[output] max_bytes` when a manifest does not say.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;

fn parse_error(format: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::OutputParse, format!("the tool's output is not valid {format}: {why}"))
}

/// Parses `stdout`:
/// - `text`: `{"raw_output": "…"}` (invalid UTF-8 replaced);
/// - `json`: the document;
/// - `jsonl`: an array of the non-empty lines' documents;
/// - `csv`: an array of objects keyed by the header row (see `csv_to_json`);
/// - `xml`: ToolClad's XML-to-JSON (see `output_xml`).
pub fn parse_output(format: OutputFormat, stdout: &[u8]) -> Result<Value, Refusal> {
    match format {
        OutputFormat::Text => Ok(serde_json::json!({ "raw_output": String::from_utf8_lossy(stdout) })),
        OutputFormat::Json => serde_json::from_slice(stdout).map_err(|e| parse_error("JSON", e)),
        OutputFormat::Jsonl => stdout
            .split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
            .map(|(i, line)| {
                serde_json::from_slice(line).map_err(|e| parse_error("JSON lines", format!("line {}: {e}", i + 1)))
            })
            .collect::<Result<Vec<Value>, _>>()
            .map(Value::Array),
        OutputFormat::Csv => Ok(csv_to_json(&String::from_utf8_lossy(stdout))),
        OutputFormat::Xml => crate::output_xml::xml_to_json(stdout),
    }
}

/// `builtin:csv` as ToolClad's reference parses it: the first line is the
/// header; the delimiter is a tab if the header has one, else `|` if it has
/// one and no comma, else a comma; fields may be double-quoted (`""` is a
/// quote) within a line; header names and fields are trimmed; a field that
/// reads as an integer, a float or `true`/`false` becomes that JSON value;
/// blank lines are skipped and a short row has only its fields.
fn csv_to_json(raw: &str) -> Value {
    let mut lines = raw.lines();
    let Some(header) = lines.next() else { return Value::Array(Vec::new()) };
    let delimiter = if header.contains('\t') {
        '\t'
    } else if header.contains('|') && !header.contains(',') {
        '|'
    } else {
        ','
    };
    let names: Vec<String> = split_csv_line(header, delimiter).iter().map(|h| h.trim().to_owned()).collect();
    let rows = lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields = split_csv_line(line, delimiter);
            Value::Object(names.iter().zip(fields.iter()).map(|(h, f)| (h.clone(), csv_value(f.trim()))).collect())
        })
        .collect();
    Value::Array(rows)
}

fn csv_value(field: &str) -> Value {
    if let Ok(n) = field.parse::<i64>() {
        Value::from(n)
    } else if let Some(n) = field.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        Value::Number(n)
    } else if field == "true" || field == "false" {
        Value::Bool(field == "true")
    } else {
        Value::String(field.to_owned())
    }
}

fn split_csv_line(line: &str, delimiter: char) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if in_quotes && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '"' => in_quotes = !in_quotes,
            c if c == delimiter && !in_quotes => fields.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    fields.push(current);
    fields
}

/// Checks that what `reader` holds is well-formed `format`, reading it once
/// with bounded memory (JSON values are checked without being built: one
/// JSON document, one per non-blank line for JSON lines, CSV records one at
/// a time). For output files too large to parse into an answer.
pub fn check_output(format: OutputFormat, reader: impl std::io::Read) -> Result<(), Refusal> {
    use serde::de::{Deserialize, IgnoredAny};
    use std::io::BufRead;
    let reader = std::io::BufReader::new(reader);
    match format {
        OutputFormat::Text => Ok(()),
        OutputFormat::Json => {
            let mut de = serde_json::Deserializer::from_reader(reader);
            IgnoredAny::deserialize(&mut de).and_then(|_| de.end()).map_err(|e| parse_error("JSON", e))
        }
        OutputFormat::Jsonl => {
            for (i, line) in reader.split(b'\n').enumerate() {
                let line = line.map_err(|e| parse_error("JSON lines", e))?;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                serde_json::from_slice::<IgnoredAny>(&line)
                    .map_err(|e| parse_error("JSON lines", format!("line {}: {e}", i + 1)))?;
            }
            Ok(())
        }
        // ToolClad's CSV reading accepts any text (see `csv_to_json`).
        OutputFormat::Csv => Ok(()),
        OutputFormat::Xml => crate::output_xml::check_xml(reader),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_streamed_check_agrees_with_the_parser() {
        let cases: [(OutputFormat, &[u8]); 11] = [
            (OutputFormat::Json, br#"{"a":[1,2,{"b":null}]}"#),
            (OutputFormat::Json, br#"{"a":1} {"b":2}"#),
            (OutputFormat::Json, b"{\"a\":"),
            (OutputFormat::Jsonl, b"{\"a\":1}\n\n[2]\n"),
            (OutputFormat::Jsonl, b"{\"a\":1}\nnope\n"),
            (OutputFormat::Csv, b"x,y\n1,2\n3,4\n"),
            (OutputFormat::Csv, b"x,y\n1,2,3\n"),
            (OutputFormat::Text, b"\xff anything"),
            (OutputFormat::Xml, b"<a x='1'><b/>t</a>"),
            (OutputFormat::Xml, b"<a><b></a>"),
            (OutputFormat::Xml, b"<a>&bogus;</a>"),
        ];
        for (format, bytes) in cases {
            assert_eq!(
                check_output(format, bytes).is_ok(),
                parse_output(format, bytes).is_ok(),
                "{format:?} {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn formats() {
        assert_eq!(parse_output(OutputFormat::Text, b"hi\xff").unwrap(), json!({"raw_output": "hi\u{fffd}"}));
        assert_eq!(parse_output(OutputFormat::Json, br#"{"a":1}"#).unwrap(), json!({"a": 1}));
        assert_eq!(parse_output(OutputFormat::Jsonl, b"1\n\n{\"b\":2}\n").unwrap(), json!([1, {"b": 2}]));
        assert_eq!(parse_output(OutputFormat::Csv, b"x,y\n1,2\n3,4\n").unwrap(), json!([{"x":1,"y":2},{"x":3,"y":4}]));
        assert_eq!(
            parse_output(OutputFormat::Csv, b" a | b \n\"x|\"\"y\"|2.5\nshort\n\ntrue|-3\n").unwrap(),
            json!([{"a":"x|\"y","b":2.5},{"a":"short"},{"a":true,"b":-3}])
        );
        assert_eq!(parse_output(OutputFormat::Csv, b"").unwrap(), json!([]));
    }

    #[test]
    fn bad_input_is_output_parse() {
        for (f, b) in [(OutputFormat::Json, &b"{"[..]), (OutputFormat::Jsonl, b"1\nnope"), (OutputFormat::Xml, b"<a>")]
        {
            assert_eq!(parse_output(f, b).unwrap_err().code, ReasonCode::OutputParse, "{f:?}");
        }
    }
}
