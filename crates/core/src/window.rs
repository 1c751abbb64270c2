//! The window a limit's quota refers to, for headers and Envoy's units.

use crate::{Algorithm, Limit, NANOS_PER_SEC};

/// The window a limit's quota refers to, in whole seconds, when it has one: the window of
/// a window algorithm, the time a bucket takes to refill its whole burst. Calendar quotas
/// and concurrency limits have none that fits `w`.
pub fn window_secs(limit: &Limit) -> Option<u64> {
    let ns = match limit {
        Limit::FixedWindow(l) => l.window().as_nanos(),
        Limit::SlidingLog(l) => l.window().as_nanos(),
        Limit::SlidingWindow(l) => l.window().as_nanos(),
        Limit::TokenBucket(l) => burst_ns(l.rate(), l.burst()),
        Limit::LeakyBucket(l) => burst_ns(l.rate(), l.burst()),
        Limit::LeakyQueue(l) => burst_ns(l.rate(), l.limit()),
        Limit::Gcra(l) => burst_ns(l.rate(), l.burst()),
        Limit::Quota(_) | Limit::Concurrency(_) => return None,
    };
    u64::try_from(ns.div_ceil(u128::from(NANOS_PER_SEC)).max(1)).ok()
}

fn burst_ns(rate: crate::Rate, burst: u64) -> u128 {
    (u128::from(burst) * u128::from(rate.period_ns())).div_ceil(u128::from(rate.count()))
}
