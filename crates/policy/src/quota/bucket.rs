//! What an Envoy quota bucket draws on, as the engine's rules resolve it.

use super::board::Budget;

/// What a quota bucket draws on: the rule that takes it, the budget it shares with every
/// bucket of the same key, and its weight in the split of that budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaBucket {
    /// The rule's name.
    pub rule: String,
    /// The budget: the rule's key for the bucket, and its rate.
    pub budget: Budget,
    /// The bucket's weight in the split (`weights`; 1 unless configured).
    pub weight: u64,
    /// Units per period a process may hand out of the budget once its lease has lapsed
    /// and the store cannot renew it, by the rule's `on_store_failure`: the whole rate
    /// when it fails open, none when it fails closed, `1 / divide_by` of it when it falls
    /// back to a local limit.
    pub fallback: u64,
}
