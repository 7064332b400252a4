//! The Cedar model of a set of tools: which action and resource each tool
//! is, the per-action context type, and the schema text Cedar parses.
//!
//! One description ([`Ty`]) drives both the schema text and the conversion
//! of a descriptor into a context, so the two cannot drift apart.

use crate::{ArgKind, ToolSpec};
use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::str::FromStr;

/// Airlock's own namespace.
pub(crate) const NAMESPACE: &str = "Airlock";
/// The principal type.
pub(crate) const AGENT: &str = "Airlock::Agent";
/// The default resource type.
pub(crate) const TOOL: &str = "Airlock::Tool";
/// The default action type.
const ACTION: &str = "Airlock::Action";

/// Names declared in the `Airlock` namespace (entity and common types).
const AIRLOCK_NAMES: &[&str] = &[
    "Agent",
    "Tool",
    "Read",
    "DirIdentity",
    "SourceRange",
    "SourceLimits",
    "Source",
    "Snapshot",
    "BrokerRoot",
    "BrokerBudgets",
    "Broker",
    "Filesystem",
    "CommandBoundary",
];
/// Names a resource type may not take, because the schema's own type
/// expressions would read them as built-in types.
const BUILTIN_NAMES: &[&str] = &["String", "Long", "Bool", "Boolean", "Set", "Record", "Entity", "Extension"];

/// A Cedar type, as declared in the schema and as read from the descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `String`.
    Str,
    /// `Long`.
    Long,
    /// `Bool`.
    Bool,
    /// `Set<T>`.
    Set(Box<Ty>),
    /// A record.
    Record(Vec<Field>),
    /// A common type of the `Airlock` namespace, printed by name.
    Named(&'static str, Box<Ty>),
    /// A tool argument: the descriptor holds every argument as a string.
    Arg(ArgKind),
}

/// One attribute of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) ty: Ty,
    pub(crate) optional: bool,
}

fn req(name: &str, ty: Ty) -> Field {
    Field { name: name.to_owned(), ty, optional: false }
}

fn opt(name: &str, ty: Ty) -> Field {
    Field { name: name.to_owned(), ty, optional: true }
}

fn set(ty: Ty) -> Ty {
    Ty::Set(Box::new(ty))
}

fn read_ty() -> Ty {
    Ty::Record(vec![req("path", Ty::Str), req("bytes", Ty::Long), req("sha256", Ty::Str)])
}

fn dir_identity_ty() -> Ty {
    Ty::Record(vec![req("dev", Ty::Str), req("ino", Ty::Str)])
}

fn source_range_ty() -> Ty {
    Ty::Record(vec![req("path", Ty::Str), req("offset", Ty::Long), req("bytes", Ty::Long), req("sha256", Ty::Str)])
}

fn source_limits_ty() -> Ty {
    let names = [
        "read_bytes",
        "max_offset",
        "max_file_bytes",
        "max_total_bytes",
        "max_matches",
        "max_excerpt_bytes",
        "max_entries",
        "max_files",
        "max_depth",
        "max_path_bytes",
    ];
    Ty::Record(names.iter().map(|n| req(n, Ty::Long)).collect())
}

/// `command_boundary.filesystem.source`: the evidence of a source query
/// (absent for command tools).
fn source_ty() -> Ty {
    Ty::Record(vec![
        req("broker", Ty::Str),
        req("broker_sha256", Ty::Str),
        req("operation", Ty::Str),
        req("path", Ty::Str),
        req("limits", Ty::Named("SourceLimits", Box::new(source_limits_ty()))),
        req("ranges", set(Ty::Named("SourceRange", Box::new(source_range_ty())))),
        req("result_sha256", Ty::Str),
        req("partial", Ty::Bool),
    ])
}

/// `command_boundary.filesystem.snapshot`: what a Git query's repository
/// snapshot holds (absent for other calls).
fn snapshot_ty() -> Ty {
    Ty::Record(vec![
        req("kind", Ty::Str),
        req("files", Ty::Long),
        req("stat_only", Ty::Long),
        req("bytes", Ty::Long),
        req("archive_bytes", Ty::Long),
        req("sha256", Ty::Str),
        req("linked_files", Ty::Long),
        req("skipped", Ty::Long),
    ])
}

