//! Real Cedar evaluation of descriptors: every key a policy may be written
//! on, the built-in default, load errors, and policy-set sizes.

mod common;

use airlock_core::descriptor::sha256_tagged;
use airlock_policy::{
    schema_text, ArgKind, PolicyError, PolicySet, Request, ToolSpec, DEFAULT_FORBID_LINKED_ID,
    DEFAULT_PERMIT_APPROVED_ID, DEFAULT_PERMIT_ID,
};
use common::*;

fn allowed(set: &PolicySet, call: &Call, tool: &ToolSpec) -> bool {
    let v = call.authorize(set, tool).unwrap();
    assert!(v.errors.is_empty(), "{v:?}");
    v.allowed
}

#[test]
fn schema_text_is_valid_cedar_and_names_every_attribute() {
    let text = schema_text(&[copy_tool(), convert_tool()]);
    let (schema, _) = cedar_policy::Schema::from_cedarschema_str(&text).unwrap();
    assert_eq!(schema.actions().count(), 2, "{text}");
    for needle in [
        "namespace Airlock {",
        "entity Agent;",
        "action \"tool_call::copy\" appliesTo",
        "input?: String",
        "level?: Long",
        "verbose?: Bool",
        "output_parent?: Airlock::DirIdentity",
        "reads: Set<Airlock::Read>",
        "read_sha256: Set<String>",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from\n{text}");
    }
}

#[test]
fn forbid_on_read_path() {
    let policy =
        format!("{PERMIT_ALL}@id(\"no-private\")\nforbid(principal, action, resource) when {{ {FS}.read_paths.contains(\"data/private.txt\") }};");
    let set = load(&policy, &[copy_tool()]).unwrap();
    assert!(allowed(&set, &Call::copy("data/public.txt", "results/a"), &copy_tool()));
    let v = Call::copy("data/private.txt", "results/a").authorize(&set, &copy_tool()).unwrap();
    assert!(!v.allowed);
    assert_eq!(v.policy_ids, ["no-private"]);
}

#[test]
fn permit_and_forbid_on_read_sha256() {
    let good = sha256_tagged(b"hello\n");
    let permit = format!(
        "@id(\"known-input\")\npermit(principal, action, resource) when {{ {FS}.read_sha256.contains(\"{good}\") }};"
    );
    let set = load(&permit, &[copy_tool()]).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    let v = call.authorize(&set, &copy_tool()).unwrap();
    assert!(v.allowed);
    assert_eq!(v.policy_ids, ["known-input"]);
    call.reads[0].1 = b"tampered\n".to_vec();
    let v = call.authorize(&set, &copy_tool()).unwrap();
    assert!(!v.allowed);
    assert!(v.policy_ids.is_empty(), "default deny has no reasons: {v:?}");

    let bad = sha256_tagged(b"tampered\n");
    let forbid =
        format!("{PERMIT_ALL}forbid(principal, action, resource) when {{ {FS}.read_sha256.contains(\"{bad}\") }};");
    let set = load(&forbid, &[copy_tool()]).unwrap();
    let v = call.authorize(&set, &copy_tool()).unwrap();
    assert!(!v.allowed);
    assert_eq!(v.policy_ids, ["test.cedar#policy1"], "unannotated ids are FILE#policyN");
    assert!(allowed(&set, &Call::copy("data/in.txt", "results/a"), &copy_tool()));
}

#[test]
fn forbid_on_max_file_bytes() {
    let policy = format!("{PERMIT_ALL}forbid(principal, action, resource) when {{ {FS}.max_file_bytes > 1048576 }};");
    let set = load(&policy, &[copy_tool()]).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    call.max_file_bytes = 1 << 20;
    assert!(allowed(&set, &call, &copy_tool()));
    call.max_file_bytes = (1 << 20) + 1;
    assert!(!allowed(&set, &call, &copy_tool()));
}

