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
//! usage: count CASE N   (CASE: bare, chain, retry; as `benches/middleware.rs`)

use ratewarden_client::{Policy, RetryMiddleware};

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let url = format!("http://{}/", common::server());
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
        "retry" => Some(
            reqwest_middleware::ClientBuilder::new(bare.clone())
                .with(RetryMiddleware::new(Policy::default()))
                .build(),
        ),
        other => {
            eprintln!("count: unknown case `{other}` (bare, chain, retry)");
            std::process::exit(2);
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
