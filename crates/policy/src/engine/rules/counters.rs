//! What each rule did: the per-rule counters behind `ratewarden_decisions_total`, and its
//! top offenders.

use std::sync::atomic::{AtomicU64, Ordering};

use super::top::TopKeys;

/// What one rule did since its rule set came into force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Requests it allowed (enforcing) that went through.
    pub allowed: u64,
    /// Requests it rejected (enforcing).
    pub rejected: u64,
    /// Requests it would have allowed, not charged because another rule rejected them.
    pub skipped: u64,
    /// Requests it would have rejected, in shadow mode or outside its rollout's share.
    pub would_have_rejected: u64,
    /// Requests it would have allowed, in shadow mode or outside its rollout's share: with
    /// `would_have_rejected`, everything such a rule matched.
    pub shadow_allowed: u64,
    /// Decisions its store failed to make (its failure policy answered instead).
    pub store_failures: u64,
}

#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) would_have_rejected: AtomicU64,
    pub(crate) shadow_allowed: AtomicU64,
    pub(crate) store_failures: AtomicU64,
    /// The keys it rejected most (enforcing), decayed: the dashboard's top offenders.
    pub(crate) top_limited: TopKeys,
    /// The keys it would have rejected most (shadow, outside a rollout's share).
    pub(crate) top_shadow: TopKeys,
}

impl Counters {
    pub(crate) fn stats(&self) -> RuleStats {
        RuleStats {
            allowed: self.allowed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            would_have_rejected: self.would_have_rejected.load(Ordering::Relaxed),
            shadow_allowed: self.shadow_allowed.load(Ordering::Relaxed),
            store_failures: self.store_failures.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