/// The documented per-read idiom: a known input is pinned by its whole
/// record (path, size and hash), since Cedar cannot reach into one element
/// of a set of records.
#[test]
fn per_read_size_by_pinning_a_known_path() {
    let content = b"a,b\n1,2\n";
    let policy = format!(
        "{PERMIT_ALL}@id(\"pin-ref\")\nforbid(principal, action, resource) when {{\n  {FS}.read_paths.contains(\"data/ref.csv\") &&\n  !{FS}.reads.contains({{path: \"data/ref.csv\", bytes: {}, sha256: \"{}\"}})\n}};",
        content.len(),
        sha256_tagged(content)
    );
    let set = load(&policy, &[copy_tool()]).unwrap();
    let mut call = Call::copy("data/ref.csv", "results/a");
    call.reads[0].1 = content.to_vec();
    assert!(allowed(&set, &call, &copy_tool()), "the pinned record");
    call.reads[0].1 = b"a,b\n1,2\n3,4\n".to_vec();
    assert!(!allowed(&set, &call, &copy_tool()), "another size");
    assert!(allowed(&set, &Call::copy("data/other.csv", "results/a"), &copy_tool()), "other paths are not pinned");
}

#[test]
fn forbid_on_output_path() {
    let policy = format!(
        "{PERMIT_ALL}forbid(principal, action, resource) when {{ {FS}.create_paths.contains(\"results/keep.json\") }};"
    );
    let set = load(&policy, &[copy_tool()]).unwrap();
    assert!(allowed(&set, &Call::copy("data/in.txt", "results/new.json"), &copy_tool()));
    assert!(!allowed(&set, &Call::copy("data/in.txt", "results/keep.json"), &copy_tool()));
}

#[test]
fn permit_on_output_parent() {
    let policy = format!(
        "permit(principal, action, resource) when {{ {FS} has output_parent && {FS}.output_parent.ino == \"131\" && {FS}.output_parent.dev == \"2049\" }};"
    );
    let set = load(&policy, &[copy_tool()]).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    assert!(allowed(&set, &call, &copy_tool()));
    call.parent = Some((2049, 132));
    assert!(!allowed(&set, &call, &copy_tool()));
    call.parent = None; // JSON null: the attribute is absent
    call.create = None;
    call.args.remove("output");
    assert!(!allowed(&set, &call, &copy_tool()));
}

#[test]
fn permit_and_forbid_on_tool() {
    let tools = [copy_tool(), convert_tool()];
    let policy =
        "@id(\"only-copy\")\npermit(principal, action, resource) when { resource == Airlock::Tool::\"copy\" };\n\
                  @id(\"no-high\")\nforbid(principal, action, resource) when { resource.risk_tier == \"high\" };\n";
    let set = load(policy, &tools).unwrap();
    assert_eq!(set.policy_ids(), ["only-copy", "no-high"]);
    let copy = Call::copy("data/in.txt", "results/a");
    let v = copy.authorize(&set, &tools[0]).unwrap();
    assert!(v.allowed);
    assert_eq!(v.policy_ids, ["only-copy"]);
    let mut convert = Call::copy("data/in.txt", "results/a");
    convert.tool = "convert".into();
    assert!(!allowed(&set, &convert, &tools[1]));
    let mut high = copy;
    high.risk_tier = "high".into();
    let v = high.authorize(&set, &tools[0]).unwrap();
    assert!(!v.allowed);
    assert_eq!(v.policy_ids, ["no-high"]);

    // The action names the tool too.
    let set = load("permit(principal, action == Airlock::Action::\"tool_call::convert\", resource);", &tools).unwrap();
    assert!(allowed(&set, &convert, &tools[1]));
    assert!(!allowed(&set, &Call::copy("data/in.txt", "results/a"), &tools[0]));
}

