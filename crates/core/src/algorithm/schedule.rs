//! Virtual scheduling: the arithmetic GCRA and the leaky-bucket queue share.
//!
//! Time is counted in the rate's ticks (nanoseconds times `count / gcd(count, period)`), so
//! the emission interval `period / count` is a whole number of ticks and nothing is ever
//! rounded. A key's whole state is its theoretical arrival time (TAT) in ticks: when it would
//! be caught up had it sent at exactly the allowed rate.

use super::gcra::Conformance;
use super::saturate;
use crate::{Decision, Outcome, Rate, Ticks};

/// A TAT-based schedule with room for `capacity` cells at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Schedule {
    pub(crate) rate: Rate,
    pub(crate) capacity: u64,
    /// `capacity` cells in scaled units: how far ahead of now the TAT may run.
    allowance: u128,
    /// The allowance when a tick is a nanosecond and it fits in 64 bits (every rate whose
    /// count divides its period, at any sane burst): then a decision whose numbers all fit
    /// in 64 bits is computed in them, without 128-bit arithmetic or dividing by one.
    narrow: Option<u64>,
}

impl Schedule {
    pub(crate) fn new(rate: Rate, capacity: u64) -> Self {
        let allowance = u128::from(capacity) * u128::from(rate.ticks_per_cell().get());
        let narrow = (rate.ticks_per_ns().get() == 1)
            .then(|| u64::try_from(allowance).ok())
            .flatten();
        Self {
            rate,
            capacity,
            allowance,
            narrow,
        }
    }

    pub(crate) fn scaled(&self, now: u64) -> u128 {
        u128::from(now) * u128::from(self.rate.ticks_per_ns().get())
    }

    fn cells(&self, n: u64) -> u128 {
        u128::from(n) * u128::from(self.rate.ticks_per_cell().get())
    }

    /// Scaled time back to nanoseconds, rounded up so a caller never comes back too early.
    pub(crate) fn ns_ceil(&self, scaled: u128) -> u64 {
        saturate(self.rate.ticks_per_ns().div_ceil(scaled))
    }

    /// Decides `cost` cells at `now` against the schedule `tat`, moving it if they conform.
    /// With `queue`, a conforming request is reported as delayed until its turn.
    ///
    /// Everything is computed from the backlog (how far the TAT runs ahead of now), once.
    #[inline]
    pub(crate) fn decide(&self, tat: &mut Ticks, now: u64, cost: u64, queue: bool) -> Decision {
        if let Some(decision) = self.decide_narrow(tat, now, cost, queue) {
            return decision;
        }
        self.decide_wide(tat, now, cost, queue)
    }

    /// [`decide`](Self::decide) in the rate's ticks, in 128 bits: out of line, so that the
    /// 64-bit path inlined into a store's decision stays small.
    #[inline(never)]
    fn decide_wide(&self, tat: &mut Ticks, now: u64, cost: u64, queue: bool) -> Decision {
        let now = self.scaled(now);
        let before = tat.get().saturating_sub(now);
        let mut backlog = before;
        let outcome = if cost > self.capacity {
            Outcome::CostTooHigh
        } else {
            // Saturation only happens with absurd parameters (2^64 cells of 2^64 ns), and
            // then the request is over the allowance, as it should be.
            let after = before.saturating_add(self.cells(cost));
            if after <= self.allowance {
                *tat = Ticks::new(now.saturating_add(after));
                backlog = after;
                if queue {
                    Outcome::Delayed {
                        delay_ns: self.ns_ceil(before),
                    }
                } else {
                    Outcome::Allowed
                }
            } else {
                Outcome::Limited {
                    retry_after_ns: self.ns_ceil(after - self.allowance),
                }
            }
        };
        let room = self.allowance.saturating_sub(backlog);
        // Less than one cell of room is none left: no division. That is every rejection of a
        // single cell (the request would not fit), so a flood of them pays two divisions, not
        // three.
        let per_cell = self.rate.ticks_per_cell();
        let remaining = if room < u128::from(per_cell.get()) {
            0
        } else {
            saturate(per_cell.div(room))
        };
        Decision::new(outcome, self.capacity, remaining, self.ns_ceil(backlog))
    }

