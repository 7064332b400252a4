//! Step 2 of the pipeline: decide whether a prepared call may run.
//!
//! Until Cedar lands, the only authorizer is the built-in default policy of
//! DESIGN.md §3: permit risk tiers `low` and `medium`, deny the rest and any
//! tool that asks for human approval. Configured policy files are never
//! ignored: while this build cannot evaluate them, every call is refused
//! with `policy.unavailable`.

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
    /// `Ok` permits; `Err` carries the refusal.
    fn authorize(&self, call: &PreparedCall) -> Result<Decision, Refusal>;
}

/// The built-in default: permit `low` and `medium` risk, deny the rest.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultPolicy;

/// Id of the built-in default policy in decisions.
pub const DEFAULT_POLICY_ID: &str = "airlock.default";

impl Authorizer for DefaultPolicy {
    fn authorize(&self, call: &PreparedCall) -> Result<Decision, Refusal> {
        let d = call.descriptor();
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

/// Refuses everything because configured policy files cannot be evaluated yet.
#[derive(Debug, Clone)]
pub struct UnavailablePolicy {
    /// The configured patterns.
    pub files: Vec<String>,
}

impl Authorizer for UnavailablePolicy {
    fn authorize(&self, _call: &PreparedCall) -> Result<Decision, Refusal> {
        Err(Refusal::new(
            ReasonCode::PolicyUnavailable,
            format!("[policy] files {:?} are configured but Cedar evaluation is not built yet; refusing rather than ignoring them", self.files),
        ))
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
    pub fn authorize(self, authorizer: &dyn Authorizer) -> Result<AuthorizedCall, Refusal> {
        let decision = authorizer.authorize(&self)?;
        Ok(AuthorizedCall { prepared: self, decision })
    }
}
