//! Virtual scheduling: the arithmetic GCRA and the leaky-bucket queue share.
//!
//! Time is scaled by the rate's count, so the emission interval `period / count` is a whole
//! number of scaled units (`period`) and nothing is ever rounded. A key's whole state is its
//! theoretical arrival time (TAT) in those units: when it would be caught up had it sent at
//! exactly the allowed rate.

use super::{div_ceil, saturate};
use crate::Rate;

/// A TAT-based schedule with room for `capacity` cells at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Schedule {
    pub(crate) rate: Rate,
    pub(crate) capacity: u64,
}

/// What a schedule says about `cost` cells at `now`.
pub(crate) enum Check {
    /// Conforming: the new TAT, and how far the start of service lies in the future (scaled).
    Fits { new_tat: u128, wait: u128 },
    /// Not yet: the scaled time until it would conform.
    NotYet { after: u128 },
    /// Never: more cells than the capacity.
    Never,
}

impl Schedule {
    pub(crate) fn scaled(&self, now: u64) -> u128 {
        u128::from(now) * u128::from(self.rate.count())
    }

    fn cells(&self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.rate.period_ns())
    }

    /// Scaled time back to nanoseconds, rounded up so a caller never comes back too early.
    pub(crate) fn ns_ceil(&self, scaled: u128) -> u64 {
        saturate(div_ceil(scaled, u128::from(self.rate.count())))
    }

    pub(crate) fn check(&self, tat: u128, now: u64, cost: u64) -> Check {
        if cost > self.capacity {
            return Check::Never;
        }
        let now = self.scaled(now);
        let start = tat.max(now);
        let Some(new_tat) = start.checked_add(self.cells(cost)) else {
            // Only absurd parameters get here (2^64 cells of 2^64 ns at 2^64 ns): the request
            // would conform past any representable time.
            return Check::NotYet { after: u128::MAX };
        };
        let allowance = self.cells(self.capacity);
        let ahead = new_tat - now;
        if ahead <= allowance {
            Check::Fits {
                new_tat,
                wait: start - now,
            }
        } else {
            Check::NotYet {
                after: ahead - allowance,
            }
        }
    }

    /// Whole cells that would still conform right now.
    pub(crate) fn remaining(&self, tat: u128, now: u64) -> u64 {
        let ahead = tat.saturating_sub(self.scaled(now));
        let room = self.cells(self.capacity).saturating_sub(ahead);
        saturate(room / u128::from(self.rate.period_ns()))
    }

    /// Nanoseconds until the schedule is caught up (the key is fresh again).
    pub(crate) fn reset_after(&self, tat: u128, now: u64) -> u64 {
        self.ns_ceil(tat.saturating_sub(self.scaled(now)))
    }

    /// Moves the TAT by `delta` cells: forward to charge (without bound: a debt), backward to
    /// refund (never behind `now`, where the key is fresh).
    pub(crate) fn settle(&self, tat: u128, now: u64, delta: i64) -> u128 {
        let now = self.scaled(now);
        let base = tat.max(now);
        let cells = self.cells(delta.unsigned_abs());
        if delta >= 0 {
            base.saturating_add(cells)
        } else {
            base.saturating_sub(cells).max(now)
        }
    }
}
