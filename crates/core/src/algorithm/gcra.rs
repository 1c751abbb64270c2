//! GCRA: the generic cell rate algorithm, one theoretical arrival time per key.

use super::schedule::Schedule;
use super::Algorithm;
use crate::{Decision, Error, Rate, Ticks};

/// The generic cell rate algorithm: token-bucket decisions from one number per key.
///
/// Each allowed request of cost `n` pushes the key's theoretical arrival time (TAT) forward by
/// `n` emission intervals (`T = period / count`); a request is rejected if it would push the
/// TAT more than `burst · T` ahead of now. The rejected request's retry time is exactly how far
/// over it would go.
///
/// # Examples
///
/// The lesson's example: 5 per second, burst 5; six requests at t = 0.
///
/// ```
/// use ratewarden_core::{Algorithm, Gcra, Rate};
/// use std::time::Duration;
///
/// let gcra = Gcra::new(Rate::per_second(5)?, 5)?;
/// let mut tat = Default::default();
/// let remaining: Vec<u64> = (0..5).map(|_| gcra.decide(&mut tat, 0, 1).remaining).collect();
/// assert_eq!(remaining, [4, 3, 2, 1, 0]);
/// let sixth = gcra.decide(&mut tat, 0, 1);
/// assert_eq!(sixth.retry_after(), Some(Duration::from_millis(200)));
/// // Exactly at the retry time it passes; a nanosecond earlier it would not.
/// assert!(!gcra.peek(&tat, 199_999_999, 1).is_allowed());
/// assert!(gcra.decide(&mut tat, 200_000_000, 1).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gcra {
    schedule: Schedule,
}

/// A GCRA key's state: its theoretical arrival time, in the rate's ticks (see below).
/// Zero (the default) is a key never seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// The theoretical arrival time, in ticks: nanoseconds times `count / gcd(count, period)`,
    /// which is plain nanoseconds whenever the count divides the period (`5/s`, `1000/m`).
    pub tat: Ticks,
}

impl Gcra {
    /// GCRA at `rate`, allowing `burst` cells at once.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `burst` is zero.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, Error> {
        if burst == 0 {
            return Err(Error::Zero { field: "burst" });
        }
        Ok(Self {
            schedule: Schedule::new(rate, burst),
        })
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.schedule.rate
    }

    /// The burst.
    pub fn burst(&self) -> u64 {
        self.schedule.capacity
    }

    /// GCRA's conformance test alone, on a theoretical arrival time held as 64-bit
    /// nanoseconds: whether a request of `cost` at `now` conforms, and the arrival time
    /// after it. `None`, before anything is computed, when that representation does not
    /// apply (a tick is not a nanosecond, a cost above the burst, or a number past 64 bits):
    /// then [`decide`](Algorithm::decide) answers.
    ///
    /// It is what [`decide`](Algorithm::decide) does, without computing the decision's
    /// numbers (remaining, reset, retry): for a store that only needs "go or not", and that
    /// asks `peek` on the same `tat` for the numbers of a refusal when someone reads them (a
    /// refusal leaves the state unchanged, so that answer is the refusal's).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{Algorithm, Gcra, Rate, Ticks};
    /// use ratewarden_core::algorithm::GcraState;
    ///
    /// let gcra = Gcra::new(Rate::per_second(5)?, 1)?;
    /// let first = gcra.conform_ns(0, 1_000, 1).expect("nanosecond ticks");
    /// assert!(first.conforms && first.limited);
    /// assert_eq!(first.tat, 200_001_000);
    /// let second = gcra.conform_ns(first.tat, 1_000, 1).expect("nanosecond ticks");
    /// assert!(!second.conforms);
    /// let state = GcraState { tat: Ticks::new(first.tat.into()) };
    /// assert_eq!(gcra.peek(&state, 1_000, 1).retry_after_ns(), Some(200_000_000));
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    #[inline]
    pub fn conform_ns(&self, tat: u64, now: u64, cost: u64) -> Option<Conformance> {
        self.schedule.conform_narrow(tat, now, cost)
    }
}

