//! What was decided for each descriptor of an Envoy rate limit request.

use crate::envoy::Unit;

/// A descriptor's code in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescriptorStatus {
    /// Under its limit, or no limit, or a shadow rule.
    Ok,
    /// Over its limit.
    OverLimit,
}

/// What was decided for one descriptor: what Envoy's `DescriptorStatus` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorVerdict {
    /// Its code.
    pub status: DescriptorStatus,
    /// No rule resolved for it (unknown domain, no match, or replaced).
    pub no_rule: bool,
    /// Its rule is `unlimited`: always OK, no counter.
    pub unlimited: bool,
    /// Its rule does not enforce for this key (shadow mode, or outside a rollout's share).
    pub shadow: bool,
    /// The rule's name, when it has one.
    pub name: Option<String>,
    /// The rule's unit: a YAML rule's own, a native rule's when its window is one unit.
    pub unit: Option<Unit>,
    /// The rule's requests per unit (a native rule's limit).
    pub requests_per_unit: u32,
    /// Its index in [`Verdict::outcomes`](super::Verdict::outcomes), when it was decided (a rule with a limit).
    pub outcome: Option<usize>,
}
