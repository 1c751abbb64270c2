//! Ratewarden on the calling side.
//!
//! A client that reads what a rate-limited server says and behaves: it honours
//! `Retry-After` (delta-seconds and HTTP-date), reads `RateLimit`/`RateLimit-Policy` and the
//! legacy `X-RateLimit-*` fields and paces itself before it is refused, retries only what is
//! safe to retry (429, 503, connect errors and timeouts; idempotent methods or requests with
//! an `Idempotency-Key`) with exponential backoff and full jitter, keeps retries within a
//! budget, and can throttle itself adaptively (Google SRE) or follow an AWS-style adaptive
//! rate. The [`Policy`] core is pure (clock and randomness injected).
//!
//! The design and the numbers behind it: `docs/client.md`.

mod backoff;
mod budget;
mod classify;
mod cubic;
mod error;
mod fields;
mod outbound;
mod pacing;
mod policy;
#[cfg(feature = "reqwest")]
mod reqwest;
mod rng;
mod stats;
mod throttle;
pub mod tower;
mod watchdog;
mod window;

pub use backoff::Backoff;
pub use budget::RetryBudget;
pub use classify::{classify_error, is_repeatable, Attempt, IDEMPOTENCY_KEY};
pub use cubic::{AdaptiveRate, Cubic, BETA, SCALE};
pub use error::{BoxError, Error};
pub use fields::{quotas, retry_after, Quota};
pub use outbound::Outbound;
pub use pacing::Pacer;
pub use policy::{origin_of, Call, Next, Policy, Settings, MAX_ORIGINS};
#[cfg(feature = "reqwest")]
pub use reqwest::RetryMiddleware;
pub use rng::SplitMix64;
pub use stats::Stats;
pub use throttle::AdaptiveThrottle;
