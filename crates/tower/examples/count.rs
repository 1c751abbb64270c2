//! Runs one case of the layer benchmark a fixed number of times, for an instruction counter
//! (`perf stat -e instructions:u`, or valgrind) to divide by: on a shared machine, where
//! times drift with the neighbours' load, instructions per request do not.
//! `scripts/bench-instructions` runs every case and prints the ratios.
//!
//! usage: count CASE N   (CASE: none, bare, layered, governor)

use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use http::StatusCode;
use tower::ServiceExt;

#[path = "../benches/common/mod.rs"]
mod common;
use common::{bare, layered, request, BURST, USERS};

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
