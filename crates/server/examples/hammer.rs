//! A client hammering a `ratewarden serve` gateway limited to 5 requests a second (burst 5):
//! 50 requests, paced by the `RateLimit` fields the gateway sends, with at most one 429.
//!
//! ```sh
//! cargo run -p ratewarden-server --example hammer
//! ```
//!
//! It starts an upstream and the gateway in front of it in this process, then sends the
//! requests one after another through reqwest with `RetryMiddleware`. The first answer
//! says how much is left and when it resets; every later request is spaced to fit.
//! `tests/client/client_gateway.rs` runs the same `hammer` on paused time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ratewarden_client::{Policy, RetryMiddleware, Settings, Stats};
use ratewarden_core::{Clock, RealClock};
use ratewarden_server::serve::{self, Options, Running};
use tokio::net::TcpListener;

/// The gateway's one rule: 5 a second with a burst of 5, per client address.
pub const RULE: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "gcra"
rate = "5/s"
burst = 5
"#;

/// What came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// 200s the caller got.
    pub ok: u32,
    /// Other answers the caller got.
    pub other: u32,
    /// The client's counters (`refused_answers`: the 429s it saw, retried or not).
    pub stats: Stats,
}

/// An upstream answering 200 to everything.
pub async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let ok = service_fn(|_| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(conn), ok),
            );
        }
    });
    addr
}

/// `ratewarden serve` as a gateway in front of `upstream`, limited by [`RULE`].
pub async fn gateway(upstream: SocketAddr, clock: Arc<dyn Clock>) -> Running {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\n{RULE}"
    );
    serve::start(Options {
        config: ratewarden_policy::config::parse("hammer.toml", &toml).expect("a valid config"),
        config_path: None,
        clock,
        workers: 1,
        envoy: Default::default(),
        envoy_path: None,
    })
    .await
    .expect("the gateway starts")
}

/// Sends `n` GETs to `url` one after another through reqwest with `policy`.
pub async fn hammer(url: &str, policy: &Policy, n: u32) -> Tally {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy.clone()))
        .build();
    let (mut ok, mut other) = (0, 0);
    for _ in 0..n {
        match client.get(url).send().await {
            Ok(r) if r.status() == StatusCode::OK => ok += 1,
            _ => other += 1,
        }
    }
    Tally {
        ok,
        other,
        stats: policy.stats(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let gw = gateway(upstream().await, Arc::clone(&clock)).await;
    let policy = Policy::new(Settings::default(), Arc::clone(&clock));
    let started = tokio::time::Instant::now();
    let tally = hammer(&format!("http://{}/orders", gw.listen), &policy, 50).await;
    println!(
        "{} OK, {} other, {} answered 429, {} retries, {} held back by pacing ({:.1} s in all), done in {:.1} s",
        tally.ok,
        tally.other,
        tally.stats.refused_answers,
        tally.stats.retries,
        tally.stats.paced,
        tally.stats.pacing_ns as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
}
