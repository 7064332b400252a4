//! Whole-manifest tests: parse, refusal of what airlock does not execute,
//! bind → plan → argv, the input schema, and properties.

use super::*;
use crate::path::RelPath;
use crate::reason::ReasonCode::{self, *};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A ToolClad-format nmap manifest using the features airlock does not
/// execute at run time (a scope target: the network), with mappings,
/// evidence capture, `{_output_file}`, XML output and a nested output schema.
const NMAP_SCAN: &str = r#"
# nmap in ToolClad format
[tool]
name = "nmap_scan"
version = "7.94"
binary = "nmap"
description = "Scan ports and detect services"
timeout_seconds = 600
risk_tier = "medium"

[tool.cedar]
resource = "Tool::NmapScan"
action = "execute_tool"

[tool.evidence]
output_dir = "{evidence_dir}/{scan_id}-nmap"
capture = true
hash = "sha256"

[args.target]
position = 1
required = true
type = "scope_target"
block_internal = true
description = "Host, address or network to scan"

[args.scan_type]
position = 2
required = true
type = "enum"
allowed = ["ping", "service", "syn"]
description = "Kind of scan"

[args.extra_flags]
position = 3
required = false
type = "string"
sanitize = ["injection"]
default = ""
description = "More nmap flags"

[command]
template = "nmap {_scan_flags} --max-rate {max_rate} -oX {_output_file} -v {extra_flags} {target}"

[command.defaults]
max_rate = 500

[command.mappings.scan_type]
ping = "-sn -PE"
service = "-sT -sV"
syn = "-sS --top-ports 100"

[output]
format = "xml"
parser = "builtin:xml"
envelope = true

[output.schema]
type = "object"

[output.schema.properties.hosts]
type = "array"
description = "Hosts found"

[output.schema.properties.hosts.items.properties.address]
type = "string"

[output.schema.properties.hosts.items.properties.ports.items.properties.number]
type = "integer"
"#;

const HEAD: &str = r#"
[tool]
name = "t"
version = "1"
description = "test tool"
"#;

fn manifest(body: &str) -> Manifest {
    let text = format!("{HEAD}{body}");
    Manifest::parse(&text, "t.clad.toml").unwrap_or_else(|r| panic!("{r}\n{text}"))
}

