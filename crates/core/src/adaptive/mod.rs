//! Adaptive concurrency limits: how many requests may be in flight, learnt from latency.
//!
//! A static concurrency limit needs someone to know the upstream's capacity. By Little's
//! law a server of `N` workers serving in `S` seconds holds about `N` requests at its best;
//! past that, requests only queue and their latency grows. The controllers here watch each
//! completed request's round trip (RTT), how many were in flight when it started and
//! whether it failed, and move the limit towards the point where latency starts to grow.
//!
//! | strategy | signal | reacts by | pick it when |
//! |---|---|---|---|
//! | [`Gradient2`] | short RTT against a slow average | limit × gradient + a small queue | the default: smooth, tolerant of noisy RTTs |
//! | [`Vegas`] | estimated queue `L·(1 − rtt_noload/rtt)` | ± log10 L steps | RTTs are steady and a no-load RTT is meaningful |
//! | [`Aimd`] | drops and timeouts only | +1, or × 0.9 | latency says nothing (batch work, streaming) |
//! | [`Gradient`] | a percentile against a min RTT measured at low concurrency | limit × gradient + √ | Envoy's behaviour, for parity with a mesh |
//!
//! Every controller is a plain state machine: time is passed in, randomness (the jitter of
//! re-probes) comes from a seeded generator, so a run replays the same. [`AdaptiveLimiter`]
//! adds the in-flight count and the criticality classes on top.
//!
//! # Arithmetic
//!
//! AIMD and Vegas run on integers. Gradient2 and Envoy's gradient are ratios of RTTs and
//! use `f64`, but only `+ − × ÷` and `sqrt`, which IEEE 754 rounds exactly (and Rust never
//! fuses into a multiply-add on its own), so a run gives the same bits on every platform.
//! Their parameters are kept in thousandths (`smoothing = 200` is 0.2), so a configuration
//! compares and hashes exactly.

mod aimd;
mod config;
mod fair_queue;
mod gradient;
mod gradient2;
mod limiter;
mod vegas;
mod window;

pub use aimd::{Aimd, AimdConfig};
pub use config::{Strategy, WindowConfig};
pub use fair_queue::{FairQueue, FairQueueConfig, Refused};
pub use gradient::{Gradient, GradientConfig};
pub use gradient2::{auto_queue, Gradient2, Gradient2Config};
pub use limiter::{AdaptiveLimiter, Completion, Criticality, Shed, Ticket};
pub use vegas::{Vegas, VegasConfig};
pub use window::{Aggregate, WindowUpdate, Windowed};

use std::fmt;

/// One completed request, as a controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Its round trip, in nanoseconds (for a gateway: until the upstream's response head).
    pub rtt_ns: u64,
    /// How many requests were in flight when it started, itself included.
    pub in_flight: u64,
    /// Whether it failed in a way that says the upstream is overloaded (a timeout, a 5xx).
    pub dropped: bool,
}

/// A controller: fed completed requests, it answers the current concurrency limit.
pub trait Controller: fmt::Debug + Send {
    /// Feeds `sample`, completed at `now` (nanoseconds); returns the limit after it.
    fn sample(&mut self, now: u64, sample: Sample) -> u64;

    /// The current limit.
    fn limit(&self) -> u64;
}

/// A small deterministic generator (splitmix64) for the jitter of re-probes: a seeded run
/// replays exactly, and no controller reads the system's randomness.
#[derive(Debug, Clone)]
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A number in `[0, bound)` (0 when `bound` is 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if bound == 0 {
            0
        } else {
            z % bound
        }
    }
}

/// `floor(log10 n)`, at least 1: the step Netflix's Vegas scales with the limit.
pub(crate) fn log10_floor1(n: u64) -> u64 {
    u64::from(n.max(1).ilog10()).max(1)
}
