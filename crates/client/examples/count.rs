//! Runs one client of the middleware benchmark a fixed number of times, for an instruction
//! counter to divide by: on a shared machine, where times drift with the neighbours' load,
//! instructions per request do not. Count N and 2N requests and divide the difference by N
//! (what is counted includes the server's share of each request, as the time does):
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/count retry 2000
//! ```
//!
//! usage: count CASE N   (CASE: bare, chain, retry, as `benches/middleware.rs`; or
//! `retry` without one of its parts, to price it: no-deadline, no-budget, no-pacing,
//! one-attempt; any of them with `-counting` runs against a server whose `RateLimit`
//! changes on every answer, as a real limiter's does)

use std::sync::Arc;

use ratewarden_client::{Policy, RetryMiddleware, Settings};
use ratewarden_core::RealClock;

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    // `-counting`: against a server whose `RateLimit` changes on every answer.
    let (case, server) = match case.strip_suffix("-counting") {
        Some(case) => (case.to_owned(), common::counting_server()),
        None => (case, common::server()),
    };
    let url = format!("http://{server}/");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let bare = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("a client");
    let client = match case.as_str() {
        "bare" => None,
        "chain" => Some(reqwest_middleware::ClientBuilder::new(bare.clone()).build()),
        retry => {
            let defaults = Settings::default();
            let settings = match retry {
                "retry" => defaults,
                "no-deadline" => Settings {
                    deadline: None,
                    ..defaults
                },
                "no-budget" => Settings {
                    budget: None,
                    ..defaults
                },
                "no-pacing" => Settings {
                    pacing: false,
                    ..defaults
                },
                "one-attempt" => Settings {
                    max_attempts: 1,
                    ..defaults
                },
                other => {
                    eprintln!(
                        "count: unknown case `{other}` (bare, chain, retry, no-deadline, \
                         no-budget, no-pacing, one-attempt)"
                    );
                    std::process::exit(2);
                }
            };
            let policy = Policy::new(settings, Arc::new(RealClock::new()));
            Some(
                reqwest_middleware::ClientBuilder::new(bare.clone())
                    .with(RetryMiddleware::new(policy))
                    .build(),
            )
        }
    };
    runtime.block_on(async {
        for _ in 0..n {
            let response = match &client {
                None => bare.get(&url).send().await.expect("an answer"),
                Some(client) => client.get(&url).send().await.expect("an answer"),
            };
            response.bytes().await.expect("a body");
        }
    });
}
