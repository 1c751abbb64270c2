//! The leaky bucket as a queue: excess requests wait their turn instead of failing.

use super::schedule::Schedule;
use super::Algorithm;
use crate::{Decision, Error, Rate, Ticks};

/// A leaky bucket used as a queue: requests leave at exactly `rate`, excess ones wait, and an
/// arrival is rejected only when `burst` requests are already waiting.
///
/// This is nginx's `limit_req rate=… burst=…` without `nodelay`: the first request of an idle
/// key goes at once, the next `burst` are accepted with growing delays, and the one after is
/// rejected. The decision says how long to hold the request
/// ([`Outcome::Delayed`](crate::Outcome::Delayed)); the caller does the holding. Its
/// accept/reject decisions equal [`Gcra`](super::Gcra) with a burst of `burst + 1`; only the
/// delays differ.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, LeakyQueue, Rate};
/// use std::time::Duration;
///
/// let queue = LeakyQueue::new(Rate::per_second(5)?, 2)?;
/// let mut state = Default::default();
/// let delays: Vec<_> = (0..3).map(|_| queue.decide(&mut state, 0, 1).delay()).collect();
/// assert_eq!(delays, [Duration::ZERO, Duration::from_millis(200), Duration::from_millis(400)]);
/// assert!(!queue.decide(&mut state, 0, 1).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeakyQueue {
    schedule: Schedule,
}

/// A queue's state: when it will have drained, in the rate's ticks (as [`GcraState`](super::GcraState)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LeakyQueueState {
    /// When the last accepted request's turn ends, in ticks.
    pub drained_at: Ticks,
}

impl LeakyQueue {
    /// A queue releasing requests at `rate`, holding at most `burst` waiting ones.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] when `burst` is `u64::MAX` (the capacity is `burst + 1`).
    pub fn new(rate: Rate, burst: u64) -> Result<Self, Error> {
        let capacity = burst.checked_add(1).ok_or(Error::TooLarge {
            field: "burst",
            reason: "the queue's burst must be below 2^64 - 1".to_owned(),
        })?;
        Ok(Self {
            schedule: Schedule::new(rate, capacity),
        })
    }

    /// The rate requests leave at.
    pub fn rate(&self) -> Rate {
        self.schedule.rate
    }

    /// How many requests may wait.
    pub fn burst(&self) -> u64 {
        self.schedule.capacity - 1
    }
}

impl Algorithm for LeakyQueue {
    type State = LeakyQueueState;

    fn decide(&self, state: &mut LeakyQueueState, now: u64, cost: u64) -> Decision {
        self.schedule.decide(&mut state.drained_at, now, cost, true)
    }

    fn settle(&self, state: &mut LeakyQueueState, now: u64, delta: i64) {
        state.drained_at = Ticks::new(self.schedule.settle(state.drained_at.get(), now, delta));
    }

    fn is_fresh(&self, state: &LeakyQueueState, now: u64) -> bool {
        state.drained_at.get() <= self.schedule.scaled(now)
    }

    fn limit(&self) -> u64 {
        self.schedule.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;
    use std::time::Duration;

    #[test]
    fn nginx_burst_semantics() {
        // rate=5r/s burst=5: one now, five delayed by 200 ms steps, the seventh rejected.
        let q = LeakyQueue::new(Rate::per_second(5).unwrap(), 5).unwrap();
        let mut s = LeakyQueueState::default();
        for i in 0..6u64 {
            let d = q.decide(&mut s, 0, 1);
            assert_eq!(d.delay(), Duration::from_millis(200 * i), "request {i}");
        }
        let d = q.decide(&mut s, 0, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
        // Once a slot has drained, the next request queues behind the others.
        let d = q.decide(&mut s, 200_000_000, 1);
        assert_eq!(d.delay(), Duration::from_millis(1000));
    }

    #[test]
    fn cost_beyond_capacity_never_fits() {
        let q = LeakyQueue::new(Rate::per_second(5).unwrap(), 2).unwrap();
        let mut s = LeakyQueueState::default();
        assert_eq!(q.decide(&mut s, 0, 4).outcome, Outcome::CostTooHigh);
        assert!(q.decide(&mut s, 0, 3).is_allowed());
    }
}
