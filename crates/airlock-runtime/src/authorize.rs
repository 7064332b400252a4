//! Step 2 of the pipeline: decide whether a prepared call may run.
//!
//! With `[policy] files` configured, [`CedarPolicy`] evaluates them (Cedar,
//! default deny) with the descriptor at
//! `context.invocation.resolved`. With none, [`DefaultPolicy`] applies the
//! built-in default of DESIGN.md §3 — the Cedar text printed by `airlock
//! policy show-default`, evaluated natively so that a call does not pay for
//! building a Cedar schema; a test checks both agree. A tool that needs an
//! exact-call approval reaches an authorizer only once approved.

use crate::prepare::PreparedCall;
use airlock_core::{ReasonCode, Refusal};

/// What an authorizer decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Ids of the policies that decided.
    pub policy_ids: Vec<String>,
    /// For people.
    pub reason: String,
}

/// Decides whether a prepared call may run.
pub trait Authorizer {
    /// `Ok` permits; `Err` carries the refusal. `approved`: an operator
    /// approved this exact descriptor digest (and the approval was consumed).
    fn authorize(&self, call: &PreparedCall, approved: bool) -> Result<Decision, Refusal>;
}

/// The built-in default: permit `low` and `medium` risk, deny the rest.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultPolicy;

/// Id of the built-in default policy in decisions (its `@id` in Cedar).
pub const DEFAULT_POLICY_ID: &str = airlock_policy::DEFAULT_PERMIT_ID;

impl Authorizer for DefaultPolicy {
    fn authorize(&self, call: &PreparedCall, approved: bool) -> Result<Decision, Refusal> {
        let d = call.descriptor();
        if approved {
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
pub struct AuthorizedCall {
    prepared: PreparedCall,
    decision: Decision,
}

impl AuthorizedCall {
    /// The prepared call.
    pub fn prepared(&self) -> &PreparedCall {
        &self.prepared
    }

    /// Why it was permitted.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Takes the call apart for the run step.
    pub fn into_parts(self) -> (PreparedCall, Decision) {
        (self.prepared, self.decision)
    }
}

impl PreparedCall {
    /// Asks `authorizer`; consumes the prepared call either way, so a call
    /// is authorized at most once.
    pub fn authorize(self, authorizer: &dyn Authorizer, approved: bool) -> Result<AuthorizedCall, Refusal> {
        let decision = authorizer.authorize(&self, approved)?;
        Ok(AuthorizedCall { prepared: self, decision })
    }
}

/// Operator policies in Cedar.
#[derive(Debug)]
pub struct CedarPolicy {
    /// Policy sources, `(file, text)`, as loaded at start-up.
    pub sources: Vec<(String, String)>,
    /// The principal calls are made as, unless the request named one.
    pub principal: String,
}

impl Authorizer for CedarPolicy {
    fn authorize(&self, call: &PreparedCall, approved: bool) -> Result<Decision, Refusal> {
        let spec = airlock_policy::ToolSpec::from_manifest(call.manifest());
        let d = call.descriptor();
        let principal = call.requested_principal().unwrap_or(&self.principal);
        let verdict =
            cedar_verdict(&self.sources, std::slice::from_ref(&spec), &spec, principal, d, call.invocation_id())?;
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

/// Loads `sources` validated against `specs` and evaluates the call of
/// `spec` described by `descriptor`, made by `principal`.
pub(crate) fn cedar_verdict(
    sources: &[(String, String)],
    specs: &[airlock_policy::ToolSpec],
    spec: &airlock_policy::ToolSpec,
    principal: &str,
    descriptor: &airlock_core::Descriptor,
    invocation_id: &str,
) -> Result<airlock_policy::Verdict, Refusal> {
    let set = airlock_policy::PolicySet::load(sources, specs)
        .map_err(|e| Refusal::new(ReasonCode::PolicyInvalid, e.message().to_owned()))?;
    let value = serde_json::to_value(descriptor).map_err(|e| Refusal::new(ReasonCode::Internal, e.to_string()))?;
    set.authorize(&airlock_policy::Request {
        principal,
        tool: spec,
        risk_tier: &descriptor.risk_tier,
        human_approval: descriptor.human_approval,
        descriptor: &value,
        invocation_id,
    })
    .map_err(|e| Refusal::new(ReasonCode::PolicyEval, e.message().to_owned()))
}

fn errors_suffix(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!(" (evaluation errors: {})", errors.join("; "))
    }
}

impl crate::Runtime {
    /// Authorizes a call that no `PreparedCall` carries (Git queries,
    /// isolated submissions): Cedar when policies are configured, with the
    /// call as `spec`'s action and the policy set validated against every
    /// tool (as at start-up, so policies naming other tools still load);
    /// else the built-in default, which permits these (callers refuse
    /// high-risk and approval-required calls first). A permit is journaled
    /// (`InvocationAuthorized`, with the deciding policies).
    pub(crate) fn authorize_builtin(
        &self,
        descriptor: &airlock_core::Descriptor,
        spec: &airlock_policy::ToolSpec,
        id: &str,
    ) -> Result<Vec<String>, Refusal> {
        let policy_ids = match &self.policy_sources {
            None => vec![DEFAULT_POLICY_ID.to_owned()],
            Some(sources) => {
                let specs = crate::policy_files::tool_specs(&self.config().tools_dir);
                let verdict = cedar_verdict(sources, &specs, spec, &self.principal, descriptor, id)?;
                if !verdict.allowed {
                    return Err(Refusal::new(
                        ReasonCode::PolicyDenied,
                        format!("{} denied by policy {:?} (default deny)", descriptor.tool, verdict.policy_ids),
                    ));
                }
                verdict.policy_ids
            }
        };
        crate::ledger::note(
            self.journal(),
            airlock_journal::kind::INVOCATION_AUTHORIZED,
            Some(id),
            serde_json::json!({ "policy_ids": policy_ids, "approved": false }),
        )?;
        Ok(policy_ids)
    }
}
