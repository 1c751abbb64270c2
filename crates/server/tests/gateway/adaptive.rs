//! Adaptive concurrency through the gateway, on real sockets: past the learnt limit a
//! request is shed with a 503 `temporary-reduced-capacity` and a Retry-After, and the limit
//! learns from the upstream's answers (a 5xx or a timeout is a drop).

#[path = "../common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::gated::Gated;
use common::{eventually, get};
use http::StatusCode;
use ratewarden_core::RealClock;

/// The gateway's upstream (`common::gated`): `/slow` waits for the gate, `/fail` answers
/// 500, `/hang` never answers.
async fn upstream() -> Gated {
    Gated::start().await
}

fn config(upstream: SocketAddr, adaptive: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
upstream_response_timeout = "300ms"

[[limit]]
name = "up"
key = ["global"]
algorithm = "adaptive-concurrency"
strategy = "aimd"

[limit.adaptive]
{adaptive}
"#
    )
}

/// The value of `ratewarden_adaptive_limit` for rule `up`, from `/metrics`.
async fn learnt(admin: SocketAddr) -> Option<u64> {
    let metrics = get(admin, "/metrics", &[]).await.body;
    metrics
        .lines()
        .find(|l| l.starts_with("ratewarden_adaptive_limit{") && l.contains("rule=\"up\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn past_the_limit_the_gateway_sheds_with_a_503_and_retry_after() {
    let up = upstream().await;
    let toml = config(up.addr, "initial = 1\nmin = 1\nmax = 1\nreserve = 0\n");
    let server = common::start_on(&toml, Arc::new(RealClock::new())).await;
    let listen = server.listen;
    let slow = tokio::spawn(async move { get(listen, "/slow", &[]).await.status });
    assert!(eventually(|| async { up.arrived.load(Ordering::SeqCst) == 1 }).await);

    let shed = get(listen, "/", &[]).await;
    assert_eq!(shed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(shed.header("retry-after").is_some(), "{:?}", shed.headers);
    assert!(
        shed.body.contains("temporary-reduced-capacity"),
        "{}",
        shed.body
    );
    // The upstream's capacity is not shown to clients.
    assert!(shed.header("ratelimit").is_none());

    up.gate.add_permits(1);
    assert_eq!(slow.await.unwrap(), StatusCode::OK);
    let after = get(listen, "/", &[]).await;
    assert_eq!(after.status, StatusCode::OK);
    assert!(after.header("ratelimit").is_none(), "{:?}", after.headers);

    let admin = server.admin.unwrap();
    let metrics = get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("ratewarden_adaptive_shed_total{class=\"default\",reason=\"limit\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratewarden_shed_total{reason=\"adaptive\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_limit_backs_off_on_an_upstream_5xx_or_timeout() {
    let up = upstream().await;
    // Every answer is a window, so each one moves the limit.
    let toml = config(
        up.addr,
        "initial = 10\nmin = 1\nmax = 20\nwindow = \"1ns\"\nwindow_samples = 1\nmin_rtt = \"0s\"\n",
    );
    let server = common::start_on(&toml, Arc::new(RealClock::new())).await;
    let admin = server.admin.unwrap();
    assert_eq!(
        get(server.listen, "/fail", &[]).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // ⌊10 · 0.9⌋ = 9; the permit is released as the response ends, just after it is read.
    assert!(eventually(|| async { learnt(admin).await == Some(9) }).await);
    assert_eq!(
        get(server.listen, "/hang", &[]).await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    // ⌊9 · 0.9⌋ = 8.
    assert!(eventually(|| async { learnt(admin).await == Some(8) }).await);
    // A success with one in flight of 8 (1 · 2 < 8): the limit was not used, no growth;
    // so the next drop takes it from 8, not 9.
    assert_eq!(get(server.listen, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        get(server.listen, "/fail", &[]).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert!(eventually(|| async { learnt(admin).await == Some(7) }).await);
    drop(up);
}

/// The value of a `/metrics` line that starts with `prefix`.
async fn metric(admin: SocketAddr, prefix: &str) -> Option<f64> {
    let metrics = get(admin, "/metrics", &[]).await.body;
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn with_a_queue_the_excess_waits_its_turn_and_a_client_gone_leaves_the_queue() {
    let up = upstream().await;
    let toml = format!(
        "{}\n[limit.queue]\nmax_wait = \"30s\"\n",
        config(up.addr, "initial = 1\nmin = 1\nmax = 1\nreserve = 0\n")
    );
    let server = common::start_on(&toml, Arc::new(RealClock::new())).await;
    let (listen, admin) = (server.listen, server.admin.unwrap());
    let waiting = "ratewarden_adaptive_queue_waiting{rule=\"up\",class=\"default\"}";
    let slow = tokio::spawn(async move { get(listen, "/slow", &[]).await.status });
    assert!(eventually(|| async { up.arrived.load(Ordering::SeqCst) == 1 }).await);

    // Past the limit: it waits instead of a 503.
    let queued = tokio::spawn(async move { get(listen, "/slow", &[]).await.status });
    assert!(eventually(|| async { metric(admin, waiting).await == Some(1.0) }).await);
    // Its client goes away while it waits: it leaves the queue, and the place the first
    // one frees does not go to it.
    let gone = tokio::spawn(async move { get(listen, "/", &[("x-tenant-id", "gone")]).await });
    assert!(eventually(|| async { metric(admin, waiting).await == Some(2.0) }).await);
    gone.abort();
    assert!(eventually(|| async { metric(admin, waiting).await == Some(1.0) }).await);

    up.gate.add_permits(2);
    assert_eq!(slow.await.unwrap(), StatusCode::OK);
    assert_eq!(queued.await.unwrap(), StatusCode::OK);
    assert_eq!(
        up.arrived.load(Ordering::SeqCst),
        2,
        "the one gone never reached it"
    );
    assert_eq!(metric(admin, waiting).await, Some(0.0));
    let let_in = "ratewarden_adaptive_queue_wait_seconds_count{rule=\"up\",class=\"default\"}";
    assert_eq!(metric(admin, let_in).await, Some(1.0));
    let metrics = get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("ratewarden_adaptive_shed_total{class=\"default\",reason=\"limit\"} 0"),
        "{metrics}"
    );
}
