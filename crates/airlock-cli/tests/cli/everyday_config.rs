//! Everyday use (issue 18 §1, §6): configuration discovery from a nested
//! directory, `AIRLOCK_CONFIG`, the repository boundary, the user's
//! configuration; `init`'s `.gitignore`; `--http localhost:0`; `journal
//! verify` without `--public-key`; a bad policy said once; completions,
//! man page, `--version`; and the output rule of status commands.

use crate::httpkit::{HttpSession, Server};
use crate::util::{Project, Run, AIRLOCK};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary in `dir` (inside `p`) with extra environment variables.
fn run_in(p: &Project, dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Run {
    let mut cmd = p.command(args);
    cmd.current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    p.run_command(cmd, args)
}

/// Every `.airlock` directory under `p`, relative to its root.
fn state_dirs(p: &Project) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() == ".airlock" {
                    found.push(path.strip_prefix(root).unwrap().display().to_string());
                } else {
                    walk(root, &path, found);
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(p.root(), p.root(), &mut found);
    found
}

/// The raw output of the binary in `p`'s root.
fn output(p: &Project, args: &[&str]) -> Output {
    p.command(args).output().unwrap()
}

#[test]
fn config_is_found_from_a_nested_directory_and_its_state_dir_is_used() {
    let p = Project::new();
    p.write("data/in.txt", "found from below\n");
    p.mkdir("data/deeper/still");
    let below = p.path("data/deeper/still");
    let run = run_in(&p, &below, &["run", "copy", "data/in.txt", "results/out.txt", "--invocation-id", "n-1"], &[]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/out.txt")).unwrap(), "found from below\n");
    // The project's journal holds the call; no second state dir appeared below.
    assert_eq!(p.journal_kinds("n-1").last().map(String::as_str), Some("InvocationFinished"));
    assert_eq!(state_dirs(&p), [".airlock"], "{}", p.tree());

    let doctor = run_in(&p, &below, &["doctor", "--json"], &[]);
    let config = &doctor.envelope["content"]["config"];
    assert_eq!(config["origin"], "discovered", "{doctor:#?}");
    assert_eq!(config["file"], p.path("airlock.toml").display().to_string());
    assert_eq!(config["state_dir"], p.path(".airlock").display().to_string());
    // --verbose says the same on stderr, and nothing else changes on stdout.
    let verbose = run_in(&p, &below, &["--verbose", "tools", "list"], &[]);
    verbose.assert_ok();
    let expected = format!("configuration: {} (discovered", p.path("airlock.toml").display());
    assert!(verbose.stderr.contains(&expected), "{verbose:#?}");
    assert_eq!(state_dirs(&p), [".airlock"], "{}", p.tree());
}

#[test]
fn airlock_config_is_honoured_and_config_flag_wins_over_it() {
    let p = Project::new();
    p.write("elsewhere/other.toml", "state_dir = \"st\"\n");
    let env = [("AIRLOCK_CONFIG", p.path("elsewhere/other.toml"))];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let doctor = run_in(&p, p.root(), &["doctor", "--json"], &env);
    let config = &doctor.envelope["content"]["config"];
    assert_eq!(
        (config["origin"].as_str(), config["file"].as_str()),
        (Some("env"), p.path("elsewhere/other.toml").to_str())
    );
    // Relative paths are taken from that file's directory.
    assert_eq!(config["state_dir"], p.path("elsewhere/st").display().to_string());
    run_in(&p, p.root(), &["tools", "list"], &env).assert_ok();
    assert!(p.path("elsewhere/st").is_dir() && !p.path(".airlock").exists(), "{}", p.tree());

    let flag = run_in(&p, p.root(), &["--config", "airlock.toml", "doctor", "--json"], &env);
    assert_eq!(flag.envelope["content"]["config"]["origin"], "flag", "{flag:#?}");
}

#[test]
fn a_repository_top_stops_discovery_and_the_user_config_comes_next() {
    let p = Project::new();
    p.mkdir("vendor/repo/.git");
    p.mkdir("vendor/repo/src");
    let src = p.path("vendor/repo/src");
    // The project's airlock.toml is above the repository's top: not used.
    let doctor = run_in(&p, &src, &["doctor", "--json"], &[]);
    let config = &doctor.envelope["content"]["config"];
    assert_eq!((config["origin"].as_str(), &config["file"]), (Some("embedded"), &Value::Null), "{doctor:#?}");
    let why = config["why"].as_str().unwrap();
    assert!(why.contains(&format!("up to the repository top {}", p.path("vendor/repo").display())), "{why}");
    // The user's configuration comes before the embedded default.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("airlock")).unwrap();
    std::fs::write(home.path().join("airlock/airlock.toml"), "state_dir = \"user-state\"\n").unwrap();
    let user = run_in(&p, &src, &["doctor", "--json"], &[("XDG_CONFIG_HOME", home.path())]);
    let config = &user.envelope["content"]["config"];
    assert_eq!(config["origin"], "user", "{user:#?}");
    assert_eq!(config["state_dir"], home.path().join("airlock/user-state").display().to_string());
    // The repository's own top is looked at.
    p.write("vendor/repo/airlock.toml", "state_dir = \".airlock\"\n");
    let top = run_in(&p, &src, &["doctor", "--json"], &[("XDG_CONFIG_HOME", home.path())]);
    assert_eq!(top.envelope["content"]["config"]["file"], p.path("vendor/repo/airlock.toml").display().to_string());
}

#[test]
fn init_writes_a_gitignore_that_keeps_the_state_dir_out_of_git() {
    let p = Project::new();
    p.run(&["init"]).assert_ok();
    assert_eq!(std::fs::read_to_string(p.path(".airlock/.gitignore")).unwrap().lines().last(), Some("*"));
    let again = p.run(&["init"]);
    again.assert_ok();
    let kept = again.envelope["content"]["kept"].as_array().unwrap();
    assert!(kept.iter().any(|k| k.as_str().unwrap().ends_with(".airlock/.gitignore")), "{again:#?}");
    // git agrees: nothing under the state dir can be added, the key least of all.
    let git = |args: &[&str]| Command::new("git").args(args).current_dir(p.root()).env("HOME", p.root()).output();
    let Ok(init) = git(&["init", "-q"]) else { return };
    assert!(init.status.success());
    let ignored = git(&["check-ignore", "-q", ".airlock/journal.key"]).unwrap();
    assert!(ignored.status.success(), "journal.key is not ignored");
    let status = git(&["status", "--porcelain", "--untracked-files=all"]).unwrap();
    let listed = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(!listed.contains(".airlock") && listed.contains("airlock.toml"), "{listed}");
}

#[test]
fn completions_and_man_page_are_generated_from_the_command_line() {
    let p = Project::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = output(&p, &["completions", shell]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("airlock") && text.contains("staging") && text.contains("journal"), "{shell}: {text}");
    }
    let bad = output(&p, &["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(64));

    let man = output(&p, &["man"]);
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(man.status.success());
    assert!(page.lines().any(|l| l.starts_with(".TH airlock 1")), "{page}");
    assert!(page.contains("doctor") && page.contains("completions"), "{page}");
    let run = String::from_utf8_lossy(&output(&p, &["man", "run"]).stdout).into_owned();
    assert!(run.lines().any(|l| l.starts_with(".TH airlock-run 1")), "{run}");
    let unknown = p.run(&["man", "nope"]);
    unknown.assert_refused("usage", 64);
}

#[test]
fn version_names_the_commit_and_the_tiers() {
    let out = Command::new(AIRLOCK).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "unknown".to_owned(), |o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    // Every tier the configuration accepts is built in this binary.
    let tiers: Vec<&str> = airlock_core::tier_settings::ALL_TIERS.iter().map(|t| t.as_str()).collect();
    let expected = format!("airlock {} (commit {commit}; tiers: {})\n", env!("CARGO_PKG_VERSION"), tiers.join(", "));
    assert_eq!(text, expected);
}

#[test]
fn mcp_http_on_localhost_binds_loopback_and_other_names_are_refused() {
    let p = Project::new();
    let server = Server::start(&p, &["--http", "localhost:0"]).unwrap();
    assert!(server.address.starts_with("127.0.0.1:"), "{}", server.stderr);
    let auth = format!("Bearer {}", server.token());
    let mut session = HttpSession::new(server.tcp(), &[("Authorization", &auth)]);
    let answer = session.initialize();
    assert_eq!(answer.status, 200, "{answer}");
    assert!(server.stop().success());

    let refused = p.run(&["mcp", "--http", "example.com:8080"]);
    refused.assert_refused("usage", 64);
    assert!(refused.reason() == "usage" && refused.stderr.contains("not resolved"), "{refused:#?}");
    p.run(&["mcp", "--http", "0.0.0.0:0"]).assert_refused("usage", 64);
}

#[test]
fn journal_verify_finds_the_key_beside_the_journal_and_else_names_public_key() {
    let p = Project::new();
    p.write("data/in.txt", "verify me\n");
    p.run(&["run", "copy", "data/in.txt", "results/out.txt"]).assert_ok();
    // In the state dir: the key beside it.
    let here = p.run(&["journal", "verify", "--journal", ".airlock/journal.jsonl"]);
    here.assert_ok();
    assert_eq!(here.envelope["content"]["public_key_file"], ".airlock/journal.pub");
    // An exported copy with its key beside it.
    let copy = tempfile::tempdir().unwrap();
    let journal = copy.path().join("journal.jsonl");
    std::fs::copy(p.path(".airlock/journal.jsonl"), &journal).unwrap();
    std::fs::copy(p.path(".airlock/journal.pub"), copy.path().join("journal.pub")).unwrap();
    let elsewhere = Project::with_config("");
    let beside = elsewhere.run(&["journal", "verify", "--journal", journal.to_str().unwrap()]);
    beside.assert_ok();
    assert!(!elsewhere.path(".airlock").exists(), "verify made a state dir: {}", elsewhere.tree());
    // A damaged record is said in words, not Rust debug text.
    let mut bytes = std::fs::read(&journal).unwrap();
    let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    bytes[second + 10] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();
    let bad = elsewhere.run(&["journal", "verify", "--journal", journal.to_str().unwrap()]);
    assert_eq!((bad.status(), bad.reason(), bad.code), ("failed", "journal.invalid", 1), "{bad:#?}");
    let message = bad.envelope["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("the record at line 2") && !message.contains("Some("), "{message}");
    // No key anywhere: refused, naming --public-key.
    std::fs::remove_file(copy.path().join("journal.pub")).unwrap();
    let none = elsewhere.run(&["journal", "verify", "--journal", journal.to_str().unwrap()]);
    none.assert_refused("journal.public_key_missing", 64);
    assert!(none.envelope["error"]["message"].as_str().unwrap().contains("--public-key"), "{none:#?}");
    elsewhere.run(&["journal", "verify"]).assert_refused("journal.public_key_missing", 64);
}

#[test]
fn one_bad_policy_expression_is_reported_once() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n\
         [policy]\nfiles = [\"policies/bad.cedar\"]\n",
    );
    p.write("policies/bad.cedar", "permit(principal, action, resource) when { context.no_such_field == 1 };\n");
    let run = p.run(&["tools", "list"]);
    assert_eq!(run.reason(), "policy.invalid", "{run:#?}");
    let message = run.envelope["error"]["message"].as_str().unwrap();
    assert_eq!(message.matches("no_such_field").count(), 1, "{message}");
    assert!(message.contains("more actions"), "{message}");
    assert_eq!(run.stderr.matches("no_such_field").count(), 1, "{}", run.stderr);
}

#[test]
fn status_commands_print_text_on_a_terminal_and_json_when_piped() {
    let p = Project::new();
    p.run(&["tools", "list"]).assert_ok();
    // Piped: one envelope each (the test harness reads stdout through a pipe).
    for args in
        [&["doctor"][..], &["tools", "list"], &["approvals", "list"], &["staging", "status"], &["journal", "show"]]
    {
        let run = p.run(args);
        assert!(run.envelope["content"].is_object(), "{run:#?}");
    }
    // On a terminal: text, unless --json.
    for (args, needle) in [
        (&["doctor"][..], "configuration: "),
        (&["tools", "list"], "runnable: "),
        (&["approvals", "list"], "no call is waiting for an approval"),
        (&["staging", "status"], "staging pool: "),
    ] {
        let text = p.on_terminal(args);
        assert!(text.contains(needle) && !text.contains("\"status\""), "{args:?}: {text}");
        let mut json = args.to_vec();
        json.push("--json");
        let text = p.on_terminal(&json);
        // (The pty carries stderr too: doctor's warnings are lines of their own.)
        assert!(text.lines().any(|l| l.starts_with("{\"status\"")), "{args:?} --json: {text}");
    }
}
