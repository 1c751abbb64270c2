//! Limits written in code: keyed by closures over the request (per user, per object),
//! costed by closures, decided all or nothing, refused with located errors when malformed.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use ratewarden_core::{Gcra, Rate, SlidingWindow, TokenBucket};
use ratewarden_tower::{header, BuildError, KeyedLimit, RateLimitLayer, TokioClock};
use tower::ServiceExt;

const BASE: u64 = 1_700_000_000_000_000_000;

fn clock() -> Arc<TokioClock> {
    Arc::new(TokioClock::new(BASE))
}

/// Writes: 2 a minute per user and document, from the path.
fn writes() -> KeyedLimit {
    KeyedLimit::new(
        "document-writes",
        SlidingWindow::new(2, Duration::from_secs(60)).unwrap(),
    )
    .key(|request| {
        let user = header(request, "x-user")?;
        let document = request.uri.path().strip_prefix("/documents/")?;
        Some(format!("{user}/{document}"))
    })
}

fn request(method: &str, path: &str, user: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("x-user", user)
        .body(Body::empty())
        .unwrap()
}

async fn status(app: &Router, method: &str, path: &str, user: &str) -> StatusCode {
    app.clone()
        .oneshot(request(method, path, user))
        .await
        .unwrap()
        .status()
}

#[tokio::test(start_paused = true)]
async fn limits_per_user_and_per_object_are_independent() {
    let layer = RateLimitLayer::builder()
        .limit(writes())
        .build()
        .unwrap()
        .clock(clock());
    let app = Router::new()
        .route("/documents/{id}", post(|| async { "saved" }))
        .route_layer(layer);
    for _ in 0..2 {
        assert_eq!(
            status(&app, "POST", "/documents/1", "ada").await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&app, "POST", "/documents/1", "ada").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another document of the same user, and the same document for another user, each
    // have a budget of their own.
    assert_eq!(
        status(&app, "POST", "/documents/2", "ada").await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "POST", "/documents/1", "bob").await,
        StatusCode::OK
    );
    // The window slides (weighing the previous minute's count): two minutes on, ada may
    // write document 1 again.
    tokio::time::advance(Duration::from_secs(120)).await;
    assert_eq!(
        status(&app, "POST", "/documents/1", "ada").await,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn several_limits_decide_all_or_nothing() {
    // Per user 3 writes a minute across documents, and 2 per document.
    let per_user = KeyedLimit::new(
        "user-writes",
        SlidingWindow::new(3, Duration::from_secs(60)).unwrap(),
    )
    .key(|request| header(request, "x-user"));
    let layer = RateLimitLayer::builder()
        .limit(per_user)
        .limit(writes())
        .build()
        .unwrap()
        .clock(clock());
    let app = Router::new()
        .route("/documents/{id}", post(|| async { "saved" }))
        .route_layer(layer);
    assert_eq!(
        status(&app, "POST", "/documents/1", "ada").await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "POST", "/documents/1", "ada").await,
        StatusCode::OK
    );
    // Refused by the document's limit: not charged to the user's.
    let refused = app
        .clone()
        .oneshot(request("POST", "/documents/1", "ada"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["document-writes"])
    );
    assert_eq!(
        status(&app, "POST", "/documents/2", "ada").await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "POST", "/documents/3", "ada").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the user's third write of the minute went through, the fourth may not"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cost_extractor_charges_its_cost_and_a_bad_cost_is_a_400_naming_the_limit() {
    let rows = KeyedLimit::new(
        "rows",
        TokenBucket::new(Rate::per_second(1).unwrap(), 10).unwrap(),
    )
    .key(|request| header(request, "x-user"))
    .cost(|request| match header(request, "x-rows") {
        None => Ok(1),
        Some(text) => text
            .parse()
            .map_err(|_| format!("header `x-rows` must be a whole number, not `{text}`")),
    });
    let layer = RateLimitLayer::builder()
        .limit(rows)
        .build()
        .unwrap()
        .clock(clock());
    let app = Router::new()
        .route("/export", get(|| async { "rows" }))
        .layer(layer);
    let with_rows = |rows: &str| {
        Request::get("/export")
            .header("x-user", "ada")
            .header("x-rows", rows)
            .body(Body::empty())
            .unwrap()
    };
    let response = app.clone().oneshot(with_rows("7")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let field = response.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(field.contains("r=3"), "{field}");
    let over = app.clone().oneshot(with_rows("4")).await.unwrap();
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.headers()["retry-after"], "1");

    let bad = app.clone().oneshot(with_rows("many")).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let text = bad.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("limit `rows`") && text.contains("`many`"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_the_key_extractor_skips_is_not_limited() {
    let reads = KeyedLimit::new("reads", Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap())
        .key(|request| header(request, "x-user"));
    let layer = RateLimitLayer::builder()
        .limit(reads)
        .build()
        .unwrap()
        .clock(clock());
    let app = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(layer);
    for _ in 0..3 {
        let anonymous = Request::get("/").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(anonymous).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("ratelimit").is_none());
    }
}

#[test]
fn bad_limit_sets_are_refused_with_the_name() {
    let gcra = || Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap();
    assert_eq!(
        RateLimitLayer::builder().build().unwrap_err(),
        BuildError::NoLimits
    );
    let twice = RateLimitLayer::builder()
        .limit(KeyedLimit::new("reads", gcra()))
        .limit(KeyedLimit::new("reads", gcra()))
        .build()
        .unwrap_err();
    assert_eq!(
        twice,
        BuildError::DuplicateName {
            name: "reads".to_owned()
        }
    );
    assert!(twice.to_string().contains("`reads`"));
    let blank = RateLimitLayer::builder()
        .limit(KeyedLimit::new(" ", gcra()))
        .build()
        .unwrap_err();
    assert!(matches!(blank, BuildError::BadName { .. }));
    let control = RateLimitLayer::builder()
        .limit(KeyedLimit::new("a\nb", gcra()))
        .build()
        .unwrap_err();
    assert!(matches!(control, BuildError::BadName { .. }));
}
