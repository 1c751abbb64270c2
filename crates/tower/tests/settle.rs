//! Estimate, then settle from inside the service: the handler finds the reservation in the
//! request's extensions and settles the real cost before it answers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Extension, Router};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use ratewarden_core::{Rate, TokenBucket};
use ratewarden_tower::SettleError;
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer, Reservation, TokioClock};
use tower::ServiceExt;

const BASE: u64 = 1_700_000_000_000_000_000;

/// Settles at `x-actual-cost` (twice when `x-settle-twice` is sent), answering what the
/// settle said.
async fn search(Extension(reservation): Extension<Reservation>, headers: HeaderMap) -> String {
    let actual: u64 = headers["x-actual-cost"].to_str().unwrap().parse().unwrap();
    let mut said = match reservation.settle(actual).await {
        Ok(()) => "settled".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    if headers.contains_key("x-settle-twice") {
        said = match reservation.settle(actual).await {
            Err(SettleError::Unknown) => "settled once only".to_owned(),
            other => format!("{other:?}"),
        };
    }
    said
}

fn app() -> Router {
    // 20 units, refilled at 1 a second; each search is estimated at 10.
    let searches = KeyedLimit::new(
        "search-cost",
        TokenBucket::new(Rate::per_second(1).unwrap(), 20).unwrap(),
    )
    .key(|request| header(request, "x-user"))
    .fixed_cost(10)
    .settle_within(Duration::from_secs(10));
    let layer = RateLimitLayer::builder()
        .limit(searches)
        .build()
        .unwrap()
        .clock(Arc::new(TokioClock::new(BASE)));
    Router::new().route("/search", post(search)).layer(layer)
}

async fn search_costing(app: &Router, actual: u64, twice: bool) -> (StatusCode, String, String) {
    let mut request = Request::post("/search")
        .header("x-user", "ada")
        .header("x-actual-cost", actual.to_string());
    if twice {
        request = request.header("x-settle-twice", "1");
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let field = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, field, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_settle_below_the_estimate_refunds_the_difference() {
    let app = app();
    let (status, field, body) = search_costing(&app, 3, false).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "settled"));
    assert!(
        field.contains("r=10"),
        "the estimate charged up front: {field}"
    );
    // 20 - 3 = 17 left: the next estimate of 10 leaves 7.
    let (status, field, _) = search_costing(&app, 10, false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(field.contains("r=7"), "{field}");
}

#[tokio::test(start_paused = true)]
async fn a_settle_above_the_estimate_charges_the_difference() {
    let app = app();
    let (status, _, body) = search_costing(&app, 15, false).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "settled"));
    // 20 - 15 = 5 left: an estimate of 10 must wait 5 seconds.
    let (status, _, _) = search_costing(&app, 10, false).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    tokio::time::advance(Duration::from_secs(5)).await;
    let (status, _, _) = search_costing(&app, 10, false).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_reservation_settles_once_and_never_above_what_one_request_may_take() {
    let app = app();
    let (_, _, body) = search_costing(&app, 4, true).await;
    assert_eq!(body, "settled once only");
    let (status, _, body) = search_costing(&app, 21, false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("refused") && body.contains("search-cost") && body.contains("21"),
        "{body}"
    );
}