#[test]
fn permit_and_forbid_on_arguments() {
    let tool = convert_tool();
    let args = "context.invocation.resolved.args";
    let policy = format!(
        "@id(\"fast\")\npermit(principal, action, resource) when {{ {args} has mode && {args}.mode == \"fast\" }};\n\
         @id(\"level\")\nforbid(principal, action, resource) when {{ {args} has level && {args}.level > 5 }};\n\
         @id(\"quiet\")\nforbid(principal, action, resource) when {{ {args} has verbose && {args}.verbose }};\n"
    );
    let set = load(&policy, std::slice::from_ref(&tool)).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    call.tool = "convert".into();
    assert!(!allowed(&set, &call, &tool), "no mode: nothing permits");
    call.args.insert("mode".into(), "fast".into());
    assert!(allowed(&set, &call, &tool));
    call.args.insert("level".into(), "5".into());
    call.args.insert("verbose".into(), "false".into());
    assert!(allowed(&set, &call, &tool), "level is a Long, verbose a Bool");
    call.args.insert("level".into(), "6".into());
    assert_eq!(call.authorize(&set, &tool).unwrap().policy_ids, ["level"]);
    call.args.insert("level".into(), "1".into());
    call.args.insert("verbose".into(), "true".into());
    assert_eq!(call.authorize(&set, &tool).unwrap().policy_ids, ["quiet"]);
    call.args.insert("mode".into(), "slow".into());
    call.args.insert("verbose".into(), "false".into());
    assert!(!allowed(&set, &call, &tool));

    // A value that is not of the argument's kind cannot be evaluated.
    call.args.insert("level".into(), "five".into());
    let e = call.authorize(&set, &tool).unwrap_err();
    assert_eq!(e.code(), PolicyError::EVAL);
    assert!(e.message().contains("descriptor.args.level"), "{e}");
}

#[test]
fn principal_and_invocation_id_are_visible() {
    let set = load(
        "permit(principal == Airlock::Agent::\"agent-1\", action, resource) when { context.invocation.id == \"inv-1\" };",
        &[copy_tool()],
    )
    .unwrap();
    assert!(allowed(&set, &Call::copy("data/in.txt", "results/a"), &copy_tool()));
}

#[test]
fn default_permits_low_and_medium_only() {
    let set = PolicySet::builtin(&[copy_tool()]).unwrap();
    assert_eq!(set.policy_ids(), [DEFAULT_PERMIT_ID, DEFAULT_PERMIT_APPROVED_ID, DEFAULT_FORBID_LINKED_ID]);
    assert!(PolicySet::default_policies().contains(DEFAULT_PERMIT_ID));
    for (tier, approval, expect) in [
        ("low", false, true),
        ("medium", false, true),
        ("high", false, false),
        ("critical", false, false),
        ("low", true, false),
        ("medium", true, false),
    ] {
        let mut call = Call::copy("data/in.txt", "results/a");
        call.risk_tier = tier.into();
        call.human_approval = approval;
        let v = call.authorize(&set, &copy_tool()).unwrap();
        assert_eq!(v.allowed, expect, "{tier} approval={approval}: {v:?}");
        let ids: &[&str] = if expect { &[DEFAULT_PERMIT_ID] } else { &[] };
        assert_eq!(v.policy_ids, ids);
        // Approved, every tier is permitted (by the approval's own permit).
        let json = call.json();
        let approved = set
            .authorize(&airlock_policy::Request {
                principal: "agent-1",
                tool: &copy_tool(),
                risk_tier: tier,
                human_approval: approval,
                descriptor: &json,
                invocation_id: "inv-1",
                approved: true,
            })
            .unwrap();
        assert!(approved.allowed, "{tier} approved: {approved:?}");
        assert!(approved.policy_ids.contains(&DEFAULT_PERMIT_APPROVED_ID.to_owned()), "{approved:?}");
    }
}

/// A Git query's descriptor: `call` with a snapshot that found `linked` hard-linked files.
fn with_snapshot(call: &Call, linked: u64) -> serde_json::Value {
    let mut json = call.json();
    json["command_boundary"]["filesystem"]["snapshot"] = serde_json::json!({
        "kind": "git", "files": 3, "stat_only": 1, "bytes": 10, "archive_bytes": 100,
        "sha256": sha256_tagged(b"archive"), "linked_files": linked, "skipped": linked,
    });
    json
}

