//! Concurrency limits: at most so many requests in flight per key.

use std::num::NonZeroU64;
use std::time::Duration;

use super::Algorithm;
use crate::units::nonzero_duration_ns;
use crate::{Decision, Error, Outcome};

/// At most `max` units in flight per key; a permit not released within `lease` expires.
///
/// A rate limit counts arrivals; this counts requests holding a thread, a connection or a GPU
/// slot. [`acquire`](Concurrency::acquire) takes a permit under an id and
/// [`release`](Concurrency::release) gives it back; a permit whose holder crashed and never
/// released it lapses after the lease, so the key cannot stay blocked forever. Through the
/// [`Algorithm`] trait a request takes an anonymous permit that only the lease ends, which is
/// what a simulation of arrivals without completions can show.
///
/// # Examples
///
/// ```
/// use ratewarden_core::Concurrency;
/// use std::time::Duration;
///
/// let limit = Concurrency::new(2, Duration::from_secs(30))?;
/// let mut state = Default::default();
/// assert!(limit.acquire(&mut state, 0, 1, 1).is_allowed());
/// assert!(limit.acquire(&mut state, 0, 1, 2).is_allowed());
/// assert!(!limit.acquire(&mut state, 0, 1, 3).is_allowed());
/// assert!(limit.release(&mut state, 1));
/// assert!(limit.acquire(&mut state, 0, 1, 3).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Concurrency {
    max: NonZeroU64,
    lease: NonZeroU64,
}

/// One permit held: its id, the units it holds, and when its lease runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Held {
    /// The permit's id (0 for anonymous permits, which only the lease ends).
    pub id: u64,
    /// Units held.
    pub cost: u64,
    /// When the lease runs out, in nanoseconds.
    pub expires: u64,
}

/// The permits a key holds. The default, none, is a key never seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ConcurrencyState {
    /// The permits, in the order they were taken.
    pub held: Vec<Held>,
}

impl Concurrency {
    /// At most `max` units in flight, each permit lapsing after `lease`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `max` or `lease` is zero.
    pub fn new(max: u64, lease: Duration) -> Result<Self, Error> {
        Ok(Self {
            max: NonZeroU64::new(max).ok_or(Error::Zero { field: "limit" })?,
            lease: nonzero_duration_ns(lease, "lease")?,
        })
    }

    /// How long a permit may be held before it lapses.
    pub fn lease(&self) -> Duration {
        Duration::from_nanos(self.lease.get())
    }

    /// Takes a permit of `cost` units under `id` at `now`, if that many are free.
    pub fn acquire(&self, state: &mut ConcurrencyState, now: u64, cost: u64, id: u64) -> Decision {
        state.held.retain(|h| h.expires > now);
        let in_flight = in_flight(state);
        let max = self.max.get();
        let outcome = if cost > max {
            Outcome::CostTooHigh
        } else if in_flight.saturating_add(cost) <= max {
            if cost > 0 {
                state.held.push(Held {
                    id,
                    cost,
                    expires: now.saturating_add(self.lease.get()),
                });
            }
            Outcome::Allowed
        } else {
            // Without releases, the earliest time enough leases have run out.
            let mut left = in_flight;
            let mut by_expiry: Vec<&Held> = state.held.iter().collect();
            by_expiry.sort_unstable_by_key(|h| h.expires);
            let at = by_expiry
                .into_iter()
                .find(|h| {
                    // Saturating: the count itself saturates after absurd settles.
                    left = left.saturating_sub(h.cost);
                    left.saturating_add(cost) <= max
                })
                .map_or(self.lease.get(), |h| h.expires - now);
            Outcome::Limited { retry_after_ns: at }
        };
        self.report(outcome, state, now)
    }

    /// Gives back the permit `id`; false if it was not held (already released, or lapsed).
    pub fn release(&self, state: &mut ConcurrencyState, id: u64) -> bool {
        match state.held.iter().position(|h| h.id == id) {
            Some(i) => {
                state.held.swap_remove(i);
                true
            }
            None => false,
        }
    }

    fn report(&self, outcome: Outcome, state: &ConcurrencyState, now: u64) -> Decision {
        let max = self.max.get();
        let reset = state
            .held
            .iter()
            .map(|h| h.expires.saturating_sub(now))
            .max()
            .unwrap_or(0);
        Decision::new(outcome, max, max.saturating_sub(in_flight(state)), reset)
    }
}

fn in_flight(state: &ConcurrencyState) -> u64 {
    state
        .held
        .iter()
        .fold(0u64, |n, h| n.saturating_add(h.cost))
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;

    fn decide(&self, state: &mut ConcurrencyState, now: u64, cost: u64) -> Decision {
        let mut next = state.clone();
        let decision = self.acquire(&mut next, now, cost, 0);
        if decision.is_allowed() {
            *state = next;
        }
        decision
    }

    fn peek(&self, state: &ConcurrencyState, now: u64, cost: u64) -> Decision {
        let mut scratch = state.clone();
        self.acquire(&mut scratch, now, cost, 0)
    }

    /// A positive delta holds that many more units under an anonymous permit (until its
    /// lease runs out); a negative one gives back anonymous units, newest first.
    fn settle(&self, state: &mut ConcurrencyState, now: u64, delta: i64) {
        state.held.retain(|h| h.expires > now);
        if delta > 0 {
            state.held.push(Held {
                id: 0,
                cost: delta.unsigned_abs(),
                expires: now.saturating_add(self.lease.get()),
            });
            return;
        }
        let mut refund = delta.unsigned_abs();
        while refund > 0 {
            let Some(i) = state.held.iter().rposition(|h| h.id == 0) else {
                break;
            };
            let take = refund.min(state.held[i].cost);
            state.held[i].cost -= take;
            refund -= take;
            if state.held[i].cost == 0 {
                state.held.remove(i);
            }
        }
    }

    fn is_fresh(&self, state: &ConcurrencyState, now: u64) -> bool {
        state.held.iter().all(|h| h.expires <= now)
    }

    fn limit(&self) -> u64 {
        self.max.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crashed_holder_frees_its_permit_when_the_lease_runs_out() {
        let limit = Concurrency::new(1, Duration::from_secs(10)).unwrap();
        let mut s = ConcurrencyState::default();
        assert!(limit.acquire(&mut s, 0, 1, 7).is_allowed());
        let d = limit.acquire(&mut s, 1_000_000_000, 1, 8);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(9)));
        assert!(!limit.acquire(&mut s, 9_999_999_999, 1, 8).is_allowed());
        assert!(limit.acquire(&mut s, 10_000_000_000, 1, 8).is_allowed());
        // The lapsed permit is gone: releasing it late does nothing.
        assert!(!limit.release(&mut s, 7));
        assert!(limit.release(&mut s, 8));
        assert!(limit.is_fresh(&s, 10_000_000_000));
    }

    #[test]
    fn weighted_permits() {
        let limit = Concurrency::new(4, Duration::from_secs(1)).unwrap();
        let mut s = ConcurrencyState::default();
        assert!(limit.acquire(&mut s, 0, 3, 1).is_allowed());
        assert!(!limit.acquire(&mut s, 0, 2, 2).is_allowed());
        assert_eq!(limit.acquire(&mut s, 0, 5, 2).outcome, Outcome::CostTooHigh);
        let d = limit.acquire(&mut s, 0, 1, 2);
        assert_eq!(d.remaining, 0);
    }
}
