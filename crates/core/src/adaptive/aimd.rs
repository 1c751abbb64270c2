//! AIMD: grow by one while the limit is used, cut by a tenth on a drop or a timeout.

use super::window::{Aggregate, WindowUpdate};

/// AIMD's parameters (Netflix's defaults: 20 initial, [20, 200], backoff 0.9, timeout 5 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AimdConfig {
    /// The limit to start from.
    pub initial: u64,
    /// The lowest limit.
    pub min: u64,
    /// The highest limit.
    pub max: u64,
    /// The multiplier on a drop, in thousandths, in `[500, 1000)`.
    pub backoff_permille: u64,
    /// An RTT above this counts as a drop, in nanoseconds.
    pub timeout_ns: u64,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            initial: 20,
            min: 20,
            max: 200,
            backoff_permille: 900,
            timeout_ns: 5_000_000_000,
        }
    }
}

/// Additive increase, multiplicative decrease, on integers.
///
/// A window with a drop, or whose RTT is over the timeout, sets `L = ⌊L · backoff⌋`;
/// otherwise, if the limit was used (`in_flight · 2 ≥ L`), `L + 1`. Always within
/// `[min, max]`.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{Aggregate, Aimd, AimdConfig, WindowUpdate};
///
/// let mut aimd = Aimd::new(AimdConfig { initial: 30, ..AimdConfig::default() });
/// let busy = Aggregate { rtt_ns: 1_000_000, rtt_error_ns: 0, max_in_flight: 30, dropped: false };
/// assert_eq!(aimd.update(busy), 31);
/// assert_eq!(aimd.update(Aggregate { dropped: true, ..busy }), 27); // ⌊31 · 0.9⌋
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    config: AimdConfig,
    limit: u64,
}

impl Aimd {
    /// A controller at `config.initial`.
    pub fn new(config: AimdConfig) -> Self {
        Self {
            limit: config.initial.clamp(config.min, config.max),
            config,
        }
    }
}

impl WindowUpdate for Aimd {
    fn update(&mut self, w: Aggregate) -> u64 {
        let c = &self.config;
        // The timeout matters: a request that timed out without a drop flag would otherwise
        // count as a success, and the limit would climb to the max under constant timeouts
        // (Netflix added `timeout` to AIMD for exactly this).
        let next = if w.dropped || w.rtt_ns > c.timeout_ns {
            self.limit.saturating_mul(c.backoff_permille) / 1000
        } else if w.max_in_flight.saturating_mul(2) >= self.limit {
            self.limit.saturating_add(1)
        } else {
            self.limit
        };
        self.limit = next.clamp(c.min, c.max);
        self.limit
    }

    fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(rtt_ns: u64, max_in_flight: u64, dropped: bool) -> Aggregate {
        Aggregate {
            rtt_error_ns: 0,
            rtt_ns,
            max_in_flight,
            dropped,
        }
    }

    /// Worked by hand: from 100 in [10, 200], backoff 0.9, timeout 1 s.
    #[test]
    fn hand_worked_vector() {
        let mut a = Aimd::new(AimdConfig {
            initial: 100,
            min: 10,
            max: 200,
            backoff_permille: 900,
            timeout_ns: 1_000_000_000,
        });
        // Used (50·2 ≥ 100): +1.
        assert_eq!(a.update(w(10_000_000, 50, false)), 101);
        // Not used (49·2 < 101): stays.
        assert_eq!(a.update(w(10_000_000, 49, false)), 101);
        // A drop: ⌊101·900/1000⌋ = ⌊90.9⌋ = 90.
        assert_eq!(a.update(w(10_000_000, 101, true)), 90);
        // Over the timeout, no drop flag: ⌊90·0.9⌋ = 81.
        assert_eq!(a.update(w(1_000_000_001, 90, false)), 81);
        // At the timeout exactly: not over, and used: 82.
        assert_eq!(a.update(w(1_000_000_000, 82, false)), 82);
    }

    #[test]
    fn never_leaves_its_bounds() {
        let mut a = Aimd::new(AimdConfig {
            initial: 11,
            min: 10,
            max: 12,
            ..AimdConfig::default()
        });
        assert_eq!(a.update(w(1, 0, true)), 10);
        for _ in 0..5 {
            a.update(w(1, 100, false));
        }
        assert_eq!(a.limit(), 12);
    }
}
