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
    fn authorize(&self, call: &PreparedCall, approved: bool) -> Result<Decision, Refusal> {
        let d = call.descriptor();
        default_forbids(d)?;
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

/// Operator policies in Cedar. The principal is the prepared call's
/// ([`PreparedCall::principal`]).
#[derive(Debug)]
pub struct CedarPolicy {
    /// Policy sources, `(file, text)`, as loaded at start-up.
    pub sources: Vec<(String, String)>,
}

impl Authorizer for CedarPolicy {
    fn authorize(&self, call: &PreparedCall, approved: bool) -> Result<Decision, Refusal> {
        let spec = airlock_policy::ToolSpec::from_manifest(call.manifest());
        let d = call.descriptor();
        let asked = Asked { principal: call.principal(), invocation_id: call.invocation_id(), approved };
        let verdict = cedar_verdict(&self.sources, std::slice::from_ref(&spec), &spec, d, asked)?;
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

/// Who asks for a call, and whether an approver approved it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    /// The call's principal.
    pub principal: &'a str,
    /// Its invocation id.
    pub invocation_id: &'a str,
    /// An approver's approval of this exact call was verified and consumed.
    pub approved: bool,
}

/// Loads `sources` validated against `specs` and evaluates the call of
/// `spec` described by `descriptor`, as `asked`.
pub(crate) fn cedar_verdict(
    sources: &[(String, String)],
    specs: &[airlock_policy::ToolSpec],
    spec: &airlock_policy::ToolSpec,
    descriptor: &airlock_core::Descriptor,
    asked: Asked<'_>,
) -> Result<airlock_policy::Verdict, Refusal> {
    let Asked { principal, invocation_id, approved } = asked;
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
        approved,
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
    /// high-risk and approval-required calls first) unless
    /// [`default_forbids`] refuses. A permit is journaled
    /// (`InvocationAuthorized`, with the deciding policies).
    pub(crate) fn authorize_builtin(
        &self,
        descriptor: &airlock_core::Descriptor,
        spec: &airlock_policy::ToolSpec,
        id: &str,
    ) -> Result<Vec<String>, Refusal> {
        let policy_ids = match &self.policy_sources {
            None => {
                default_forbids(descriptor)?;
                vec![DEFAULT_POLICY_ID.to_owned()]
            }
            Some(sources) => {
                let specs = crate::policy_files::tool_specs(&self.config().tools_dir);
                let principal = self.record_principal(Some(id));
                let asked = Asked { principal: &principal, invocation_id: id, approved: false };
                let verdict = cedar_verdict(sources, &specs, spec, descriptor, asked)?;
                if !verdict.allowed {
                    return Err(Refusal::new(
                        ReasonCode::PolicyDenied,
                        format!("{} denied by policy {:?} (default deny)", descriptor.tool, verdict.policy_ids),
                    ));
                }
                verdict.policy_ids
            }
        };
        self.note(
            airlock_journal::kind::INVOCATION_AUTHORIZED,
            Some(id),
            serde_json::json!({ "policy_ids": policy_ids, "approved": false }),
        )?;
        Ok(policy_ids)
    }
}