#[test]
fn default_forbids_a_snapshot_that_found_hard_links() {
    let set = PolicySet::builtin(&[copy_tool()]).unwrap();
    let call = Call::copy("data/in.txt", "results/a");
    for (linked, expect) in [(0, true), (1, false), (40, false)] {
        let descriptor = with_snapshot(&call, linked);
        let v = set
            .authorize(&Request {
                principal: "agent-1",
                tool: &copy_tool(),
                risk_tier: "low",
                human_approval: false,
                descriptor: &descriptor,
                invocation_id: "inv-1",
                approved: false,
            })
            .unwrap();
        assert_eq!(v.allowed, expect, "linked_files={linked}: {v:?}");
        let ids: &[&str] = if expect { &[DEFAULT_PERMIT_ID] } else { &[DEFAULT_FORBID_LINKED_ID] };
        assert_eq!(v.policy_ids, ids);
    }
}

#[test]
fn default_loads_with_no_tools_and_with_namespaced_tools() {
    PolicySet::builtin(&[]).unwrap();
    let nmap = ToolSpec {
        name: "nmap_scan".into(),
        action: Some("execute_tool".into()),
        resource: Some("Tool::NmapScan".into()),
        args: vec![("scan_type".into(), ArgKind::String)],
    };
    let set = PolicySet::builtin(&[nmap.clone(), copy_tool()]).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    call.tool = "nmap_scan".into();
    call.risk_tier = "medium".into();
    call.args = [("scan_type".to_owned(), "ping".to_owned())].into();
    assert!(allowed(&set, &call, &nmap));
}

#[test]
fn tool_cedar_resource_and_shared_action() {
    let scan = |name: &str, args: Vec<(String, ArgKind)>| ToolSpec {
        name: name.into(),
        action: Some("execute_tool".into()),
        resource: Some("PenTest::ScanTarget".into()),
        args,
    };
    let nmap = scan("nmap_scan", vec![("port".into(), ArgKind::Long), ("target".into(), ArgKind::String)]);
    let ping = scan("ping", vec![("port".into(), ArgKind::String), ("count".into(), ArgKind::Long)]);
    let explicit = ToolSpec {
        name: "whois".into(),
        action: Some("PenTest::Action::\"lookup\"".into()),
        resource: Some("PenTest::Registry::\"iana\"".into()),
        args: vec![],
    };
    let tools = [nmap.clone(), ping.clone(), explicit.clone(), copy_tool()];
    let text = schema_text(&tools);
    assert!(text.contains("namespace PenTest {") && text.contains("entity ScanTarget"), "{text}");
    assert!(text.contains("arguments typed String because the tools disagree: port"), "{text}");
    let policy = "@id(\"scan\")\npermit(principal, action == Airlock::Action::\"execute_tool\", resource is PenTest::ScanTarget)\n\
                  when { resource == PenTest::ScanTarget::\"nmap_scan\" && context.invocation.resolved.args has port && context.invocation.resolved.args.port == \"443\" };\n\
                  @id(\"lookup\")\npermit(principal, action == PenTest::Action::\"lookup\", resource == PenTest::Registry::\"iana\");\n";
    let set = load(policy, &tools).unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    call.tool = "nmap_scan".into();
    call.args = [("port".to_owned(), "443".to_owned())].into();
    assert!(allowed(&set, &call, &nmap));
    call.tool = "ping".into();
    assert!(!allowed(&set, &call, &ping), "ping is PenTest::ScanTarget::\"ping\"");
    call.tool = "whois".into();
    call.args.clear();
    assert!(allowed(&set, &call, &explicit));
}

#[test]
fn unmodellable_tools_are_refused() {
    for (resource, action, why) in [
        (Some("not a type!"), None, "neither a Cedar entity type"),
        (Some("Airlock::Agent"), None, "the only resource type in the Airlock namespace"),
        (Some("Tool"), None, "ambiguous beside Airlock::Tool"),
        (Some("String"), None, "built-in type"),
        (None, Some("PenTest::Thing::\"x\""), "not an action"),
    ] {
        let tool = ToolSpec {
            name: "t".into(),
            action: action.map(Into::into),
            resource: resource.map(Into::into),
            args: vec![],
        };
        let e = PolicySet::builtin(std::slice::from_ref(&tool)).unwrap_err();
        assert_eq!(e.code(), PolicyError::INVALID);
        assert!(e.message().contains("tool t:") && e.message().contains(why), "{e}");
        assert!(schema_text(&[tool, copy_tool()]).contains("// left out: tool t:"));
    }
    let e = PolicySet::builtin(&[copy_tool(), copy_tool()]).unwrap_err();
    assert!(e.message().contains("declared twice"), "{e}");
    // An unqualified type that shadows nothing is fine.
    let tool = ToolSpec { name: "t".into(), action: None, resource: Some("Scanner".into()), args: vec![] };
    PolicySet::builtin(&[tool]).unwrap();
}

