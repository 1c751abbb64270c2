//! What a rule decides while the store fails: its `on_store_failure` policy.

use ratewarden_core::{Algorithm, AsyncStore, Decision, Outcome};

use super::Charger;
use crate::config::{OnStoreFailure, Rule};
use crate::engine::rules::Applying;

impl<S: AsyncStore> Charger<S> {
    /// `rule`'s decision for `key` at `cost` while the store is down, and whether the
    /// answer must be "unavailable" (a `closed` rule).
    ///
    /// `open` does not mean unlimited: the rule is still enforced at its own numbers on the
    /// engine's local store, so one process alone stays exact and a fleet of N admits at
    /// most N times the limit; it only never answers 503. `local`
    /// decides on the rule's divided share instead.
    pub(crate) fn on_store_failure(
        &self,
        rule: &Rule,
        key: &str,
        cost: u64,
        now: u64,
    ) -> (Decision, bool) {
        match (&rule.on_store_failure, &rule.local) {
            (OnStoreFailure::Closed, _) => {
                let retry_after_ns = 1_000_000_000;
                let size = rule.limit.limit();
                (
                    Decision::new(Outcome::Limited { retry_after_ns }, size, 0, 0),
                    true,
                )
            }
            (OnStoreFailure::Local { .. }, Some(local)) => {
                (self.local.decide(local, key, now, cost), false)
            }
            _ => (self.local.decide(&rule.limit, key, now, cost), false),
        }
    }

    /// Charges the in-process share of every `local` rule among `enforced` with what the
    /// shared store just admitted (a share already spent stays so: this is a record of this
    /// process's traffic, not a decision), so a store failure finds the share already
    /// holding this process's recent admissions, not a fresh burst. (`open` rules are
    /// charged in process before the store is asked: `Charger::in_process`.)
    pub(crate) fn record_locally(&self, rules: &[Rule], enforced: &[&Applying], now: u64) {
        for a in enforced {
            let rule = &rules[a.rule];
            let (OnStoreFailure::Local { .. }, Some(limit)) = (&rule.on_store_failure, &rule.local)
            else {
                continue;
            };
            // Concurrency units are held and released in the shared store; a local copy
            // would never be released.
            if matches!(limit, ratewarden_core::Limit::Concurrency(_)) {
                continue;
            }
            self.local.decide(limit, &a.key, now, a.cost);
        }
    }
}
