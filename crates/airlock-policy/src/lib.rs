//! Cedar policy for airlock (step 2 of the pipeline, DESIGN.md §1).
//!
//! A [`PolicySet`] is Cedar policy text validated against a schema built
//! from the tools ([`ToolSpec`], one per manifest); [`PolicySet::authorize`]
//! then answers one call, described by its descriptor.
//!
//! # The model
//!
//! * **Principal**: `Airlock::Agent::"ID"` (no attributes).
//! * **Resource**: the tool. Without `[tool.cedar] resource` it is
//!   `Airlock::Tool::"NAME"`. With one, an entity type such as
//!   `PenTest::ScanTarget` names the type and the tool's name is the id
//!   (`PenTest::ScanTarget::"nmap_scan"`); a full reference such as
//!   `PenTest::ScanTarget::"x"` is taken as written. Every resource type has
//!   the attributes `name: String`, `risk_tier: String`,
//!   `human_approval: Bool`.
//! * **Action**: `[tool.cedar] action` as the id of an `Airlock::Action`
//!   (or, written as `NS::Action::"id"`, that action), else
//!   `Airlock::Action::"tool_call::NAME"`.
//! * **Context**: `context.invocation.id` (the invocation id),
//!   `context.invocation.approved` (an approver approved this exact call) and
//!   `context.invocation.resolved`, the descriptor (DESIGN.md §3), typed per
//!   action: `args` holds each declared argument as an optional attribute
//!   typed by [`ArgKind`]; JSON `null` leaves an attribute out; `argv` and
//!   the `filesystem` lists are sets; `output_parent` is optional.
//!   [`schema_text`] prints the whole schema.
//!
//! Policies are validated in Cedar's strict mode, so a policy that names an
//! attribute the schema does not have (a misspelt path, say) is refused at
//! load instead of never matching. Every request is validated too.
//!
//! # Verdicts and the default policy
//!
//! A verdict allows only if Cedar allows **and** no policy errored: Cedar
//! skips a `forbid` whose evaluation errors, which must not turn into a
//! permit. Policy ids come from `@id`, else `FILE#policyN`. Without policy
//! files the runtime evaluates the built-in default natively
//! (`airlock.default.permit-low-medium`, and
//! `airlock.default.forbid-linked-files`: a Git snapshot with `linked_files >
//! 0`; `airlock policy show-default` prints its Cedar text): approved calls
//! pass the permit, and the forbid wins over everything. Building a policy
//! set for one tool takes 5–11 ms; a run builds it for its one tool, and a
//! long-lived server should cache it per tool. The crate pins cedar-policy
//! `~4.7`: later 4.x releases need a newer Rust than the workspace's.
//!
//! # Writing policies
//!
//! Anything no policy permits is denied, and any matching `forbid` wins.
//! Give each policy an id with `@id("…")`; decisions report those ids.
//!
//! ```cedar
//! @id("no-private-inputs")
//! forbid (principal, action, resource)
//! when { context.invocation.resolved.command_boundary.filesystem.read_paths.contains("data/private.txt") };
//! ```
//!
//! Cedar cannot quantify over a set of records, so the descriptor also
//! carries the flat sets `read_paths`, `read_sha256` and `create_paths`.
//! A read's size cannot be tested on its own: `reads` can only be asked
//! whether it holds an exact record, so the idiom for a known input is to
//! pin its path, size and hash together:
//!
//! ```cedar
//! @id("pin-reference-csv")
//! forbid (principal, action, resource)
//! when {
//!   context.invocation.resolved.command_boundary.filesystem.read_paths.contains("data/ref.csv") &&
//!   !context.invocation.resolved.command_boundary.filesystem.reads.contains(
//!     {path: "data/ref.csv", bytes: 1234, sha256: "sha256:…"})
//! };
//! ```
//!
//! A bound on the size of *any* input is not expressible in Cedar; it is
//! airlock's `[limits] max_input_bytes`. `max_file_bytes` (the output's
//! bound) is an ordinary `Long`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod context;
mod load;
mod schema;

