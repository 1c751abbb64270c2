//! Ratewarden's HTTP contract: what a limited (or allowed) response says, and how.
//!
//! - Over a caller's limit: **429** with `Retry-After` in whole seconds, rounded up and never
//!   0; `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11) as
//!   Structured Field lists; `Cache-Control: no-store`; an `application/problem+json` body of
//!   type `quota-exceeded` naming the `violated-policies`.
//! - A rule marked sensitive (login, OTP): a **bare 429** with `Retry-After` and nothing that
//!   reveals capacity.
//! - The server itself out of capacity (load shedding, a `closed` rule whose store is down):
//!   **503** with `Retry-After`, whoever asks.
//! - The legacy `X-RateLimit-Limit/-Remaining/-Reset` trio, when asked for.
//!
//! Headers are returned as `(name, value)` pairs, so any HTTP library can send them.

mod contract;

pub use contract::{
    allowed_headers, limited, retry_after_secs, unavailable, PolicyState, Response, QUOTA_EXCEEDED,
    TEMPORARY_REDUCED_CAPACITY,
};
/// Moved to core, where Envoy's units need it too; this path stays.
pub use ratewarden_core::window_secs;
