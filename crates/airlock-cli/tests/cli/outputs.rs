//! Outputs people can use (issue 17, items 3 and 5), on the shipping binary
//! with real files: a tool's standard output as its output file (`jq` and
//! `sqlite3` without a shell), published modes that follow the caller's
//! umask or `[filesystem] output_mode`, and `create_parents` made through
//! handles, refused through a link.

use crate::runkit::{lit, manifest, run_cmd, IO_ARGS};
use crate::util::{sha256_hex, Project, Run, AIRLOCK, CANARY};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const CONFIG: &str = "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n";

/// `airlock ARGS` in the project, started by `sh` after `umask MASK`.
fn run_umask(p: &Project, mask: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!("umask {mask} && exec \"$0\" \"$@\"")).arg(AIRLOCK).args(args);
    cmd.current_dir(p.root()).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Ok(r) = std::env::var("AIRLOCK_RESOLVER") {
        cmd.env("AIRLOCK_RESOLVER", r);
    }
    run_cmd(cmd, &format!("umask {mask}; airlock {args:?}"))
}

fn mode(p: &Project, rel: &str) -> u32 {
    std::fs::symlink_metadata(p.path(rel)).unwrap().permissions().mode() & 0o7777
}

/// A tool whose stdout is its output: `exec` words (placeholders as
/// written), `[output] format`, and extra `[filesystem]` lines.
fn stdout_tool(p: &Project, name: &str, exec: &[&str], format: &str, fs_extra: &str) {
    let rest = format!(
        "[filesystem]\nread = [\"{{input}}\"]\ncreate = [\"{{output}}\"]\n{fs_extra}\n[output]\nformat = \"{format}\"\nstdout_file = \"{{output}}\"\n"
    );
    p.tool(name, &manifest(name, "", IO_ARGS, exec, &rest));
}

/// What the same program prints on the host, for comparison.
fn host_stdout(program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[track_caller]
fn assert_published(p: &Project, run: &Run, rel: &str, expected: &[u8]) {
    run.assert_ok();
    let got = std::fs::read(p.path(rel)).unwrap();
    assert_eq!(got, expected, "published bytes of {rel}");
    let sha = format!("sha256:{}", sha256_hex(expected));
    assert_eq!(run.envelope["created_files"][0]["path"], rel, "{run:#?}");
    assert_eq!(run.envelope["created_files"][0]["sha256"], sha.as_str(), "{run:#?}");
    assert_eq!(run.envelope["content"]["sha256"], sha.as_str(), "{run:#?}");
    assert_eq!(run.envelope["content"]["bytes"], expected.len(), "{run:#?}");
    assert_eq!(run.envelope["content"]["stdout_file"], rel, "{run:#?}");
}

const USERS: &str = r#"{"users":[{"name":"ada","age":36},{"name":"bob","age":25},{"name":"cy","age":41}]}"#;
const JQ_FILTER: &str = "[.users[] | select(.age > 30) | .name]";

#[test]
fn jq_stdout_is_the_output_without_a_shell() {
    let p = Project::with_config(CONFIG);
    p.write("data/users.json", USERS);
    let filter = lit(JQ_FILTER);
    stdout_tool(&p, "jq-older", &["jq", "-c", &filter, "{input}"], "json", "");
    let run = p.run(&["run", "jq-older", "data/users.json", "results/older.json"]);
    let expected = host_stdout("jq", &["-c", JQ_FILTER, &p.path("data/users.json").display().to_string()]);
    assert_published(&p, &run, "results/older.json", &expected);
    assert_eq!(expected, b"[\"ada\",\"cy\"]\n");
    assert_eq!(run.envelope["content"]["parsed"], serde_json::json!(["ada", "cy"]));
    assert_eq!(run.envelope["content"]["format"], "json");
}

#[test]
fn sqlite3_stdout_is_the_output_without_a_shell() {
    let p = Project::with_config(CONFIG);
    p.mkdir("data");
    let db = p.path("data/people.db");
    let made = Command::new("sqlite3")
        .arg(&db)
        .arg("CREATE TABLE users(name TEXT, age INT); INSERT INTO users VALUES ('ada',36),('bob',25),('cy',41);")
        .status()
        .unwrap();
    assert!(made.success());
    let query = "SELECT name, age FROM users WHERE age > 30 ORDER BY name";
    stdout_tool(&p, "older", &["sqlite3", "-readonly", "-csv", "-header", "{input}", query], "csv", "");
    let run = p.run(&["run", "older", "data/people.db", "results/older.csv"]);
    let expected = host_stdout("sqlite3", &["-readonly", "-csv", "-header", &db.display().to_string(), query]);
    assert_eq!(expected, b"name,age\nada,36\ncy,41\n");
    assert_published(&p, &run, "results/older.csv", &expected);
    assert_eq!(
        run.envelope["content"]["parsed"][1],
        serde_json::json!({"name": "cy", "age": 41}),
        "CSV numbers are numbers (ToolClad builtin:csv)"
    );
}

#[test]
fn the_worker_has_no_output_file_of_its_own() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "x");
    // The probe prints whether the output's path exists in the worker and
    // then tries to create it: only stdout may reach the host.
    let script = lit(r#"test -e "$2" && echo present || echo absent; echo sneaky > "$2" || echo refused"#);
    stdout_tool(&p, "probe", &["sh", "-c", &script, "sh", "{input}", "{output}"], "text", "");
    let run = p.run(&["run", "probe", "data/in.txt", "results/probe.txt"]);
    let published = std::fs::read_to_string(p.path("results/probe.txt")).unwrap();
    run.assert_ok();
    assert!(published.starts_with("absent\n"), "{published:?}");
    assert!(!published.contains("sneaky"), "{published:?}");
    assert!(run.envelope["content"].get("parsed").is_none(), "text is not parsed into the answer: {run:#?}");
}

