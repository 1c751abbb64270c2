//! What the layer costs an axum service: a handler returning a fixed body, with and without
//! the layer (GCRA per user, in memory), on the same 1,024 users, in one run.
//!
//! - `in_process`: requests driven through `tower::ServiceExt::oneshot`, beside governor's
//!   keyed `check_key` on the same keys (the peer: what a bare keyed limiter costs). The
//!   layer's overhead is `layered - bare`.
//! - `loopback`: both routers served by axum on 127.0.0.1 (one runtime worker), loaded by a
//!   small hyper client loop over 32 keep-alive connections (another thread); a request's
//!   time is the batch's over its size, so requests/s is its inverse. The goal is the
//!   layered router at 0.90 or more of the bare router's requests/s.
//!
//! Run with `cargo bench -p ratewarden-tower --bench layer`. The quota is 1 a minute with a
//! burst of 100 million, for ours and governor's: every decision is allowed and every key's
//! state stays live (the allowed path, like for like).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use governor::{Quota, RateLimiter};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tower::ServiceExt;

#[path = "common/mod.rs"]
mod common;
use common::{bare, layered, request, BURST, USERS};

const CONNECTIONS: usize = 32;

fn users() -> Arc<Vec<String>> {
    Arc::new((0..USERS).map(|i| format!("user-{i}")).collect())
}

fn in_process(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let users = users();
    let mut group = c.benchmark_group("in_process");
    group.throughput(Throughput::Elements(1));
    for (name, router) in [("bare", bare()), ("layered", layered())] {
        let mut i = 0;
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                i = (i + 1) % USERS;
                let response = router.clone().oneshot(request(&users[i]));
                async move {
                    let response = response.await.expect("infallible");
                    assert_eq!(response.status(), StatusCode::OK);
                    response
                }
            });
        });
    }
    let quota = Quota::per_minute(NonZeroU32::MIN).allow_burst(NonZeroU32::new(BURST).unwrap());
    let governor = RateLimiter::keyed(quota);
    let mut i = 0;
    group.bench_function("governor_check_key", |b| {
        b.iter(|| {
            i = (i + 1) % USERS;
            assert!(governor.check_key(&users[i]).is_ok());
        });
    });
    group.finish();
}

type Sender = SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Sender {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// Sends `total` requests over `senders`, each connection one at a time, and gives the
/// connections back with the time it took.
async fn drive(
    senders: Vec<Sender>,
    total: u64,
    users: Arc<Vec<String>>,
) -> (Vec<Sender>, Duration) {
    let start = tokio::time::Instant::now();
    let count = senders.len() as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut sender) in senders.into_iter().enumerate() {
        let n = total / count + u64::from((c as u64) < total % count);
        let users = Arc::clone(&users);
        tasks.spawn(async move {
            for i in 0..n {
                let user = &users[(c * 7919 + i as usize) % USERS];
                sender.ready().await.expect("connection ready");
                let request = Request::get("/")
                    .header(http::header::HOST, "127.0.0.1")
                    .header("x-user", user)
                    .body(Empty::new())
                    .expect("a request");
                let response = sender.send_request(request).await.expect("a response");
                assert_eq!(response.status(), StatusCode::OK);
                response.into_body().collect().await.expect("a body");
            }
            sender
        });
    }
    let senders = tasks.join_all().await;
    (senders, start.elapsed())
}

fn loopback(c: &mut Criterion) {
    // The servers run on a runtime of their own (one worker thread), the load generator on
    // this thread: on a 2-vCPU machine each has a core.
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a server runtime");
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a client runtime");
    let users = users();
    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Elements(1));
    for (name, router) in [("bare", bare()), ("layered", layered())] {
        let addr = servers.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("an address");
            tokio::spawn(async move { axum::serve(listener, router).await });
            addr
        });
        let senders = client.block_on(async {
            let mut senders = Vec::new();
            for _ in 0..CONNECTIONS {
                senders.push(connect(addr).await);
            }
            senders
        });
        let senders = RefCell::new(senders);
        let senders = &senders;
        group.bench_function(name, |b| {
            b.to_async(&client).iter_custom(|iters| {
                let users = Arc::clone(&users);
                async move {
                    let taken = std::mem::take(&mut *senders.borrow_mut());
                    let (back, took) = drive(taken, iters, users).await;
                    *senders.borrow_mut() = back;
                    took
                }
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    in_process(&mut c);
    loopback(&mut c);
    c.final_summary();
}
