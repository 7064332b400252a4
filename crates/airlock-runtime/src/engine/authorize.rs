//! Step 2 of the pipeline, the same for every call shape: decide whether a
//! prepared call may run, and journal the permit.
//!
//! With `[policy] files` configured, [`CedarPolicy`] evaluates them (Cedar,
//! default deny) with the descriptor at `context.invocation.resolved`, the
//! call's tool as the action and its principal. The policy set is loaded
//! once, at start-up, validated against every tool a policy may name (the
//! catalog's), and serves every call whose tool is as it was then; a tool
//! whose manifest changed since is judged by a set rebuilt with its new
//! view. With none,
//! [`DefaultPolicy`] applies the built-in default of DESIGN.md §3 — the
//! Cedar text printed by `airlock policy show-default`, evaluated natively
//! so that a call does not pay for building a Cedar schema; a test checks
//! both agree. A tool that needs an exact-call approval reaches an
//! authorizer only once approved.
//!
//! # Authorization
//!
//! With `[policy] files`, [`CedarPolicy`] judges the call (`airlock-policy`);
//! without, [`DefaultPolicy`] evaluates the built-in default natively. Approved
//! calls pass the default's permit; its forbid (a Git snapshot with
//! `linked_files > 0`) wins over everything. Building the set costs 5–11 ms,
//! paid at start-up (and again only for a call whose tool changed).
//! Cedar sees `context.invocation.approved` (an approver's approval of this
//! exact call was verified and consumed), so a policy can say "high risk needs
//! a permit and an approval".

use super::prepared::PreparedCall;
use crate::Runtime;
use airlock_core::{Descriptor, ReasonCode, Refusal};
use airlock_journal::kind;
use serde_json::json;

/// What an authorizer decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Ids of the policies that decided.
    pub policy_ids: Vec<String>,
    /// For people.
    pub reason: String,
}

/// What an authorizer is asked about one call, whatever its shape.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The resolved call.
    pub descriptor: &'a Descriptor,
    /// Cedar's view of its tool (action and argument types).
    pub spec: &'a airlock_policy::ToolSpec,
    /// Who makes it.
    pub principal: &'a str,
    /// Its invocation id.
    pub invocation_id: &'a str,
    /// An approver approved this exact descriptor digest (and the approval
    /// was consumed).
    pub approved: bool,
}

/// Decides whether a prepared call may run.
pub trait Authorizer {
    /// `Ok` permits; `Err` carries the refusal.
    fn authorize(&self, question: &Question<'_>) -> Result<Decision, Refusal>;
}

/// The built-in default: permit `low` and `medium` risk, deny the rest.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultPolicy;

/// Id of the built-in default policy in decisions (its `@id` in Cedar).
pub const DEFAULT_POLICY_ID: &str = airlock_policy::DEFAULT_PERMIT_ID;

/// The built-in default's forbid (`airlock.default.forbid-linked-files`):
/// a Git snapshot that found any file with more than one hard link is
/// refused, though those files were left out, so that someone notices
/// (the answer would be partial). Like a Cedar `forbid`, it wins over
/// every permit, an approval's included.
pub(crate) fn default_forbids(d: &airlock_core::Descriptor) -> Result<(), Refusal> {
    match &d.command_boundary.filesystem.snapshot {
        Some(s) if s.linked_files > 0 => Err(Refusal::new(
            ReasonCode::PolicyDenied,
            format!(
                "the repository holds {} file(s) with more than one hard link; they are never copied (their \
                 content is shared with a name elsewhere) and the default policy ({}) refuses such a snapshot. \
                 Give each file its own copy (`cp f f.new && mv f.new f`; for a `git clone --local` repository \
                 `git repack -a -d`), or permit it with a Cedar policy (the answer is \
                 then partial)",
                s.linked_files,
                airlock_policy::DEFAULT_FORBID_LINKED_ID
            ),
        )),
        _ => Ok(()),
    }
}

impl Authorizer for DefaultPolicy {
    fn authorize(&self, question: &Question<'_>) -> Result<Decision, Refusal> {
        let d = question.descriptor;
        default_forbids(d)?;
        if question.approved {
            return Ok(Decision {
                policy_ids: vec![format!("{DEFAULT_POLICY_ID}.approved")],
                reason: "an operator approved this exact call".into(),
            });
        }
        if d.human_approval {
            return Err(Refusal::new(
                ReasonCode::PolicyDenied,
                format!("{} asks for human approval, and exact-call approval is not available in this build", d.tool),
            ));
        }
        match d.risk_tier.as_str() {
            "low" | "medium" => Ok(Decision {
                policy_ids: vec![DEFAULT_POLICY_ID.to_owned()],
                reason: format!("risk tier {} is permitted by the default policy", d.risk_tier),
            }),
            other => Err(Refusal::new(
                ReasonCode::PolicyDenied,
                format!("risk tier {other} is denied by the default policy ({DEFAULT_POLICY_ID})"),
            )),
        }
    }
}

/// A call that policy permitted. Only this can run.
#[derive(Debug)]
pub struct AuthorizedCall<P> {
    prepared: PreparedCall<P>,
    decision: Decision,
}

impl<P> AuthorizedCall<P> {
    /// The prepared call.
    pub fn prepared(&self) -> &PreparedCall<P> {
        &self.prepared
    }

