//! AWS-style adaptive rate: a client-side token bucket whose rate follows CUBIC on throttling
//! (the AWS SDKs' `adaptive` retry mode).

use std::time::Duration;

use ratewarden_core::NANOS_PER_SEC;

/// How much a throttle cuts the rate (CUBIC's multiplicative decrease).
pub const BETA: f64 = 0.7;
/// How fast the rate grows back (CUBIC's scaling constant).
pub const SCALE: f64 = 0.4;
/// The slowest the bucket fills, in tokens a second.
const MIN_FILL_RATE: f64 = 0.5;
/// The smallest bucket.
const MIN_CAPACITY: f64 = 1.0;
/// Weight of the newest measurement in the sending rate's moving average.
const SMOOTH: f64 = 0.8;
/// The sending rate is measured in buckets of this many seconds.
const BUCKET_SECS: f64 = 0.5;

/// The CUBIC rate curve alone, in requests per second and seconds.
///
/// After a throttle at `last_throttle` with the rate then at `last_max`, the rate recovers
/// as `SCALE x (t - last_throttle - K)^3 + last_max`, where `K = (last_max x (1 - BETA) /
/// SCALE)^(1/3)` is when it is back at `last_max`: fast at first, flat around the old
/// maximum, then probing beyond it.
///
/// # Examples
///
/// The AWS SDKs' published recovery vector (maximum 10, throttled at t = 5):
///
/// ```
/// use ratewarden_client::Cubic;
///
/// let cubic = Cubic { last_max: 10.0, last_throttle: 5.0 };
/// assert!((cubic.success(5.0) - 7.0).abs() < 1e-9);
/// assert!((cubic.success(6.0) - 9.64893600966).abs() < 1e-9);
/// assert!((cubic.success(7.0) - 10.000030849917364).abs() < 1e-9);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cubic {
    /// The rate when last throttled.
    pub last_max: f64,
    /// When that was, in seconds.
    pub last_throttle: f64,
}

impl Cubic {
    /// `K`: seconds after a throttle until the rate is back at `last_max`.
    pub fn time_window(&self) -> f64 {
        (self.last_max * (1.0 - BETA) / SCALE).cbrt()
    }

    /// The rate after a success at `t`.
    pub fn success(&self, t: f64) -> f64 {
        SCALE * (t - self.last_throttle - self.time_window()).powi(3) + self.last_max
    }

    /// A throttle at `t` with the rate at `rate`: remembers it and returns the cut rate.
    pub fn throttle(&mut self, rate: f64, t: f64) -> f64 {
        self.last_max = rate;
        self.last_throttle = t;
        rate * BETA
    }
}

/// The whole adaptive client rate: CUBIC sets a token bucket's rate, capped at twice the
/// measured sending rate, and the bucket comes into play at the first throttle.
///
/// # Examples
///
/// ```
/// use ratewarden_client::AdaptiveRate;
/// use std::time::Duration;
///
/// let mut rate = AdaptiveRate::default();
/// assert_eq!(rate.acquire(0), Duration::ZERO); // no throttle yet: no bucket
/// rate.observe(0, true);
/// assert!(rate.fill_rate().is_some());
/// ```
#[derive(Debug, Clone, Default)]
pub struct AdaptiveRate {
    cubic: Cubic,
    enabled: bool,
    fill_rate: f64,
    max_capacity: f64,
    capacity: f64,
    last_refill: Option<f64>,
    measured: f64,
    last_bucket: f64,
    count: f64,
}

impl Default for Cubic {
    fn default() -> Self {
        Self {
            last_max: 0.0,
            last_throttle: 0.0,
        }
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / NANOS_PER_SEC as f64
}

impl AdaptiveRate {
    /// The bucket's rate, once a throttle has enabled it.
    pub fn fill_rate(&self) -> Option<f64> {
        self.enabled.then_some(self.fill_rate)
    }

    /// Takes a token for a request at `now` (nanoseconds), returning how long to hold the
    /// request for it (zero until the first throttle).
    pub fn acquire(&mut self, now: u64) -> Duration {
        if !self.enabled {
            return Duration::ZERO;
        }
        let t = secs(now);
        self.refill(t);
        // The request takes its token now and waits for it to have accrued: concurrent
        // callers queue behind each other instead of all waiting for the same token.
        let wait = if self.capacity >= 1.0 {
            0.0
        } else {
            (1.0 - self.capacity) / self.fill_rate
        };
        self.capacity -= 1.0;
        Duration::from_secs_f64(wait.max(0.0))
    }

