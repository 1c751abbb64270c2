//! Runs one case of the layer benchmark a fixed number of times, for an instruction counter
//! (`perf stat -e instructions:u`, or valgrind) to divide by: on a shared machine, where
//! times drift with the neighbours' load, instructions per request do not.
//! `scripts/bench-instructions` runs every case and prints the ratios.
//!
//! usage: count CASE N   (CASE: none, bare, layered, governor)

use std::num::NonZeroU32;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use governor::{Quota, RateLimiter};
use http::{Request, StatusCode};
use ratewarden_core::{Gcra, Rate};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer};
use tower::ServiceExt;

const USERS: usize = 1024;
const BURST: u32 = 100_000_000;

fn bare() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

fn layered() -> Router {
    let per_user = KeyedLimit::new(
        "per-user",
        Gcra::new(
            Rate::new(1, Duration::from_secs(60)).expect("1 a minute"),
            u64::from(BURST),
        )
        .expect("a burst"),
    )
    .key(|request| header(request, "x-user"));
    bare().layer(
        RateLimitLayer::builder()
            .limit(per_user)
            .build()
            .expect("one limit"),
    )
}

fn request(user: &str) -> Request<Body> {
    Request::get("/")
        .header("x-user", user)
        .body(Body::empty())
        .expect("a request")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let users: Vec<String> = (0..USERS).map(|i| format!("user-{i}")).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let router = match case.as_str() {
        "bare" => Some(bare()),
        "layered" => Some(layered()),
        "governor" | "none" => None,
        other => {
            eprintln!("count: unknown case `{other}` (none, bare, layered, governor)");
            std::process::exit(2);
        }
    };
    if let Some(router) = router {
        runtime.block_on(async {
            for i in 0..n {
                let response = router
                    .clone()
                    .oneshot(request(&users[i % USERS]))
                    .await
                    .expect("infallible");
                assert_eq!(response.status(), StatusCode::OK);
            }
        });
    } else if case == "governor" {
        let quota =
            Quota::per_minute(NonZeroU32::MIN).allow_burst(NonZeroU32::new(BURST).expect("> 0"));
        let governor = RateLimiter::keyed(quota);
        for i in 0..n {
            assert!(governor.check_key(&users[i % USERS]).is_ok());
        }
    }
}
