//! Turning a tool's bounded standard output into the envelope's `content`,
//! by the manifest's `[output] format` (ToolClad's builtin parsers).

use crate::manifest::OutputFormat;
use crate::reason::{ReasonCode, Refusal};
use serde_json::{Map, Value};

/// `[output] max_bytes` when a manifest does not say.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;

fn parse_error(format: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::new(ReasonCode::OutputParse, format!("the tool's output is not valid {format}: {why}"))
}

/// Parses `stdout`:
/// - `text`: `{"raw_output": "…"}` (invalid UTF-8 replaced);
/// - `json`: the document;
/// - `jsonl`: an array of the non-empty lines' documents;
/// - `csv`: an array of objects keyed by the header row.
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
        OutputFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(stdout);
            let headers = reader.headers().map_err(|e| parse_error("CSV", e))?.clone();
            let mut rows = Vec::new();
            for record in reader.records() {
                let record = record.map_err(|e| parse_error("CSV", e))?;
                let row: Map<String, Value> = headers
                    .iter()
                    .zip(record.iter())
                    .map(|(h, v)| (h.to_owned(), Value::String(v.to_owned())))
                    .collect();
                rows.push(Value::Object(row));
            }
            Ok(Value::Array(rows))
        }
        OutputFormat::Xml => Err(Refusal::new(ReasonCode::ManifestUnsupported, "XML output is not parsed by airlock")),
    }
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
        OutputFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(reader);
            reader.headers().map_err(|e| parse_error("CSV", e))?;
            let mut record = csv::ByteRecord::new();
            while reader.read_byte_record(&mut record).map_err(|e| parse_error("CSV", e))? {}
            Ok(())
        }
        OutputFormat::Xml => Err(Refusal::new(ReasonCode::ManifestUnsupported, "XML output is not parsed by airlock")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_streamed_check_agrees_with_the_parser() {
        let cases: [(OutputFormat, &[u8]); 8] = [
            (OutputFormat::Json, br#"{"a":[1,2,{"b":null}]}"#),
            (OutputFormat::Json, br#"{"a":1} {"b":2}"#),
            (OutputFormat::Json, b"{\"a\":"),
            (OutputFormat::Jsonl, b"{\"a\":1}\n\n[2]\n"),
            (OutputFormat::Jsonl, b"{\"a\":1}\nnope\n"),
            (OutputFormat::Csv, b"x,y\n1,2\n3,4\n"),
            (OutputFormat::Csv, b"x,y\n1,2,3\n"),
            (OutputFormat::Text, b"\xff anything"),
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
        assert_eq!(
            parse_output(OutputFormat::Csv, b"x,y\n1,2\n3,4\n").unwrap(),
            json!([{"x":"1","y":"2"},{"x":"3","y":"4"}])
        );
    }

    #[test]
    fn bad_input_is_output_parse() {
        for (f, b) in
            [(OutputFormat::Json, &b"{"[..]), (OutputFormat::Jsonl, b"1\nnope"), (OutputFormat::Csv, b"a,b\n1,2,3\n")]
        {
            assert_eq!(parse_output(f, b).unwrap_err().code, ReasonCode::OutputParse, "{f:?}");
        }
    }
}
