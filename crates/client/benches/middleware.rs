//! What `RetryMiddleware` costs an allowed request: reqwest to a local server, bare and
//! with the middleware, in one run.
//!
//! - `bare`: `reqwest::Client`, the peer.
//! - `chain`: reqwest-middleware's `ClientWithMiddleware` with no middleware (what the
//!   middleware crate's own boxing costs, before ours).
//! - `retry`: the same with `RetryMiddleware` on the default policy (budget, pacing,
//!   full-jitter backoff; nothing to retry).
//!
//! The server answers 200 with `RateLimit-Policy`/`RateLimit` fields, as a `ratewarden
//! serve` gateway does, the same bytes on every answer (the middleware recognises them
//! without parsing; `examples/count.rs` has a server whose `RateLimit` changes), with a
//! quota so large that pacing never holds a request. One keep-alive connection; a request's time
//! is the round trip. Run with `cargo bench -p ratewarden-client --bench middleware`. The
//! goal is `retry` within 5% of `bare`. Criterion measures each in turn, which a shared
//! machine skews; a last, paired phase interleaves the three and prints their ratios.
//! `examples/count.rs` runs one of them a fixed number of times for an instruction counter
//! (the figure that holds on a busy machine), against the same server (`common`).
//!
//! With `MIDDLEWARE_PARTS` set, the paired phase also interleaves a middleware that only
//! hands the request on (what any middleware costs) and `retry` without each of its parts
//! (`one-attempt`: no copy kept for a retry; `no-deadline`: no watch; `no-pacing`; `none`:
//! none of those nor the budget), and prints each against `bare`: the parts priced in time,
//! as `count.rs` prices them in instructions.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use criterion::Criterion;
use ratewarden_client::{Policy, RetryMiddleware, Settings};
use ratewarden_core::RealClock;
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};

mod common;
use common::server;

fn bench(c: &mut Criterion) {
    let url = format!("http://{}/", server());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let bare = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("a client");
    let chain = reqwest_middleware::ClientBuilder::new(bare.clone()).build();
    let retry = reqwest_middleware::ClientBuilder::new(bare.clone())
        .with(RetryMiddleware::new(Policy::default()))
        .build();
    let mut group = c.benchmark_group("get_allowed");
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter(|| async {
            let r = bare.get(&url).send().await.expect("an answer");
            r.bytes().await.expect("a body")
        })
    });
    group.bench_function("chain", |b| {
        b.to_async(&rt).iter(|| async {
            let r = chain.get(&url).send().await.expect("an answer");
            r.bytes().await.expect("a body")
        })
    });
    group.bench_function("retry", |b| {
        b.to_async(&rt).iter(|| async {
            let r = retry.get(&url).send().await.expect("an answer");
            r.bytes().await.expect("a body")
        })
    });
    group.finish();
}

/// A middleware that hands the request on and awaits the answer: the floor under any
/// middleware that looks at the answer (its future boxed, the middleware stack copied for
/// each request).
struct PassOn;

impl Middleware for PassOn {
    fn handle<'a, 'b, 'c, 'call>(
        &'a self,
        request: reqwest::Request,
        extensions: &'b mut http::Extensions,
        next: Next<'c>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'call>>
    where
        'a: 'call,
        'b: 'call,
        'c: 'call,
        Self: 'call,
    {
        Box::pin(async move { next.run(request, extensions).await })
    }
}

/// The clients `MIDDLEWARE_PARTS` adds, by name.
fn parts(bare: &reqwest::Client) -> Vec<(&'static str, ClientWithMiddleware)> {
    let retry = |settings: Settings| {
        let policy = Policy::new(settings, Arc::new(RealClock::new()));
        reqwest_middleware::ClientBuilder::new(bare.clone())
            .with(RetryMiddleware::new(policy))
            .build()
    };
    vec![
        (
            "pass-on",
            reqwest_middleware::ClientBuilder::new(bare.clone())
                .with(PassOn)
                .build(),
        ),
        (
            "one-attempt",
            retry(Settings {
                max_attempts: 1,
                ..Settings::default()
            }),
        ),
        (
            "no-deadline",
            retry(Settings {
                deadline: None,
                ..Settings::default()
            }),
        ),
        (
            "no-pacing",
            retry(Settings {
                pacing: false,
                ..Settings::default()
            }),
        ),
        (
            "none",
            retry(Settings {
                max_attempts: 1,
                deadline: None,
                pacing: false,
                budget: None,
                ..Settings::default()
            }),
        ),
    ]
}

/// The same three clients interleaved: rounds of `PER_ROUND` requests each, in turn, so a
/// noisy neighbour slows all three alike; the ratios of their median rounds are the figure.
/// With `MIDDLEWARE_PARTS` set, the clients of [`parts`] take their turns too.
fn paired() {
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 200;
    let url = format!("http://{}/", server());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let bare = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("a client");
    let chain = reqwest_middleware::ClientBuilder::new(bare.clone()).build();
    let retry = reqwest_middleware::ClientBuilder::new(bare.clone())
        .with(RetryMiddleware::new(Policy::default()))
        .build();
    let extra = match std::env::var_os("MIDDLEWARE_PARTS") {
        Some(_) => parts(&bare),
        None => Vec::new(),
    };
    let mut rounds = vec![Vec::new(); 3 + extra.len()];
    rt.block_on(async {
        for _ in 0..ROUNDS {
            for (i, times) in rounds.iter_mut().enumerate() {
                let started = tokio::time::Instant::now();
                for _ in 0..PER_ROUND {
                    let r = match i {
                        0 => bare.get(&url).send().await.expect("an answer"),
                        1 => chain.get(&url).send().await.expect("an answer"),
                        2 => retry.get(&url).send().await.expect("an answer"),
                        _ => extra[i - 3].1.get(&url).send().await.expect("an answer"),
                    };
                    r.bytes().await.expect("a body");
                }
                times.push(started.elapsed().as_secs_f64() / PER_ROUND as f64);
            }
        }
    });
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = rounds.iter_mut().map(median).collect();
    let (b, c, r) = (medians[0], medians[1], medians[2]);
    println!(
        "paired ({ROUNDS} rounds of {PER_ROUND}): bare {:.1} us, chain {:.1} us ({:.3}), retry {:.1} us ({:.3} of bare, {:.3} of chain)",
        b * 1e6,
        c * 1e6,
        c / b,
        r * 1e6,
        r / b,
        r / c
    );
    if !extra.is_empty() {
        let each: Vec<String> = extra
            .iter()
            .zip(&medians[3..])
            .map(|((name, _), m)| format!("{name} {:.3}", m / b))
            .collect();
        println!("parts, of bare: {}", each.join(", "));
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    paired();
}