#[test]
fn stdout_is_bounded_by_max_file_bytes_at_and_past_the_bound() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.bin", "z");
    let script = lit("import sys; sys.stdout.write('z' * int(sys.argv[1]))");
    for (n, ok) in [("100", true), ("101", false)] {
        let name = format!("print{n}");
        stdout_tool(&p, &name, &["python3", "-c", &script, n, "{input}"], "text", "max_file_bytes = 100");
        let out = format!("results/{n}.bin");
        let run = p.run(&["run", &name, "data/in.bin", &out]);
        if ok {
            assert_published(&p, &run, &out, &[b'z'; 100]);
        } else {
            assert_eq!((run.status(), run.reason(), run.code), ("failed", "limit.output_size", 1), "{run:#?}");
            assert!(run.envelope["error"]["message"].as_str().unwrap().contains("max_file_bytes = 100"), "{run:#?}");
            assert!(!p.path(&out).exists(), "nothing may be published past the bound");
            assert!(run.envelope["created_files"].as_array().is_none_or(|a| a.is_empty()), "{run:#?}");
        }
    }
}

#[test]
fn stdout_that_is_not_its_declared_format_publishes_nothing() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "not json\n");
    stdout_tool(&p, "cat-json", &["cat", "{input}"], "json", "");
    let run = p.run(&["run", "cat-json", "data/in.txt", "results/o.json"]);
    assert_eq!((run.status(), run.reason()), ("failed", "output.parse"), "{run:#?}");
    assert!(!p.path("results/o.json").exists());
}

#[test]
fn published_files_follow_the_umask_or_output_mode() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "hello");
    for (mask, out, want) in
        [("022", "results/a.txt", 0o644), ("027", "results/b.txt", 0o640), ("077", "results/c.txt", 0o600)]
    {
        run_umask(&p, mask, &["run", "copy", "data/in.txt", out]).assert_ok();
        assert_eq!(mode(&p, out), want, "umask {mask}");
    }
    p.write("airlock.toml", format!("{CONFIG}output_mode = \"0664\"\n"));
    run_umask(&p, "077", &["run", "copy", "data/in.txt", "results/d.txt"]).assert_ok();
    assert_eq!(mode(&p, "results/d.txt"), 0o664, "a configured mode is set exactly, whatever the umask");
}

#[test]
fn output_modes_with_exec_or_special_bits_are_refused() {
    for bad in
        ["output_mode = \"0755\"", "output_mode = \"4644\"", "output_mode = \"0044\"", "output_dir_mode = \"1777\""]
    {
        let p = Project::with_config(&format!("{CONFIG}{bad}\n"));
        p.write("data/in.txt", "x");
        let run = p.run(&["run", "copy", "data/in.txt", "results/o.txt"]);
        assert_eq!((run.status(), run.reason(), run.code), ("error", "config.invalid", 78), "{bad}: {run:#?}");
        assert!(!p.path("results/o.txt").exists());
    }
}