fn broker_root_ty() -> Ty {
    Ty::Record(["name", "path", "rights", "dev", "ino"].iter().map(|n| req(n, Ty::Str)).collect())
}

fn broker_budgets_ty() -> Ty {
    Ty::Record(
        ["calls", "outstanding", "read_bytes", "write_bytes", "entries"].iter().map(|n| req(n, Ty::Long)).collect(),
    )
}

/// `command_boundary.filesystem.broker`: an isolated submission's named
/// roots, budgets and helper digests (absent for other calls).
fn broker_ty() -> Ty {
    Ty::Record(vec![
        req("roots", set(Ty::Named("BrokerRoot", Box::new(broker_root_ty())))),
        req("read_roots", set(Ty::Str)),
        req("write_roots", set(Ty::Str)),
        req("list_roots", set(Ty::Str)),
        req("budgets", Ty::Named("BrokerBudgets", Box::new(broker_budgets_ty()))),
        req("broker_sha256", Ty::Str),
        req("client_sha256", Ty::Str),
    ])
}

fn filesystem_ty() -> Ty {
    Ty::Record(vec![
        req("reads", set(Ty::Named("Read", Box::new(read_ty())))),
        req("create", set(Ty::Str)),
        req("max_file_bytes", Ty::Long),
        req("input_snapshots", Ty::Bool),
        req("overwrite", Ty::Bool),
        opt("output_parent", Ty::Named("DirIdentity", Box::new(dir_identity_ty()))),
        opt("create_dirs", set(Ty::Str)),
        req("read_paths", set(Ty::Str)),
        req("read_sha256", set(Ty::Str)),
        req("create_paths", set(Ty::Str)),
        opt("source", Ty::Named("Source", Box::new(source_ty()))),
        opt("snapshot", Ty::Named("Snapshot", Box::new(snapshot_ty()))),
        opt("broker", Ty::Named("Broker", Box::new(broker_ty()))),
    ])
}

fn command_boundary_ty() -> Ty {
    Ty::Record(vec![req("filesystem", Ty::Named("Filesystem", Box::new(filesystem_ty())))])
}

/// The common types of the `Airlock` namespace, in declaration order.
fn common_types() -> Vec<(&'static str, Ty)> {
    vec![
        ("Read", read_ty()),
        ("DirIdentity", dir_identity_ty()),
        ("SourceRange", source_range_ty()),
        ("SourceLimits", source_limits_ty()),
        ("Source", source_ty()),
        ("Snapshot", snapshot_ty()),
        ("BrokerRoot", broker_root_ty()),
        ("BrokerBudgets", broker_budgets_ty()),
        ("Broker", broker_ty()),
        ("Filesystem", filesystem_ty()),
        ("CommandBoundary", command_boundary_ty()),
    ]
}

/// `context.invocation.resolved` of an action whose tools declare `args`.
pub(crate) fn resolved_ty(args: &BTreeMap<String, ArgKind>) -> Ty {
    let args = Ty::Record(args.iter().map(|(name, kind)| opt(name, Ty::Arg(*kind))).collect());
    Ty::Record(vec![
        req("version", Ty::Long),
        req("tool", Ty::Str),
        req("tool_version", Ty::Str),
        req("manifest_sha256", Ty::Str),
        req("args", args),
        req("argv", set(Ty::Str)),
        req("transport", Ty::Str),
        req("risk_tier", Ty::Str),
        req("human_approval", Ty::Bool),
        req("working_dir", Ty::Str),
        req("tier", Ty::Str),
        req("command_boundary", Ty::Named("CommandBoundary", Box::new(command_boundary_ty()))),
    ])
}

/// The context of an action whose resolved call has type `resolved`.
fn context_ty(resolved: Ty) -> Ty {
    Ty::Record(vec![req(
        "invocation",
        Ty::Record(vec![req("id", Ty::Str), req("approved", Ty::Bool), req("resolved", resolved)]),
    )])
}

