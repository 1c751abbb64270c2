//! The layer over the rules of a config file: the contract's answers, the RateLimit fields
//! on allowed responses, shared state across clones, bad input.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_tower::{RateLimitLayer, TokioClock};
use tower::ServiceExt;

const BASE: u64 = 1_700_000_000_000_000_000;

fn layer(toml: &str) -> RateLimitLayer {
    let config = ratewarden_policy::config::parse("test.toml", toml).expect("valid config");
    RateLimitLayer::from_config(config, MemoryStore::new(StoreConfig::default()))
        .clock(Arc::new(TokioClock::new(BASE)))
}

const PER_USER: &str = r#"
[[limit]]
name = "per-user"
key = ["header:x-user"]
algorithm = "gcra"
rate = "5/s"
burst = 5
"#;

fn router(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/documents", get(|| async { "listed" }))
        .layer(layer)
}

fn get_as(user: &str) -> Request<Body> {
    Request::get("/documents")
        .header("x-user", user)
        .body(Body::empty())
        .unwrap()
}

async fn body_text(response: http::Response<Body>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn header<'a>(response: &'a http::Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The `r` (remaining) of policy `name` in a `RateLimit` field, parsed as Structured Fields.
fn remaining(field: &str, name: &str) -> i64 {
    let list = sfv::Parser::new(field)
        .parse::<sfv::List>()
        .expect("a Structured Field list");
    for member in list {
        let sfv::ListEntry::Item(item) = member else {
            panic!("an inner list in {field}")
        };
        if item.bare_item.as_string().map(|s| s.as_str()) == Some(name) {
            let r = item.params.get("r").expect("an r parameter");
            return r.as_integer().expect("an integer").into();
        }
    }
    panic!("no policy {name} in {field}")
}

#[tokio::test(start_paused = true)]
async fn allowed_responses_carry_the_ratelimit_fields_and_the_sixth_is_a_429() {
    let app = router(layer(PER_USER));
    for i in 0..5 {
        let response = app.clone().oneshot(get_as("ada")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header(&response, "ratelimit-policy"),
            Some(r#""per-user";q=5;w=1"#)
        );
        let field = header(&response, "ratelimit").expect("RateLimit on an allowed answer");
        assert_eq!(remaining(field, "per-user"), 4 - i);
        assert_eq!(header(&response, "cache-control"), Some("private"));
        assert_eq!(body_text(response).await, "listed");
    }
    let response = app.clone().oneshot(get_as("ada")).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), Some("1"));
    assert_eq!(header(&response, "cache-control"), Some("no-store"));
    assert_eq!(
        header(&response, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        remaining(header(&response, "ratelimit").unwrap(), "per-user"),
        0
    );
    let body: serde_json::Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["per-user"]));

    // Another user has a budget of their own; ada's refills after one interval.
    let other = app.clone().oneshot(get_as("bob")).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    tokio::time::advance(Duration::from_millis(200)).await;
    let again = app.clone().oneshot(get_as("ada")).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_sensitive_rule_answers_a_bare_429() {
    let app = router(layer(
        r#"
[[limit]]
name = "login"
key = ["header:x-user"]
algorithm = "fixed-window"
limit = 1
window = "1m"
sensitive = true
"#,
    ));
    assert_eq!(
        app.clone().oneshot(get_as("ada")).await.unwrap().status(),
        StatusCode::OK
    );
    let response = app.clone().oneshot(get_as("ada")).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&response, "retry-after").is_some());
    assert!(header(&response, "ratelimit").is_none());
    assert!(header(&response, "ratelimit-policy").is_none());
    assert_eq!(body_text(response).await, "");
}

/// tower's own `RateLimit` reserves in `poll_ready` on per-clone state, so a router cloning
/// it per request stops limiting (tower#764, axum#2634). Here every clone shares one budget.
#[tokio::test(start_paused = true)]
async fn a_thousand_concurrent_requests_through_cloned_routers_never_exceed_the_limit() {
    let app = router(layer(
        r#"
[[limit]]
name = "global"
key = ["global"]
algorithm = "gcra"
rate = "5/s"
burst = 5
"#,
    ));
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.oneshot(get_as("ada")).await.unwrap().status() })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        if task.await.unwrap() == StatusCode::OK {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5, "time stood still: the burst and nothing more");
}

