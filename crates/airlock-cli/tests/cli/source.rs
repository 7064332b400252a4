//! Source queries on the shipping binary: `airlock query` with real links,
//! FIFOs, hard links, traversal and control directories (ATTACKS.md 1–8 for
//! source paths), a Cedar forbid keeping content out, nested and missing
//! ceilings, and the evidence in the journal.

use crate::util::{Project, Run, CANARY};
use serde_json::Value;
use std::os::unix::fs::symlink;

/// A project with `data/` (ro), `results/` (rw) and source files in `data/`.
fn project() -> Project {
    let p = Project::new();
    p.write("data/src/main.rs", "fn main() {\n    println!(\"needle\");\n}\n");
    p.write("data/notes.txt", "first line\nsecond needle line\n");
    p
}

fn query(p: &Project, args: &[&str]) -> Run {
    let mut all = vec!["query"];
    all.extend_from_slice(args);
    p.run(&all)
}

fn paths(run: &Run) -> Vec<String> {
    run.envelope["content"]["entries"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap().into()).collect()
}

fn journal(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path(".airlock/journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_three_operations_answer_with_sealed_results() {
    let p = project();
    let list = query(&p, &["list_files", "path=data"]);
    list.assert_ok();
    assert_eq!(paths(&list), ["data/notes.txt", "data/src", "data/src/main.rs"]);
    assert_eq!(list.envelope["content"]["partial"], false);
    let grep = query(&p, &["grep_files", "pattern=needle"]);
    grep.assert_ok();
    let matches = grep.envelope["content"]["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 2);
    assert_eq!((matches[0]["path"].as_str(), matches[0]["line"].as_u64()), (Some("data/notes.txt"), Some(2)));
    let read = query(&p, &["read_file", "path=data/notes.txt", "offset=11", "limit=6"]);
    read.assert_ok();
    assert_eq!(read.envelope["content"]["content"], "second");
    assert_eq!(read.envelope["content"]["partial_reasons"], serde_json::json!(["read_limit"]));
    for run in [&list, &grep, &read] {
        let mut c = run.envelope["content"].as_object().unwrap().clone();
        let claimed = c.remove("result_sha256").unwrap();
        let canonical = airlock_core::canonical_json(&Value::Object(c));
        assert_eq!(claimed.as_str().unwrap(), format!("sha256:{}", crate::util::sha256_hex(&canonical)));
    }
    // The journal binds the query: prepared (with the result digest and the
    // broker hash), authorized, finished; and it verifies.
    let records = journal(&p);
    let prepared: Vec<&Value> = records.iter().filter(|r| r["kind"] == "InvocationPrepared").collect();
    assert_eq!(prepared.len(), 3);
    assert_eq!(prepared[2]["body"]["source"]["result_sha256"], read.envelope["content"]["result_sha256"]);
    assert!(prepared[2]["body"]["source"]["broker_sha256"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(records.iter().filter(|r| r["kind"] == "InvocationAuthorized").count(), 3);
    p.run(&["journal", "verify"]).assert_ok();
    // Nothing was reserved or staged, and the content is nowhere in the state dir.
    assert_eq!(crate::runkit::staged_entries(p.root()), Vec::<String>::new());
    p.assert_state_free_of("second needle line");
}

#[test]
fn source_paths_refuse_attacks_before_and_during_resolution() {
    let p = project();
    p.write("data-evil/x", CANARY);
    symlink(p.path("outside/secret.txt"), p.path("data/link.txt")).unwrap();
    symlink(p.path("outside"), p.path("data/linkdir")).unwrap();
    std::fs::hard_link(p.path("outside/secret.txt"), p.path("data/hard.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p.path("data/fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
    p.write("data/.git/config", CANARY);
    let cases: &[(&str, &str, i32)] = &[
        ("path=../data-evil/x", "path.traversal", 77),
        ("path=data/../outside/secret.txt", "path.traversal", 77),
        ("path=data//notes.txt", "path.empty_component", 77),
        ("path=./data/notes.txt", "path.dot_component", 77),
        ("path=/etc/passwd", "path.absolute", 77),
        ("path=data\\..\\x", "path.backslash", 77),
        ("path=C:x", "path.mount_delimiter", 77),
        ("path=data/.git/config", "path.control_dir", 77),
        ("path=data/.GIT/config", "path.control_dir", 77),
        ("path=data/link.txt", "path.symlink", 77),
        ("path=data/linkdir/secret.txt", "path.symlink", 77),
        ("path=data/hard.txt", "input.hardlink", 77),
        ("path=data/fifo", "input.not_regular", 77),
        ("path=data/src", "input.not_regular", 77),
        ("path=data/missing.txt", "input.missing", 66),
        ("path=outside/secret.txt", "grant.no_ceiling", 77),
    ];
    for (arg, code, exit) in cases {
        let run = query(&p, &["read_file", arg]);
        run.assert_refused(code, *exit);
        p.assert_absent(&run, CANARY);
    }
    let long = format!("path=data/{}", "a".repeat(256));
    query(&p, &["read_file", &long]).assert_refused("path.component_too_long", 77);
    let nul = query(&p, &["read_file", "path=data/a\u{1}b"]);
    nul.assert_refused("path.control_char", 77);
    // Enumeration skips and counts the same entries, and never reads them.
    for args in [&["list_files", "path=data"][..], &["grep_files", "pattern=CANARY"][..]] {
        let run = query(&p, args);
        run.assert_ok();
        let c = &run.envelope["content"];
        assert_eq!(c["partial"], true, "{run:#?}");
        assert_eq!((c["skipped"]["symlink"].as_u64(), c["skipped"]["hardlink"].as_u64()), (Some(2), Some(1)));
        assert_eq!((c["skipped"]["special"].as_u64(), c["skipped"]["control_dir"].as_u64()), (Some(1), Some(1)));
        p.assert_absent(&run, CANARY);
    }
    // Every refusal is journaled with its code.
    let refused = journal(&p).into_iter().filter(|r| r["kind"] == "InvocationRefused").count();
    assert_eq!(refused, cases.len() + 2);
}

#[test]
fn limits_are_checked_at_the_edge_and_one_past_on_the_binary() {
    let p = project();
    p.write("data/big", vec![b'x'; 70_000]);
    let edge = query(&p, &["read_file", "path=data/big", "limit=65536", "offset=10000000"]);
    edge.assert_ok();
    assert_eq!(edge.envelope["content"]["bytes"], 0);
    // More than a pipe buffer of output: read while it runs.
    let out = p.command(&["query", "read_file", "path=data/big", "limit=65536"]).output().unwrap();
    let full: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((full["content"]["bytes"].as_u64(), out.status.code()), (Some(65_536), Some(0)));
    assert_eq!(full["content"]["partial_reasons"], serde_json::json!(["read_limit"]));
    query(&p, &["read_file", "path=data/big", "limit=65537"]).assert_refused("arg.out_of_range", 65);
    query(&p, &["read_file", "path=data/big", "offset=10000001"]).assert_refused("arg.out_of_range", 65);
    let needle = format!("pattern={}", "n".repeat(1024));
    query(&p, &["grep_files", &needle]).assert_ok();
    let too_long = format!("pattern={}", "n".repeat(1025));
    query(&p, &["grep_files", &too_long]).assert_refused("arg.out_of_range", 65);
    // An empty value is no value to the manifest layer (the broker itself
    // refuses an empty needle as out of range: query.rs tests).
    query(&p, &["grep_files", "pattern="]).assert_refused("arg.missing", 65);
    query(&p, &["list_files", "depth=3"]).assert_refused("arg.unknown", 65);
}

#[test]
fn a_cedar_forbid_on_a_path_keeps_its_content_out_of_the_result() {
    let p =
        Project::with_config("[filesystem]\nroots = [\"./data:data:ro\"]\n[policy]\nfiles = [\"policy/*.cedar\"]\n");
    p.write("policy/a.cedar", "@id(\"permit-all\")\npermit(principal, action, resource);\n");
    p.write(
        "policy/b.cedar",
        r#"@id("no-private")
forbid(principal, action, resource) when {
  context.invocation.resolved.command_boundary.filesystem.read_paths.contains("data/private.txt")
};
@id("no-reads-past-4k")
forbid(principal, action, resource == Airlock::Tool::"read_file") when {
  context.invocation.resolved.command_boundary.filesystem.max_file_bytes > 4096
};
@id("no-listing-of-vault")
forbid(principal, action, resource) when {
  context.invocation.resolved.command_boundary.filesystem has source &&
  context.invocation.resolved.command_boundary.filesystem.source.operation == "list_files" &&
  context.invocation.resolved.command_boundary.filesystem.source.path like "data/vault*"
};"#,
    );
    p.write("data/ok.txt", "fine\n");
    p.write("data/private.txt", CANARY);
    let denied = query(&p, &["read_file", "path=data/private.txt"]);
    denied.assert_refused("policy.denied", 77);
    assert!(denied.envelope.get("content").is_none(), "{denied:#?}");
    p.assert_absent(&denied, CANARY);
    let grep = query(&p, &["grep_files", "pattern=CANARY"]);
    grep.assert_refused("policy.denied", 77);
    p.assert_absent(&grep, CANARY);
    let journal_text = std::fs::read_to_string(p.path(".airlock/journal.jsonl")).unwrap();
    assert!(!journal_text.contains(CANARY));
    assert!(journal_text.contains("InvocationRefused") && journal_text.contains("policy.denied"));
    // A policy may name the bundled tool (validated at start-up against the
    // bundled manifests).
    query(&p, &["read_file", "path=data/ok.txt", "limit=4097"]).assert_refused("policy.denied", 77);
    let ok = query(&p, &["read_file", "path=data/ok.txt", "limit=4096"]);
    ok.assert_ok();
    assert_eq!(ok.envelope["content"]["content"], "fine\n");
    assert_eq!(ok.envelope["evidence"]["policy_ids"], serde_json::json!(["permit-all"]));
    // A listing reads no content, so a forbid on content reads does not
    // touch it; the source record is there for policies that want it.
    p.write("data/vault/key.txt", CANARY);
    let list = query(&p, &["list_files", "path=data"]);
    list.assert_ok();
    assert!(paths(&list).contains(&"data/private.txt".to_owned()));
    let vault = query(&p, &["list_files", "path=data/vault"]);
    vault.assert_refused("policy.denied", 77);
    assert!(vault.envelope["error"]["message"].as_str().unwrap().contains("no-listing-of-vault"), "{vault:#?}");
    assert!(!vault.stdout.contains("key.txt"), "{vault:#?}");
}

#[test]
fn nested_ceilings_hide_the_parent_and_missing_roots_are_errors() {
    let p = Project::with_config("[filesystem]\nroots = [\"./base:.:ro\", \"./inner:src/vendor:ro\"]\n");
    p.write("base/src/lib.rs", "pub fn f() {}\n");
    p.write("base/src/vendor/hidden.rs", CANARY);
    p.write("inner/shown.rs", "pub fn shown() {}\n");
    let list = query(&p, &["list_files"]);
    list.assert_ok();
    assert_eq!(paths(&list), ["src", "src/lib.rs", "src/vendor", "src/vendor/shown.rs"]);
    let grep = query(&p, &["grep_files", "pattern=CANARY"]);
    grep.assert_ok();
    assert_eq!(grep.envelope["content"]["matches"].as_array().unwrap().len(), 0);
    p.assert_absent(&grep, CANARY);
    query(&p, &["read_file", "path=src/vendor/hidden.rs"]).assert_refused("input.missing", 66);

    let missing = Project::with_config("[filesystem]\nroots = [\"./data:data:ro\", \"./gone:more:ro\"]\n");
    std::fs::remove_dir(missing.path("data")).unwrap();
    let run = missing.run(&["query", "list_files"]);
    assert_eq!((run.status(), run.reason()), ("error", "config.ceiling"), "{run:#?}");
    assert_eq!(run.code, 78);
    let none = Project::with_config("state_dir = \".airlock\"\n");
    let run = none.run(&["query", "list_files"]);
    run.assert_refused("grant.no_ceiling", 77);
}

#[test]
fn a_shadowing_manifest_must_itself_be_the_source_tool() {
    let p = project();
    // The bundled tools are listed, runnable.
    let list = p.run(&["tools", "list"]);
    let tools = list.envelope["content"]["tools"].as_array().unwrap().clone();
    let find = |tools: &[Value], name: &str| tools.iter().find(|t| t["name"] == name).cloned();
    for name in ["read_file", "list_files", "grep_files"] {
        let t = find(&tools, name).unwrap_or_else(|| panic!("{name} not listed: {list:#?}"));
        assert_eq!(
            (t["runnable"].as_bool(), t["manifest"].as_str()),
            (Some(true), Some(&*format!("bundled:{name}.clad.toml")))
        );
    }
    // A command tool named like a bundled source operation is refused, not run.
    p.write("tools/read_file.clad.toml", crate::util::COPY_TOOL.replace("name = \"copy\"", "name = \"read_file\""));
    query(&p, &["read_file", "path=data/notes.txt"]).assert_refused("source.shadowed", 65);
    let list = p.run(&["tools", "list"]);
    let shadow = list.envelope["content"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["manifest"].as_str().is_some_and(|m| m.ends_with("tools/read_file.clad.toml")))
        .cloned()
        .unwrap();
    assert_eq!(shadow["error"]["code"], "source.shadowed", "{list:#?}");
    // A source manifest for the same operation may replace the bundled one.
    p.write(
        "tools/read_file.clad.toml",
        "[tool]\nname = \"read_file\"\nversion = \"9\"\ndescription = \"local\"\n[source]\noperation = \"read_file\"\n\
         [args.path]\ntype = \"path\"\nrequired = true\n[output]\nformat = \"json\"\n",
    );
    query(&p, &["read_file", "path=data/notes.txt"]).assert_ok();
    query(&p, &["read_file", "path=data/notes.txt", "limit=3"]).assert_refused("arg.unknown", 65);
    // A source manifest that also declares a command is refused, not run.
    p.write(
        "tools/both.clad.toml",
        format!("{}\n[source]\noperation = \"list_files\"\n", crate::util::COPY_TOOL.replace("\"copy\"", "\"both\"")),
    );
    p.run(&["run", "both", "data/notes.txt", "results/x.txt"]).assert_refused("source.conflict", 65);
    assert!(!p.path("results/x.txt").exists());
    // `query` runs only source operations; `run` reaches bundled ones too.
    let run = p.run(&["query", "copy"]);
    run.assert_refused("usage", 64);
    p.run(&["run", "list_files", "data"]).assert_ok();
    p.run(&["run", "grep_files", "needle", "data/src"]).assert_ok();
    // A source query's id cannot be dispatched afterwards.
    let q = p.run(&["query", "list_files", "--invocation-id", "src-1"]);
    q.assert_ok();
    p.run(&["dispatch", "src-1"]).assert_refused("invocation.duplicate", 77);
    p.run(&["query", "list_files", "--invocation-id", "src-1"]).assert_refused("invocation.duplicate", 77);
}

/// ATTACKS.md 10 for source paths: a racer swaps a directory for a symlink
/// to a canary directory in a loop while reads, listings and searches run.
/// No answer may hold the canary, its hash, or a path that leads to it.
#[test]
fn directory_swap_race_never_reaches_the_canary() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let p = Arc::new(project());
    p.write("data/dir/in.txt", "the real input\n");
    p.write("outside/canary/in.txt", CANARY);
    let canary_hash = format!("sha256:{}", crate::util::sha256_hex(CANARY.as_bytes()));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (p, stop, swaps) = (p.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            let (dir, aside, canary) = (p.path("data/dir"), p.path("data/dir.aside"), p.path("outside/canary"));
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&dir, &aside).unwrap();
                symlink(&canary, &dir).unwrap();
                std::thread::yield_now();
                std::fs::remove_file(&dir).unwrap();
                std::fs::rename(&aside, &dir).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..300 {
        let args: &[&str] = match i % 3 {
            0 => &["read_file", "path=data/dir/in.txt"],
            1 => &["list_files", "path=data"],
            _ => &["grep_files", "pattern=CANARY", "path=data"],
        };
        let run = query(&p, args);
        assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY), "{run:#?}");
        assert!(!run.stdout.contains(&canary_hash), "canary hash returned: {run:#?}");
        match run.status() {
            "ok" => {
                let c = &run.envelope["content"];
                assert_eq!(c["matches"].as_array().map_or(0, Vec::len), 0, "{run:#?}");
                if i % 3 == 0 {
                    assert_eq!(c["content"], "the real input\n");
                }
            }
            "refused" => {
                let allowed = ["path.symlink", "input.missing", "path.race", "input.changed"];
                assert!(allowed.contains(&run.reason()), "unexpected refusal: {run:#?}");
            }
            other => panic!("unexpected status {other}: {run:#?}"),
        }
        *outcomes.entry(format!("{}:{}", args[0], run.status())).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    eprintln!("source race: {outcomes:?}, {} swaps", swaps.load(Ordering::Relaxed));
    assert!(swaps.load(Ordering::Relaxed) > 20, "the racer barely ran");
    p.assert_state_free_of(CANARY);
}
