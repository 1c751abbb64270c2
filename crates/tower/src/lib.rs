//! Ratewarden inside a service: a [`tower`](https://docs.rs/tower) layer that decides each
//! request on the policy engine before the service sees it.
//!
//! Limits at the edge know an address, a gateway knows an API key; only the service knows
//! the user, the object and the cost. This layer puts the same engine the gateway runs
//! (`ratewarden-policy`) in front of a service, configured either way:
//!
//! - [`RateLimitLayer::from_config`]: the TOML rules of a `ratewarden-policy` config, so a
//!   service embeds exactly what the gateway runs;
//! - [`RateLimitLayer::builder`]: [`KeyedLimit`]s written in code, each an algorithm with
//!   its numbers, keyed by a closure over the request and its extensions (the user an
//!   earlier layer authenticated, a path segment), with an optional cost. Per-object limits
//!   (writes per document, exports per account) are what these are for.
//!
//! Unlike tower's own `RateLimit`, nothing is reserved in `poll_ready`: every clone of the
//! service shares one engine behind an `Arc`, and each request is decided in `call`. So a
//! router that clones the service per request (axum does) still enforces one budget.
//!
//! Answers follow `ratewarden-http`: 429 with `Retry-After`, `RateLimit-Policy` and
//! `RateLimit`, `Cache-Control: no-store` and a problem+json body; a bare 429 for sensitive
//! rules; 503 when a `closed` rule's store is down. Allowed responses carry the RateLimit
//! fields. [`RateLimitLayer::on_reject`] renders a rejection body of your own, and a gRPC
//! request (`content-type: application/grpc…`) is refused as gRPC: `RESOURCE_EXHAUSTED`
//! with the delay in `retry-after` and `grpc-retry-pushback-ms` metadata.
//!
//! Concurrency rules hold their permits for the life of the response body: they go back when
//! the body has been sent or dropped (the client went away), or at the end of their lease.
//! A rule whose cost is an estimate hands the handler a [`Reservation`] in the request's
//! extensions, to settle the real cost before it answers.
//!
//! # Examples
//!
//! ```
//! use ratewarden_core::{Gcra, Rate};
//! use ratewarden_tower::{KeyedLimit, RateLimitLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Reads: 5 a second per user, a burst of 5.
//! let reads = KeyedLimit::new("reads", Gcra::new(Rate::per_second(5)?, 5)?)
//!     .key(|request| ratewarden_tower::header(request, "x-user"));
//! let layer = RateLimitLayer::builder().limit(reads).build()?;
//! // axum::Router::new().route(...).route_layer(layer)
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod answer;
mod body;
mod error;
mod grpc;
mod keyed;
mod layer;
mod limits;
mod reservation;
mod service;

pub use answer::{RejectHook, Rejection};
pub use body::LimitBody;
pub use error::BuildError;
pub use keyed::{header, KeyedLimit};
pub use layer::{Builder, RateLimitLayer};
pub use ratewarden_core::TokioClock;
pub use reservation::Reservation;
pub use service::{RateLimit, ResponseFuture};

/// What a [`Reservation`] is known by, and why a settle was refused.
pub use ratewarden_policy::{GrantId, SettleError};