    /// Records the answer to a request sent at `now`: throttled (a 429, or a 503 with the
    /// server short of capacity) or not.
    pub fn observe(&mut self, now: u64, throttled: bool) {
        let t = secs(now);
        self.measure(t);
        let rate = if throttled {
            let rate = if self.enabled {
                self.measured.min(self.fill_rate)
            } else {
                self.measured
            };
            self.enabled = true;
            self.cubic.throttle(rate, t)
        } else {
            self.cubic.success(t)
        };
        self.set_rate(t, rate.min(2.0 * self.measured));
    }

    fn refill(&mut self, t: f64) {
        if let Some(last) = self.last_refill {
            let filled = (t - last).max(0.0) * self.fill_rate;
            self.capacity = (self.capacity + filled).min(self.max_capacity);
        }
        self.last_refill = Some(t);
    }

    fn set_rate(&mut self, t: f64, rate: f64) {
        self.refill(t);
        self.fill_rate = rate.max(MIN_FILL_RATE);
        self.max_capacity = rate.max(MIN_CAPACITY);
        self.capacity = self.capacity.min(self.max_capacity);
    }

    fn measure(&mut self, t: f64) {
        let bucket = (t / BUCKET_SECS).floor() * BUCKET_SECS;
        self.count += 1.0;
        if bucket > self.last_bucket {
            let current = self.count / (bucket - self.last_bucket);
            self.measured = current * SMOOTH + self.measured * (1.0 - SMOOTH);
            self.count = 0.0;
            self.last_bucket = bucket;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_recovery_vector() {
        // The AWS SDKs' cross-SDK test: maximum 10, throttled at t = 5, successes each second.
        let cubic = Cubic {
            last_max: 10.0,
            last_throttle: 5.0,
        };
        let expected = [
            7.0,
            9.64893600966,
            10.000030849917364,
            10.453284520772092,
            13.408697022224185,
            21.26626835427364,
            36.425998516920465,
        ];
        for (i, want) in expected.iter().enumerate() {
            let got = cubic.success(5.0 + i as f64);
            assert!((got - want).abs() < 1e-9, "t={}: {got} != {want}", 5 + i);
        }
    }

    #[test]
    fn a_throttle_cuts_by_beta_and_sets_the_time_window() {
        // botocore's CubicCalculator tests: K is 1.9574338205844317 for a maximum of 10 and
        // 1.8171205928321397 after a throttle at 8 requests a second.
        let mut cubic = Cubic {
            last_max: 10.0,
            last_throttle: 0.0,
        };
        assert!((cubic.time_window() - 1.9574338205844317).abs() < 1e-12);
        let cut = cubic.throttle(8.0, 1.0);
        assert!((cut - 5.6).abs() < 1e-12);
        assert!((cubic.time_window() - 1.8171205928321397).abs() < 1e-12);
        assert!((cubic.success(1.0 + cubic.time_window()) - 8.0).abs() < 1e-9);
    }

    #[test]
    fn throttles_slow_the_bucket_and_successes_grow_it_back() {
        let mut rate = AdaptiveRate::default();
        let ms = 1_000_000;
        // 10 requests a second for 2 s, then a throttle.
        for i in 0..20 {
            rate.observe(i * 100 * ms, false);
        }
        rate.observe(2_000 * ms, true);
        let after_throttle = rate.fill_rate().unwrap();
        assert!(after_throttle < 10.0, "{after_throttle}");
        // Holding requests to the new rate: 10 back to back wait for their tokens.
        let waits: Vec<Duration> = (0..10).map(|_| rate.acquire(2_000 * ms)).collect();
        assert!(
            waits.last().unwrap() > &Duration::from_millis(500),
            "{waits:?}"
        );
        for i in 0..40 {
            rate.observe(2_000 * ms + i * 100 * ms, false);
        }
        assert!(rate.fill_rate().unwrap() > after_throttle);
    }
}
