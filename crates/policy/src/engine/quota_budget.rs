//! The budget an Envoy quota bucket draws on: the first native rule that takes the bucket
//! (by `match.bucket`, or by `match.domain` and `match.descriptor` as a descriptor's
//! entries are taken), its key for the bucket, and the bucket's weight in the split.

use std::time::Duration;

use super::descriptors::native_key;
use super::Engine;
use crate::config::split_rate;
use crate::quota::Budget;

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
}

impl<S> Engine<S> {
    /// The budget of a quota bucket of `domain` whose id is `entries` (sorted by key): the
    /// first rule taking it, its key for them, its rate, and the bucket's weight. `None`
    /// when no rule takes it, or the rule has no rate to split (a sliding log, a quota, a
    /// concurrency limit, adaptive concurrency).
    pub fn quota_budget(&self, domain: &str, entries: &[(&str, &str)]) -> Option<QuotaBucket> {
        let set = self.current();
        let i = set
            .rules
            .iter()
            .position(|r| r.matches.matches_bucket(domain, entries))?;
        let rule = &set.rules[i];
        if rule.adaptive.is_some() {
            return None;
        }
        let (per_period, period, burst) = split_rate(&rule.limit)?;
        let key = native_key(&set.prefixes[i], rule, entries);
        let weight = rule
            .matches
            .bucket
            .as_ref()
            .map_or(1, |b| b.weight(entries));
        Some(QuotaBucket {
            rule: rule.name.clone(),
            budget: Budget {
                key,
                per_period,
                period: Duration::max(period, Duration::from_nanos(1)),
                burst,
            },
            weight,
        })
    }
}