/// GCRA's conformance test on a 64-bit arrival time ([`Gcra::conform_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conformance {
    /// Whether the request conforms (and was charged, in `tat`).
    pub conforms: bool,
    /// The theoretical arrival time after the request, in nanoseconds: moved by its cost
    /// when it conforms, unchanged when it does not.
    pub tat: u64,
    /// Whether a request of one cell would be refused at the same instant, after this one.
    pub limited: bool,
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn decide(&self, state: &mut GcraState, now: u64, cost: u64) -> Decision {
        self.schedule.decide(&mut state.tat, now, cost, false)
    }

    fn settle(&self, state: &mut GcraState, now: u64, delta: i64) {
        state.tat = Ticks::new(self.schedule.settle(state.tat.get(), now, delta));
    }

    fn is_fresh(&self, state: &GcraState, now: u64) -> bool {
        state.tat.get() <= self.schedule.scaled(now)
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

    const MS: u64 = 1_000_000;

    #[test]
    fn cost_above_burst_can_never_fit_and_charges_nothing() {
        let g = Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap();
        let mut s = GcraState::default();
        assert_eq!(g.decide(&mut s, 0, 6).outcome, Outcome::CostTooHigh);
        assert_eq!(s, GcraState::default());
        assert!(g.decide(&mut s, 0, 5).is_allowed());
        let d = g.decide(&mut s, 0, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
    }

    #[test]
    fn weighted_request_waits_for_all_its_cells() {
        // redis-cell's worked check: limit 5 at 1/s; 3 spent, a request of 5 waits 3 s.
        let g = Gcra::new(Rate::per_second(1).unwrap(), 5).unwrap();
        let mut s = GcraState::default();
        assert!(g.decide(&mut s, 0, 3).is_allowed());
        let d = g.decide(&mut s, 0, 5);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn non_integral_intervals_are_exact() {
        // 3 per second, burst 3: after a burst at t = 0, cells are due at exactly 1/3 s,
        // 2/3 s and 1 s (rounded up to the nanosecond), never earlier.
        let g = Gcra::new(Rate::per_second(3).unwrap(), 3).unwrap();
        let mut s = GcraState::default();
        assert!(g.decide(&mut s, 0, 3).is_allowed());
        let d = g.decide(&mut s, 0, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(333_333_334)));
        assert!(!g.peek(&s, 333_333_333, 1).is_allowed());
        assert!(g.decide(&mut s, 333_333_334, 1).is_allowed());
        assert!(!g.peek(&s, 666_666_666, 1).is_allowed());
        assert!(g.decide(&mut s, 666_666_667, 1).is_allowed());
        assert!(!g.peek(&s, 1_000 * MS - 1, 1).is_allowed());
        assert!(g.decide(&mut s, 1_000 * MS, 1).is_allowed());
        assert!(!g.decide(&mut s, 1_000 * MS, 1).is_allowed());
    }

    #[test]
    fn time_going_backwards_is_no_time_passing() {
        let g = Gcra::new(Rate::per_second(5).unwrap(), 1).unwrap();
        let mut s = GcraState::default();
        assert!(g.decide(&mut s, 1_000 * MS, 1).is_allowed());
        let d = g.decide(&mut s, 500 * MS, 1);
        assert_eq!(d.retry_after(), Some(Duration::from_millis(700)));
    }

    #[test]
    fn fresh_after_reset() {
        let g = Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap();
        let mut s = GcraState::default();
        let d = g.decide(&mut s, 0, 2);
        assert_eq!(d.reset_after(), Duration::from_millis(400));
        assert!(!g.is_fresh(&s, 399 * MS));
        assert!(g.is_fresh(&s, 400 * MS));
    }
}
