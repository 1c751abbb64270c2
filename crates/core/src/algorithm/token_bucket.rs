//! The token bucket: a count of tokens, topped up from the elapsed time before each decision.

use super::{saturate, Algorithm};
use crate::{Decision, Error, Outcome, Rate};

/// A token bucket holding up to `burst` tokens, refilled at `rate`.
///
/// No timer drips tokens in: the state is the token count and when it was last topped up, and
/// each decision first adds `elapsed × rate`, capped at `burst`. Over any span `t` it admits at
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
}

/// A token bucket's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Tokens held, in ticks (one token is an emission interval's worth); negative while in debt after a
    /// [`settle`](Algorithm::settle). Meaningless until `filled`.
    pub tokens: i128,
    /// When the bucket was last topped up, in nanoseconds.
    pub last: u64,
    /// Whether the bucket has been seen; an unseen bucket is full.
    pub filled: bool,
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
        Ok(Self { rate, burst })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The bucket's capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    fn tokens(&self, n: u64) -> i128 {
        // n ≤ 2^64 and period < 2^64, so the product fits in 128 bits.
        i128::try_from(u128::from(n) * u128::from(self.rate.ticks_per_cell().get()))
            .unwrap_or(i128::MAX)
    }

    /// The bucket as it stands at `now`: topped up, and with the time of that top-up.
    fn refilled(&self, state: &TokenBucketState, now: u64) -> TokenBucketState {
        let full = self.tokens(self.burst);
        if !state.filled {
            return TokenBucketState {
                tokens: full,
                last: now,
                filled: true,
            };
        }
        let elapsed = now.saturating_sub(state.last);
        let refill = i128::from(elapsed) * i128::from(self.rate.ticks_per_ns().get());
        TokenBucketState {
            tokens: state.tokens.saturating_add(refill).min(full),
            last: state.last.max(now),
            filled: true,
        }
    }

    fn report(&self, outcome: Outcome, state: &TokenBucketState) -> Decision {
        let tokens = u128::try_from(state.tokens).unwrap_or(0);
        let remaining = saturate(self.rate.ticks_per_cell().div(tokens));
        let missing = u128::try_from(self.tokens(self.burst) - state.tokens).unwrap_or(0);
        let reset = saturate(self.rate.ticks_per_ns().div_ceil(missing));
        Decision::new(outcome, self.burst, remaining, reset)
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn decide(&self, state: &mut TokenBucketState, now: u64, cost: u64) -> Decision {
        let current = self.refilled(state, now);
        if cost > self.burst {
            return self.report(Outcome::CostTooHigh, &current);
        }
        let needed = self.tokens(cost);
        if current.tokens >= needed {
            *state = TokenBucketState {
                tokens: current.tokens - needed,
                ..current
            };
            return self.report(Outcome::Allowed, state);
        }
        let short = u128::try_from(needed - current.tokens).unwrap_or(0);
        let wait = saturate(self.rate.ticks_per_ns().div_ceil(short));
        let outcome = Outcome::Limited {
            retry_after_ns: wait,
        };
        self.report(outcome, &current)
    }

    fn settle(&self, state: &mut TokenBucketState, now: u64, delta: i64) {
        let mut current = self.refilled(state, now);
        let amount = self.tokens(delta.unsigned_abs());
        current.tokens = if delta >= 0 {
            current.tokens.saturating_sub(amount)
        } else {
            current
                .tokens
                .saturating_add(amount)
                .min(self.tokens(self.burst))
        };
        *state = current;
    }

    fn is_fresh(&self, state: &TokenBucketState, now: u64) -> bool {
        self.refilled(state, now).tokens == self.tokens(self.burst)
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
