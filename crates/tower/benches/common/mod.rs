//! The routers the layer benchmark and the instruction counter (`examples/count.rs`)
//! measure: one definition, so the two figures are of the same code.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::Request;
use ratewarden_core::{Gcra, Rate};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer};

/// Distinct users the requests cycle through.
pub const USERS: usize = 1024;
/// Governor's and ours: 1 a minute with this burst, so every decision is allowed.
pub const BURST: u32 = 100_000_000;

/// A handler returning a fixed body.
///
/// Both routers are finalized with `with_state(())`, as `axum::serve` does before it serves
/// one: an unfinalized router turns its boxed handler (and each layer over it) into a
/// service again on every request, an allocation or three that no served router pays.
pub fn bare() -> Router {
    handler().with_state(())
}

fn handler() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// The same handler behind the layer: GCRA per user from the `x-user` header, in memory.
pub fn layered() -> Router {
    let per_user = KeyedLimit::new(
        "per-user",
        Gcra::new(
            Rate::new(1, Duration::from_secs(60)).expect("1 a minute"),
            u64::from(BURST),
        )
        .expect("a burst"),
    )
    .key(|request| header(request, "x-user"));
    handler()
        .layer(
            RateLimitLayer::builder()
                .limit(per_user)
                .build()
                .expect("one limit"),
        )
        .with_state(())
}

/// A request from `user`.
pub fn request(user: &str) -> Request<Body> {
    Request::get("/")
        .header("x-user", user)
        .body(Body::empty())
        .expect("a request")
}
