//! The retry budget: retries may add only a share of the traffic.

use std::time::Duration;

use ratewarden_core::NANOS_PER_SEC;

use crate::window::SlidingCounts;

/// Retries limited to a share of requests plus a small floor per second, over a sliding
/// window (Finagle's `RetryBudget`, tower's `TpsBudget`).
///
/// When every request fails, retries stay at `percent` of the traffic (plus the floor)
/// instead of multiplying it by the attempt count: the difference between an outage and a
/// retry storm.
///
/// # Examples
///
/// Hand-worked: 20% plus 10/s over 10 s is a reserve of 100 retries, and each request
/// deposits a fifth of one more.
///
/// ```
/// use ratewarden_client::RetryBudget;
///
/// let mut budget = RetryBudget::default();
/// for _ in 0..50 { budget.deposit(0); }           // 50 requests: 10 more retries
/// assert_eq!(budget.available(0), 110);
/// for _ in 0..110 { assert!(budget.withdraw(0)); }
/// assert!(!budget.withdraw(0));                   // the 111th is refused
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Requests (a) and retries (b) in the window.
    counts: SlidingCounts,
    /// Retries allowed regardless of traffic, over the whole window.
    reserve: u64,
    /// Retries earned per 1000 requests.
    per_mille: u64,
}

impl RetryBudget {
    /// Retries may be `percent` of requests (a ratio: 0.2 is 20%) plus `min_per_sec` a
    /// second, counted over `ttl`.
    pub fn new(ttl: Duration, min_per_sec: u32, percent: f64) -> Self {
        let ttl_ns = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX).max(1);
        let reserve = u64::from(min_per_sec).saturating_mul(ttl_ns) / NANOS_PER_SEC;
        Self {
            counts: SlidingCounts::new(ttl_ns),
            reserve,
            per_mille: (percent.clamp(0.0, 1000.0) * 1000.0).round() as u64,
        }
    }

    /// Records a request (not a retry) at `now`.
    pub fn deposit(&mut self, now: u64) {
        self.counts.add(now, 1, 0);
    }

    /// Retries the budget would allow at `now`.
    pub fn available(&self, now: u64) -> u64 {
        let (requests, retries) = self.counts.totals(now);
        let earned = requests.saturating_mul(self.per_mille) / 1000;
        self.reserve.saturating_add(earned).saturating_sub(retries)
    }

    /// Spends one retry at `now`, if the budget has one.
    pub fn withdraw(&mut self, now: u64) -> bool {
        let ok = self.available(now) > 0;
        if ok {
            self.counts.add(now, 0, 1);
        }
        ok
    }
}

impl Default for RetryBudget {
    /// 20% of requests plus 10 a second, over 10 seconds (Finagle's defaults).
    fn default() -> Self {
        Self::new(Duration::from_secs(10), 10, 0.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NANOS_PER_SEC;

    #[test]
    fn retries_spent_come_back_when_they_leave_the_window() {
        let mut b = RetryBudget::new(Duration::from_secs(10), 1, 0.0);
        assert_eq!(b.available(0), 10);
        for _ in 0..10 {
            assert!(b.withdraw(0));
        }
        assert!(!b.withdraw(9 * S));
        assert!(b.withdraw(10 * S), "the first slot has slid out");
    }

    #[test]
    fn under_steady_failure_retries_stay_a_share_of_requests() {
        // 100 requests a second, all failing, each wanting a retry: after the reserve is
        // spent, 20 of the 100 get one each second, plus the 10/s floor.
        let mut b = RetryBudget::default();
        let mut granted = 0;
        for second in 0..60 {
            for i in 0..100 {
                let now = second * S + i * (S / 100);
                b.deposit(now);
                if b.withdraw(now) && second >= 50 {
                    granted += 1;
                }
            }
        }
        assert_eq!(
            granted, 300,
            "30 a second over the last 10 s: 20% of 100 plus 10"
        );
    }
}