#[test]
fn odd_argument_names_are_quoted() {
    let tool = ToolSpec {
        name: "odd".into(),
        action: Some("run \"it\"".into()),
        resource: None,
        args: vec![("max-rate".into(), ArgKind::Long), ("in".into(), ArgKind::String)],
    };
    let text = schema_text(std::slice::from_ref(&tool));
    assert!(text.contains("\"max-rate\"?: Long") && text.contains("\"in\"?: String"), "{text}");
    let set = load(
        "permit(principal, action == Airlock::Action::\"run \\\"it\\\"\", resource) when { context.invocation.resolved.args has \"max-rate\" && context.invocation.resolved.args[\"max-rate\"] < 10 };",
        std::slice::from_ref(&tool),
    )
    .unwrap();
    let mut call = Call::copy("data/in.txt", "results/a");
    call.tool = "odd".into();
    call.args = [("max-rate".to_owned(), "9".to_owned()), ("in".to_owned(), "x".to_owned())].into();
    assert!(allowed(&set, &call, &tool));
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let text = "// first\n@id(\"ok\")\npermit(principal, action, resource);\n\npermit(principal, action, resource) when { context.x = };\n";
    let e =
        PolicySet::load(&[("a.cedar".into(), PERMIT_ALL.into()), ("bad.cedar".into(), text.into())], &[copy_tool()])
            .unwrap_err();
    assert_eq!(e.code(), PolicyError::INVALID);
    assert!(e.message().starts_with("bad.cedar:5:"), "{e}");
}

#[test]
fn attribute_not_in_schema_is_refused_at_load() {
    let text = format!("{PERMIT_ALL}\n@id(\"typo\")\nforbid(principal, action, resource)\nwhen {{ {FS}.read_path.contains(\"data/private.txt\") }};\n");
    let e =
        PolicySet::load(&[("a.cedar".into(), "// first file\n".repeat(9)), ("p.cedar".into(), text)], &[copy_tool()])
            .unwrap_err();
    assert_eq!(e.code(), PolicyError::INVALID);
    let m = e.message();
    assert!(m.starts_with("p.cedar:6:8:") && m.contains("policy typo") && m.contains("read_path"), "{m}");

    // A type error, and an argument the tool does not declare.
    for bad in [
        format!("permit(principal, action, resource) when {{ {FS}.max_file_bytes == \"8\" }};"),
        "permit(principal, action, resource) when { context.invocation.resolved.args.mode == \"fast\" };".to_owned(),
        "permit(principal, action, resource) when { resource.owner == \"me\" };".to_owned(),
        "permit(principal, action == Airlock::Action::\"tool_call::nope\", resource);".to_owned(),
        // Optional attributes need `has` first.
        "permit(principal, action, resource) when { context.invocation.resolved.args.input == \"x\" };".to_owned(),
        format!("permit(principal, action, resource) when {{ {FS}.output_parent.ino == \"1\" }};"),
    ] {
        let e = load(&bad, &[copy_tool()]).unwrap_err();
        assert!(e.message().starts_with("test.cedar:1:") && e.message().contains("policy test.cedar#policy0"), "{e}");
    }
}

#[test]
fn templates_empty_and_duplicate_ids_are_refused() {
    let e = load("permit(principal == ?principal, action, resource);", &[copy_tool()]).unwrap_err();
    assert!(e.message().contains("templates are not supported"), "{e}");
    let e = PolicySet::load(
        &[("a.cedar".into(), PERMIT_ALL.into()), ("b.cedar".into(), format!("\n\n{PERMIT_ALL}"))],
        &[copy_tool()],
    )
    .unwrap_err();
    assert!(e.message().starts_with("b.cedar:3:1: policy id \"permit-all\" is already used at a.cedar:1:1"), "{e}");
    let e = load("@id(\"\") permit(principal, action, resource);", &[copy_tool()]).unwrap_err();
    assert!(e.message().contains("@id is empty"), "{e}");
}