fn parse_err(body: &str) -> Refusal {
    match Manifest::parse(&format!("{HEAD}{body}"), "t.clad.toml") {
        Ok(_) => panic!("parsed:\n{body}"),
        Err(r) => r,
    }
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

fn argv(m: &Manifest, positional: &[&str]) -> Result<Vec<String>, Refusal> {
    let args = m.bind_args(&strings(positional), &[])?;
    m.build_argv(&args)
}

fn named(pairs: &[(&str, Value)]) -> Vec<(String, Value)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

#[test]
fn toolclad_nmap_loads_unchanged_and_is_refused_to_run() {
    let m = Manifest::parse(NMAP_SCAN, "tools/nmap_scan.clad.toml").unwrap();
    assert_eq!(m.name(), "nmap_scan");
    assert_eq!(m.tool.risk_tier, RiskTier::Medium);
    assert_eq!(m.tool.timeout_seconds, 600);
    assert_eq!(m.tool.cedar.as_ref().unwrap().action, "execute_tool");
    assert!(m.tool.evidence.as_ref().unwrap().capture);
    assert_eq!(m.sha256(), crate::descriptor::sha256_tagged(NMAP_SCAN.as_bytes()));
    assert_eq!(m.positional_names(), ["target", "scan_type", "extra_flags"]);
    let schema = m.output.as_ref().unwrap().schema.as_ref().unwrap();
    assert!(schema["properties"]["hosts"]["items"]["properties"]["ports"].is_table());

    let err = m.check_executable().unwrap_err();
    assert_eq!(err.code, ManifestUnsupported);
    for feature in [
        "tools/nmap_scan.clad.toml",
        "{_output_file} without a [filesystem] create",
        "[args.target] type = \"scope_target\" (the tool reaches the network, and airlock has no network grant yet)",
        "[args.target] block_internal",
    ] {
        assert!(err.message.contains(feature), "{feature} not in: {}", err.message);
    }
    assert!(!err.message.contains("[command.mappings]") && !err.message.contains("{_scan_flags}"), "{}", err.message);
    let args = m.bind_args(&strings(&["10.0.0.1", "ping"]), &[]).unwrap();
    assert_eq!(args.get("target"), Some("10.0.0.1"));
    let bad = m.bind_args(&strings(&["*.example.com", "ping"]), &[]).unwrap_err();
    assert_eq!(bad.code, ReasonCode::ArgInvalid, "{}", bad.message);
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let cases = [
        ("[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\ncolour = 1", "colour"),
        ("bogus = 1", "bogus"),
        ("[tool.cedar]\nresource = \"r\"\naction = \"a\"\nprincipal = \"p\"", "principal"),
        ("[tool.evidence]\noutput_dir = \"o\"\ncompress = true", "compress"),
        ("[tool.limits]\nmemory = 5", "memory"),
        ("[args.x]\ntype = \"string\"\nrequird = true", "requird"),
        ("[command]\nexec = [\"a\"]\nshell = true", "shell"),
        ("[command]\nexec = [\"a\"]\n[command.conditionals.c]\nwhen = \"x\"\ntemplate = \"y\"\nelse = \"z\"", "else"),
        ("[output]\nformat = \"text\"\nparsr = \"builtin:text\"", "parsr"),
        ("[filesystem]\nreads = [\"a\"]", "reads"),
        ("[source]\noperation = \"read_file\"\npath = \"x\"", "path"),
        ("[commands]\nexec = [\"a\"]", "commands"),
    ];
    for (body, key) in cases {
        let text = if body.starts_with("[tool]\n") { body.to_owned() } else { format!("{HEAD}{body}") };
        let err = Manifest::parse(&text, "t.clad.toml").unwrap_err();
        assert_eq!(err.code, ManifestInvalid, "{body}");
        assert!(err.message.contains(&format!("`{key}`")), "{key} not named in: {}", err.message);
        assert!(err.message.contains("line"), "no line in: {}", err.message);
        assert!(err.message.starts_with("t.clad.toml: "), "{}", err.message);
    }
}

#[test]
fn bad_values_in_typed_sections() {
    for body in [
        "[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\nmode = \"daemon\"",
        "[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\nrisk_tier = \"extreme\"",
        "[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\ndispatch = \"rpc\"",
        "[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\ntimeout_seconds = -1",
        "[tool]\nname = \"t\"\nversion = \"1\"",
        "[tool]\nname = \"t\"\ndescription = \"d\"",
    ] {
        assert_eq!(Manifest::parse(body, "x").unwrap_err().code, ManifestInvalid, "{body}");
    }
    assert_eq!(parse_err("[output]\nformat = \"yaml\"").code, ManifestInvalid);
    assert_eq!(parse_err("[output]\nformat = \"text\"\nmax_bytes = 0").code, ManifestInvalid);
    assert_eq!(parse_err("[args.x]\nposition = 1").code, ManifestInvalid, "type is required");
}

#[test]
fn tool_checks() {
    let tool = |name: &str, extra: &str| {
        Manifest::parse(&format!("[tool]\nname = {name:?}\nversion = \"1\"\ndescription = \"d\"\n{extra}"), "x")
    };
    for ok in ["a", "nmap_scan", "word-count2", &format!("a{}", "b".repeat(63))] {
        assert!(tool(ok, "").is_ok(), "{ok}");
    }
    for bad in ["", "Nmap", "1tool", "_x", "-x", "a b", "a.b", "a/b", &format!("a{}", "b".repeat(64))] {
        assert_eq!(tool(bad, "").unwrap_err().code, ManifestInvalid, "{bad:?}");
    }
    assert_eq!(tool("t", "timeout_seconds = 0").unwrap_err().code, ManifestInvalid);
    assert!(tool("t", "timeout_seconds = 86400").is_ok());
    for huge in ["86401", "9223372036854775807"] {
        let err = tool("t", &format!("timeout_seconds = {huge}")).unwrap_err();
        assert_eq!(err.code, ManifestInvalid, "{huge}");
        assert!(err.message.contains("24 h"), "{}", err.message);
    }
    assert_eq!(tool("t", "[tool.limits]\npids = 0").unwrap_err().code, ManifestInvalid);
    let m = tool("t", "[tool.limits]\npids = 64\nmemory_bytes = 1048576").unwrap();
    assert_eq!(m.tool.limits.unwrap().pids, Some(64));
    assert_eq!(m.tool.mode, Mode::Oneshot);
    assert_eq!(m.tool.risk_tier.as_str(), "low");
    assert_eq!(m.tool.timeout_seconds, 60);
}

#[test]
fn structural_refusals() {
    let cases: &[(&str, ReasonCode, &str)] = &[
        (
            "[args.a]\ntype = \"string\"\nposition = 1\n[args.b]\ntype = \"string\"\nposition = 1",
            ManifestInvalid,
            "position 1",
        ),
        ("[args.a]\ntype = \"enum\"", ManifestInvalid, "allowed"),
        ("[args.a]\ntype = \"regex_match\"", ManifestInvalid, "pattern"),
        ("[args.a]\ntype = \"string\"\npattern = \"(\"", ManifestInvalid, "does not compile"),
        ("[args.bad-name]\ntype = \"string\"", ManifestInvalid, "bad-name"),
        ("[command]\nexec = [\"a\", \"{nope}\"]", ManifestInvalid, "{nope}"),
        ("[args.p]\ntype = \"string\"\n[command]\nexec = [\"{p}\"]", ManifestInvalid, "program"),
        ("[command]\ntemplate = \"a 'b\"", ManifestInvalid, "not closed"),
        ("[args.p]\ntype = \"string\"\n[filesystem]\nread = [\"{p}\"]", ManifestInvalid, "not path"),
        ("[filesystem]\nread = [\"{p}\"]", ManifestInvalid, "no declared argument"),
        ("[filesystem]\nread = [\"a/../b\"]", PathTraversal, "read entry"),
        ("[filesystem]\nread = [\"x/{p}\"]", ManifestPathTemplate, "read entry"),
        ("[filesystem]\nread = [\"a\"]\ncreate = [\"a\"]", PathDuplicate, "twice"),
        ("[filesystem]\ncreate = [\"a\", \"b\"]", LimitOutputs, "create"),
        ("[filesystem]\nmax_file_bytes = 4294967297", LimitFileBytes, "max_file_bytes"),
    ];
    for (body, code, needle) in cases {
        let err = parse_err(body);
        assert_eq!(err.code, *code, "{body}: {}", err.message);
        assert!(err.message.contains(needle), "{needle} not in {}", err.message);
        assert!(err.message.starts_with("t.clad.toml: "), "{}", err.message);
    }
}

#[test]
fn opaque_sections_load_with_any_content() {
    let m = manifest(
        r#"
        [mcp]
        server = "github"
        tool = "create_issue"
        [mcp.field_map]
        repo = "repository"
        [http]
        method = "POST"
        headers = { "Authorization" = "Bearer {_secret:token}" }
        [browser]
        engine = "cdp"
        [browser.scope]
        allowed_domains = ["*.example.com"]
        "#,
    );
    assert_eq!(m.mcp.as_ref().unwrap()["server"].as_str(), Some("github"));
    assert!(m.http.is_some() && m.browser.is_some());
    let err = m.check_executable().unwrap_err();
    assert_eq!(err.code, ManifestUnsupported);
    for feature in ["[http]", "[browser]"] {
        assert!(err.message.contains(feature), "{feature} not in {}", err.message);
    }
}

#[test]
fn each_unsupported_feature_is_refused() {
    let runnable = "[command]\nexec = [\"echo\", \"hi\"]\n";
    assert!(manifest(runnable).check_executable().is_ok());
    let cases: &[(&str, &str)] = &[
        ("[http]\nmethod = \"GET\"", "[http]"),
        ("[browser]\nengine = \"cdp\"", "[browser]"),
        ("[output]\nformat = \"json\"\nparser = \"builtin:yaml\"", "parser = \"builtin:yaml\""),
        ("[output]\nformat = \"json\"\nparser = \"scripts/parse.py\"", "scripts/parse.py"),
        ("[args.t]\ntype = \"scope_target\"", "scope_target"),
        ("[args.t]\ntype = \"credential_file\"", "credential_file"),
        ("[args.t]\ntype = \"msf_options\"", "msf_options"),
        ("[args.t]\ntype = \"my_custom_type\"", "my_custom_type"),
        ("[args.t]\ntype = \"url\"\nscope_check = true", "scope_check"),
        ("[args.t]\ntype = \"url\"\nschemes = [\"ftp\"]", "schemes \"ftp\""),
        ("[args.t]\ntype = \"string\"\nsanitize = [\"injection\", \"html\"]", "sanitize \"html\""),
        ("[args.t]\ntype = \"string\"\nblock_internal = true", "block_internal"),
    ];
    // `[source]` beside a command is `source.conflict` (manifest/source.rs).
    let both = manifest(&format!("{runnable}[source]\noperation = \"read_file\""));
    assert_eq!(both.check_executable().unwrap_err().code, ReasonCode::SourceConflict);
    for (extra, needle) in cases {
        let (tool_extra, rest) = if extra.starts_with("[tool.") { (*extra, "") } else { ("", *extra) };
        let m = manifest(&format!("{tool_extra}\n{runnable}{rest}"));
        let err = m.check_executable().unwrap_err();
        assert_eq!(err.code, ManifestUnsupported, "{extra}");
        assert!(err.message.contains(needle), "{needle} not in {}", err.message);
    }
    let with_tool = |line: &str| {
        Manifest::parse(&format!("[tool]\nname = \"t\"\nversion = \"1\"\ndescription = \"d\"\n{line}\n{runnable}"), "x")
            .unwrap()
            .check_executable()
            .unwrap_err()
            .message
    };
    assert!(with_tool("mode = \"session\"").contains("mode = \"session\""));
    assert!(with_tool("mode = \"browser\"").contains("mode = \"browser\""));
    assert!(with_tool("dispatch = \"callback\"").contains("dispatch = \"callback\""));
    let command_cases: &[(&str, &str)] = &[
        ("[command]\nexecutor = \"wrap.sh\"", "[command] executor"),
        ("[command]\nexec = [\"a\", \"{_scan_id}\"]", "{_scan_id}"),
        ("[command]\nexec = [\"a\", \"{_evidence_dir}\"]", "{_evidence_dir}"),
        ("[command]\nexec = [\"a\", \"--token={_secret:api}\"]", "{_secret:api}"),
        ("[command]\nexec = [\"a\", \"{_output_file}\"]", "{_output_file} without"),
        ("", "no command"),
    ];
    for (body, needle) in command_cases {
        let m = manifest(body);
        let err = m.check_executable().unwrap_err();
        assert_eq!(err.code, ManifestUnsupported, "{body}");
        assert!(err.message.contains(needle), "{needle} not in {}", err.message);
        assert_eq!(m.build_argv(&BoundArgs::default()).unwrap_err().code, ManifestUnsupported);
    }
    for ok in [
        "[output]\nformat = \"xml\"",
        "[output]\nformat = \"json\"\nparser = \"builtin:csv\"",
        "[output]\nformat = \"json\"\nparser = \"builtin:json\"",
        "[output]\nformat = \"text\"",
        "[output]\nformat = \"csv\"\nparser = \"builtin:csv\"\nmax_bytes = 1024",
        "[args.t]\ntype = \"url\"\nschemes = [\"https\"]\nsanitize = [\"injection\"]",
        "[tool.evidence]\noutput_dir = \"e\"\ncapture = false",
        "[tool.evidence]\noutput_dir = \"{evidence_dir}/{scan_id}\"\ncapture = true",
    ] {
        let (tool_extra, rest) = if ok.starts_with("[tool.") { (ok, "") } else { ("", ok) };
        assert!(manifest(&format!("{tool_extra}\n{runnable}{rest}")).check_executable().is_ok(), "{ok}");
    }
}

#[test]
fn a_bad_default_makes_the_manifest_invalid_at_run() {
    let m = manifest("[args.n]\ntype = \"integer\"\ndefault = \"many\"\n[command]\nexec = [\"a\", \"{n}\"]");
    let err = m.check_executable().unwrap_err();
    assert_eq!(err.code, ManifestInvalid);
    assert!(err.message.contains("[args.n] default"), "{}", err.message);
    let m = manifest("[args.s]\ntype = \"string\"\ndefault = \"-v\"\n[command]\nexec = [\"a\", \"{s}\"]");
    assert_eq!(m.check_executable().unwrap_err().code, ManifestInvalid);
}

const GREP: &str = r#"
[args.pattern]
position = 1
required = true
type = "string"
[args.input]
position = 2
required = true
type = "path"
[args.context]
type = "integer"
min = 0
max = 10
clamp = true
[args.label]
type = "string"
"#;

#[test]
fn values_with_spaces_stay_one_word() {
    let m = manifest(&format!("{GREP}[command]\ntemplate = \"grep -e {{pattern}} -- {{input}}\""));
    assert_eq!(
        argv(&m, &["two words", "data/my file.txt"]).unwrap(),
        ["grep", "-e", "two words", "--", "data/my file.txt"]
    );
    let m = manifest(&format!("{GREP}[command]\nexec = [\"grep\", \"-e\", \"{{pattern}}\", \"{{input}}\"]"));
    assert_eq!(argv(&m, &["a  b", "in.txt"]).unwrap(), ["grep", "-e", "a  b", "in.txt"]);
}

#[test]
fn template_quoting_and_literal_metacharacters() {
    let m = manifest(&format!(
        "{GREP}[command]\ntemplate = '''grep 'a b' \"--label={{pattern}} x\" x|y ; $HOME {{{{lit}}}} {{input}}'''"
    ));
    assert_eq!(
        argv(&m, &["p q", "in.txt"]).unwrap(),
        ["grep", "a b", "--label=p q x", "x|y", ";", "$HOME", "{lit}", "in.txt"]
    );
}

#[test]
fn metacharacters_in_values_are_refused_never_interpreted() {
    let m = manifest(&format!("{GREP}[command]\ntemplate = \"grep {{pattern}} {{input}}\""));
    assert_eq!(argv(&m, &["$(id)", "in.txt"]).unwrap_err().code, ArgInjection);
    assert_eq!(argv(&m, &["a", "in;rm"]).unwrap_err().code, ArgInjection);
    assert_eq!(argv(&m, &["a", "../x"]).unwrap_err().code, PathTraversal);
    // The exec form never reaches a shell: a `string` keeps its bytes, one word.
    let m = manifest(&format!("{GREP}[command]\nexec = [\"grep\", \"{{pattern}}\", \"{{input}}\"]"));
    assert_eq!(argv(&m, &["$(id) | x", "in.txt"]).unwrap(), ["grep", "$(id) | x", "in.txt"]);
    assert_eq!(argv(&m, &["a", "in;rm"]).unwrap_err().code, ArgInjection);
    // ... unless its words name a shell.
    let m =
        manifest(&format!("{GREP}[command]\nexec = [\"sh\", \"-c\", \"grep \\\"$1\\\"\", \"sh\", \"{{pattern}}\"]"));
    assert_eq!(argv(&m, &["$(id)", "in.txt"]).unwrap_err().code, ArgInjection);
}

#[test]
fn end_of_options() {
    let body = format!("{GREP}[command]\nexec = [\"grep\", \"-n\", \"{{pattern}}\", \"{{input}}\"]");
    let m = manifest(&body);
    assert_eq!(argv(&m, &["-v", "in.txt"]).unwrap_err().code, ArgLeadingDash);
    let m = manifest(&format!("{body}\nend_of_options = true"));
    assert_eq!(argv(&m, &["-v", "-in.txt"]).unwrap(), ["grep", "-n", "--", "-v", "-in.txt"]);
    assert_eq!(argv(&m, &["x", "in.txt"]).unwrap(), ["grep", "-n", "--", "x", "in.txt"]);
    let m = manifest(&format!(
        "{GREP}[command]\nexec = [\"grep\", \"{{label}}\", \"x\", \"{{pattern}}\"]\nend_of_options = true"
    ));
    let args = m.bind_args(&strings(&["p", "in.txt"]), &[]).unwrap();
    assert_eq!(m.build_argv(&args).unwrap(), ["grep", "--", "x", "p"], "-- stays even when its word is dropped");
}

#[test]
fn absent_optional_values() {
    let m = manifest(&format!(
        "{GREP}[command]\nexec = [\"grep\", \"{{label}}\", \"-C{{context}}\", \"{{pattern}}\", \"{{input}}\"]"
    ));
    let args = m.bind_args(&strings(&["p", "in.txt"]), &named(&[("context", json!(3))])).unwrap();
    assert_eq!(m.build_argv(&args).unwrap(), ["grep", "-C3", "p", "in.txt"], "the {{label}} word is dropped");
    let args = m.bind_args(&strings(&["p", "in.txt"]), &[]).unwrap();
    let err = m.build_argv(&args).unwrap_err();
    assert_eq!(err.code, ArgMissing);
    assert!(err.message.contains("context"), "{}", err.message);
    let args =
        m.bind_args(&strings(&["p", "in.txt"]), &named(&[("context", json!(99)), ("label", json!(""))])).unwrap();
    assert_eq!(m.build_argv(&args).unwrap(), ["grep", "", "-C10", "p", "in.txt"], "present but empty is kept; clamped");
}

#[test]
fn defaults() {
    let m = manifest(
        r#"
        [args.rate]
        type = "integer"
        [args.mode]
        type = "enum"
        allowed = ["a", "b"]
        default = "b"
        [command]
        exec = ["tool", "--rate={rate}", "--mode={mode}", "--depth={depth}", "--on={flag}"]
        [command.defaults]
        rate = 100
        depth = 2.5
        flag = true
        "#,
    );
    let args = m.bind_args(&[], &[]).unwrap();
    assert_eq!(args.get("rate"), Some("100"), "[command.defaults] is the default of an argument without one");
    assert_eq!(args.json("rate"), Some(&json!(100)));
    assert_eq!(m.build_argv(&args).unwrap(), ["tool", "--rate=100", "--mode=b", "--depth=2.5", "--on=true"]);
    let args = m.bind_args(&[], &named(&[("rate", json!("7")), ("mode", json!("a"))])).unwrap();
    assert_eq!(m.build_argv(&args).unwrap(), ["tool", "--rate=7", "--mode=a", "--depth=2.5", "--on=true"]);
}

#[test]
fn bind_args_rules() {
    let m = manifest(&format!("{GREP}[command]\nexec = [\"grep\", \"{{pattern}}\", \"{{input}}\"]"));
    let code = |pos: &[&str], nm: &[(&str, Value)]| m.bind_args(&strings(pos), &named(nm)).unwrap_err().code;
    assert_eq!(code(&["a", "b", "c"], &[]), ArgUnknown);
    assert_eq!(code(&["a", "b"], &[("nope", json!("x"))]), ArgUnknown);
    assert_eq!(code(&["a", "b"], &[("_output_file", json!("x"))]), ArgUnknown);
    assert_eq!(code(&["a", "b"], &[("pattern", json!("x"))]), ArgInvalid);
    assert_eq!(code(&["a", "b"], &[("label", json!("x")), ("label", json!("y"))]), ArgInvalid);
    assert_eq!(code(&["a"], &[]), ArgMissing);
    assert_eq!(code(&["", "b"], &[]), ArgMissing);
    assert_eq!(code(&["a", "b"], &[("context", json!(null))]), ArgInvalid);
    assert_eq!(code(&["a", "b"], &[("context", json!([1]))]), ArgInvalid);
    assert_eq!(code(&["a", "b"], &[("context", json!(1.5))]), ArgInvalid);
    let args = m
        .bind_args(&[], &named(&[("pattern", json!("p")), ("input", json!("in.txt")), ("context", json!(-4))]))
        .unwrap();
    assert_eq!(args.get("context"), Some("0"));
    assert_eq!(args.get("label"), None);
    assert_eq!(args.len(), 3);
    assert_eq!(args.to_json(), json!({"pattern": "p", "input": "in.txt", "context": 0}));
    assert_eq!(
        args.as_strings(),
        BTreeMap::from([
            ("pattern".into(), "p".into()),
            ("input".into(), "in.txt".into()),
            ("context".into(), "0".into())
        ])
    );
}

#[test]
fn json_values_of_each_kind() {
    let m = manifest(
        r#"
        [args.flag]
        type = "boolean"
        [args.ratio]
        type = "number"
        [args.port]
        type = "port"
        [args.text]
        type = "string"
        [command]
        exec = ["t", "{flag}", "{ratio}", "{port}", "{text}"]
        "#,
    );
    let args = m
        .bind_args(
            &[],
            &named(&[("flag", json!(true)), ("ratio", json!(0.5)), ("port", json!(443)), ("text", json!(12))]),
        )
        .unwrap();
    assert_eq!(m.build_argv(&args).unwrap(), ["t", "true", "0.5", "443", "12"]);
    assert_eq!(args.json("flag"), Some(&json!(true)));
    assert_eq!(args.json("port"), Some(&json!(443)));
    assert_eq!(args.json("text"), Some(&json!("12")));
}

const COPY: &str = r#"
[args.input]
position = 1
required = true
type = "path"
[args.extra]
type = "path"
[args.out]
position = 2
type = "path"
[filesystem]
read = ["config/base.toml", "{input}", "{extra}"]
create = ["{out}"]
max_file_bytes = 4096
"#;

#[test]
fn filesystem_plan_and_output_file() {
    let m = manifest(&format!("{COPY}[command]\nexec = [\"cp\", \"{{input}}\", \"{{_output_file}}\"]"));
    m.check_executable().unwrap();
    let args = m.bind_args(&strings(&["data/in.csv", "results/out.csv"]), &[]).unwrap();
    let plan = m.filesystem_plan(&args).unwrap();
    let paths: Vec<&str> = plan.reads.iter().map(RelPath::as_str).collect();
    assert_eq!(paths, ["config/base.toml", "data/in.csv"], "absent optional {{extra}} is not part of the plan");
    assert_eq!(plan.create.as_ref().map(RelPath::as_str), Some("results/out.csv"));
    assert_eq!(plan.max_file_bytes, Some(4096));
    assert_eq!(m.build_argv(&args).unwrap(), ["cp", "data/in.csv", "results/out.csv"]);

    let args = m.bind_args(&strings(&["data/in.csv"]), &[]).unwrap();
    assert_eq!(m.filesystem_plan(&args).unwrap().create, None);
    let err = m.build_argv(&args).unwrap_err();
    assert_eq!(err.code, ManifestInvalid, "{{_output_file}} with no create in this call");

    let dup = |pos: &[&str], nm: &[(&str, Value)]| {
        let args = m.bind_args(&strings(pos), &named(nm)).unwrap();
        m.filesystem_plan(&args).unwrap_err().code
    };
    assert_eq!(dup(&["config/base.toml"], &[]), PathDuplicate);
    assert_eq!(dup(&["data/a", "data/a"], &[]), PathDuplicate);
    assert_eq!(dup(&["data/a"], &[("extra", json!("data/a"))]), PathDuplicate);
}

#[test]
fn no_filesystem_is_an_empty_plan() {
    let m = manifest("[command]\nexec = [\"date\"]");
    let plan = m.filesystem_plan(&BoundArgs::default()).unwrap();
    assert_eq!(plan, FilesystemPlan::default());
    assert_eq!(m.build_argv(&BoundArgs::default()).unwrap(), ["date"]);
}

#[test]
fn input_schema() {
    let m = manifest(
        r#"
        [args.input]
        type = "path"
        required = true
        description = "File to read"
        [args.count]
        type = "integer"
        min = 1
        max = 64
        default = 4
        required = true
        [args.ratio]
        type = "number"
        min_float = 0.0
        max_float = 1.0
        [args.port]
        type = "port"
        [args.verbose]
        type = "boolean"
        default = false
        [args.mode]
        type = "enum"
        allowed = ["fast", "slow"]
        [args.tag]
        type = "string"
        pattern = "[a-z]+"
        [args.note]
        type = "literal_text"
        pattern = "ok"
        [args.wait]
        type = "duration"
        [command]
        exec = ["t"]
        "#,
    );
    let s = m.input_schema();
    assert_eq!(s["type"], "object");
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(s["required"], json!(["input"]), "an argument with a default is not required of the client");
    let p = &s["properties"];
    assert_eq!(p["input"]["type"], "string");
    assert_eq!(p["input"]["description"], "File to read");
    assert_eq!(p["input"]["maxLength"], MAX_VALUE_BYTES);
    assert_eq!(p["count"], json!({"type": "integer", "minimum": 1, "maximum": 64, "default": 4}));
    assert_eq!(p["ratio"], json!({"type": "number", "minimum": 0.0, "maximum": 1.0}));
    assert_eq!(p["port"], json!({"type": "integer", "minimum": 1, "maximum": 65535}));
    assert_eq!(p["verbose"], json!({"type": "boolean", "default": false}));
    assert_eq!(p["mode"]["enum"], json!(["fast", "slow"]));
    assert_eq!(p["tag"]["pattern"], "^(?:[a-z]+)$");
    assert_eq!(p["note"]["pattern"], "ok");
    assert_eq!(p["wait"]["pattern"], "^[0-9]+[smh]?$");
    assert_eq!(s["properties"].as_object().unwrap().len(), 9);
}

#[test]
fn sha256_is_of_the_raw_bytes() {
    let a = manifest("[command]\nexec = [\"a\"]");
    let b = manifest("[command]\nexec = [\"a\"]\n# comment");
    assert_ne!(a.sha256(), b.sha256());
    assert!(a.sha256().starts_with("sha256:") && a.sha256().len() == 71);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    const ALL_TYPES: &str = r#"
        [args.s]
        position = 1
        type = "string"
        [args.p]
        position = 2
        type = "path"
        [args.u]
        position = 3
        type = "url"
        [args.i]
        position = 4
        type = "integer"
        min = -5
        max = 5
        clamp = true
        [args.n]
        position = 5
        type = "number"
        [args.b]
        position = 6
        type = "boolean"
        [args.e]
        position = 7
        type = "enum"
        allowed = ["x", "y"]
        [args.po]
        position = 8
        type = "port"
        [args.d]
        position = 9
        type = "duration"
        [args.r]
        position = 10
        type = "regex_match"
        pattern = "[a-z]{1,8}"
        [args.l]
        position = 11
        type = "literal_text"
        [args.ip]
        position = 12
        type = "ip_address"
        [args.c]
        position = 13
        type = "cidr"
        [command]
        exec = ["t", "{s}", "{p}", "{u}", "{i}", "{n}", "{b}", "{e}", "{po}", "{d}", "{r}", "{l}", "{ip}", "{c}"]
        [filesystem]
        read = ["{p}"]
    "#;

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ -~]{0,40}",
            "[a-z./_-]{1,30}",
            "-?[0-9]{1,25}[smh]?",
            Just("a".repeat(MAX_VALUE_BYTES + 1)),
        ]
    }

    proptest! {
        #[test]
        fn bind_args_never_panics(values in proptest::collection::vec(value(), 0..16), name in "[a-z_]{0,4}", v in value()) {
            let m = manifest(ALL_TYPES);
            let _ = m.bind_args(&values, &[]);
            let _ = m.bind_args(&[], &[(name, Value::String(v))]);
            if let Ok(args) = m.bind_args(&values, &[]) {
                let _ = m.filesystem_plan(&args);
                let _ = m.build_argv(&args);
            }
        }

        #[test]
        fn each_type_never_panics(value in value()) {
            let m = manifest(ALL_TYPES);
            for name in m.args.keys() {
                let _ = m.bind_args(&[], &[(name.clone(), Value::String(value.clone()))]);
            }
        }

        #[test]
        fn accepted_paths_pass_the_grammar(value in prop_oneof![any::<String>(), "[a-zA-Z0-9 ./_:*-]{1,40}"]) {
            let m = manifest("[args.p]\ntype = \"path\"\nposition = 1\n[filesystem]\nread = [\"{p}\"]\n[command]\nexec = [\"cat\", \"{p}\"]");
            if let Ok(args) = m.bind_args(std::slice::from_ref(&value), &[]) {
                prop_assert!(RelPath::parse(&value).is_ok());
                prop_assert_eq!(args.get("p"), Some(value.as_str()));
                let plan = m.filesystem_plan(&args).unwrap();
                prop_assert_eq!(plan.reads[0].as_str(), value.as_str());
                prop_assert_eq!(m.build_argv(&args).unwrap(), vec!["cat".to_owned(), value.clone()]);
            }
        }

        #[test]
        fn accepted_strings_are_unchanged_and_clean(value in any::<String>()) {
            let exec = manifest("[args.s]\ntype = \"string\"\nposition = 1\n[command]\nexec = [\"echo\", \"{s}\"]");
            let template = manifest("[args.s]\ntype = \"string\"\nposition = 1\n[command]\ntemplate = \"echo {s}\"");
            if let Ok(args) = exec.bind_args(std::slice::from_ref(&value), &[]) {
                prop_assert_eq!(args.get("s"), Some(value.as_str()));
                prop_assert_eq!(exec.build_argv(&args).unwrap(), vec!["echo".to_owned(), value.clone()]);
                prop_assert!(!value.starts_with('-'));
                prop_assert!(!value.chars().any(char::is_control));
            }
            if let Ok(args) = template.bind_args(std::slice::from_ref(&value), &[]) {
                prop_assert_eq!(args.get("s"), Some(value.as_str()));
                prop_assert!(!value.contains(SHELL_METACHARACTERS));
                prop_assert!(!value.starts_with('-'));
                prop_assert!(!value.chars().any(char::is_control));
            }
        }
    }
}

