//! Conformance with the ToolClad reference implementation (the `toolclad`
//! crate 0.6.1, its own parser, validator and command builder): for the
//! reference's example manifests and airlock's ToolClad-format manifests in
//! `tests/toolclad/`, and a table of argument sets, airlock's argv (after
//! mappings, conditionals and defaults) equals the reference's, and both
//! refuse the same invalid values.
//!
//! Known, deliberate differences are asserted as such, not hidden:
//! - toolclad 0.6.1 (Rust) does not apply the `_type` suffix rule (its Go
//!   implementation and the spec's nmap example do: `scan_type` offers
//!   `{_scan_flags}`); the reference leaves the placeholder as literal text.
//! - In an `exec` array the reference keeps an element that became empty
//!   (a false conditional) as an empty argument; airlock leaves it out.
//! - A value is one word in airlock; the reference splits the interpolated
//!   template, so a value with a blank becomes several words there.
//! - `{_output_file}` is the reference's evidence path, airlock's the call's
//!   declared output; `{{`/`}}` are literal braces in airlock and left
//!   doubled by the reference.

use airlock_core::manifest::Manifest;
use std::collections::HashMap;
use std::path::Path;

fn dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/toolclad"))
}

fn text(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap()
}

/// The reference's argv: validate like `toolclad::executor::execute`, then
/// build (exec arrays element by element; templates interpolated and split
/// with shlex, as the reference runs them).
fn reference_argv(m: &toolclad::types::Manifest, args: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let given: HashMap<&str, &str> = args.iter().copied().collect();
    let mut validated = HashMap::new();
    for (name, def) in &m.args {
        if let Some(v) = given.get(name.as_str()) {
            let clean = toolclad::validator::validate_arg(name, def, v).map_err(|e| e.to_string())?;
            validated.insert(name.clone(), clean);
        } else if let Some(d) = &def.default {
            let d = match d {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            validated.insert(name.clone(), d);
        } else if def.required {
            return Err(format!("missing required argument '{name}'"));
        }
    }
    if m.command.exec.is_some() {
        return toolclad::executor::build_command_argv(m, &validated).map_err(|e| e.to_string());
    }
    let line = toolclad::executor::build_command(m, &validated).map_err(|e| e.to_string())?;
    shlex::split(&line).ok_or_else(|| "unbalanced quotes".to_owned())
}

fn airlock_argv(m: &Manifest, args: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let named: Vec<(String, serde_json::Value)> =
        args.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned()))).collect();
    let bound = m.bind_args(&[], &named).map_err(|r| format!("{}: {}", r.code, r.message))?;
    m.preview_argv(&bound).map_err(|r| format!("{}: {}", r.code, r.message))
}

fn both(file: &str) -> (toolclad::types::Manifest, Manifest) {
    let body = text(file);
    let reference = toolclad::parse_manifest(&body).unwrap_or_else(|e| panic!("reference refuses {file}: {e}"));
    let ours = Manifest::parse(&body, file).unwrap_or_else(|r| panic!("airlock refuses {file}: {}", r.message));
    (reference, ours)
}

/// One row of a table: the named arguments, and the argv both must build
/// (`None`: both must refuse).
type Row<'a> = (&'a [(&'a str, &'a str)], Option<Vec<&'a str>>);

