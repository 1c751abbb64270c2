//! What a quota budget's share may be while the store that splits it across the fleet
//! cannot be reached: the rule's `on_store_failure`.

use super::Engine;
use crate::config::OnStoreFailure;
use crate::quota::Budget;

impl<S> Engine<S> {
    /// The units per period this process may hand out of `budget` (rule `rule`'s) once
    /// its lease has lapsed and the store cannot renew it: the whole rate when the rule
    /// fails open, none when it fails closed, `1 / divide_by` of it when it falls back to
    /// a local limit. A rule no longer there fails closed.
    pub fn quota_fallback(&self, rule: &str, budget: &Budget) -> u64 {
        let set = self.current();
        match set
            .rules
            .iter()
            .find(|r| r.name == rule)
            .map(|r| r.on_store_failure)
        {
            Some(OnStoreFailure::Open) => budget.per_period,
            Some(OnStoreFailure::Local { divide_by }) => {
                budget.per_period / u64::from(divide_by.max(1))
            }
            Some(OnStoreFailure::Closed) | None => 0,
        }
    }
}
