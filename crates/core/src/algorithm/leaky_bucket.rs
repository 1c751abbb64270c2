//! The leaky bucket as a meter: a water level that rises per request and drains at the rate.

use super::{Algorithm, TokenBucket, TokenBucketState};
use crate::{Decision, Error, Rate};

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
    /// The same bucket, upside down: the water level is the tokens spent.
    bucket: TokenBucket,
}

/// A meter's state: [`TokenBucketState`], whose `spent` is the water level. The default, an
/// empty bucket, is a key never seen.
pub type LeakyBucketState = TokenBucketState;

impl LeakyBucket {
    /// A meter of capacity `burst`, draining at `rate`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `burst` is zero.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, Error> {
        Ok(Self {
            bucket: TokenBucket::new(rate, burst)?,
        })
    }

    /// The drain rate.
    pub fn rate(&self) -> Rate {
        self.bucket.rate()
    }

    /// The capacity.
    pub fn burst(&self) -> u64 {
        self.bucket.burst()
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    #[inline]
    fn decide(&self, state: &mut LeakyBucketState, now: u64, cost: u64) -> Decision {
        self.bucket.decide(state, now, cost)
    }

    fn settle(&self, state: &mut LeakyBucketState, now: u64, delta: i64) {
        self.bucket.settle(state, now, delta);
    }

    fn is_fresh(&self, state: &LeakyBucketState, now: u64) -> bool {
        self.bucket.is_fresh(state, now)
    }

    fn limit(&self) -> u64 {
        self.bucket.limit()
    }
}
