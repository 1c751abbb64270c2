//! Rate limiting algorithms as exact, pure state transitions.
//!
//! Every algorithm in this crate is a pure function of its parameters, a small piece of
//! per-key state, the current time and a cost:
//! `(params, state, now, cost) -> (Decision, state')`. Nothing here reads a clock, sleeps,
//! allocates on the decision path (except the sliding log's bounded buffer) or does I/O, so
//! the same transitions run in memory, in a shared store, in tests and in the simulator.
//!
//! Time is a `u64` count of nanoseconds, passed in by the caller. Use [`RealClock`] in
//! production and [`ManualClock`] in tests and simulations. Calendar quotas read it as
//! nanoseconds since the Unix epoch; every other algorithm only looks at differences.
//!
//! All decisions use integer arithmetic. Rates are kept as a rational `count / period`, so a
//! limit of 3 per second really is 3 per second, not one every 333,333,333 ns.
//!
//! # Examples
//!
//! GCRA at 5 per second with a burst of 5: six requests at once, the sixth waits exactly
//! 200 ms.
//!
//! ```
//! use ratewarden_core::{Algorithm, Gcra, Rate};
//! use std::time::Duration;
//!
//! let gcra = Gcra::new(Rate::per_second(5)?, 5)?;
//! let mut state = Default::default();
//! for _ in 0..5 {
//!     assert!(gcra.decide(&mut state, 0, 1).is_allowed());
//! }
//! let sixth = gcra.decide(&mut state, 0, 1);
//! assert_eq!(sixth.retry_after(), Some(Duration::from_millis(200)));
//! # Ok::<(), ratewarden_core::Error>(())
//! ```
#![doc = include_str!("../docs/algorithms.md")]

pub mod adaptive;
pub mod algorithm;
mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod decision;
mod divisor;
mod error;
pub mod lease;
mod limit;
mod numbers;
pub mod shared_store;
pub mod store;
mod units;
mod window;

pub use algorithm::{
    Algorithm, CalendarUnit, Concurrency, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Quota,
    SlidingLog, SlidingWindow, TokenBucket,
};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, ManualClock, RealClock};
pub use decision::{Decision, Outcome};
pub use error::Error;
pub use limit::{AlgorithmKind, Limit, LimitState};
pub use numbers::{Numbers, DEFAULT_LEASE, DEFAULT_TIMEZONE};
pub use store::{now_or_panic, AsyncStore, Check, Store};
pub use units::{parse_decimal, parse_duration, DisplayDuration, Rate, ReadableDuration, Ticks};
pub use window::window_secs;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The README's examples compile and pass as written.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