/// How one tool appears to Cedar.
#[derive(Debug, Clone)]
pub(crate) struct ToolEntry {
    /// The spec it was built from.
    pub(crate) spec: ToolSpec,
    /// Its action.
    pub(crate) action: EntityUid,
    /// Its resource entity.
    pub(crate) resource: EntityUid,
    /// The key of its action in [`Model::actions`].
    pub(crate) action_key: String,
}

/// One declared action.
#[derive(Debug, Clone)]
pub(crate) struct ActionEntry {
    /// The action's uid.
    pub(crate) uid: EntityUid,
    /// Resource types it applies to (full names).
    pub(crate) resource_types: BTreeSet<String>,
    /// Arguments of every tool with this action; a name declared with
    /// different kinds by different tools is a `String`.
    pub(crate) args: BTreeMap<String, ArgKind>,
    /// Argument names whose kinds disagreed between tools.
    pub(crate) widened: BTreeSet<String>,
    /// Tools with this action.
    pub(crate) tools: Vec<String>,
    /// The type of `context.invocation.resolved`.
    pub(crate) resolved: Ty,
}

/// The Cedar model of a set of tools.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    /// By tool name.
    pub(crate) tools: BTreeMap<String, ToolEntry>,
    /// By the action uid's text.
    pub(crate) actions: BTreeMap<String, ActionEntry>,
    /// Resource types other than `Airlock::Tool` (full names).
    pub(crate) resource_types: BTreeSet<String>,
    /// What could not be modelled, one message per tool.
    pub(crate) problems: Vec<String>,
}

fn entity_type(name: &str) -> EntityTypeName {
    #[allow(clippy::expect_used)]
    EntityTypeName::from_str(name).expect("airlock's own type names are valid Cedar names")
}

/// `[tool.cedar] resource` (or its absence) as an entity.
fn resource_of(spec: &ToolSpec) -> Result<EntityUid, String> {
    let Some(text) = spec.resource.as_deref() else {
        return Ok(EntityUid::from_type_name_and_id(entity_type(TOOL), EntityId::new(&spec.name)));
    };
    let uid = if let Ok(uid) = EntityUid::from_str(text) {
        uid
    } else if let Ok(ty) = EntityTypeName::from_str(text) {
        EntityUid::from_type_name_and_id(ty, EntityId::new(&spec.name))
    } else {
        return Err(format!(
            "[tool.cedar] resource {text:?} is neither a Cedar entity type (like PenTest::ScanTarget) nor an entity \
             reference (like PenTest::ScanTarget::\"x\")"
        ));
    };
    let ty = uid.type_name();
    let full = ty.to_string();
    if ty.basename() == "Action" {
        return Err(format!("[tool.cedar] resource {text:?}: a resource cannot be an action type"));
    }
    if ty.namespace() == NAMESPACE && full != TOOL {
        return Err(format!(
            "[tool.cedar] resource {text:?}: the only resource type in the Airlock namespace is {TOOL}"
        ));
    }
    if BUILTIN_NAMES.contains(&ty.basename()) {
        return Err(format!("[tool.cedar] resource {text:?}: {} is the name of a Cedar built-in type", ty.basename()));
    }
    Ok(uid)
}

/// `[tool.cedar] action` (or its absence) as an action uid.
fn action_of(spec: &ToolSpec) -> Result<EntityUid, String> {
    let id = match spec.action.as_deref() {
        None => format!("tool_call::{}", spec.name),
        Some(text) => {
            if let Ok(uid) = EntityUid::from_str(text) {
                if uid.type_name().basename() != "Action" {
                    return Err(format!(
                        "[tool.cedar] action {text:?} is an entity of type {}, not an action",
                        uid.type_name()
                    ));
                }
                return Ok(uid);
            }
            if text.is_empty() {
                return Err("[tool.cedar] action is empty".to_owned());
            }
            text.to_owned()
        }
    };
    Ok(EntityUid::from_type_name_and_id(entity_type(ACTION), EntityId::new(id)))
}

