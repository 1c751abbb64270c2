//! Division by a limit's fixed numbers, fast.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU64;

use strength_reduce::StrengthReducedU64;

/// A divisor fixed when a limit is built (a rate's count or period, a window's length).
///
/// Decisions divide by these two or three times each, and a hardware 64-bit `div` (let alone a
/// 128-bit division call) is most of a decision's cost. Dividends that fit in 64 bits (all of
/// them on the decision path for sane limits) divide by multiplication; wider ones fall back to
/// plain `u128` division, so results are exact either way.
#[derive(Clone, Copy)]
pub(crate) struct Divisor {
    reduced: StrengthReducedU64,
}

impl Divisor {
    pub(crate) fn new(d: NonZeroU64) -> Self {
        Self {
            reduced: StrengthReducedU64::new(d.get()),
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.reduced.get()
    }

    /// `x / d`, rounded down.
    #[inline]
    pub(crate) fn div(&self, x: u128) -> u128 {
        match u64::try_from(x) {
            Ok(x) => u128::from(x / self.reduced),
            Err(_) => x / u128::from(self.get()),
        }
    }

    /// `x / d`, rounded up.
    #[inline]
    pub(crate) fn div_ceil(&self, x: u128) -> u128 {
        match u64::try_from(x) {
            Ok(x) => {
                let (q, r) = StrengthReducedU64::div_rem(x, self.reduced);
                u128::from(q) + u128::from(r != 0)
            }
            Err(_) => x.div_ceil(u128::from(self.get())),
        }
    }

    /// `(x / d, x % d)` for a 64-bit `x`.
    #[inline]
    pub(crate) fn div_rem(&self, x: u64) -> (u64, u64) {
        StrengthReducedU64::div_rem(x, self.reduced)
    }
}

impl fmt::Debug for Divisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl PartialEq for Divisor {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Divisor {}

impl Hash for Divisor {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.get().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_plain_division() {
        let samples = [
            1u64,
            2,
            3,
            7,
            10,
            1_000,
            333_333_333,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ];
        for d in samples {
            let div = Divisor::new(NonZeroU64::new(d).unwrap());
            for x in samples
                .iter()
                .map(|&x| u128::from(x))
                .chain([0, u128::MAX, 1 << 64])
            {
                let d = u128::from(d);
                assert_eq!(div.div(x), x / d, "{x} / {d}");
                assert_eq!(div.div_ceil(x), x.div_ceil(d), "{x} / {d} up");
            }
        }
    }
}
