//! A circuit breaker: after repeated failures, stop calling a sick store for a while, then
//! let one call probe whether it has recovered.
//!
//! A Redis that is down costs each decision at most the deadline until the breaker opens,
//! and nothing after: while open, calls fail at once and each rule's failure policy answers.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail at once until the cool-down is over.
    Open,
    /// One call is probing; the others fail at once until it answers.
    HalfOpen,
}

#[derive(Debug)]
struct Inner {
    state: BreakerState,
    failures: u32,
    open_until: Option<Instant>,
}

/// Counts consecutive failures; opens at `threshold`, probes after `cool_down`.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Duration,
    inner: Mutex<Inner>,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, cool_down: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            cool_down,
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                failures: 0,
                open_until: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// Whether a call may go out now. When the cool-down is over, the first caller becomes
    /// the probe.
    pub(crate) fn allow(&self) -> bool {
        let mut inner = self.lock();
        match inner.state {
            BreakerState::Closed => true,
            BreakerState::HalfOpen => false,
            BreakerState::Open => {
                if inner
                    .open_until
                    .is_some_and(|until| Instant::now() >= until)
                {
                    inner.state = BreakerState::HalfOpen;
                    true
                } else {
                    false
                }
            }
        }
    }

    pub(crate) fn succeeded(&self) {
        let mut inner = self.lock();
        if inner.state != BreakerState::Closed {
            tracing::info!("redis answered again; the circuit breaker closes");
        }
        inner.state = BreakerState::Closed;
        inner.failures = 0;
        inner.open_until = None;
    }

    /// A call that ended without telling whether Redis is well (the caller was too busy to
    /// see its reply in time). Counts nothing; a probe that ends so lets the next call probe.
    pub(crate) fn inconclusive(&self) {
        let mut inner = self.lock();
        if inner.state == BreakerState::HalfOpen {
            inner.state = BreakerState::Open;
            inner.open_until = Some(Instant::now());
        }
    }

    /// Redis changed (a new master was found): an open breaker lets the next call probe at
    /// once instead of after the rest of its cool-down.
    pub(crate) fn probe_now(&self) {
        let mut inner = self.lock();
        if inner.state == BreakerState::Open {
            inner.open_until = Some(Instant::now());
        }
    }

    pub(crate) fn failed(&self) {
        let mut inner = self.lock();
        inner.failures = inner.failures.saturating_add(1);
        let reopen = inner.state == BreakerState::HalfOpen;
        if reopen || (inner.state == BreakerState::Closed && inner.failures >= self.threshold) {
            if inner.state == BreakerState::Closed {
                tracing::warn!(
                    failures = inner.failures,
                    cool_down = %ratewarden_core::DisplayDuration(self.cool_down),
                    "redis keeps failing; the circuit breaker opens"
                );
            }
            inner.state = BreakerState::Open;
            inner.open_until = Some(Instant::now() + self.cool_down);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_the_threshold_then_probes_once_after_the_cool_down() {
        let b = Breaker::new(3, Duration::from_secs(1));
        for _ in 0..2 {
            assert!(b.allow());
            b.failed();
        }
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.allow());
        b.failed();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allow());
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!b.allow());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(b.allow(), "the probe");
        assert!(!b.allow(), "one probe at a time");
        b.failed();
        assert_eq!(
            b.state(),
            BreakerState::Open,
            "a failed probe reopens at once"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.allow());
        b.succeeded();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.allow());
    }

    #[tokio::test(start_paused = true)]
    async fn an_inconclusive_probe_lets_the_next_call_probe() {
        let b = Breaker::new(1, Duration::from_secs(1));
        b.failed();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.allow(), "the probe");
        b.inconclusive();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(
            b.allow(),
            "another probe at once, not a whole cool-down later"
        );
        b.inconclusive();
        assert!(b.allow());
        b.succeeded();
        assert_eq!(b.state(), BreakerState::Closed);
        b.inconclusive();
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "counts nothing while closed"
        );
    }
}
