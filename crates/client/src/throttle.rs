//! Adaptive throttling (Google SRE book, "Handling Overload"): refuse locally what the
//! backend would refuse anyway.

use std::time::Duration;

use crate::window::SlidingCounts;
use crate::SplitMix64;

/// Client-side adaptive throttling: over a sliding window, a request is sent with
/// probability `1 - max(0, (requests - K x accepts) / (requests + 1))`.
///
/// While the backend accepts, `requests` stays below `K x accepts` and nothing is refused;
/// when it refuses everything, the client sends only a trickle (enough to see it recover)
/// instead of the whole offered load. `K = 2` lets twice the accepted traffic through.
///
/// # Examples
///
/// Hand-worked: 100 requests, 20 accepted, K = 2: (100 - 40) / 101 of new requests are
/// refused locally.
///
/// ```
/// use ratewarden_client::AdaptiveThrottle;
///
/// let mut t = AdaptiveThrottle::default();
/// for i in 0..100 { t.record(0, i < 20); }
/// assert!((t.reject_probability(0) - 60.0 / 101.0).abs() < 1e-12);
/// ```
#[derive(Debug, Clone)]
pub struct AdaptiveThrottle {
    /// Requests (a) and accepts (b).
    counts: SlidingCounts,
    k: f64,
}

impl AdaptiveThrottle {
    /// Throttling with multiplier `k`, remembering `window`.
    pub fn new(k: f64, window: Duration) -> Self {
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        Self {
            counts: SlidingCounts::new(window_ns),
            k,
        }
    }

    /// The chance a new request is refused locally at `now`.
    pub fn reject_probability(&self, now: u64) -> f64 {
        let (requests, accepts) = self.counts.totals(now);
        let (requests, accepts) = (requests as f64, accepts as f64);
        ((requests - self.k * accepts) / (requests + 1.0)).max(0.0)
    }

    /// Whether to send a request at `now`, drawing from `rng`; a refusal is counted as a
    /// request (the SRE book counts what the application asked for, so refusing does not
    /// make the next refusal less likely).
    pub fn admit(&mut self, now: u64, rng: &mut SplitMix64) -> bool {
        let p = self.reject_probability(now);
        let admitted = p <= 0.0 || rng.unit() >= p;
        if !admitted {
            self.counts.add(now, 1, 0);
        }
        admitted
    }

    /// Records a request sent at `now` and whether the backend accepted it (anything but a
    /// 429, a 503 or a failure to answer).
    pub fn record(&mut self, now: u64, accepted: bool) {
        self.counts.add(now, 1, u64::from(accepted));
    }
}

impl Default for AdaptiveThrottle {
    /// K = 2 over two minutes, as the SRE book suggests.
    fn default() -> Self {
        Self::new(2.0, Duration::from_secs(120))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_refused_while_requests_stay_under_k_times_accepts() {
        let mut t = AdaptiveThrottle::default();
        for i in 0..100 {
            t.record(0, i < 50);
        }
        assert_eq!(t.reject_probability(0), 0.0);
        let mut rng = SplitMix64::new(3);
        assert!((0..1000).all(|_| t.admit(0, &mut rng)));
    }

    #[test]
    fn a_dead_backend_gets_a_trickle() {
        // Hand-worked: 99 requests, none accepted: 99/100 refused.
        let mut t = AdaptiveThrottle::default();
        for _ in 0..99 {
            t.record(0, false);
        }
        assert!((t.reject_probability(0) - 0.99).abs() < 1e-12);
        let mut rng = SplitMix64::new(9);
        let sent = (0..10_000).filter(|_| t.admit(0, &mut rng)).count();
        // Each refusal raises the count, so the chance creeps towards 1: few get through.
        assert!(sent < 100, "{sent}");
        assert!(sent > 0);
    }

    #[test]
    fn the_window_forgets_the_outage() {
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(10));
        for _ in 0..100 {
            t.record(0, false);
        }
        assert!(t.reject_probability(0) > 0.9);
        assert_eq!(t.reject_probability(10_000_000_000), 0.0);
    }
}