use cedar_policy as cedar;
use schema::{Model, AGENT};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

/// The built-in default policy (Cedar text).
const DEFAULT_POLICIES: &str = include_str!("default.cedar");

/// File name under which the built-in default is loaded (it opens messages).
pub const DEFAULT_POLICY_FILE: &str = "<airlock-default>";

/// Id of the built-in default's permit of low and medium risk.
pub const DEFAULT_PERMIT_ID: &str = "airlock.default.permit-low-medium";

/// Id of the built-in default's permit of a call an approver approved
/// (`context.invocation.approved`).
pub const DEFAULT_PERMIT_APPROVED_ID: &str = "airlock.default.permit-approved";

/// Id of the built-in default's forbid: a Git snapshot that found files
/// with more than one hard link (`snapshot.linked_files > 0`).
pub const DEFAULT_FORBID_LINKED_ID: &str = "airlock.default.forbid-linked-files";

/// What policy needs to know about one tool: how it appears to Cedar and
/// the types of its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// `[tool] name`.
    pub name: String,
    /// `[tool.cedar] action`.
    pub action: Option<String>,
    /// `[tool.cedar] resource`.
    pub resource: Option<String>,
    /// The declared arguments (`[args.NAME]`) and their Cedar types.
    pub args: Vec<(String, ArgKind)>,
}

impl ToolSpec {
    /// The spec of a parsed manifest.
    pub fn from_manifest(manifest: &airlock_core::manifest::Manifest) -> ToolSpec {
        let cedar = manifest.tool.cedar.as_ref();
        ToolSpec {
            name: manifest.tool.name.clone(),
            action: cedar.map(|c| c.action.clone()),
            resource: cedar.map(|c| c.resource.clone()),
            args: manifest
                .args
                .iter()
                .map(|(name, def)| (name.clone(), ArgKind::from_type_name(&def.type_name)))
                .collect(),
        }
    }
}

/// How an argument's value appears to Cedar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArgKind {
    /// `String`: every type not listed below, including `number` (Cedar has
    /// no floating point).
    String,
    /// `Long`: `integer`, `port` and `duration` (in seconds).
    Long,
    /// `Bool`: `boolean`.
    Bool,
}

impl ArgKind {
    /// The kind of a ToolClad argument type name (`[args.NAME] type`).
    pub fn from_type_name(type_name: &str) -> ArgKind {
        match type_name {
            "integer" | "port" | "duration" => ArgKind::Long,
            "boolean" => ArgKind::Bool,
            _ => ArgKind::String,
        }
    }
}

/// Why policy could not be loaded or evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    code: &'static str,
    message: String,
}

impl PolicyError {
    /// `policy.invalid`: policy text that does not parse or validate, or
    /// tools that cannot be modelled. Messages name file, line and column.
    pub const INVALID: &'static str = "policy.invalid";
    /// `policy.eval`: a request that cannot be evaluated (unknown tool, a
    /// descriptor that does not fit the schema).
    pub const EVAL: &'static str = "policy.eval";

    fn invalid(message: String) -> PolicyError {
        PolicyError { code: Self::INVALID, message }
    }

    fn eval(message: String) -> PolicyError {
        PolicyError { code: Self::EVAL, message }
    }

    /// [`PolicyError::INVALID`] or [`PolicyError::EVAL`].
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// For people; one problem a line.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for PolicyError {}

/// One call to authorize.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The agent's id (`Airlock::Agent::"…"`).
    pub principal: &'a str,
    /// The tool, as given to [`PolicySet::load`].
    pub tool: &'a ToolSpec,
    /// The manifest's risk tier.
    pub risk_tier: &'a str,
    /// Whether the manifest asks for human approval.
    pub human_approval: bool,
    /// The descriptor, as `serde_json::to_value(&descriptor)`.
    pub descriptor: &'a Value,
    /// The invocation id (`context.invocation.id`).
    pub invocation_id: &'a str,
    /// Whether an approver's signed approval of this exact call was
    /// verified and consumed (`context.invocation.approved`), so operators
    /// can write "high risk needs a permit and an approval".
    pub approved: bool,
}

