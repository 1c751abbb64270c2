//! The token bucket: a count of tokens, topped up from the elapsed time before each decision.

use super::{saturate, Algorithm};
use crate::{Decision, Error, Outcome, Rate, Ticks};

/// A token bucket holding up to `burst` tokens, refilled at `rate`.
///
/// No timer drips tokens in: the state is the token count (kept as the tokens spent, so an
/// unseen key is simply zero) and when it was last topped up, and each decision first refills
/// `elapsed × rate`, capped at `burst`. Over any span `t` it admits at
/// most `burst + rate·t`. A key never seen starts with a full bucket.
///
/// Tokens are counted in ticks, fractions of a token chosen so that the refill of one
/// nanosecond is a whole number of them: refill is exact for any rate.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, Rate, TokenBucket};
///
/// let bucket = TokenBucket::new(Rate::per_second(5)?, 5)?;
/// let mut state = Default::default();
/// assert_eq!(bucket.decide(&mut state, 0, 5).remaining, 0);
/// assert!(!bucket.decide(&mut state, 100_000_000, 1).is_allowed());
/// assert!(bucket.decide(&mut state, 200_000_000, 1).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    rate: Rate,
    burst: u64,
    /// `burst` tokens in ticks.
    capacity: u128,
}

/// A token bucket's state: the tokens taken and not yet refilled, and when that was counted.
///
/// The bucket holds `burst − spent` tokens, so the default (nothing spent) is a full bucket:
/// a key never seen. `spent` above the burst is a debt left by a
/// [`settle`](Algorithm::settle).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Tokens spent and not yet refilled, in ticks (one token is an emission interval's
    /// worth).
    pub spent: Ticks,
    /// When `spent` was last brought up to date, in nanoseconds.
    pub last: u64,
}

impl TokenBucket {
    /// A bucket of `burst` tokens refilled at `rate`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `burst` is zero.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, Error> {
        if burst == 0 {
            return Err(Error::Zero { field: "burst" });
        }
        let capacity = u128::from(burst) * u128::from(rate.ticks_per_cell().get());
        Ok(Self {
            rate,
            burst,
            capacity,
        })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The bucket's capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn tokens(&self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.rate.ticks_per_cell().get())
    }

    /// Tokens spent at `now`, after refilling for the time since `state.last`.
    #[inline]
    fn spent(&self, state: &TokenBucketState, now: u64) -> u128 {
        let elapsed = now.saturating_sub(state.last);
        let refill = u128::from(elapsed) * u128::from(self.rate.ticks_per_ns().get());
        state.spent.get().saturating_sub(refill)
    }

    #[inline]
    fn report(&self, outcome: Outcome, spent: u128) -> Decision {
        let held = self.capacity.saturating_sub(spent);
        let remaining = saturate(self.rate.ticks_per_cell().div(held));
        let reset = saturate(self.rate.ticks_per_ns().div_ceil(spent));
        Decision::new(outcome, self.burst, remaining, reset)
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    #[inline]
    fn decide(&self, state: &mut TokenBucketState, now: u64, cost: u64) -> Decision {
        let spent = self.spent(state, now);
        if cost > self.burst {
            return self.report(Outcome::CostTooHigh, spent);
        }
        let after = spent.saturating_add(self.tokens(cost));
        if after <= self.capacity {
            *state = TokenBucketState {
                spent: Ticks::new(after),
                last: state.last.max(now),
            };
            return self.report(Outcome::Allowed, after);
        }
        let wait = saturate(self.rate.ticks_per_ns().div_ceil(after - self.capacity));
        self.report(
            Outcome::Limited {
                retry_after_ns: wait,
            },
            spent,
        )
    }

    fn settle(&self, state: &mut TokenBucketState, now: u64, delta: i64) {
        let spent = self.spent(state, now);
        let amount = self.tokens(delta.unsigned_abs());
        let spent = if delta >= 0 {
            spent.saturating_add(amount)
        } else {
            spent.saturating_sub(amount)
        };
        *state = TokenBucketState {
            spent: Ticks::new(spent),
            last: state.last.max(now),
        };
    }

    fn is_fresh(&self, state: &TokenBucketState, now: u64) -> bool {
        self.spent(state, now) == 0
    }

    fn limit(&self) -> u64 {
        self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn debt_is_waited_out_exactly() {
        let b = TokenBucket::new(Rate::per_second(10).unwrap(), 10).unwrap();
        let mut s = TokenBucketState::default();
        assert!(b.decide(&mut s, 0, 10).is_allowed());
        b.settle(&mut s, 0, 5); // the request really cost 15: 5 tokens of debt
        let d = b.decide(&mut s, 0, 1);
        // 6 tokens to refill at 10/s.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(600)));
        assert_eq!(d.remaining, 0);
        b.settle(&mut s, 0, -100); // refunds stop at a full bucket
        assert!(b.is_fresh(&s, 0));
    }

    #[test]
    fn unseen_bucket_is_full_and_fresh() {
        let b = TokenBucket::new(Rate::per_second(1).unwrap(), 3).unwrap();
        let s = TokenBucketState::default();
        assert!(b.is_fresh(&s, 42));
        assert_eq!(b.peek(&s, 42, 1).remaining, 2);
    }
}