    /// Why it was permitted.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Takes the call apart for the run step.
    pub fn into_parts(self) -> (PreparedCall<P>, Decision) {
        (self.prepared, self.decision)
    }
}

impl Runtime {
    /// Step 2 for every call shape: asks the configured authorizer about
    /// `prepared` (consuming it either way, so a call is authorized at most
    /// once) and journals the permit (`InvocationAuthorized`, with the
    /// deciding policies). `approved`: an approver's approval of this exact
    /// call was verified and consumed.
    pub(crate) fn authorize<P>(&self, prepared: PreparedCall<P>, approved: bool) -> Result<AuthorizedCall<P>, Refusal> {
        let question = Question {
            descriptor: prepared.descriptor(),
            spec: prepared.spec(),
            principal: prepared.principal(),
            invocation_id: prepared.invocation_id(),
            approved,
        };
        let began = std::time::Instant::now();
        self.check_policy_bundle(prepared.descriptor().policy_bundle.as_ref())?;
        let decision = self.authorizer()?.authorize(&question)?;
        let mut body = json!({ "policy_ids": decision.policy_ids, "approved": approved });
        if let Some(bundle) = &prepared.descriptor().policy_bundle {
            body["policy_bundle"] = json!(bundle);
        }
        self.note(kind::INVOCATION_AUTHORIZED, Some(prepared.invocation_id()), body)?;
        tracing::debug!(
            policy_ids = ?decision.policy_ids,
            approved,
            duration_ms = super::elapsed_ms(began),
            "authorized"
        );
        Ok(AuthorizedCall { prepared, decision })
    }
}

/// Operator policies in Cedar. The principal is the call's
/// ([`Question::principal`]).
pub struct CedarPolicy {
    sources: Vec<(String, String)>,
    specs: Vec<airlock_policy::ToolSpec>,
    /// The set validated against `specs`, built once.
    set: airlock_policy::PolicySet,
}

impl std::fmt::Debug for CedarPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarPolicy").field("sources", &self.sources).field("specs", &self.specs).finish()
    }
}

impl CedarPolicy {
    /// Loads `sources` (`(file, text)`), validated against `specs`, every
    /// tool a policy may name (a syntax or schema error names the file and
    /// line).
    pub fn load(sources: Vec<(String, String)>, specs: Vec<airlock_policy::ToolSpec>) -> Result<Self, Refusal> {
        let set = airlock_policy::PolicySet::load(&sources, &specs)
            .map_err(|e| Refusal::new(ReasonCode::PolicyInvalid, e.message().to_owned()))?;
        Ok(CedarPolicy { sources, specs, set })
    }
}

impl Authorizer for CedarPolicy {
    fn authorize(&self, question: &Question<'_>) -> Result<Decision, Refusal> {
        let Question { descriptor: d, spec, principal, invocation_id, approved } = *question;
        // The set loaded at start-up serves every tool as it was then; a
        // tool whose manifest changed since is validated as it is now.
        let rebuilt;
        let set = if self.specs.contains(spec) {
            &self.set
        } else {
            let specs: Vec<airlock_policy::ToolSpec> = self
                .specs
                .iter()
                .filter(|s| s.name != spec.name)
                .cloned()
                .chain(std::iter::once(spec.clone()))
                .collect();
            rebuilt = CedarPolicy::load(self.sources.clone(), specs)?;
            &rebuilt.set
        };
        let value = serde_json::to_value(d).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
        let verdict = set
            .authorize(&airlock_policy::Request {
                principal,
                tool: spec,
                risk_tier: &d.risk_tier,
                human_approval: d.human_approval,
                descriptor: &value,
                invocation_id,
                approved,
            })
            .map_err(|e| Refusal::new(ReasonCode::PolicyEval, e.message().to_owned()))?;
        if verdict.allowed {
            let how = if approved { "permitted by policy and approved" } else { "permitted by policy" };
            Ok(Decision { policy_ids: verdict.policy_ids, reason: how.into() })
        } else if verdict.policy_ids.is_empty() {
            Err(Refusal::new(ReasonCode::PolicyDenied, format!("no policy permits {} (default deny)", d.tool)))
        } else {
            Err(Refusal::new(
                ReasonCode::PolicyDenied,
                format!("denied by policy {:?}{}", verdict.policy_ids, errors_suffix(&verdict.errors)),
            ))
        }
    }
}

fn errors_suffix(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!(" (evaluation errors: {})", errors.join("; "))
    }
}