/// Runs the table for one manifest: `Some(argv)` rows must give that argv
/// on both sides, `None` rows must be refused by both.
fn check(file: &str, table: &[Row<'_>], adjust: fn(Vec<String>) -> Vec<String>) {
    let (reference, ours) = both(file);
    for (args, expected) in table {
        let theirs = reference_argv(&reference, args).map(adjust);
        let mine = airlock_argv(&ours, args);
        match expected {
            Some(want) => {
                let want: Vec<String> = want.iter().map(|w| (*w).to_owned()).collect();
                assert_eq!(theirs, Ok(want.clone()), "{file} {args:?}: the reference");
                assert_eq!(mine, Ok(want), "{file} {args:?}: airlock");
            }
            None => {
                assert!(theirs.is_err(), "{file} {args:?}: the reference accepts: {theirs:?}");
                assert!(mine.is_err(), "{file} {args:?}: airlock accepts: {mine:?}");
            }
        }
    }
}

fn same(v: Vec<String>) -> Vec<String> {
    v
}

#[test]
fn a_template_mapping_expands_into_its_words() {
    check(
        "ls_format.clad.toml",
        &[
            (&[("dir", "docs")], Some(vec!["ls", "-1", "docs"])),
            (&[("dir", "docs"), ("format_type", "all")], Some(vec!["ls", "-1", "-A", "docs"])),
            (&[("dir", "docs"), ("format_type", "classify")], Some(vec!["ls", "-1", "-F", "--color=never", "docs"])),
            (&[("dir", "docs"), ("format_type", "long")], None),
            (&[("dir", "../etc")], None),
            (&[("dir", "/etc")], None),
            (&[("dir", "x;id")], None),
            (&[("format_type", "one")], None),
        ],
        same,
    );
}

/// A value is never re-split: the reference splits the interpolated
/// template again, so a value with a blank becomes two words there.
#[test]
fn a_value_with_a_blank_stays_one_word() {
    let (reference, ours) = both("ls_format.clad.toml");
    let args = [("dir", "a b"), ("format_type", "classify")];
    assert_eq!(reference_argv(&reference, &args).unwrap(), ["ls", "-1", "-F", "--color=never", "a", "b"]);
    assert_eq!(airlock_argv(&ours, &args).unwrap(), ["ls", "-1", "-F", "--color=never", "a b"]);
}

#[test]
fn conditionals_and_defaults_match_the_reference() {
    check(
        "sort_lines.clad.toml",
        &[
            (&[("input", "f.txt")], Some(vec!["sort", "-d", "f.txt"])),
            (&[("input", "f.txt"), ("reverse", "true")], Some(vec!["sort", "-d", "-r", "f.txt"])),
            (&[("input", "f.txt"), ("reverse", "false"), ("key", "2")], Some(vec!["sort", "-d", "-k", "2", "f.txt"])),
            (
                &[("input", "f.txt"), ("reverse", "true"), ("key", "3"), ("order", "numeric")],
                Some(vec!["sort", "-n", "-r", "-k", "3", "f.txt"]),
            ),
            (&[("input", "f.txt"), ("key", "3"), ("order", "version")], Some(vec!["sort", "-V", "f.txt"])),
            (&[("input", "f.txt"), ("key", "0")], None),
            (&[("input", "f.txt"), ("key", "x")], None),
            (&[("input", "f.txt"), ("reverse", "yes")], None),
            (&[("input", "f.txt"), ("order", "random")], None),
        ],
        same,
    );
}

/// The reference keeps an exec element emptied by a false conditional as
/// `""`; airlock leaves the element out.
fn without_empty(v: Vec<String>) -> Vec<String> {
    v.into_iter().filter(|w| !w.is_empty()).collect()
}

#[test]
fn exec_elements_take_a_fragment_as_one_word() {
    check(
        "grep_mode.clad.toml",
        &[
            (&[("pattern", "abc"), ("input", "f")], Some(vec!["grep", "-s", "-e", "abc", "f"])),
            (
                &[("pattern", "abc"), ("input", "f"), ("match_type", "word"), ("count", "true")],
                Some(vec!["grep", "-w", "--count", "-e", "abc", "f"]),
            ),
            (&[("pattern", "ABC"), ("input", "f")], None),
            (&[("pattern", "abc"), ("input", "f"), ("match_type", "-v")], None),
        ],
        without_empty,
    );
}

#[test]
fn the_reference_examples_build_the_same_argv() {
    check(
        "dig_lookup.clad.toml",
        &[
            (&[("target", "example.com")], Some(vec!["dig", "+short", "example.com", "A"])),
            (&[("target", "10.0.0.1"), ("record_type", "PTR")], Some(vec!["dig", "+short", "10.0.0.1", "PTR"])),
            (&[("target", "example.com"), ("record_type", "AXFR")], None),
        ],
        same,
    );
    check("whois_lookup.clad.toml", &[(&[("target", "example.org")], Some(vec!["whois", "example.org"]))], same);
    // `%{{http_code}}`: airlock reads `{{` as a literal brace (curl wants
    // `%{http_code}`); the reference leaves it doubled.
    fn braces(v: Vec<String>) -> Vec<String> {
        v.into_iter().map(|w| w.replace("{{", "{").replace("}}", "}")).collect()
    }
    let curl = ["curl", "-s", "-S", "-X"];
    check(
        "curl_fetch.clad.toml",
        &[
            (
                &[("url", "https://example.com/a")],
                Some(
                    [&curl[..], &["GET", "--max-time", "25", "-w", "\\n%{http_code}", "https://example.com/a"]]
                        .concat(),
                ),
            ),
            (
                &[("url", "https://example.com/"), ("method", "HEAD"), ("headers", "Accept: text/plain")],
                Some(
                    [
                        &curl[..],
                        &[
                            "HEAD",
                            "--max-time",
                            "25",
                            "-w",
                            "\\n%{http_code}",
                            "-H",
                            "Accept: text/plain",
                            "https://example.com/",
                        ],
                    ]
                    .concat(),
                ),
            ),
            (&[("url", "https://example.com/"), ("method", "TRACE")], None),
            (&[("url", "https://example.com/"), ("headers", "X: $(id)")], None),
            (&[("url", "ftp://example.com/")], None),
        ],
        braces,
    );
}

#[test]
fn nmap_scan_type_offers_scan_flags_by_the_type_suffix_rule() {
    let (reference, ours) = both("nmap_scan.clad.toml");
    // The example writes {_output_file} without a declared output, so only
    // the words before it are compared; the mapped words come first.
    let args = [("target", "10.0.0.0/24"), ("scan_type", "service")];
    let theirs = reference_argv(&reference, &args).unwrap();
    assert_eq!(theirs[..2], ["nmap", "{_scan_flags}"], "toolclad 0.6.1 has no `_type` rule");
    let named: Vec<(String, serde_json::Value)> =
        args.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned()))).collect();
    let bound = ours.bind_args(&[], &named).unwrap();
    let err = ours.preview_argv(&bound).unwrap_err();
    assert!(err.message.contains("_output_file"), "{}", err.message);
    // Both validate the enum and the scope target alike.
    for (target, scan) in [("10.0.0.1", "syn"), ("example.com", "ping"), ("2001:db8::1", "os_detect")] {
        let a = [("target", target), ("scan_type", scan)];
        assert!(reference_argv(&reference, &a).is_ok(), "{a:?}");
        let named: Vec<(String, serde_json::Value)> =
            a.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned()))).collect();
        assert!(ours.bind_args(&[], &named).is_ok(), "{a:?}");
    }
    let refused = ours.check_executable().unwrap_err();
    assert!(refused.message.contains("no network grant"), "{}", refused.message);
}