    /// [`decide`](Self::decide) in 64-bit nanoseconds, when a tick is a nanosecond and
    /// every number fits (`None` otherwise, before changing anything): the same decision
    /// without 128-bit tick arithmetic.
    #[inline]
    fn decide_narrow(&self, tat: &mut Ticks, now: u64, cost: u64, queue: bool) -> Option<Decision> {
        let allowance = self.narrow?;
        let per_cell = self.rate.ticks_per_cell();
        let before = u64::try_from(tat.get()).ok()?.saturating_sub(now);
        if cost > self.capacity {
            return None;
        }
        let after = before.checked_add(cost.checked_mul(per_cell.get())?)?;
        let (outcome, backlog) = if after <= allowance {
            *tat = Ticks::new(u128::from(now.checked_add(after)?));
            let outcome = if queue {
                Outcome::Delayed { delay_ns: before }
            } else {
                Outcome::Allowed
            };
            (outcome, after)
        } else {
            let retry_after_ns = after - allowance;
            (Outcome::Limited { retry_after_ns }, before)
        };
        let room = allowance.saturating_sub(backlog);
        let remaining = if room < per_cell.get() {
            0
        } else {
            per_cell.div_rem(room).0
        };
        Some(Decision::new(outcome, self.capacity, remaining, backlog))
    }

    /// The conformance test of [`decide_narrow`](Self::decide_narrow) alone, on a 64-bit
    /// TAT in nanoseconds (`None` where that path does not apply, before anything): whether
    /// `cost` cells fit at `now`, the TAT after (unchanged when they do not), and whether a
    /// single cell would be refused then. No decision is built: a caller that only needs
    /// "go or not" pays for the comparison, and asks [`decide`](Self::decide) on the same
    /// TAT for the numbers when it wants them (a refusal leaves the TAT as it was, so the
    /// answer is the same).
    #[inline]
    pub(crate) fn conform_narrow(&self, tat: u64, now: u64, cost: u64) -> Option<Conformance> {
        let allowance = self.narrow?;
        let per_cell = self.rate.ticks_per_cell().get();
        if cost > self.capacity {
            return None;
        }
        let before = tat.saturating_sub(now);
        let after = before.checked_add(cost.checked_mul(per_cell)?)?;
        if after <= allowance {
            let tat = now.checked_add(after)?;
            Some(Conformance {
                conforms: true,
                tat,
                // `allowance - after` and `allowance - per_cell` cannot wrap: `after` fits,
                // and a cell is at most the burst.
                limited: per_cell > allowance - after,
            })
        } else {
            Some(Conformance {
                conforms: false,
                tat,
                limited: before > allowance - per_cell,
            })
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    /// The decision computed the plain way, `remaining` always dividing the room left: the
    /// reference for the path where a rejection skips that division.
    fn three_divisions(
        s: &Schedule,
        tat: &mut Ticks,
        now: u64,
        cost: u64,
        queue: bool,
    ) -> Decision {
        let now = s.scaled(now);
        let before = tat.get().saturating_sub(now);
        let mut backlog = before;
        let outcome = if cost > s.capacity {
            Outcome::CostTooHigh
        } else {
            let after = before.saturating_add(s.cells(cost));
            if after <= s.allowance {
                *tat = Ticks::new(now.saturating_add(after));
                backlog = after;
                if queue {
                    Outcome::Delayed {
                        delay_ns: s.ns_ceil(before),
                    }
                } else {
                    Outcome::Allowed
                }
            } else {
                Outcome::Limited {
                    retry_after_ns: s.ns_ceil(after - s.allowance),
                }
            }
        };
        let room = s.allowance.saturating_sub(backlog);
        let remaining = saturate(s.rate.ticks_per_cell().div(room));
        Decision::new(outcome, s.capacity, remaining, s.ns_ceil(backlog))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_048))]

