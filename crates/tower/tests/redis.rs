//! Three services, each with its own layer and connection, on one real `redis-server` (and
//! on a Redis Cluster): together they stay within one limiter's bound, and a concurrency
//! permit taken through one is released for all. With Redis down, a limit failing closed
//! answers 503 and an open one is enforced in the process.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use ratewarden_core::{Concurrency, Gcra, Rate};
use ratewarden_redis::testing::{Cluster, Server};
use ratewarden_redis::{RedisConfig, RedisStore, Target};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer};
use tower::ServiceExt;

const BURST: u64 = 10;

fn store(target: Target) -> RedisStore {
    RedisStore::new(RedisConfig {
        target,
        // Generous for a shared machine: a miss would fail open (enforced in-process).
        deadline: Duration::from_secs(2),
        ..RedisConfig::default()
    })
    .expect("a valid config")
}

/// A service of the fleet: its own layer on its own connection.
fn service(target: Target) -> Router {
    // 10 at once, then one an hour: the test's seconds refill nothing worth counting.
    let calls = KeyedLimit::new(
        "calls",
        Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), BURST).unwrap(),
    )
    .key(|request| header(request, "x-user"))
    .fail_closed();
    let slots = KeyedLimit::new(
        "slots",
        Concurrency::new(3, Duration::from_secs(60)).unwrap(),
    )
    .key(|request| header(request, "x-user"))
    .fail_closed();
    let calls = RateLimitLayer::builder()
        .limit(calls)
        .build_on(store(target.clone()))
        .unwrap();
    let slots = RateLimitLayer::builder()
        .limit(slots)
        .build_on(store(target))
        .unwrap();
    Router::new()
        .route("/call", get(|| async { "called" }).route_layer(calls))
        .route("/slot", get(|| async { "slot" }).route_layer(slots))
}

fn get_as(path: &str, user: &str) -> Request<Body> {
    Request::get(path)
        .header("x-user", user)
        .body(Body::empty())
        .unwrap()
}

async fn three_services_stay_within_one_limit(target: Target) {
    let fleet: Vec<Router> = (0..3).map(|_| service(target.clone())).collect();
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let app = fleet[i % 3].clone();
            tokio::spawn(async move { app.oneshot(get_as("/call", "ada")).await.unwrap().status() })
        })
        .collect();
    let mut counts = [0u64; 2];
    for task in tasks {
        match task.await.unwrap() {
            StatusCode::OK => counts[0] += 1,
            StatusCode::TOO_MANY_REQUESTS => counts[1] += 1,
            other => panic!("unexpected {other}"),
        }
    }
    // The burst, and at most one more should the hour's one token come due.
    assert!(
        (BURST..=BURST + 1).contains(&counts[0]),
        "allowed {} of 300 across three services",
        counts[0]
    );

    // Concurrency: three slots taken through three services refuse a fourth anywhere...
    let mut held = Vec::new();
    for app in &fleet {
        let response = app.clone().oneshot(get_as("/slot", "ada")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        held.push(response);
    }
    let fourth = fleet[0]
        .clone()
        .oneshot(get_as("/slot", "ada"))
        .await
        .unwrap();
    assert_eq!(fourth.status(), StatusCode::TOO_MANY_REQUESTS);
    // ...until one body is dropped: its release goes to Redis on a task of its own.
    drop(held.pop());
    let mut released = false;
    for _ in 0..200 {
        let again = fleet[1]
            .clone()
            .oneshot(get_as("/slot", "ada"))
            .await
            .unwrap();
        if again.status() == StatusCode::OK {
            released = true;
            break;
        }
        // Waiting for the release's round trip, not for a refill.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(released, "the dropped body's permit came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_on_one_redis_stay_within_one_limiters_bound() {
    let server = Server::start();
    three_services_stay_within_one_limit(Target::Single(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_on_a_redis_cluster_stay_within_one_limiters_bound() {
    let cluster = Cluster::start();
    three_services_stay_within_one_limit(Target::Cluster(cluster.urls())).await;
}

/// A layer over a Redis nobody answers on.
fn unreachable(limit: KeyedLimit) -> Router {
    let port = ratewarden_redis::testing::free_port();
    let store = RedisStore::new(RedisConfig {
        target: Target::Single(format!("redis://127.0.0.1:{port}")),
        deadline: Duration::from_millis(200),
        ..RedisConfig::default()
    })
    .expect("a valid config");
    let layer = RateLimitLayer::builder()
        .limit(limit.key(|request| header(request, "x-user")))
        .build_on(store)
        .unwrap();
    Router::new().route("/call", get(|| async { "called" }).route_layer(layer))
}

#[tokio::test]
async fn a_limit_failing_closed_answers_503_while_its_store_is_down_and_an_open_one_enforces_here()
{
    let gcra = || Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), 2).unwrap();
    let closed = unreachable(KeyedLimit::new("closed", gcra()).fail_closed());
    let response = closed.oneshot(get_as("/call", "ada")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );

    // Open: never a 503, and still the limit's own numbers, in this process.
    let open = unreachable(KeyedLimit::new("open", gcra()));
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            open.clone()
                .oneshot(get_as("/call", "ada"))
                .await
                .unwrap()
                .status(),
        );
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
