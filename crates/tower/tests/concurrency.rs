//! Concurrency limits: a permit per request, held for the life of its response body and
//! released when the body is sent, dropped, or the client goes away before the answer; the
//! lease lets a permit go that nothing released.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use ratewarden_core::Concurrency;
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer, TokioClock};
use tower::ServiceExt;

const BASE: u64 = 1_700_000_000_000_000_000;
const LEASE: Duration = Duration::from_secs(30);

fn app() -> Router {
    let reports = KeyedLimit::new("reports", Concurrency::new(2, LEASE).unwrap())
        .key(|request| header(request, "x-user"));
    let layer = RateLimitLayer::builder()
        .limit(reports)
        .build()
        .unwrap()
        .clock(Arc::new(TokioClock::new(BASE)));
    Router::new()
        .route("/reports", get(|| async { "report" }))
        .route("/hang", get(std::future::pending::<&'static str>))
        .layer(layer)
}

fn get_as(path: &str, user: &str) -> Request<Body> {
    Request::get(path)
        .header("x-user", user)
        .body(Body::empty())
        .unwrap()
}

async fn status(app: &Router, user: &str) -> StatusCode {
    app.clone()
        .oneshot(get_as("/reports", user))
        .await
        .unwrap()
        .status()
}

#[tokio::test(start_paused = true)]
async fn permits_are_held_by_the_body_and_released_when_it_is_dropped() {
    let app = app();
    let first = app
        .clone()
        .oneshot(get_as("/reports", "ada"))
        .await
        .unwrap();
    let second = app
        .clone()
        .oneshot(get_as("/reports", "ada"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let third = app
        .clone()
        .oneshot(get_as("/reports", "ada"))
        .await
        .unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let policy = third.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains(r#"qu="concurrent-requests""#), "{policy}");
    // Per key: another user is not held up.
    assert_eq!(status(&app, "bob").await, StatusCode::OK);
    drop(first);
    assert_eq!(status(&app, "ada").await, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_body_sent_to_the_end_releases_its_permit_before_it_is_dropped() {
    let app = app();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut response = app
            .clone()
            .oneshot(get_as("/reports", "ada"))
            .await
            .unwrap();
        while let Some(frame) = response.body_mut().frame().await {
            frame.unwrap();
        }
        // Kept, as a connection may keep a finished body a while.
        held.push(response);
    }
    assert_eq!(status(&app, "ada").await, StatusCode::OK);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_client_gone_before_the_answer_releases_its_permit() {
    let app = app();
    let hanging: Vec<_> = (0..2)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.oneshot(get_as("/hang", "ada")).await })
        })
        .collect();
    // Let both reach the handler and hold their permits.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(status(&app, "ada").await, StatusCode::TOO_MANY_REQUESTS);
    // The client goes away: the connection drops the request's future.
    hanging[0].abort();
    assert!(hanging
        .into_iter()
        .next()
        .unwrap()
        .await
        .unwrap_err()
        .is_cancelled());
    assert_eq!(status(&app, "ada").await, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_permit_nothing_releases_lapses_after_its_lease() {
    let app = app();
    for _ in 0..2 {
        let response = app
            .clone()
            .oneshot(get_as("/reports", "ada"))
            .await
            .unwrap();
        // Leaked: no drop, no release.
        std::mem::forget(response);
    }
    assert_eq!(status(&app, "ada").await, StatusCode::TOO_MANY_REQUESTS);
    tokio::time::advance(LEASE + Duration::from_millis(1)).await;
    assert_eq!(status(&app, "ada").await, StatusCode::OK);
}