#[test]
fn enums_display_as_written() {
    assert_eq!(RiskTier::Critical.to_string(), "critical");
    assert_eq!(Mode::Session.to_string(), "session");
    assert_eq!(Dispatch::Callback.to_string(), "callback");
    assert_eq!(OutputFormat::Jsonl.to_string(), "jsonl");
}

const MCP_TOOL: &str = r#"
    [args.input]
    type = "path"
    required = true
    [args.lines]
    type = "integer"
    [filesystem]
    read = ["{input}"]
    [mcp]
    server = ["node", "/srv/server.js", "/workspace"]
    tool = "read_text_file"
    [mcp.field_map]
    input = "path"
    lines = "head"
"#;

#[test]
fn an_mcp_tool_runs_its_server_and_sends_arguments_under_upstream_names() {
    let m = manifest(MCP_TOOL);
    m.check_executable().unwrap();
    let spec = m.mcp_spec().unwrap().unwrap();
    assert_eq!(spec.tool, "read_text_file");
    let args = m.bind_args(&[], &[("input".into(), "data/in.txt".into()), ("lines".into(), 3.into())]).unwrap();
    // Grants use the local names, before the field map renames them.
    assert_eq!(m.filesystem_plan(&args).unwrap().reads[0].as_str(), "data/in.txt");
    assert_eq!(m.build_argv(&args).unwrap(), ["node", "/srv/server.js", "/workspace"]);
    let sent = serde_json::Value::Object(spec.arguments(&args));
    assert_eq!(sent, serde_json::json!({"path": "data/in.txt", "head": 3}));
}