#[test]
fn broker_writes_follow_the_umask_or_output_mode() {
    let p = Project::with_config(CONFIG);
    let root = format!("out={}:w", p.path("results").display());
    let write = |mask: &str, name: &str| {
        let script = format!("printf x | airlock-fs write out {name}");
        run_umask(&p, mask, &["isolated", "--root", &root, "--", "sh", "-c", &script]).assert_ok();
    };
    write("027", "a.txt");
    assert_eq!(mode(&p, "results/a.txt"), 0o640);
    write("022", "b.txt");
    assert_eq!(mode(&p, "results/b.txt"), 0o644);
    p.write("airlock.toml", format!("{CONFIG}output_mode = \"0660\"\n"));
    write("077", "c.txt");
    assert_eq!(mode(&p, "results/c.txt"), 0o660);
}

/// The body of the first journal record of `kind` for invocation `id`.
fn record(p: &Project, id: &str, kind: &str) -> serde_json::Value {
    let show = p.run(&["journal", "show", "--json"]);
    let records = show.envelope["content"]["records"].as_array().unwrap();
    let found = records.iter().find(|r| r["invocation_id"] == id && r["kind"] == kind);
    found.unwrap_or_else(|| panic!("no {kind} for {id}")).get("body").cloned().unwrap_or_default()
}

fn nested_tool(p: &Project, create_parents: bool) {
    let extra = if create_parents { "create_parents = true\n" } else { "" };
    let rest = format!("[filesystem]\nread = [\"{{input}}\"]\ncreate = [\"{{output}}\"]\n{extra}");
    p.tool("nest", &manifest("nest", "", IO_ARGS, &["cp", "{input}", "{output}"], &rest));
}

#[test]
fn create_parents_makes_missing_nested_directories_and_is_refused_without_it() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "nested");
    nested_tool(&p, false);
    let run = p.run(&["run", "nest", "data/in.txt", "results/a/b/c/out.txt"]);
    run.assert_refused("output.parent_missing", 66);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("create_parents"), "{run:#?}");
    assert!(!p.path("results/a").exists());

    nested_tool(&p, true);
    p.mkdir("results/a");
    let run = run_umask(&p, "027", &["run", "nest", "data/in.txt", "results/a/b/c/out.txt"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/a/b/c/out.txt")).unwrap(), "nested");
    assert_eq!((mode(&p, "results/a/b"), mode(&p, "results/a/b/c")), (0o750, 0o750));
    assert_eq!(mode(&p, "results/a/b/c/out.txt"), 0o640);
    let id = run.envelope["invocation_id"].as_str().unwrap();
    let prepared = record(&p, id, "InvocationPrepared");
    assert_eq!(prepared["create_dirs"], serde_json::json!(["results/a/b", "results/a/b/c"]));
    let made = record(&p, id, "OutputDirectoryCreated");
    assert_eq!((made["path"].as_str(), made["mode"].as_str()), (Some("results/a/b"), Some("0750")), "{made}");
    let kinds = p.journal_kinds(id);
    assert_eq!(kinds.iter().filter(|k| *k == "OutputDirectoryCreated").count(), 2, "{kinds:?}");
    let made = kinds.iter().position(|k| k == "OutputDirectoryCreated").unwrap();
    let authorized = kinds.iter().position(|k| k == "InvocationAuthorized").unwrap();
    assert!(authorized < made, "directories are made only after authorization: {kinds:?}");

    // Nothing missing: no create_dirs in the descriptor.
    let run = p.run(&["prepare", "nest", "data/in.txt", "results/a/b/c/again.txt"]);
    assert!(run.envelope["descriptor"]["command_boundary"]["filesystem"].get("create_dirs").is_none(), "{run:#?}");

    // A configured directory mode is set exactly.
    p.write("airlock.toml", format!("{CONFIG}output_dir_mode = \"0700\"\n"));
    run_umask(&p, "000", &["run", "nest", "data/in.txt", "results/x/out.txt"]).assert_ok();
    assert_eq!(mode(&p, "results/x"), 0o700);
}

#[test]
fn a_failed_call_makes_no_directory() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "x");
    let rest = "[filesystem]\nread = [\"{input}\"]\ncreate = [\"{output}\"]\ncreate_parents = true\n";
    p.tool("fails", &manifest("fails", "", IO_ARGS, &["false", "{input}", "{output}"], rest));
    let run = p.run(&["run", "fails", "data/in.txt", "results/new/out.txt"]);
    assert_eq!(run.status(), "failed", "{run:#?}");
    assert!(!p.path("results/new").exists(), "directories are made only to publish");
}

#[test]
fn a_symlink_planted_as_a_parent_before_prepare_is_refused() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "x");
    nested_tool(&p, true);
    std::os::unix::fs::symlink(p.path("outside"), p.path("results/a")).unwrap();
    let run = p.run(&["run", "nest", "data/in.txt", "results/a/b/out.txt"]);
    run.assert_refused("path.symlink", 77);
    assert_eq!(std::fs::read_dir(p.path("outside")).unwrap().count(), 1, "only the canary is outside");
    assert_eq!(std::fs::read_to_string(p.path("outside/secret.txt")).unwrap(), CANARY);
}

