//! The algorithms, one file each, each a pure transition over a small piece of state.
//!
//! | name | remembers | bursts | use it for |
//! |---|---|---|---|
//! | [`FixedWindow`] | a window id and a count | up to 2× the limit across a window edge | simple counters, calendar-like promises |
//! | [`SlidingLog`] | every allowed request's time (at most `limit`) | never more than `limit` in any window | small, costly limits (OTP sends) |
//! | [`SlidingWindow`] | two window counts, or `N + 1` slot counts | estimated, nearly exact on smooth traffic | per-minute limits over millions of keys |
//! | [`TokenBucket`] | a token count and when it was last topped up | at most `burst + rate·t` in any `t` | the common default for APIs |
//! | [`LeakyBucket`] | a water level and when it last drained | same decisions as the token bucket | the "meter" reading of the same idea |
//! | [`LeakyQueue`] | when the queue drains | none: excess waits its turn | smoothing traffic to a partner |
//! | [`Gcra`] | one theoretical arrival time | same decisions as the token bucket | token-bucket limits with one number a key |
//! | [`Quota`] | the calendar period and its count | a full period's allowance at its start | plans: "a million a month" |
//! | [`Concurrency`] | the permits in flight, with their leases | not a rate: at most `max` at once | threads, connections, GPU slots |
//!
//! Every algorithm charges weighted costs, never charges a request it rejects, reports the
//! exact retry time, and can [`settle`](Algorithm::settle) a cost afterwards (so a caller can
//! reserve an estimate first and correct it once the real cost is known).

mod concurrency;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod leaky_queue;
mod quota;
mod schedule;
mod sliding_log;
mod sliding_window;
mod token_bucket;

use std::fmt;

pub use concurrency::{Concurrency, ConcurrencyState, Held};
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Conformance, Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use leaky_queue::{LeakyQueue, LeakyQueueState};
pub use quota::{CalendarUnit, Quota, QuotaState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState, SlotCount, MAX_SUB_WINDOWS};
pub use token_bucket::{TokenBucket, TokenBucketState};

use crate::Decision;

/// A rate limiting algorithm: its parameters, and the transitions over one key's state.
///
/// `State::default()` is the state of a key never seen before. Implementations guarantee:
///
/// - a rejected request ([`Outcome::Limited`](crate::Outcome::Limited) or
///   [`Outcome::CostTooHigh`](crate::Outcome::CostTooHigh)) leaves the state unchanged;
/// - a request of cost 0 is checked without being charged;
/// - `retry_after` is exact: the same request at `now + retry_after` is allowed (if nothing
///   else was charged), and one nanosecond earlier it is not;
/// - time going backwards never panics; the algorithm treats it as no time passing.
pub trait Algorithm {
    /// One key's state: small plain data, so any store can hold it.
    type State: Clone + Default + fmt::Debug + Send + Sync + HeapSize;

    /// Decides a request of `cost` units at `now` (nanoseconds), charging it if allowed.
    fn decide(&self, state: &mut Self::State, now: u64, cost: u64) -> Decision;

    /// What [`decide`](Algorithm::decide) would answer, without charging anything.
    fn peek(&self, state: &Self::State, now: u64, cost: u64) -> Decision {
        let mut scratch = state.clone();
        self.decide(&mut scratch, now, cost)
    }

    /// Charges `delta` units at `now` without a decision: positive to charge more (the balance
    /// may go past the limit, and later requests wait the debt out), negative to refund (never
    /// past a fresh key's state).
    fn settle(&self, state: &mut Self::State, now: u64, delta: i64);

    /// Whether `state` is, at `now`, the same as a key never seen: then dropping it changes no
    /// decision, which is what lets a store evict it.
    fn is_fresh(&self, state: &Self::State, now: u64) -> bool;

    /// The limit decisions report (the burst, the window count, the queue capacity).
    fn limit(&self) -> u64;
}

/// The heap a state holds beyond its own size: what a store that bounds its bytes counts
/// for it besides the slot it sits in.
///
/// Most states are a few numbers and hold none; a sliding log holds its entries and a
/// concurrency limit its permits, which grow with what the key admits.
///
/// # Examples
///
/// ```
/// use ratewarden_core::algorithm::{HeapSize, SlidingLogState};
/// use ratewarden_core::{Algorithm, SlidingLog};
/// use std::time::Duration;
///
/// let log = SlidingLog::new(100, Duration::from_secs(60))?;
/// let mut state = SlidingLogState::default();
/// assert_eq!(state.heap_bytes(), 0);
/// for at in 0..100 {
///     log.decide(&mut state, at, 1);
/// }
/// assert!(state.heap_bytes() > 0 && state.heap_bytes() <= log.largest_heap_bytes());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
pub trait HeapSize {
    /// Bytes allocated on the heap for this state (0 for none).
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl HeapSize for FixedWindowState {}
impl HeapSize for SlidingWindowState {
    fn heap_bytes(&self) -> usize {
        match self {
            SlidingWindowState::Windows { .. } => 0,
            SlidingWindowState::Slots { counts, .. } => std::mem::size_of_val(&**counts),
        }
    }
}
impl HeapSize for TokenBucketState {}
impl HeapSize for LeakyQueueState {}
impl HeapSize for GcraState {}
impl HeapSize for QuotaState {}

impl HeapSize for ConcurrencyState {
    fn heap_bytes(&self) -> usize {
        self.held.capacity() * std::mem::size_of::<Held>()
    }
}

/// Nanoseconds to a `u64`, saturating (any later time is as good as "never" here).
pub(crate) fn saturate(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}