impl Model {
    /// Models `tools`; what cannot be modelled is left out and named in
    /// `problems`.
    pub(crate) fn build(tools: &[ToolSpec]) -> Model {
        let mut model = Model::default();
        for spec in tools {
            if model.tools.contains_key(&spec.name) {
                model.problems.push(format!("tool {}: declared twice", spec.name));
                continue;
            }
            let entry = match resource_of(spec).and_then(|r| Ok((r, action_of(spec)?))) {
                Ok((resource, action)) => {
                    ToolEntry { spec: spec.clone(), action_key: action.to_string(), action, resource }
                }
                Err(why) => {
                    model.problems.push(format!("tool {}: {why}", spec.name));
                    continue;
                }
            };
            let rtype = entry.resource.type_name().to_string();
            if rtype != TOOL {
                model.resource_types.insert(rtype.clone());
            }
            let action = model.actions.entry(entry.action_key.clone()).or_insert_with(|| ActionEntry {
                uid: entry.action.clone(),
                resource_types: BTreeSet::new(),
                args: BTreeMap::new(),
                widened: BTreeSet::new(),
                tools: Vec::new(),
                resolved: Ty::Str,
            });
            action.resource_types.insert(rtype);
            action.tools.push(spec.name.clone());
            for (name, kind) in &spec.args {
                match action.args.get(name) {
                    Some(k) if k != kind => {
                        action.args.insert(name.clone(), ArgKind::String);
                        action.widened.insert(name.clone());
                    }
                    Some(_) => {}
                    None => {
                        action.args.insert(name.clone(), *kind);
                    }
                }
            }
            model.tools.insert(spec.name.clone(), entry);
        }
        model.check_names();
        for action in model.actions.values_mut() {
            action.resolved = resolved_ty(&action.args);
        }
        model
    }

    /// An unqualified resource type is read, inside the namespace of an
    /// action that names it, as that namespace's type of the same name
    /// when there is one. Refuse those ambiguities rather than let the
    /// schema mean something else.
    fn check_names(&mut self) {
        let mut declared: BTreeSet<String> = AIRLOCK_NAMES.iter().map(|n| format!("{NAMESPACE}::{n}")).collect();
        declared.extend(self.resource_types.iter().cloned());
        let mut bad: BTreeMap<String, String> = BTreeMap::new();
        for action in self.actions.values() {
            let ns = action.uid.type_name().namespace();
            if ns.is_empty() {
                continue;
            }
            for rtype in &action.resource_types {
                if rtype.contains("::") {
                    continue;
                }
                let shadow = format!("{ns}::{rtype}");
                if declared.contains(&shadow) {
                    for tool in &action.tools {
                        let ty = self.tools[tool].resource.type_name().to_string();
                        if &ty == rtype {
                            bad.insert(
                                tool.clone(),
                                format!(
                                    "[tool.cedar] resource {rtype} is ambiguous beside {shadow}; give it a namespace \
                                     (like Tools::{rtype})"
                                ),
                            );
                        }
                    }
                }
            }
        }
        if bad.is_empty() {
            return;
        }
        for (tool, why) in &bad {
            self.problems.push(format!("tool {tool}: {why}"));
        }
        let kept: Vec<ToolSpec> =
            self.tools.values().filter(|t| !bad.contains_key(&t.spec.name)).map(|t| t.spec.clone()).collect();
        let problems = std::mem::take(&mut self.problems);
        *self = Model::build(&kept);
        self.problems.splice(0..0, problems);
    }

