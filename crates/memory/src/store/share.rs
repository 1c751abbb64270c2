//! Leased shares of fleet budgets (`ratewarden_core::share`), for processes that share this
//! store: one table of leases per budget, kept apart from the limiters' state.

use std::hash::BuildHasher;
use std::sync::PoisonError;

use ratewarden_core::share::Ask;

use super::MemoryStore;
use crate::cell::Stored;

/// Budgets past which each lease call first drops the budgets whose leases all lapsed.
const TIDY_PAST: usize = 1024;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Leases `ask.member` its share of the budget `key` at `now` (nanoseconds), as
    /// [`Leases::lease`](ratewarden_core::share::Leases::lease) grants it, on a clock of
    /// whole milliseconds as the Redis store's: the units granted.
    pub fn share(&self, key: &str, ask: Ask<'_>, now: u64) -> u64 {
        let now_ms = now / 1_000_000;
        let mut budgets = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        if budgets.len() > TIDY_PAST {
            budgets.retain(|_, leases| !leases.is_empty(now_ms));
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