        /// Every field a caller reads is what the three-division computation in 128 bits
        /// gave, on random rates, bursts, states, times and costs, allowed and rejected
        /// alike, in 64 bits or not.
        #[test]
        fn a_rejection_without_the_remaining_division_decides_the_same(
            // Counts dividing the period (a tick is a nanosecond: the 64-bit path) as often
            // as not.
            count in prop_oneof![1u64..2_000, Just(1u64), Just(50u64), Just(1_000u64)],
            period_ms in 1u64..120_000,
            capacity in 1u64..1_000,
            tat in any::<u64>(),
            tat_hi in prop_oneof![Just(0u64), any::<u64>()],
            now in any::<u64>(),
            cost in prop_oneof![0u64..3, 0u64..1_200],
            queue in any::<bool>(),
        ) {
            let rate = Rate::new(count, Duration::from_millis(period_ms)).unwrap();
            let s = Schedule::new(rate, capacity);
            // Mostly a backlog of up to two bursts (where rejections happen), sometimes a key
            // fresh at `now`.
            let raw = u128::from(tat_hi) << 64 | u128::from(tat);
            let base = s.scaled(now);
            let per_cell = u128::from(s.rate.ticks_per_cell().get());
            let tat = if tat_hi % 4 == 1 {
                raw % (base + 1)
            } else if tat_hi % 4 == 2 {
                // Room of exactly a whole number of cells: the edge of the shortcut.
                base + s.allowance - per_cell * (raw % u128::from(capacity.min(3) + 1))
            } else {
                base + raw % (2 * s.allowance + 1)
            };
            let (mut new, mut old) = (Ticks::new(tat), Ticks::new(tat));
            prop_assert_eq!(s.decide(&mut new, now, cost, queue), three_divisions(&s, &mut old, now, cost, queue));
            prop_assert_eq!(new, old);
        }

        /// The conformance test alone answers what the decision says: allowed or not, the
        /// same arrival time after, and "limited" exactly when a request of one cell would
        /// then be refused; and it declines only where the 64-bit decision path does.
        #[test]
        fn the_conformance_test_alone_agrees_with_the_decision(
            count in prop_oneof![1u64..2_000, Just(1u64), Just(50u64), Just(1_000u64)],
            period_ms in 1u64..120_000,
            capacity in 1u64..1_000,
            tat in any::<u64>(),
            now in any::<u64>(),
            shape in 0u8..4,
            cost in prop_oneof![0u64..3, 0u64..1_200],
        ) {
            let rate = Rate::new(count, Duration::from_millis(period_ms)).unwrap();
            let s = Schedule::new(rate, capacity);
            let tat = match (shape, s.narrow) {
                // A backlog of up to two bursts, where rejections happen.
                (0 | 1, Some(allowance)) => now.saturating_add(tat % (2 * allowance + 1)),
                // Room of exactly a whole number of cells.
                (2, Some(allowance)) => now
                    .saturating_add(allowance)
                    .saturating_sub(s.rate.ticks_per_cell().get() * (tat % 4)),
                _ => tat,
            };
            let mut state = Ticks::new(u128::from(tat));
            let decision = s.decide(&mut state, now, cost, false);
            let mut narrow = Ticks::new(u128::from(tat));
            let narrowed = s.decide_narrow(&mut narrow, now, cost, false).is_some();
            match s.conform_narrow(tat, now, cost) {
                None => prop_assert!(!narrowed || cost > s.capacity),
                Some(c) => {
                    prop_assert!(narrowed);
                    prop_assert_eq!(c.conforms, decision.is_allowed());
                    prop_assert_eq!(u128::from(c.tat), state.get());
                    let mut after = state;
                    let one = s.decide(&mut after, now, 1, false);
                    prop_assert_eq!(c.limited, matches!(one.outcome, Outcome::Limited { .. }));
                }
            }
        }
    }
}