#[test]
fn no_policies_deny_everything() {
    let set = PolicySet::load(&[], &[copy_tool()]).unwrap();
    assert!(set.policy_ids().is_empty());
    assert!(!allowed(&set, &Call::copy("data/in.txt", "results/a"), &copy_tool()));
}

#[test]
fn one_and_a_hundred_policies() {
    let set = load(PERMIT_ALL, &[copy_tool()]).unwrap();
    assert!(allowed(&set, &Call::copy("data/in.txt", "results/a"), &copy_tool()));

    let mut text = String::from(PERMIT_ALL);
    for i in 0..99 {
        text.push_str(&format!(
            "@id(\"no-{i}\")\nforbid(principal, action, resource) when {{ {FS}.read_paths.contains(\"data/private-{i}.txt\") }};\n"
        ));
    }
    let set = load(&text, &[copy_tool()]).unwrap();
    assert_eq!(set.policy_ids().len(), 100);
    assert!(allowed(&set, &Call::copy("data/in.txt", "results/a"), &copy_tool()));
    for i in [0, 42, 98] {
        let v = Call::copy(&format!("data/private-{i}.txt"), "results/a").authorize(&set, &copy_tool()).unwrap();
        assert!(!v.allowed);
        assert_eq!(v.policy_ids, [format!("no-{i}")]);
    }
}

#[test]
fn an_evaluation_error_fails_closed() {
    let text = format!("{PERMIT_ALL}@id(\"overflow\")\nforbid(principal, action, resource) when {{ {FS}.max_file_bytes * 9223372036854775807 > 0 }};");
    let set = load(&text, &[copy_tool()]).unwrap();
    let v = Call::copy("data/in.txt", "results/a").authorize(&set, &copy_tool()).unwrap();
    assert!(!v.allowed, "{v:?}");
    assert_eq!(v.policy_ids, ["overflow"]);
    assert_eq!(v.errors.len(), 1);
    assert!(v.errors[0].contains("overflow"), "{v:?}");
}

#[test]
fn requests_that_do_not_fit_are_errors() {
    let set = PolicySet::builtin(&[copy_tool()]).unwrap();
    let call = Call::copy("data/in.txt", "results/a");
    let e = call.authorize(&set, &convert_tool()).unwrap_err();
    assert!(e.code() == PolicyError::EVAL && e.message().contains("not among the tools"), "{e}");
    let mut changed = copy_tool();
    changed.args.pop();
    let e = call.authorize(&set, &changed).unwrap_err();
    assert!(e.message().contains("differs"), "{e}");
    let mut other = Call::copy("data/in.txt", "results/a");
    other.tool = "convert".into();
    let e = other.authorize(&set, &copy_tool()).unwrap_err();
    assert!(e.message().contains("not a call of copy"), "{e}");

    let mut json = call.json();
    json["command_boundary"]["filesystem"].as_object_mut().unwrap().remove("read_paths");
    let r = airlock_policy::Request {
        principal: "a",
        tool: &copy_tool(),
        risk_tier: "low",
        human_approval: false,
        descriptor: &json,
        invocation_id: "i",
        approved: false,
    };
    let e = set.authorize(&r).unwrap_err();
    assert!(e.message().contains("descriptor.command_boundary.filesystem.read_paths: missing"), "{e}");
    let r = airlock_policy::Request { risk_tier: "high", ..r };
    assert!(set.authorize(&r).unwrap_err().message().contains("risk_tier"));

    // Descriptor keys the schema does not declare are not passed on.
    let mut json = call.json();
    json["future_field"] = serde_json::json!({"x": 1});
    json["args"]["undeclared"] = "v".into();
    let r = airlock_policy::Request { descriptor: &json, ..r };
    let r = airlock_policy::Request { risk_tier: "low", ..r };
    assert!(set.authorize(&r).unwrap().allowed);
}

#[test]
fn a_policy_set_can_be_shared_between_threads() {
    fn check<T: Send + Sync>() {}
    check::<PolicySet>();
}