#[tokio::test(start_paused = true)]
async fn a_repeated_key_header_is_a_400_naming_the_rule_and_header() {
    let app = router(layer(PER_USER));
    let request = Request::get("/documents")
        .header("x-user", "ada")
        .header("x-user", "bob")
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let text = body_text(response).await;
    assert!(
        text.contains("per-user") && text.contains("x-user"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reject_hook_renders_its_own_body_and_keeps_retry_after() {
    let layer = layer(PER_USER).on_reject(|rejection| {
        let mut response = rejection.response();
        response.headers_mut().remove(http::header::CONTENT_TYPE);
        *response.body_mut() = format!("slow down, {}", rejection.violated.join(",")).into();
        response
    });
    let app = router(layer);
    for _ in 0..5 {
        app.clone().oneshot(get_as("ada")).await.unwrap();
    }
    let response = app.oneshot(get_as("ada")).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), Some("1"));
    assert_eq!(body_text(response).await, "slow down, per-user");
}

#[tokio::test(start_paused = true)]
async fn requests_no_rule_matches_pass_untouched() {
    let app = router(layer(&format!("{PER_USER}when_key_missing = \"skip\"\n")));
    // No x-user header, and the rule skips a request without its key part.
    let request = Request::get("/documents").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(header(&response, "ratelimit").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_queueing_rule_delays_the_request_instead_of_refusing_it() {
    let app = router(layer(
        r#"
[[limit]]
name = "queue"
key = ["header:x-user"]
algorithm = "leaky-queue"
rate = "1/s"
burst = 2
"#,
    ));
    let start = tokio::time::Instant::now();
    assert_eq!(
        app.clone().oneshot(get_as("ada")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The second waits its turn: one emission interval.
    assert_eq!(
        app.clone().oneshot(get_as("ada")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn ip_rules_key_by_the_peer_in_the_extensions_and_an_unknown_peer_shares_one_budget() {
    let app = router(layer(
        r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"
"#,
    ));
    let from = |peer: Option<&str>| {
        let mut request = Request::get("/documents").body(Body::empty()).unwrap();
        if let Some(peer) = peer {
            let addr: std::net::SocketAddr = peer.parse().unwrap();
            request.extensions_mut().insert(addr);
        }
        request
    };
    let status = |r: Request<Body>| {
        let app = app.clone();
        async move { app.oneshot(r).await.unwrap().status() }
    };
    assert_eq!(status(from(Some("192.0.2.1:1000"))).await, StatusCode::OK);
    assert_eq!(status(from(Some("192.0.2.2:1000"))).await, StatusCode::OK);
    assert_eq!(
        status(from(Some("192.0.2.1:2000"))).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(from(None)).await, StatusCode::OK);
    assert_eq!(status(from(None)).await, StatusCode::TOO_MANY_REQUESTS);
}

/// `[server] retry_after_jitter`, as the gateway reads it: Retry-After spread over the
/// exact wait and up to the jitter more, never less.
#[tokio::test(start_paused = true)]
async fn retry_after_jitter_spreads_clients_out_but_never_sends_them_early() {
    let toml = r#"
[server]
retry_after_jitter = "3s"

[[limit]]
name = "per-user"
key = ["header:x-user"]
algorithm = "fixed-window"
limit = 1
window = "10s"
"#;
    let app = router(layer(toml));
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..60 {
        let response = app.clone().oneshot(get_as("ada")).await.unwrap();
        if i == 0 {
            assert_eq!(response.status(), StatusCode::OK);
            continue;
        }
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = header(&response, "retry-after").unwrap().parse().unwrap();
        assert!((10..=13).contains(&retry), "{retry}");
        seen.insert(retry);
    }
    assert!(seen.len() >= 3, "spread out: {seen:?}");
}

#[tokio::test(start_paused = true)]
async fn limits_written_in_code_take_their_jitter_from_the_layer() {
    use ratewarden_core::FixedWindow;
    use ratewarden_tower::{header as read_header, KeyedLimit};
    let per_user = KeyedLimit::new(
        "per-user",
        FixedWindow::new(1, Duration::from_secs(10)).unwrap(),
    )
    .key(|request| read_header(request, "x-user"));
    let layer = RateLimitLayer::builder()
        .limit(per_user)
        .build()
        .unwrap()
        .clock(Arc::new(TokioClock::new(BASE)));
    let exact = router(layer.clone());
    let spread = router(layer.retry_after_jitter(Duration::from_secs(3)));
    exact.clone().oneshot(get_as("ada")).await.unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let response = exact.clone().oneshot(get_as("ada")).await.unwrap();
        assert_eq!(
            header(&response, "retry-after"),
            Some("10"),
            "no jitter by default"
        );
        let response = spread.clone().oneshot(get_as("ada")).await.unwrap();
        let retry: u64 = header(&response, "retry-after").unwrap().parse().unwrap();
        assert!((10..=13).contains(&retry), "{retry}");
        seen.insert(retry);
    }
    assert!(seen.len() >= 3, "spread out: {seen:?}");
}

#[tokio::test]
async fn spellings_of_one_host_and_one_credential_share_a_budget_and_a_missing_part_counts_the_client(
) {
    let app = router(layer(
        r#"
[[limit]]
name = "api-host"
match = { host = "api.example.com" }
key = ["api_key"]
algorithm = "fixed-window"
limit = 2
window = "1h"
"#,
    ));
    let call = |host: &'static str, authorization: Option<&'static str>| {
        let mut request = Request::get("/documents").header("host", host);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        app.clone().oneshot(request.body(Body::empty()).unwrap())
    };
    let mut statuses = Vec::new();
    for (host, auth) in [
        ("api.example.com.", "BEARER t"),
        ("API.example.com:443", "bearer  t"),
        ("api.example.com", "Bearer t"),
    ] {
        statuses.push(call(host, Some(auth)).await.unwrap().status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Without an API key the rule still counts, under the client's address.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(call("api.example.com.", None).await.unwrap().status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // A host that is no host is a 400.
    let response = call("api..example.com", None).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
