//! Reservations (estimated costs waiting for a settle) and permits (concurrency units held
//! until a release): who holds what, under ids nobody can guess.
//!
//! Both are kept in a [`Ledger`]: a map by id, and a queue in issue order that expiry walks
//! from the front a few entries per call, so a grant or a release costs O(1) however many
//! are live, and a cap on the live count: past it the oldest lapses, as
//! it would at the end of its lease.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use ratewarden_core::Limit;
use ring::rand::SystemRandom;

use crate::engine::rules::RuleSet;
use crate::engine::verdict::GrantId;

/// The most reservations (and, apart, permits) live at once.
pub(crate) const MAX_LIVE: usize = 262_144;

/// Expired entries dropped per call, at most: enough to outpace the one entry a grant adds.
const SWEEP: usize = 4;

/// One rule's charge in a grant.
#[derive(Debug)]
pub(crate) struct Charge {
    pub(crate) rule: String,
    /// The rule's index in the issuing rule set, to build its key again for an owner check.
    pub(crate) index: usize,
    pub(crate) limit: Limit,
    pub(crate) key: String,
    pub(crate) cost: u64,
    /// The most one request may cost under the rule (its `max_cost`, at most its burst).
    pub(crate) max_cost: u64,
    /// For an adaptive rule: its place in the rule's in-process limiter (given back there,
    /// not to the store).
    pub(crate) ticket: Option<ratewarden_core::adaptive::Ticket>,
}

/// What a reservation or a permit holds.
pub(crate) struct Grant {
    pub(crate) charges: Vec<Charge>,
    /// Past this, the grant is gone: a reservation's estimate stands, a permit's units
    /// were let go by the store.
    pub(crate) expires: u64,
    /// The rule set that issued it, whose rules build the keys an owner must hold again
    /// (a reload in between changes nothing for it); `None` for a descriptor call's, which
    /// no request can claim.
    pub(crate) issuer: Option<std::sync::Arc<RuleSet>>,
}

#[derive(Default)]
struct Inner {
    live: HashMap<GrantId, Grant>,
    /// Ids in issue order with their expiry. An id settled or released early stays here
    /// until the walk reaches it; the queue is capped at twice the live cap, so that stays
    /// bounded too.
    order: VecDeque<(u64, GrantId)>,
    /// Entries looked at by expiry and the cap, for the test that pins O(1).
    #[cfg(test)]
    touched: u64,
}

/// Grants by id, expiring lazily, bounded in count.
pub(crate) struct Ledger {
    inner: Mutex<Inner>,
    cap: usize,
    rng: SystemRandom,
}

impl Ledger {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            rng: SystemRandom::new(),
        }
    }

    /// Records `grant`, returning its id; `None` only if the system gave no randomness
    /// (the request then goes without: its estimate stands, or its units lapse).
    pub(crate) fn insert(&self, grant: Grant, now: u64) -> Option<GrantId> {
        let id = GrantId::random(&self.rng)?;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.expire(now);
        while inner.live.len() >= self.cap || inner.order.len() >= 2 * self.cap {
            // The oldest goes first, as its lease would have ended first.
            let Some((_, oldest)) = inner.order.pop_front() else {
                break;
            };
            inner.count(1);
            if inner.live.remove(&oldest).is_some() {
                tracing::warn!(
                    cap = self.cap,
                    "too many live grants; the oldest lapses early"
                );
            }
        }
        inner.order.push_back((grant.expires, id));
        inner.live.insert(id, grant);
        Some(id)
    }

    /// Takes grant `id` if it is live and `accept` takes it; a refused grant stays.
    pub(crate) fn take<E>(
        &self,
        id: GrantId,
        now: u64,
        accept: impl FnOnce(&Grant) -> Result<(), E>,
        unknown: E,
    ) -> Result<Grant, E> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.expire(now);
        match inner.live.remove(&id) {
            Some(grant) if grant.expires > now => match accept(&grant) {
                Ok(()) => Ok(grant),
                Err(refused) => {
                    inner.live.insert(id, grant);
                    Err(refused)
                }
            },
            _ => Err(unknown),
        }
    }

    /// Adds `charges` to live grant `id`, which then lapses at `expires` if that is
    /// sooner; `Err` when the grant is not live.
    pub(crate) fn attach(
        &self,
        id: GrantId,
        charges: Vec<Charge>,
        expires: u64,
        now: u64,
    ) -> Result<(), ()> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match inner.live.get_mut(&id) {
            Some(grant) if grant.expires > now => {
                grant.charges.extend(charges);
                grant.expires = grant.expires.min(expires);
                Ok(())
            }
            _ => Err(()),
        }
    }

    #[cfg(test)]
    fn touched(&self) -> u64 {
        self.inner.lock().unwrap().touched
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap().live.len()
    }
}

impl Inner {
    /// Drops up to [`SWEEP`] expired entries from the front of the queue.
    fn expire(&mut self, now: u64) {
        for _ in 0..SWEEP {
            match self.order.front() {
                Some(&(expires, id)) if expires <= now => {
                    self.order.pop_front();
                    self.live.remove(&id);
                    self.count(1);
                }
                _ => return,
            }
        }
    }

    /// Counts entries looked at, in tests only.
    fn count(&mut self, n: u64) {
        #[cfg(test)]
        {
            self.touched += n;
        }
        let _ = (self, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(expires: u64) -> Grant {
        Grant {
            charges: Vec::new(),
            expires,
            issuer: None,
        }
    }

    #[test]
    fn grants_and_releases_stay_constant_time_with_100k_live() {
        let ledger = Ledger::new(MAX_LIVE);
        let ids: Vec<GrantId> = (0..100_000)
            .map(|i| ledger.insert(grant(1_000_000 + i), i).unwrap())
            .collect();
        assert_eq!(ledger.len(), 100_000);
        let before = ledger.touched();
        // A thousand more grants and releases, with every lease still running: none looks
        // at the 100k others.
        for (i, id) in ids.iter().take(1_000).enumerate() {
            let now = 100_000 + i as u64;
            ledger.insert(grant(2_000_000), now).unwrap();
            ledger.take(*id, now, |_| Ok::<(), ()>(()), ()).unwrap();
        }
        assert_eq!(ledger.touched() - before, 0, "no entry was walked");
        // Once the leases run out, each call drops at most a few expired ones.
        let before = ledger.touched();
        for i in 0..1_000 {
            ledger.insert(grant(u64::MAX), 1_500_000 + i).unwrap();
        }
        assert!(ledger.touched() - before <= 1_000 * SWEEP as u64);
    }

    #[test]
    fn past_the_cap_the_oldest_lapses() {
        let ledger = Ledger::new(3);
        let first = ledger.insert(grant(100), 0).unwrap();
        for _ in 0..3 {
            ledger.insert(grant(100), 0).unwrap();
        }
        assert_eq!(ledger.len(), 3);
        assert!(ledger.take(first, 1, |_| Ok::<(), ()>(()), ()).is_err());
    }

    #[test]
    fn ids_are_32_hex_digits_and_parse_back() {
        let ledger = Ledger::new(8);
        let id = ledger.insert(grant(100), 0).unwrap();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<GrantId>().unwrap(), id);
        assert!("1".parse::<GrantId>().is_err());
        assert_ne!(ledger.insert(grant(100), 0).unwrap(), id);
    }
}
