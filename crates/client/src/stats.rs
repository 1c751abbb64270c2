//! What the client did, counted.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a client's requests, retries, refusals and delays.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) refused_answers: AtomicU64,
    pub(crate) budget_refusals: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) not_repeatable: AtomicU64,
    pub(crate) deadline_give_ups: AtomicU64,
    pub(crate) paced: AtomicU64,
    pub(crate) pacing_ns: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            requests: get(&self.requests),
            attempts: get(&self.attempts),
            retries: get(&self.retries),
            refused_answers: get(&self.refused_answers),
            budget_refusals: get(&self.budget_refusals),
            throttled: get(&self.throttled),
            not_repeatable: get(&self.not_repeatable),
            deadline_give_ups: get(&self.deadline_give_ups),
            paced: get(&self.paced),
            pacing_ns: get(&self.pacing_ns),
        }
    }
}

/// A snapshot of a client's counters (see [`Policy::stats`](crate::Policy::stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests the application made.
    pub requests: u64,
    /// Attempts sent to a server (requests plus retries, less local refusals).
    pub attempts: u64,
    /// Retries sent.
    pub retries: u64,
    /// Attempts the server answered 429 or 503.
    pub refused_answers: u64,
    /// Retries the budget refused (the last answer was returned instead).
    pub budget_refusals: u64,
    /// Requests adaptive throttling refused locally.
    pub throttled: u64,
    /// Retryable failures of requests that may not be repeated (a POST without an
    /// `Idempotency-Key`), returned as they were.
    pub not_repeatable: u64,
    /// Retries not made because they would have ended past the deadline.
    pub deadline_give_ups: u64,
    /// Attempts held back by pacing, a `Retry-After` or the adaptive rate.
    pub paced: u64,
    /// Their total delay, in nanoseconds.
    pub pacing_ns: u64,
}

impl Stats {
    /// Attempts per request: 1.0 when nothing was retried.
    pub fn amplification(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        self.attempts as f64 / self.requests as f64
    }
}
