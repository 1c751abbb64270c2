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
//! Headers are returned as `(name, value)` pairs, the names as `http::HeaderName` constants
//! (lowercase, as HTTP/2 writes them and as `http` wants them), so a server sends them as
//! they are and a new name can never fail to convert.

mod contract;
mod fields;
pub mod grpc;
mod openai;
mod rendered;

pub use contract::{
    allowed_headers, limited, retry_after_secs, unavailable, PolicyState, Response, CACHE_CONTROL,
    CONTENT_TYPE, QUOTA_EXCEEDED, RATELIMIT, RATELIMIT_POLICY, RETRY_AFTER,
    TEMPORARY_REDUCED_CAPACITY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
pub use openai::{go_duration, openai_headers, OpenAiFamily};
/// Moved to core, where Envoy's units need it too; this path stays.
pub use ratewarden_core::window_secs;
pub use rendered::RenderedPolicy;
