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

use criterion::Criterion;
use ratewarden_client::{Policy, RetryMiddleware};

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

/// The same three clients interleaved: rounds of `PER_ROUND` requests each, in turn, so a
/// noisy neighbour slows all three alike; the ratios of their median rounds are the figure.
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
    let mut rounds: [Vec<f64>; 3] = Default::default();
    rt.block_on(async {
        for _ in 0..ROUNDS {
            for (i, times) in rounds.iter_mut().enumerate() {
                let started = tokio::time::Instant::now();
                for _ in 0..PER_ROUND {
                    let r = match i {
                        0 => bare.get(&url).send().await.expect("an answer"),
                        1 => chain.get(&url).send().await.expect("an answer"),
                        _ => retry.get(&url).send().await.expect("an answer"),
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
    let [mut b, mut c, mut r] = rounds;
    let (b, c, r) = (median(&mut b), median(&mut c), median(&mut r));
    println!(
        "paired ({ROUNDS} rounds of {PER_ROUND}): bare {:.1} us, chain {:.1} us ({:.3}), retry {:.1} us ({:.3} of bare, {:.3} of chain)",
        b * 1e6,
        c * 1e6,
        c / b,
        r * 1e6,
        r / b,
        r / c
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    paired();
}
