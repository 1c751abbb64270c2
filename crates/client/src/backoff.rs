//! How long to wait before retry number n.

use std::time::Duration;

use crate::SplitMix64;

/// A waiting strategy between attempts.
///
/// [`Backoff::FullJitter`] is the one to use (AWS Architecture Blog, "Exponential Backoff
/// and Jitter", 2015): clients that failed together spread their retries over the whole
/// interval instead of returning together. The others exist to show, in `ratewarden simulate
/// retries`, why.
///
/// # Examples
///
/// ```
/// use ratewarden_client::{Backoff, SplitMix64};
/// use std::time::Duration;
///
/// let backoff = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(2));
/// assert_eq!(backoff.ceiling(1), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
/// assert_eq!(backoff.ceiling(10), Duration::from_secs(2)); // capped
/// let wait = backoff.wait(3, &mut SplitMix64::new(1));
/// assert!(wait <= Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// Retry at once.
    Immediate,
    /// Always the same wait.
    Fixed(Duration),
    /// `min(cap, base x 2^(n-1))`: everyone who failed together retries together.
    Exponential {
        /// The first wait.
        base: Duration,
        /// The most any wait may be.
        cap: Duration,
    },
    /// A uniform wait in `[0, min(cap, base x 2^(n-1))]`.
    FullJitter {
        /// The first ceiling.
        base: Duration,
        /// The most any wait may be.
        cap: Duration,
    },
}

impl Backoff {
    /// Exponential backoff with full jitter.
    pub const fn full_jitter(base: Duration, cap: Duration) -> Self {
        Self::FullJitter { base, cap }
    }

    /// The longest wait before retry `retry` (1 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        match *self {
            Self::Immediate => Duration::ZERO,
            Self::Fixed(d) => d,
            Self::Exponential { base, cap } | Self::FullJitter { base, cap } => {
                let doublings = retry.saturating_sub(1).min(63);
                let ns = u64::try_from(base.as_nanos()).unwrap_or(u64::MAX);
                let ceiling = ns.saturating_mul(1u64 << doublings);
                Duration::from_nanos(ceiling).min(cap)
            }
        }
    }

    /// The wait before retry `retry` (1 for the first), drawing jitter from `rng`.
    pub fn wait(&self, retry: u32, rng: &mut SplitMix64) -> Duration {
        let ceiling = self.ceiling(retry);
        match self {
            Self::FullJitter { .. } => {
                let ns = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.below(ns))
            }
            _ => ceiling,
        }
    }
}

impl Default for Backoff {
    /// 100 ms doubling to at most 20 s, fully jittered.
    fn default() -> Self {
        Self::full_jitter(Duration::from_millis(100), Duration::from_secs(20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let b = Backoff::Exponential {
            base: Duration::from_millis(50),
            cap: Duration::from_millis(300),
        };
        let waits: Vec<u128> = (1..=5)
            .map(|n| b.wait(n, &mut SplitMix64::new(0)).as_millis())
            .collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
    }

    #[test]
    fn the_ceiling_never_overflows() {
        let b = Backoff::full_jitter(Duration::from_secs(1), Duration::MAX);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn full_jitter_spreads_over_the_whole_interval() {
        let b = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(10));
        let mut rng = SplitMix64::new(42);
        let waits: Vec<Duration> = (0..2000).map(|_| b.wait(4, &mut rng)).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(800)));
        let mean = waits.iter().sum::<Duration>() / 2000;
        // Uniform on [0, 800 ms]: the mean is 400 ms.
        assert!((380..420).contains(&mean.as_millis()), "{mean:?}");
        assert!(waits.iter().any(|w| *w < Duration::from_millis(40)));
        assert!(waits.iter().any(|w| *w > Duration::from_millis(760)));
    }
}
