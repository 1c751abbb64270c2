//! Leased shares of fleet budgets (`ratewarden_core::lease`), for processes that share this
//! store: one table of leases per budget, kept apart from the limiters' state.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::PoisonError;

use ratewarden_core::lease::{Ask, Leases};

use super::MemoryStore;
use crate::cell::Stored;

/// The fleet budgets' leases, by budget, and how many budgets may be held before the next
/// pass drops those whose leases all lapsed.
#[derive(Debug)]
pub(super) struct Shares {
    budgets: HashMap<String, Leases>,
    tidy_past: usize,
}

impl Default for Shares {
    fn default() -> Self {
        Self {
            budgets: HashMap::new(),
            tidy_past: TIDY_PAST,
        }
    }
}

/// Budgets held before the first pass that drops lapsed ones; after each pass, twice what
/// is left (at least this), so the passes cost a constant share of the calls.
const TIDY_PAST: usize = 1024;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Leases `ask.member` its share of the budget `key` at `now` (nanoseconds), as
    /// [`Leases::lease`] grants it, on a clock of whole milliseconds as the Redis store's:
    /// the units granted.
    pub fn lease(&self, key: &str, ask: Ask<'_>, now: u64) -> u64 {
        let now_ms = now / 1_000_000;
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        let Shares { budgets, tidy_past } = &mut *shares;
        if budgets.len() > *tidy_past {
            budgets.retain(|_, leases| !leases.is_empty(now_ms));
            *tidy_past = (2 * budgets.len()).max(TIDY_PAST);
        }
        let granted = budgets
            .entry(key.to_owned())
            .or_default()
            .lease(ask, now_ms);
        if budgets.get(key).is_some_and(|l| l.is_empty(now_ms)) {
            budgets.remove(key);
        }
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    /// Budgets whose leases lapsed are dropped in passes a constant share of the calls
    /// pays for: the table stays near the budgets alive, however many came and went.
    #[test]
    fn lapsed_budgets_are_dropped() {
        let store: MemoryStore = MemoryStore::new(StoreConfig::default());
        let mut most = 0;
        for i in 0..5_000u64 {
            let ask = Ask {
                member: "a",
                want: 10,
                weight: 1,
                capacity: 10,
                ttl_ms: 1,
            };
            assert_eq!(store.lease(&format!("budget-{i}"), ask, i * 1_000_000), 10);
            most = most.max(store.shares.lock().unwrap().budgets.len());
        }
        assert!(most <= TIDY_PAST + 1, "{most} budgets held at once");
    }
}