#[test]
fn mcp_sections_that_make_no_sense_are_refused_with_their_own_codes() {
    let cases: &[(&str, &str, ReasonCode)] = &[
        ("server = [\"node\", \"/srv/server.js\", \"/workspace\"]", "server = \"github\"", ManifestUnsupported),
        ("server = [\"node\", \"/srv/server.js\", \"/workspace\"]", "server = []", McpInvalid),
        ("tool = \"read_text_file\"", "tool = \"bad name!\"", McpInvalid),
        ("tool = \"read_text_file\"", "tool = \"x\"\nextra = 1", McpInvalid),
        ("\"/srv/server.js\"", "\"{input}\"", McpInvalid),
        ("lines = \"head\"", "missing = \"head\"", McpFieldMap),
        ("lines = \"head\"", "lines = \"path\"", McpFieldMap),
        ("[mcp]\n", "[command]\nexec = [\"cat\"]\n[mcp]\n", McpConflict),
        ("[mcp]\n", "[output]\nformat = \"text\"\n[mcp]\n", McpConflict),
        ("[mcp]\n", "[output]\nformat = \"json\"\nparser = \"/usr/bin/jq\"\n[mcp]\n", McpConflict),
    ];
    for (from, to, code) in cases {
        assert!(MCP_TOOL.contains(from), "{from}");
        let m = manifest(&MCP_TOOL.replacen(from, to, 1));
        let err = m.check_executable().unwrap_err();
        assert_eq!(err.code, *code, "{from} -> {to}: {}", err.message);
    }
}

