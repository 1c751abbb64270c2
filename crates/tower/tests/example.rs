//! The axum example's router, run in-process under paused time: every route's limit as the
//! README describes it.

#[allow(dead_code)]
#[path = "../examples/axum.rs"]
mod example;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use ratewarden_tower::TokioClock;
use tower::ServiceExt;

fn app() -> Router {
    example::router(Arc::new(TokioClock::new(1_700_000_000_000_000_000)))
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
async fn document_reads_are_five_a_second_per_user() {
    let app = app();
    for _ in 0..5 {
        assert_eq!(
            status(&app, "GET", "/documents/1", "ada").await,
            StatusCode::OK
        );
    }
    // Per user, across documents.
    assert_eq!(
        status(&app, "GET", "/documents/2", "ada").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&app, "GET", "/documents/1", "bob").await,
        StatusCode::OK
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(
        status(&app, "GET", "/documents/1", "ada").await,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn document_writes_are_two_a_minute_per_user_and_document() {
    let app = app();
    for _ in 0..2 {
        assert_eq!(
            status(&app, "POST", "/documents/7", "ada").await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&app, "POST", "/documents/7", "ada").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&app, "POST", "/documents/8", "ada").await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "POST", "/documents/7", "bob").await,
        StatusCode::OK
    );
    // Reads of the same document have limits of their own.
    assert_eq!(
        status(&app, "GET", "/documents/7", "ada").await,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn reports_are_two_in_flight_per_user() {
    let app = app();
    let running: Vec<_> = (0..2)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let response = app
                    .oneshot(request("GET", "/reports", "ada"))
                    .await
                    .unwrap();
                let status = response.status();
                response.into_body().collect().await.unwrap();
                status
            })
        })
        .collect();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        status(&app, "GET", "/reports", "ada").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&app, "GET", "/reports", "bob").await, StatusCode::OK);
    for task in running {
        // Time moves on by itself while every task waits: the 200 ms pass.
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(status(&app, "GET", "/reports", "ada").await, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn searches_charge_ten_then_settle_to_the_actual_cost() {
    let app = app();
    let search = |actual: &str| {
        Request::post("/search")
            .header("x-user", "ada")
            .header("x-actual-cost", actual)
            .body(Body::empty())
            .unwrap()
    };
    // Cheap searches settle to 1: far more than ten estimates of 10 fit in 100.
    for _ in 0..30 {
        let response = app.clone().oneshot(search("1")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // One dear one takes most of what is left (100 - 30 - 65 = 5, under the next
    // estimate of 10).
    let dear = app.clone().oneshot(search("65")).await.unwrap();
    assert_eq!(dear.status(), StatusCode::OK);
    let body = dear.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"searched; settled at 65\n");
    let refused = app.clone().oneshot(search("1")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // A minute refills the bucket; a cost that is not a number is the handler's 400.
    tokio::time::advance(Duration::from_secs(60)).await;
    let bad = app.clone().oneshot(search("lots")).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

/// The tokens left for `user`, as the `RateLimit` field of an answer says.
fn tokens_left(response: &http::Response<Body>) -> u64 {
    let field = response
        .headers()
        .get("ratelimit")
        .and_then(|v| v.to_str().ok())
        .expect("a RateLimit field")
        .to_owned();
    let r = field
        .split(';')
        .find_map(|p| p.trim().strip_prefix("r="))
        .unwrap_or_else(|| panic!("no r= in {field}"));
    r.parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_streamed_chat_is_settled_at_its_usage_before_the_stream_ends() {
    let app = app();
    let chat = |tokens: &str| {
        Request::builder()
            .method("POST")
            .uri("/chat")
            .header("x-user", "ada")
            .header("x-tokens", tokens)
            .body(Body::empty())
            .unwrap()
    };
    let first = app.clone().oneshot(chat("50")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The estimate is charged while the model answers.
    assert_eq!(tokens_left(&first), 1_000 - 200);
    let body = first.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains(r#""usage":{"total_tokens":50}"#), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    // Read to its end, the stream was settled at its usage: 50 spent, not 200; the next
    // call reserves its own estimate.
    let second = app.clone().oneshot(chat("800")).await.unwrap();
    assert_eq!(tokens_left(&second), 1_000 - 50 - 200);
    second.into_body().collect().await.unwrap();
    // 50 + 800 spent: 150 left, less than the next estimate.
    let third = app.clone().oneshot(chat("10")).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
}