    /// The schema in Cedar's human-readable schema syntax.
    pub(crate) fn schema_text(&self) -> String {
        let mut out = String::new();
        out.push_str("// The Cedar schema airlock validates policies and requests against, generated from the tool\n");
        out.push_str(
            "// manifests. A tool's call is `action` on `resource` by an `Airlock::Agent`; the context is the\n",
        );
        out.push_str("// call's descriptor at context.invocation.resolved (DESIGN.md §6, \"Descriptor layout\").\n");
        for problem in &self.problems {
            let _ = writeln!(out, "// left out: {problem}");
        }
        // Declarations by namespace ("" is the empty namespace).
        let mut spaces: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut airlock = vec![
            "// The caller (an agent's id).".to_owned(),
            "entity Agent;".to_owned(),
            "// A tool without a [tool.cedar] resource: Airlock::Tool::\"NAME\".".to_owned(),
            format!("entity Tool {};", print_ty(&tool_attrs_ty(), 0)),
        ];
        for (name, ty) in common_types() {
            airlock.push(format!("type {name} = {};", print_ty(&ty, 0)));
        }
        spaces.insert(NAMESPACE.to_owned(), airlock);
        for rtype in &self.resource_types {
            let ty = entity_type(rtype);
            let mut tools: Vec<&str> =
                self.tools.values().filter(|t| t.resource.type_name() == &ty).map(|t| t.spec.name.as_str()).collect();
            tools.sort_unstable();
            spaces.entry(ty.namespace()).or_default().extend([
                format!("// [tool.cedar] resource of {}", tools.join(", ")),
                format!("entity {} {};", ident(ty.basename()), print_ty(&tool_attrs_ty(), 0)),
            ]);
        }
        for action in self.actions.values() {
            let ns = action.uid.type_name().namespace();
            let resources: Vec<&str> = action.resource_types.iter().map(String::as_str).collect();
            let mut decl = Vec::new();
            decl.push(format!("// tools: {}", action.tools.join(", ")));
            if !action.widened.is_empty() {
                let names: Vec<&str> = action.widened.iter().map(String::as_str).collect();
                decl.push(format!("// arguments typed String because the tools disagree: {}", names.join(", ")));
            }
            decl.push(format!(
                "action {} appliesTo {{\n  principal: [{AGENT}],\n  resource: [{}],\n  context: {}\n}};",
                cedar_string(action.uid.id().unescaped()),
                resources.join(", "),
                print_ty(&context_ty(action.resolved.clone()), 1)
            ));
            spaces.entry(ns).or_default().extend(decl);
        }
        let mut order: Vec<&String> = spaces.keys().collect();
        order.sort_by_key(|ns| (ns.as_str() != NAMESPACE, ns.is_empty(), ns.as_str()));
        for ns in order {
            let decls = &spaces[ns];
            out.push('\n');
            if ns.is_empty() {
                for d in decls {
                    out.push_str(d);
                    out.push('\n');
                }
            } else {
                let _ = writeln!(out, "namespace {ns} {{");
                for d in decls {
                    for line in d.lines() {
                        let _ = writeln!(out, "  {line}");
                    }
                }
                out.push_str("}\n");
            }
        }
        out
    }
}

/// Attributes of every resource entity.
pub(crate) fn tool_attrs_ty() -> Ty {
    Ty::Record(vec![req("name", Ty::Str), req("risk_tier", Ty::Str), req("human_approval", Ty::Bool)])
}

/// Words the schema grammar reserves, which an attribute name must quote.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "if",
    "then",
    "else",
    "in",
    "is",
    "like",
    "has",
    "namespace",
    "entity",
    "action",
    "type",
    "appliesTo",
    "principal",
    "resource",
    "context",
    "tags",
    "enum",
    "__cedar",
];

fn is_ident(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !RESERVED.contains(&s)
}

/// An attribute name, quoted when it is not a plain identifier.
fn ident(s: &str) -> String {
    if is_ident(s) {
        s.to_owned()
    } else {
        cedar_string(s)
    }
}

/// A Cedar string literal.
pub(crate) fn cedar_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A type expression; records span lines, indented `depth` levels.
fn print_ty(ty: &Ty, depth: usize) -> String {
    match ty {
        Ty::Str | Ty::Arg(ArgKind::String) => "String".to_owned(),
        Ty::Long | Ty::Arg(ArgKind::Long) => "Long".to_owned(),
        Ty::Bool | Ty::Arg(ArgKind::Bool) => "Bool".to_owned(),
        Ty::Set(inner) => format!("Set<{}>", print_ty(inner, depth)),
        Ty::Named(name, _) => format!("{NAMESPACE}::{name}"),
        Ty::Record(fields) if fields.is_empty() => "{}".to_owned(),
        Ty::Record(fields) => {
            let pad = "  ".repeat(depth);
            let mut out = String::from("{\n");
            for (i, f) in fields.iter().enumerate() {
                let comma = if i + 1 < fields.len() { "," } else { "" };
                let q = if f.optional { "?" } else { "" };
                let _ = writeln!(out, "{pad}  {}{q}: {}{comma}", ident(&f.name), print_ty(&f.ty, depth + 1));
            }
            out.push_str(&pad);
            out.push('}');
            out
        }
    }
}
