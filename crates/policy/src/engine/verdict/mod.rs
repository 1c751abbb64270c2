//! The engine's answer: whether a request may go, every rule's part in it, and how the
//! HTTP contract says it (`answer.rs`).

mod answer;
mod descriptor;
mod grant_id;

pub use answer::{Answer, Jitter};
pub use descriptor::{DescriptorStatus, DescriptorVerdict};
pub use grant_id::GrantId;

use std::sync::Arc;

use ratewarden_core::Decision;

use crate::config::Rule;

/// One rule's part in a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutcome {
    /// The rule's index in [`Verdict::rules`].
    pub rule: usize,
    /// The key its state is kept under.
    pub key: String,
    /// Its decision (for a rejected request, what it would have said: nothing is charged).
    pub decision: Decision,
    /// Whether this decision could reject: false for shadow mode, and for keys outside a
    /// rollout's share.
    pub enforced: bool,
    /// The store failed, and the rule's `on_store_failure` policy decided instead.
    pub store_failed: bool,
}

impl RuleOutcome {
    /// Whether the rule said no (enforced or not).
    pub fn said_no(&self) -> bool {
        !self.decision.is_allowed()
    }
}

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The store failed and a `closed` rule applies: answer 503 (or gRPC `UNAVAILABLE`),
    /// the server is at fault.
    pub unavailable: bool,
    /// Every applying rule's outcome, in rule order.
    pub outcomes: Vec<RuleOutcome>,
    /// The longest retry time among the enforced rules that said no.
    pub retry_after_ns: Option<u64>,
    /// When an allowed request's cost was an estimate: the id to settle it with.
    pub reservation: Option<GrantId>,
    /// When an allowed request holds concurrency permits: the id to release them with
    /// when it finishes (or they lapse after their lease).
    pub permit: Option<GrantId>,
    /// The version of the rule set that decided.
    pub version: u64,
    /// The rules `outcomes` index: the config's rules for [`Engine::decide`](crate::engine::Engine::decide),
    /// one rule per resolved descriptor for [`Engine::decide_descriptors`](crate::engine::Engine::decide_descriptors).
    pub rules: Arc<[Rule]>,
    /// Per descriptor, in request order, for a descriptor call (empty for an HTTP request).
    pub descriptors: Vec<DescriptorVerdict>,
}

impl Verdict {
    /// The enforced rules that rejected the request.
    pub fn violated(&self) -> impl Iterator<Item = &RuleOutcome> {
        self.outcomes.iter().filter(|o| o.enforced && o.said_no())
    }

    /// The outcomes a client is shown the numbers of (RateLimit fields): enforced rules that
    /// are not sensitive. Shadow rules are not the client's business, and sensitive ones
    /// must not reveal capacity.
    pub fn shown(&self) -> impl Iterator<Item = &RuleOutcome> {
        // An adaptive rule's numbers are the upstream's capacity: not the client's business.
        self.outcomes.iter().filter(|o| {
            o.enforced && !self.rules[o.rule].sensitive && self.rules[o.rule].adaptive.is_none()
        })
    }

    /// Whether an adaptive concurrency rule shed the request: the upstream is at the
    /// limit it can take, so the answer is a 503, not a 429 (the client did nothing wrong).
    pub fn shed(&self) -> bool {
        self.violated()
            .any(|o| self.rules[o.rule].adaptive.is_some())
    }

    /// Whether a rule that rejected the request is sensitive: answer a bare 429.
    pub fn sensitive(&self) -> bool {
        self.violated().any(|o| self.rules[o.rule].sensitive)
    }

    /// The longest delay an enforced queueing rule asks of the request, in nanoseconds
    /// (0: none).
    pub fn delay_ns(&self) -> u64 {
        self.outcomes
            .iter()
            .filter(|o| o.enforced)
            .filter_map(|o| match o.decision.outcome {
                ratewarden_core::Outcome::Delayed { delay_ns } => Some(delay_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Rules that would have rejected the request but did not enforce (shadow, rollout).
    pub fn would_have_rejected(&self) -> impl Iterator<Item = &RuleOutcome> {
        self.outcomes.iter().filter(|o| !o.enforced && o.said_no())
    }
}
