//! The leaky bucket as a meter: a water level that rises per request and drains at the rate.

use super::{saturate, Algorithm};
use crate::{Decision, Error, Outcome, Rate};

/// A leaky bucket used as a meter: each request pours its cost in, the bucket drains at `rate`,
/// and a request that would overflow `burst` is rejected.
///
/// Turned upside down it is a [`TokenBucket`](super::TokenBucket) (the empty space is the token
/// count): with the same rate and burst the two make identical decisions. This is nginx's
/// `limit_req … nodelay`. For the queue that delays instead, see
/// [`LeakyQueue`](super::LeakyQueue).
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, LeakyBucket, Rate};
/// use std::time::Duration;
///
/// let meter = LeakyBucket::new(Rate::per_second(5)?, 2)?;
/// let mut level = Default::default();
/// assert!(meter.decide(&mut level, 0, 2).is_allowed());
/// let d = meter.decide(&mut level, 0, 1);
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    rate: Rate,
    burst: u64,
}

/// A meter's state. The default, an empty bucket, is a key never seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LeakyBucketState {
    /// Water in the bucket, in ticks (an emission interval holds one request's worth); above the capacity while
    /// in debt after a [`settle`](Algorithm::settle).
    pub level: u128,
    /// When the level was last drained, in nanoseconds.
    pub last: u64,
}

impl LeakyBucket {
    /// A meter of capacity `burst`, draining at `rate`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `burst` is zero.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, Error> {
        if burst == 0 {
            return Err(Error::Zero { field: "burst" });
        }
        Ok(Self { rate, burst })
    }

    /// The drain rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn water(&self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.rate.ticks_per_cell().get())
    }

    fn drained(&self, state: &LeakyBucketState, now: u64) -> LeakyBucketState {
        let elapsed = now.saturating_sub(state.last);
        LeakyBucketState {
            level: state
                .level
                .saturating_sub(u128::from(elapsed) * u128::from(self.rate.ticks_per_ns().get())),
            last: state.last.max(now),
        }
    }

    fn report(&self, outcome: Outcome, state: &LeakyBucketState) -> Decision {
        let room = self.water(self.burst).saturating_sub(state.level);
        let remaining = saturate(self.rate.ticks_per_cell().div(room));
        let reset = saturate(self.rate.ticks_per_ns().div_ceil(state.level));
        Decision::new(outcome, self.burst, remaining, reset)
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn decide(&self, state: &mut LeakyBucketState, now: u64, cost: u64) -> Decision {
        let current = self.drained(state, now);
        if cost > self.burst {
            return self.report(Outcome::CostTooHigh, &current);
        }
        let level = current.level.saturating_add(self.water(cost));
        let capacity = self.water(self.burst);
        if level <= capacity {
            *state = LeakyBucketState { level, ..current };
            return self.report(Outcome::Allowed, state);
        }
        let wait = saturate(self.rate.ticks_per_ns().div_ceil(level - capacity));
        let outcome = Outcome::Limited {
            retry_after_ns: wait,
        };
        self.report(outcome, &current)
    }

    fn settle(&self, state: &mut LeakyBucketState, now: u64, delta: i64) {
        let mut current = self.drained(state, now);
        let water = self.water(delta.unsigned_abs());
        current.level = if delta >= 0 {
            current.level.saturating_add(water)
        } else {
            current.level.saturating_sub(water)
        };
        *state = current;
    }

    fn is_fresh(&self, state: &LeakyBucketState, now: u64) -> bool {
        self.drained(state, now).level == 0
    }

    fn limit(&self) -> u64 {
        self.burst
    }
}
