//! The budget an Envoy quota bucket draws on: the first native rule whose `match.domain`
//! and `match.descriptor` take the bucket's entries, as a descriptor's are taken.

use std::time::Duration;

use ratewarden_core::{Algorithm, Limit};

use super::descriptors::native_key;
use super::Engine;
use crate::quota::Budget;

impl<S> Engine<S> {
    /// The budget of a quota bucket of `domain` whose id is `entries` (sorted by key): the
    /// rule matching them as a descriptor, its key for them, and its rate. `None` when no
    /// rule matches, or the rule has no rate to split (a sliding log, a quota, a
    /// concurrency limit, adaptive concurrency).
    pub fn quota_budget(&self, domain: &str, entries: &[(&str, &str)]) -> Option<(String, Budget)> {
        let set = self.current();
        let i = set
            .rules
            .iter()
            .position(|r| r.matches.matches_descriptor(domain, entries))?;
        let rule = &set.rules[i];
        if rule.adaptive.is_some() {
            return None;
        }
        let (per_period, period, burst) = match &rule.limit {
            Limit::Gcra(g) => (g.rate().count(), g.rate().period(), g.burst()),
            Limit::TokenBucket(t) => (t.rate().count(), t.rate().period(), t.burst()),
            Limit::LeakyBucket(l) => (l.rate().count(), l.rate().period(), l.burst()),
            Limit::FixedWindow(w) => (w.limit(), w.window(), w.limit()),
            Limit::SlidingWindow(w) => (w.limit(), w.window(), w.limit()),
            _ => return None,
        };
        let key = native_key(&set.prefixes[i], rule, entries);
        Some((
            rule.name.clone(),
            Budget {
                key,
                per_period,
                period: Duration::max(period, Duration::from_nanos(1)),
                burst,
            },
        ))
    }
}
