//! Every policy file in examples/policy loads, and permits and denies what
//! its comment says.

mod common;

use airlock_core::manifest::Manifest;
use airlock_policy::{PolicySet, ToolSpec};
use common::*;
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn policy_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(examples().join("policy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cedar"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    files
}

/// A call that the file permits and one that it denies, with the policy
/// that denies it (None: nothing permits it).
fn cases(file: &str) -> (Call, Call, Option<&'static str>) {
    let ok = Call::copy("data/notes.txt", "results/notes.txt");
    match file {
        "forbid-private-inputs.cedar" => {
            (ok, Call::copy("data/secret.txt", "results/leak.txt"), Some("forbid-private-inputs.secret"))
        }
        "only-known-tools.cedar" => {
            let mut high = Call::copy("data/notes.txt", "results/notes.txt");
            high.risk_tier = "high".into();
            (ok, high, Some("only-known-tools.no-high-risk"))
        }
        "cap-output-size.cedar" => {
            let mut big = Call::copy("data/notes.txt", "results/notes.txt");
            big.max_file_bytes = 4 << 20;
            (ok, big, Some("cap-output-size.at-most-1mib"))
        }
        "pin-input-hash.cedar" => {
            let real = std::fs::read(examples().join("data/sample.csv")).unwrap();
            let mut pinned = Call::copy("data/sample.csv", "results/sample.json");
            pinned.reads[0].1 = real.clone();
            let mut changed = Call::copy("data/sample.csv", "results/sample.json");
            changed.reads[0].1 = [real.as_slice(), b"mallory,Perl,1\n"].concat();
            (pinned, changed, Some("pin-input-hash.sample-csv"))
        }
        other => panic!("examples/policy/{other} has no test case: add one to tests/examples.rs"),
    }
}

#[test]
fn each_example_permits_and_denies() {
    let files = policy_files();
    assert!(files.len() >= 3, "{files:?}");
    for (name, text) in &files {
        let set =
            PolicySet::load(&[(name.clone(), text.clone())], &[copy_tool()]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (ok, denied, by) = cases(name);
        let v = ok.authorize(&set, &copy_tool()).unwrap();
        assert!(v.allowed && v.errors.is_empty(), "{name}: {v:?}");
        let v = denied.authorize(&set, &copy_tool()).unwrap();
        assert!(!v.allowed, "{name}: {v:?}");
        assert_eq!(v.policy_ids, by.into_iter().collect::<Vec<_>>(), "{name}");
    }
    // The second forbid of cap-output-size.
    let (name, text) = files.iter().find(|(n, _)| n == "cap-output-size.cedar").unwrap();
    let set = PolicySet::load(&[(name.clone(), text.clone())], &[copy_tool()]).unwrap();
    let v = Call::copy("data/notes.txt", "results/report.json").authorize(&set, &copy_tool()).unwrap();
    assert_eq!((v.allowed, v.policy_ids), (false, vec!["cap-output-size.not-the-report".to_owned()]));
}

/// All the examples together validate against the example manifests (and
/// their ids do not clash).
#[test]
fn examples_validate_against_the_example_tools() {
    let mut tools: Vec<ToolSpec> = std::fs::read_dir(examples().join("tools"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".clad.toml"))
        .map(|p| {
            let m = Manifest::parse(&std::fs::read_to_string(&p).unwrap(), &p.to_string_lossy()).unwrap();
            ToolSpec::from_manifest(&m)
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(tools.iter().any(|t| t.name == "wordcount"), "{tools:?}");
    let set = PolicySet::load(&policy_files(), &tools).unwrap();
    assert_eq!(set.policy_ids().len(), 9);

    let only = policy_files().into_iter().filter(|(n, _)| n == "only-known-tools.cedar").collect::<Vec<_>>();
    let set = PolicySet::load(&only, &tools).unwrap();
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let mut call = Call::copy("data/notes.txt", "results/n.json");
    call.tool = "wordcount".into();
    assert!(call.authorize(&set, &tool("wordcount")).unwrap().allowed);
    call.tool = "misbehave".into();
    call.risk_tier = "medium".into();
    let v = call.authorize(&set, &tool("misbehave")).unwrap();
    assert!(!v.allowed && v.policy_ids.is_empty(), "not on the list: {v:?}");
}