/// What policy decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the call may run: Cedar allowed it **and** no policy failed
    /// to evaluate (a failed `forbid` is skipped by Cedar, so airlock fails
    /// closed instead).
    pub allowed: bool,
    /// The determining policies, sorted: the permits that allowed it, the
    /// forbids that denied it, or, when Cedar allowed but a policy failed
    /// to evaluate, the failing policies. Empty for a denial because
    /// nothing permitted the call.
    pub policy_ids: Vec<String>,
    /// Evaluation errors, one a policy, for people.
    pub errors: Vec<String>,
}

/// Validated Cedar policies and the schema they were validated against.
///
/// The schema, the policies and the validator are built once, at load;
/// [`PolicySet::authorize`] builds only the request's context and its two
/// entities.
pub struct PolicySet {
    model: Model,
    schema: cedar::Schema,
    policies: cedar::PolicySet,
    ids: Vec<String>,
    authorizer: cedar::Authorizer,
    agent: cedar::EntityTypeName,
}

impl fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicySet")
            .field("policy_ids", &self.ids)
            .field("tools", &self.model.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The Cedar schema (human-readable schema syntax) for `tools`, as
/// [`PolicySet::load`] uses it. A tool that cannot be modelled is left out
/// with a comment saying why ([`PolicySet::load`] refuses it).
pub fn schema_text(tools: &[ToolSpec]) -> String {
    Model::build(tools).schema_text()
}

impl PolicySet {
    /// Parses and validates policies against the schema built from `tools`.
    ///
    /// `sources` are `(file name, text)`. A syntax or schema error is a
    /// [`PolicyError::INVALID`] naming the file, line and column (and the
    /// policy's id for a schema error); every error found is reported, one
    /// a line. Templates (`?principal`, `?resource`) are refused, as are
    /// two policies with one id. Validation is strict: a policy that can
    /// never apply (an action no tool has, a resource type its action does
    /// not take) is an error too. With no tools the policies are parsed but
    /// not validated (there is nothing to validate them against, and no
    /// call to authorize).
    pub fn load(sources: &[(String, String)], tools: &[ToolSpec]) -> Result<PolicySet, PolicyError> {
        let model = Model::build(tools);
        if !model.problems.is_empty() {
            return Err(PolicyError::invalid(model.problems.join("\n")));
        }
        let text = model.schema_text();
        let schema = match cedar::Schema::from_cedarschema_str(&text) {
            Ok((schema, _warnings)) => schema,
            Err(e) => {
                return Err(PolicyError::invalid(format!("the schema built from the tools is not valid Cedar: {e}")))
            }
        };
        let parsed = load::parse(sources)?;
        let validator = cedar::Validator::new(schema);
        // With no tool there is no action, so every policy would be "not
        // applicable"; and no request can be made, so nothing is lost.
        if !model.actions.is_empty() {
            load::validate(&parsed, &validator, sources)?;
        }
        let schema = validator.schema().clone();
        #[allow(clippy::expect_used)]
        let agent = cedar::EntityTypeName::from_str(AGENT).expect("Airlock::Agent is a valid type name");
        Ok(PolicySet {
            model,
            schema,
            policies: parsed.set,
            ids: parsed.ids,
            authorizer: cedar::Authorizer::new(),
            agent,
        })
    }

    /// The built-in default, as Cedar text: permit risk tiers `low` and
    /// `medium` without human approval; nothing else.
    pub fn default_policies() -> &'static str {
        DEFAULT_POLICIES
    }

    /// The built-in default, validated against `tools`.
    pub fn builtin(tools: &[ToolSpec]) -> Result<PolicySet, PolicyError> {
        PolicySet::load(&[(DEFAULT_POLICY_FILE.to_owned(), DEFAULT_POLICIES.to_owned())], tools)
    }

    /// Ids of the loaded policies, in load order.
    pub fn policy_ids(&self) -> Vec<String> {
        self.ids.clone()
    }

    /// The Cedar schema the policies were validated against.
    pub fn schema_text(&self) -> String {
        self.model.schema_text()
    }

    /// Decides one call.
    ///
    /// A [`PolicyError::EVAL`] when the tool is not one the set was loaded
    /// for (or differs from it), or the descriptor does not describe this
    /// tool or does not fit the schema.
    pub fn authorize(&self, request: &Request<'_>) -> Result<Verdict, PolicyError> {
        let name = &request.tool.name;
        let tool = self.model.tools.get(name).ok_or_else(|| {
            PolicyError::eval(format!("tool {name} is not among the tools the policies were loaded for"))
        })?;
        if &tool.spec != request.tool {
            return Err(PolicyError::eval(format!(
                "tool {name} differs from the one the policies were loaded for (reload the policies)"
            )));
        }
        let d = request.descriptor;
        if d.get("tool").and_then(Value::as_str) != Some(name.as_str()) {
            return Err(PolicyError::eval(format!("the descriptor is not a call of {name}")));
        }
        if d.get("risk_tier").and_then(Value::as_str) != Some(request.risk_tier)
            || d.get("human_approval").and_then(Value::as_bool) != Some(request.human_approval)
        {
            return Err(PolicyError::eval(format!(
                "the descriptor's risk_tier and human_approval differ from the request's ({} and {})",
                request.risk_tier, request.human_approval
            )));
        }
        let action = &self.model.actions[&tool.action_key];
        let eval = |e: String| PolicyError::eval(e);
        let resolved = context::to_expr(&action.resolved, d, "descriptor").map_err(eval)?;
        let invocation = cedar::RestrictedExpression::new_record([
            ("id".to_owned(), cedar::RestrictedExpression::new_string(request.invocation_id.to_owned())),
            ("approved".to_owned(), cedar::RestrictedExpression::new_bool(request.approved)),
            ("resolved".to_owned(), resolved),
        ])
        .map_err(|e| eval(e.to_string()))?;
        let context =
            cedar::Context::from_pairs([("invocation".to_owned(), invocation)]).map_err(|e| eval(e.to_string()))?;

        let principal =
            cedar::EntityUid::from_type_name_and_id(self.agent.clone(), cedar::EntityId::new(request.principal));
        let resource = cedar::Entity::new(
            tool.resource.clone(),
            HashMap::from([
                ("name".to_owned(), cedar::RestrictedExpression::new_string(name.clone())),
                ("risk_tier".to_owned(), cedar::RestrictedExpression::new_string(request.risk_tier.to_owned())),
                ("human_approval".to_owned(), cedar::RestrictedExpression::new_bool(request.human_approval)),
            ]),
            HashSet::new(),
        )
        .map_err(|e| eval(e.to_string()))?;
        let entities = cedar::Entities::from_entities(
            [cedar::Entity::new_no_attrs(principal.clone(), HashSet::new()), resource],
            None,
        )
        .map_err(|e| eval(e.to_string()))?;
        let cedar_request =
            cedar::Request::new(principal, tool.action.clone(), tool.resource.clone(), context, Some(&self.schema))
                .map_err(|e| eval(format!("the call does not fit the schema: {e}")))?;

        let response = self.authorizer.is_authorized(&cedar_request, &self.policies, &entities);
        let diagnostics = response.diagnostics();
        let errors: Vec<String> = diagnostics.errors().map(ToString::to_string).collect();
        let cedar_allowed = response.decision() == cedar::Decision::Allow;
        let mut policy_ids: Vec<String> = if cedar_allowed && !errors.is_empty() {
            diagnostics
                .errors()
                .map(|e| match e {
                    cedar::AuthorizationError::PolicyEvaluationError(e) => e.policy_id().to_string(),
                })
                .collect()
        } else {
            diagnostics.reason().map(ToString::to_string).collect()
        };
        policy_ids.sort();
        policy_ids.dedup();
        Ok(Verdict { allowed: cedar_allowed && errors.is_empty(), policy_ids, errors })
    }
}