#[test]
fn mappings_and_conditionals_run() {
    let m = manifest(
        r#"[args.mode_type]
position = 1
type = "enum"
allowed = ["short", "long"]
default = "short"
[args.n]
type = "integer"
[command]
template = "tool {_mode_flags} {_limit} end"
[command.mappings.mode_type]
short = "-s"
long = "-l --all"
[command.conditionals.limit]
when = "n != ''"
template = "--limit {n}"
"#,
    );
    m.check_executable().unwrap();
    let argv = |pos: &[&str], named: &[(&str, i64)]| {
        let named: Vec<(String, serde_json::Value)> = named.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        m.build_argv(&m.bind_args(&strings(pos), &named).unwrap()).unwrap()
    };
    assert_eq!(argv(&[], &[]), ["tool", "-s", "end"]);
    assert_eq!(argv(&["long"], &[("n", 5)]), ["tool", "-l", "--all", "--limit", "5", "end"]);
    let eoo = manifest(
        "[args.f]\ntype = \"path\"\n[args.m]\ntype = \"enum\"\nallowed = [\"a\"]\n[command]\nexec = [\"t\", \"{_m}\", \"{f}\"]\nend_of_options = true\n[command.mappings.m]\na = \"-a\"",
    );
    let args = eoo.bind_args(&[], &[("f".into(), "x".into()), ("m".into(), "a".into())]).unwrap();
    assert_eq!(eoo.build_argv(&args).unwrap(), ["t", "-a", "--", "x"], "mapped flags come before `--`");
    for (body, needle) in [
        ("[command]\nexec = [\"a\"]\n[command.mappings.m]\nx = \"-x\"", "names no declared argument"),
        (
            "[args.m]\ntype = \"string\"\n[command]\ntemplate = \"a x{_m}\"\n[command.mappings.m]\nx = \"-x\"",
            "word of its own",
        ),
        ("[args.m]\ntype = \"string\"\n[command]\nexec = [\"a\"]\n[command.mappings.m]\nx = \"-{m}\"", "literal"),
        (
            "[command]\nexec = [\"a\", \"{_c}\"]\n[command.conditionals.c]\nwhen = \"x != ''\"\ntemplate = \"-x\"",
            "\"x\"",
        ),
    ] {
        let err = parse_err(body);
        assert_eq!(err.code, ManifestInvalid, "{body}");
        assert!(err.message.contains(needle), "{needle} not in {}", err.message);
    }
}