/// The reference's scope vectors (tests/scope_vectors.json) and more
/// attack shapes: both sides agree on every value.
#[test]
fn scope_targets_are_refused_alike() {
    let (reference, ours) = both("whois_lookup.clad.toml");
    let values = [
        "10.0.1.1",
        "2001:db8::1",
        "example.com",
        "sub.example.com",
        "10.0.1.0/24",
        "*.example.com",
        "example.com; rm -rf /",
        "$(whoami).evil.com",
        "example.com\nmalicious.com",
        "",
        "10.0.1.1|cat /etc/passwd",
        "xn--exmple-cua.com",
        "XN--abc.com",
        "a/../b",
        "a\\b",
        "exämple.com",
        "example.com/path",
        " example.com",
        "example.com ",
        "-example.com",
        "example-.com",
        "a..b",
        "999.1.1.1",
        &"a".repeat(254),
        &format!("{}.com", "a.".repeat(120)),
    ];
    for v in values {
        let theirs = reference_argv(&reference, &[("target", v)]);
        let mine = airlock_argv(&ours, &[("target", v)]);
        assert_eq!(theirs.is_ok(), mine.is_ok(), "{v:?}: reference {theirs:?}, airlock {mine:?}");
    }
}

/// A manifest that prints a file with `cat` and parses it with `parser`;
/// its schema is more than `{"type": "object"}`, so the reference returns
/// the parsed output (not only the raw text).
fn cat_manifest(format: &str, parser: &str) -> String {
    format!(
        r#"
[tool]
name = "cat_{format}"
version = "1.0.0"
binary = "cat"
description = "Print a file"
[args.file]
position = 1
required = true
type = "path"
[command]
exec = ["cat", "{{file}}"]
[filesystem]
read = ["{{file}}"]
[output]
format = "{format}"
parser = "{parser}"
[output.schema]
type = "object"
description = "anything"
"#
    )
}

/// For each builtin parser, the reference's parsed output of a real `cat`
/// run equals airlock's parse of the same bytes.
#[test]
fn builtin_parsers_read_output_as_the_reference_does() {
    for (format, parser, file) in [
        ("xml", "builtin:xml", "scan.xml"),
        ("csv", "builtin:csv", "table.csv"),
        ("jsonl", "builtin:jsonl", "lines.jsonl"),
        ("json", "builtin:json", "doc.json"),
        ("text", "builtin:text", "plain.txt"),
        ("text", "builtin:csv", "table.csv"),
    ] {
        let body = cat_manifest(format, parser);
        let reference = toolclad::parse_manifest(&body).unwrap();
        let rel = format!("tests/toolclad/output/{file}");
        let args = HashMap::from([("file".to_owned(), rel.clone())]);
        let envelope = toolclad::executor::execute(&reference, &args).unwrap();
        assert_eq!(envelope.exit_code, 0, "{file}: {}", envelope.stderr);
        let ours = Manifest::parse(&body, "cat.clad.toml").unwrap();
        ours.check_executable().unwrap();
        let bytes = std::fs::read(&rel).unwrap();
        let parsed = airlock_core::output::parse_output(ours.output_parser(), &bytes).unwrap();
        assert_eq!(parsed, envelope.results, "{parser} of {file}");
    }
}