#[test]
fn a_symlink_swapped_in_between_prepare_and_publish_is_refused() {
    let p = Project::with_config(CONFIG);
    p.write("data/in.txt", "x");
    nested_tool(&p, true);
    let prepared = p.run(&["prepare", "nest", "data/in.txt", "results/a/b/out.txt"]);
    assert_eq!(prepared.code, 0, "{prepared:#?}");
    let id = prepared.envelope["invocation_id"].as_str().unwrap().to_owned();
    assert_eq!(
        prepared.envelope["descriptor"]["command_boundary"]["filesystem"]["create_dirs"],
        serde_json::json!(["results/a", "results/a/b"])
    );
    std::os::unix::fs::symlink(p.path("outside"), p.path("results/a")).unwrap();
    let run = p.run(&["dispatch", &id]);
    run.assert_refused("path.symlink", 77);
    assert_eq!(std::fs::read_dir(p.path("outside")).unwrap().count(), 1, "nothing written outside");

    // A directory made in its place by someone else is not adopted either.
    let prepared = p.run(&["prepare", "nest", "data/in.txt", "results/m/out.txt"]);
    let id = prepared.envelope["invocation_id"].as_str().unwrap().to_owned();
    p.mkdir("results/m");
    p.run(&["dispatch", &id]).assert_refused("output.parent_changed", 77);
    assert!(!p.path("results/m/out.txt").exists());
}

#[test]
fn recovery_publishes_a_named_candidate_with_the_recorded_mode() {
    use std::os::unix::process::ExitStatusExt;
    let p = Project::with_config(&format!("{CONFIG}output_mode = \"0640\"\n"));
    p.write("data/in.txt", "recovered");
    let id = "inv-recovered-mode";
    let mut cmd = p.command(&["run", "copy", "data/in.txt", "results/r.txt", "--invocation-id", id]);
    cmd.env("AIRLOCK_TEST_CRASH_AT", "after_prepared").env("AIRLOCK_TEST_NAMED_CANDIDATE", "1");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.signal(), Some(9), "airlock should have been SIGKILLed: {out:?}");
    assert!(!p.path("results/r.txt").exists());
    let intent = record(&p, id, "FilePublicationPrepared");
    assert_eq!(intent["mode"], "0640", "{intent}");
    p.run(&["invocation", "recover", id]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/r.txt")).unwrap(), "recovered");
    assert_eq!(mode(&p, "results/r.txt"), 0o640);
}

/// A stdout of 256 MiB goes to its output file through the sandbox's pipe
/// without being held in memory: `airlock` stays under 64 MiB resident, and
/// the published bytes are exactly what the tool printed.
#[test]
fn a_large_stdout_streams_into_its_output_with_bounded_memory() {
    const MIB: u64 = 1 << 20;
    let size = 256 * MIB;
    let p = Project::with_config(&format!(
        "{CONFIG}[limits]\nmax_file_bytes = {}\n[staging]\nmax_bytes = {}\n",
        512 * MIB,
        1024 * MIB
    ));
    p.write("data/in.bin", "z");
    let script =
        lit("import sys\nb = bytes(range(256)) * 4096\nfor _ in range(int(sys.argv[1])): sys.stdout.buffer.write(b)");
    let blocks = (size / MIB).to_string();
    stdout_tool(
        &p,
        "big",
        &["python3", "-c", &script, &blocks, "{input}"],
        "text",
        &format!("max_file_bytes = {}", 512 * MIB),
    );
    let (run, rss_kib) = crate::operator_limits::run_measured(
        &p,
        &["run", "big", "data/in.bin", "results/big.bin"],
        std::time::Duration::from_secs(120),
    );
    run.assert_ok();
    let published = std::fs::metadata(p.path("results/big.bin")).unwrap().len();
    assert_eq!(published, size, "{run:#?}");
    assert_eq!(run.envelope["content"]["bytes"], size);
    let expected = {
        use sha2::Digest;
        let block: Vec<u8> = (0..=255u8).collect::<Vec<u8>>().repeat(4096);
        let mut h = sha2::Sha256::new();
        for _ in 0..size / MIB {
            h.update(&block);
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    };
    assert_eq!(run.envelope["created_files"][0]["sha256"], expected.as_str(), "{run:#?}");
    assert!(rss_kib < 64 * 1024, "airlock's peak RSS was {rss_kib} KiB for a {size}-byte stdout");
}
