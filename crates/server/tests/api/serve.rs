//! `ratewarden serve` end to end: real listeners on 127.0.0.1, a real HTTP client, a real
//! upstream started by the test, and the contract asserted header by header.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use ratewarden_core::{Clock, ManualClock};
use ratewarden_server::serve::{Options, Running, TokioClock};
use serde_json::{json, Value};
use tokio::net::TcpListener;

const T0: u64 = 1_000_000_000_000;

#[path = "../common/mod.rs"]
mod common;

use common::gated::Gated;
use common::{client, eventually, get, post, send, Served};

async fn start(toml: &str, clock: Arc<dyn Clock>) -> Running {
    start_with(toml, clock, 1).await
}

/// With worker threads beyond the test's own runtime.
async fn start_with(toml: &str, clock: Arc<dyn Clock>, workers: usize) -> Running {
    common::start_workers(toml, clock, workers).await
}

fn list(value: &str) -> sfv::List {
    sfv::Parser::new(value)
        .parse::<sfv::List>()
        .unwrap_or_else(|e| panic!("`{value}` is not a Structured Field list: {e}"))
}

/// The integer parameter `param` of the list member named `name`.
fn param(list: &sfv::List, name: &str, param: &str) -> Option<i64> {
    list.iter().find_map(|member| {
        let sfv::ListEntry::Item(item) = member else {
            return None;
        };
        let sfv::BareItem::String(s) = &item.bare_item else {
            return None;
        };
        if s.as_str() != name {
            return None;
        }
        item.params.iter().find_map(|(k, v)| match v {
            sfv::BareItem::Integer(i) if k.as_str() == param => Some(i64::from(*i)),
            _ => None,
        })
    })
}

// ---------------------------------------------------------------------------------------
// The decision API

const API: &str = r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "gcra"
rate = "5/s"
burst = 5

[[limit]]
name = "watch"
key = ["global"]
algorithm = "fixed-window"
limit = 2
window = "1m"
mode = "shadow"
"#;

#[tokio::test]
async fn the_decision_api_decides_with_the_headers_a_gateway_should_send() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = start(API, clock.clone()).await;
    let check = r#"{"ip": "203.0.113.7", "method": "GET", "path": "/orders", "api_key": "k1"}"#;
    for i in 0..5 {
        let reply = post(server.listen, "/v1/check", check).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        let d = reply.json();
        assert_eq!(d["allowed"], true, "request {i}: {d}");
        assert_eq!(d["status"], 200);
        let headers = d["headers"].as_array().unwrap();
        let field = |name: &str| {
            headers
                .iter()
                .find(|h| h[0] == name)
                .map(|h| h[1].as_str().unwrap().to_owned())
        };
        let state = list(&field("ratelimit").unwrap());
        assert_eq!(param(&state, "per-key", "r"), Some(4 - i));
        // The shadow rule is nobody's business but the operator's.
        assert_eq!(param(&state, "watch", "r"), None);
    }
    let d = post(server.listen, "/v1/check", check).await.json();
    assert_eq!(d["allowed"], false);
    assert_eq!(d["status"], 429);
    assert_eq!(d["retry_after_ms"], 200, "exactly one token's time at 5/s");
    assert_eq!(d["violated_policies"], json!(["per-key"]));
    assert_eq!(d["would_have_rejected"], json!(["watch"]));
    let headers = d["headers"].as_array().unwrap();
    assert!(headers.contains(&json!(["retry-after", "1"])));
    assert!(headers.contains(&json!(["cache-control", "no-store"])));
    let problem: Value = serde_json::from_str(d["body"].as_str().unwrap()).unwrap();
    assert_eq!(problem["violated-policies"], json!(["per-key"]));
    let per_key = &d["policies"][0];
    assert_eq!(per_key["name"], "per-key");
    assert_eq!(per_key["outcome"], "limited");
    assert_eq!(per_key["remaining"], 0);

    // One nanosecond early is still too early; at 200 ms the token is there.
    clock.advance(Duration::from_nanos(199_999_999));
    assert_eq!(
        post(server.listen, "/v1/check", check).await.json()["allowed"],
        false
    );
    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        post(server.listen, "/v1/check", check).await.json()["allowed"],
        true
    );
    // Another key has its own budget; the cost is the caller's to say.
    let other = r#"{"ip": "203.0.113.7", "api_key": "k2", "cost": 5}"#;
    let d = post(server.listen, "/v1/check", other).await.json();
    assert_eq!(d["allowed"], true);
    assert_eq!(d["policies"][0]["remaining"], 0);
}

#[tokio::test]
async fn retry_after_jitter_spreads_clients_out_but_never_sends_them_early() {
    let toml = r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
retry_after_jitter = "3s"

[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "10s"
"#;
    let server = start(toml, Arc::new(ManualClock::new(T0))).await;
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..60 {
        let d = post(server.listen, "/v1/check", r#"{"ip": "192.0.2.1"}"#)
            .await
            .json();
        if i == 0 {
            continue;
        }
        assert_eq!(
            d["retry_after_ms"], 10_000,
            "the exact wait is not jittered"
        );
        let retry = d["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h[0] == "retry-after")
            .unwrap()[1]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap();
        assert!((10..=13).contains(&retry), "{retry}");
        seen.insert(retry);
    }
    assert!(seen.len() >= 3, "spread out: {seen:?}");
}

#[tokio::test]
async fn bad_api_requests_get_a_4xx_problem_that_says_what_was_wrong() {
    let toml = API.replace("[server]\n", "[server]\nmax_body = 1024\n");
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    let cases: &[(&str, &str, StatusCode, &str)] = &[
        ("/v1/check", "{\"ip\": ", StatusCode::BAD_REQUEST, "EOF"),
        ("/v1/check", "", StatusCode::BAD_REQUEST, "empty"),
        (
            "/v1/check",
            "[1, 2]",
            StatusCode::UNPROCESSABLE_ENTITY,
            "JSON object",
        ),
        (
            "/v1/check",
            r#"{"ipp": "1.2.3.4"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown field `ipp`",
        ),
        (
            "/v1/check",
            r#"{"cost": -3}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "-3",
        ),
        (
            "/v1/check",
            r#"{"cost": 1.5}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "1.5",
        ),
        (
            "/v1/check",
            r#"{"cost": 99999999999999}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "at most 1000000000",
        ),
        (
            "/v1/check",
            r#"{"ip": "300.1.1.1"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "`ip`",
        ),
        (
            "/v1/check",
            r#"{"path": "orders"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "`path`",
        ),
        (
            "/v1/check",
            r#"{"method": "GET /"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "`method`",
        ),
        (
            "/v1/settle",
            r#"{"reservation": "7"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing field `cost`",
        ),
        (
            "/v1/settle",
            r#"{"reservation": "00000000000000000000000000000007", "cost": 1}"#,
            StatusCode::NOT_FOUND,
            "no such reservation",
        ),
        (
            "/v1/release",
            r#"{"permit": "00000000000000000000000000000009"}"#,
            StatusCode::NOT_FOUND,
            "no such permit",
        ),
        ("/v1/nothing", "{}", StatusCode::NOT_FOUND, "/v1/check"),
    ];
    for (path, body, status, says) in cases {
        let reply = post(server.listen, path, body).await;
        assert_eq!(reply.status, *status, "{path} {body}: {}", reply.body);
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        let problem = reply.json();
        assert_eq!(problem["status"], status.as_u16());
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains(says),
            "{path} {body}: `{detail}` should say `{says}`"
        );
    }
    let big = format!(r#"{{"path": "/{}"}}"#, "a".repeat(2000));
    let reply = post(server.listen, "/v1/check", &big).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.json()["detail"]
        .as_str()
        .unwrap()
        .contains("max_body"));

    let reply = get(server.listen, "/v1/check", &[]).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.header("allow"), Some("POST"));

    let reply = send(
        Request::post(format!("http://{}/v1/check", server.listen))
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // After all that, the server still decides.
    let d = post(server.listen, "/v1/check", r#"{"api_key": "k"}"#)
        .await
        .json();
    assert_eq!(d["allowed"], true);
}

#[tokio::test]
async fn estimates_settle_and_permits_release_through_the_api() {
    let toml = r#"
[server]
listen = "127.0.0.1:0"
admin = "off"

[[limit]]
name = "tokens"
match = { path = "/generate" }
key = ["tenant"]
algorithm = "token-bucket"
rate = "1000/m"
burst = 1000
settle = "1m"

[[limit]]
name = "exports"
match = { path = "/export" }
key = ["tenant"]
algorithm = "concurrency"
limit = 1
lease = "5m"
"#;
    let server = start(toml, Arc::new(ManualClock::new(T0))).await;
    assert_eq!(server.admin, None);
    let d = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "acme", "path": "/generate", "cost": 800}"#,
    )
    .await
    .json();
    let reservation = d["reservation"]
        .as_str()
        .expect("an estimate is a reservation");
    assert_eq!(reservation.len(), 32, "128 random bits in hex");
    assert_eq!(d["policies"][0]["remaining"], 200);
    // The real cost was 100: 700 come back. The settle names the tenant again: only the
    // client a reservation was issued for may settle it.
    let settled = post(
        server.listen,
        "/v1/settle",
        &format!(r#"{{"reservation": "{reservation}", "cost": 100, "tenant": "acme"}}"#),
    )
    .await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.body);
    let d = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "acme", "path": "/generate", "cost": 900}"#,
    )
    .await
    .json();
    assert_eq!(d["allowed"], true, "{d}");
    // Settling twice is refused.
    let again = post(
        server.listen,
        "/v1/settle",
        &format!(r#"{{"reservation": "{reservation}", "cost": 100, "tenant": "acme"}}"#),
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);

    let export = r#"{"tenant": "acme", "path": "/export"}"#;
    let first = post(server.listen, "/v1/check", export).await.json();
    let permit = first["permit"]
        .as_str()
        .expect("a concurrency rule grants a permit")
        .to_owned();
    let second = post(server.listen, "/v1/check", export).await.json();
    assert_eq!(second["allowed"], false);
    assert_eq!(second["violated_policies"], json!(["exports"]));
    let policy = second["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "ratelimit-policy")
        .unwrap()[1]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        policy.contains(r#""exports";q=1;qu="concurrent-requests""#),
        "{policy}"
    );
    let released = post(
        server.listen,
        "/v1/release",
        &format!(r#"{{"permit": "{permit}", "tenant": "acme", "path": "/export"}}"#),
    )
    .await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    let third = post(server.listen, "/v1/check", export).await.json();
    assert_eq!(third["allowed"], true, "{third}");
}

#[tokio::test]
async fn another_tenants_ids_settle_and_release_nothing_through_the_api() {
    let toml = r#"
[server]
listen = "127.0.0.1:0"
admin = "off"

[[limit]]
name = "tokens"
match = { path = "/generate" }
key = ["tenant"]
algorithm = "token-bucket"
rate = "1000/m"
burst = 1000
settle = "1m"

[[limit]]
name = "exports"
match = { path = "/export" }
key = ["tenant"]
algorithm = "concurrency"
limit = 1
lease = "5m"
"#;
    let server = start(toml, Arc::new(ManualClock::new(T0))).await;
    let d = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "a", "path": "/generate", "cost": 800}"#,
    )
    .await
    .json();
    let reservation = d["reservation"].as_str().unwrap().to_owned();
    let exported = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "a", "path": "/export"}"#,
    )
    .await
    .json();
    let permit = exported["permit"].as_str().unwrap().to_owned();

    // Tenant B carries A's ids: a full refund of A's estimate, and A's export slot.
    let stolen = [
        (
            "/v1/settle",
            format!(r#"{{"reservation": "{reservation}", "cost": 0, "tenant": "b"}}"#),
        ),
        (
            "/v1/settle",
            format!(r#"{{"reservation": "{reservation}", "cost": 0}}"#),
        ),
        (
            "/v1/release",
            format!(r#"{{"permit": "{permit}", "tenant": "b"}}"#),
        ),
        ("/v1/release", format!(r#"{{"permit": "{permit}"}}"#)),
    ];
    for (path, body) in &stolen {
        let reply = post(server.listen, path, body).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{path} {body}: {}",
            reply.body
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("another client"), "{detail}");
        assert!(
            !detail.contains("|a"),
            "A's key is not shown to B: {detail}"
        );
    }

    // A's reservation and permit are untouched: 200 tokens left, the export slot taken...
    let peek = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "a", "path": "/generate", "cost": 0}"#,
    )
    .await
    .json();
    assert_eq!(peek["policies"][0]["remaining"], 200, "{peek}");
    let second = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "a", "path": "/export"}"#,
    )
    .await
    .json();
    assert_eq!(second["allowed"], false, "{second}");
    // ...and still A's to settle and release.
    let settled = post(
        server.listen,
        "/v1/settle",
        &format!(r#"{{"reservation": "{reservation}", "cost": 100, "tenant": "a"}}"#),
    )
    .await;
    assert_eq!(settled.status, StatusCode::OK, "{}", settled.body);
    let released = post(
        server.listen,
        "/v1/release",
        &format!(r#"{{"permit": "{permit}", "tenant": "a"}}"#),
    )
    .await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    let third = post(
        server.listen,
        "/v1/check",
        r#"{"tenant": "a", "path": "/export"}"#,
    )
    .await
    .json();
    assert_eq!(third["allowed"], true, "{third}");
}

// ---------------------------------------------------------------------------------------
// A real upstream for the gateway

/// The gateway's upstream (`common::gated`).
async fn upstream() -> Gated {
    Gated::start().await
}

fn gateway_config(upstream: SocketAddr, extra_server: &str, rules: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
api = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
{extra_server}

{rules}
"#
    )
}

const GATEWAY_RULES: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 3
window = "10s"

[[limit]]
name = "login"
match = { method = "POST", path = "/login" }
key = ["ip"]
algorithm = "sliding-log"
limit = 1
window = "1m"
sensitive = true
"#;

#[tokio::test]
async fn the_gateway_forwards_allowed_requests_and_answers_the_contract_over_the_limit() {
    let up = upstream().await;
    let clock = Arc::new(ManualClock::new(T0));
    let server = start(
        &gateway_config(up.addr, "legacy_headers = true", GATEWAY_RULES),
        clock.clone(),
    )
    .await;
    let gw = server.listen;
    for i in 0..3 {
        let reply = get(gw, "/orders?page=2", &[("x-request", "mine")]).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        // The upstream's own headers and body come through...
        assert_eq!(reply.header("x-upstream"), Some("yes"));
        // ...without the ones meant for one connection.
        assert_eq!(reply.header("x-hop"), None);
        assert_eq!(reply.header("keep-alive"), None);
        let policy = list(reply.header("ratelimit-policy").unwrap());
        assert_eq!(param(&policy, "per-ip", "q"), Some(3));
        assert_eq!(param(&policy, "per-ip", "w"), Some(10));
        let state = list(reply.header("ratelimit").unwrap());
        assert_eq!(param(&state, "per-ip", "r"), Some(2 - i));
        assert_eq!(param(&state, "per-ip", "t"), Some(10));
        assert_eq!(reply.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(&*(2 - i).to_string())
        );
        assert_eq!(reply.header("cache-control"), Some("private"));
        let echo = reply.json();
        assert_eq!(echo["path"], "/orders");
        assert_eq!(echo["query"], "page=2");
        assert_eq!(echo["headers"]["x-request"], "mine");
        assert_eq!(echo["headers"]["x-forwarded-for"], "127.0.0.1");
    }
    clock.advance(Duration::from_millis(2500));
    let reply = get(gw, "/orders", &[]).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("8"), "7.5 s, rounded up");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let state = list(reply.header("ratelimit").unwrap());
    assert_eq!(param(&state, "per-ip", "r"), Some(0));
    assert_eq!(param(&state, "per-ip", "t"), Some(8));
    let policy = list(reply.header("ratelimit-policy").unwrap());
    assert_eq!(param(&policy, "per-ip", "q"), Some(3));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(reply.header("x-ratelimit-reset"), Some("8"));
    assert_eq!(
        reply.header("x-upstream"),
        None,
        "the upstream never saw it"
    );
    let problem = reply.json();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated-policies"], json!(["per-ip"]));

    // The window turns: allowed again.
    clock.advance(Duration::from_millis(7500));
    assert_eq!(get(gw, "/orders", &[]).await.status, StatusCode::OK);

    // The decision API beside the gateway shares its counters.
    let d = post(server.api.unwrap(), "/v1/check", r#"{"ip": "127.0.0.1"}"#)
        .await
        .json();
    assert_eq!(d["policies"][0]["remaining"], 1);
}

#[tokio::test]
async fn a_sensitive_rule_answers_a_bare_429() {
    let up = upstream().await;
    let clock = Arc::new(ManualClock::new(T0));
    let server = start(&gateway_config(up.addr, "", GATEWAY_RULES), clock).await;
    let login = || {
        Request::post(format!("http://{}/login", server.listen))
            .body(Full::new(Bytes::from_static(b"user=a&password=b")))
            .unwrap()
    };
    let first = send(login()).await;
    assert_eq!(first.status, StatusCode::OK);
    // Even allowed, a login says nothing of the login rule's capacity.
    let state = list(first.header("ratelimit").unwrap());
    assert_eq!(param(&state, "login", "r"), None);
    assert_eq!(param(&state, "per-ip", "r"), Some(2));
    let second = send(login()).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.header("retry-after"), Some("60"));
    assert_eq!(second.header("cache-control"), Some("no-store"));
    let mut names: Vec<&str> = second.headers.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["cache-control", "content-length", "date", "retry-after"],
        "nothing that reveals capacity"
    );
    assert_eq!(second.body, "");
}

#[tokio::test]
async fn bodies_stream_both_ways_through_the_gateway() {
    let up = upstream().await;
    let server = start(
        &gateway_config(
            up.addr,
            "",
            GATEWAY_RULES.replace("limit = 3", "limit = 100").as_str(),
        ),
        Arc::new(ManualClock::new(T0)),
    )
    .await;
    // Upstream to client: the first chunk arrives while the upstream is still writing.
    let response = client()
        .request(
            Request::get(format!("http://{}/stream", server.listen))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("ratelimit"));
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"first;");
    let mut tx = up.stream.lock().unwrap().take().unwrap();
    tx.send_data(Bytes::from_static(b"second")).await.unwrap();
    drop(tx);
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"second");

    // Client to upstream: a 4 MiB upload arrives whole.
    let upload = Bytes::from(vec![7u8; 4 << 20]);
    let reply = send(
        Request::post(format!("http://{}/upload", server.listen))
            .body(Full::new(upload))
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, (4 << 20).to_string());
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_problem() {
    // A port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let server = start(
        &gateway_config(closed, "", GATEWAY_RULES),
        Arc::new(ManualClock::new(T0)),
    )
    .await;
    let reply = get(server.listen, "/orders", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    // Which upstream: the setting to look at (its address is in the log, not told clients).
    assert!(reply.body.contains("`[server] upstream`"), "{}", reply.body);
}

#[tokio::test(start_paused = true)]
async fn a_queueing_rule_delays_excess_requests_instead_of_rejecting_them() {
    let up = upstream().await;
    let rules = r#"
[[limit]]
name = "smooth"
key = ["global"]
algorithm = "leaky-queue"
rate = "5/s"
burst = 2
"#;
    let server = start(
        &gateway_config(up.addr, "", rules),
        Arc::new(TokioClock::new(T0)),
    )
    .await;
    let start = tokio::time::Instant::now();
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let gw = server.listen;
        waiting.push(tokio::spawn(async move {
            let reply = get(gw, "/orders", &[]).await;
            (reply.status, tokio::time::Instant::now() - start)
        }));
        // In order of arrival.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut results = Vec::new();
    for w in waiting {
        results.push(w.await.unwrap());
    }
    let statuses: Vec<StatusCode> = results.iter().map(|r| r.0).collect();
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "two wait, the one beyond the queue is rejected: {results:?}"
    );
    // The queue waits its turn at 5 a second: 200 ms apart; the rejection is immediate.
    let took: Vec<u128> = results.iter().map(|r| r.1.as_millis()).collect();
    assert!(took[0] < 10, "{results:?}");
    assert!((200..210).contains(&took[1]), "{results:?}");
    assert!((400..410).contains(&took[2]), "{results:?}");
    assert!(took[3] < 10, "{results:?}");
}

#[tokio::test]
async fn a_concurrency_rule_holds_its_permit_for_the_life_of_the_proxied_request() {
    let up = upstream().await;
    let rules = r#"
[[limit]]
name = "one-at-a-time"
match = { path = "/slow" }
key = ["ip"]
algorithm = "concurrency"
limit = 1
lease = "5m"
"#;
    let server = start(
        &gateway_config(up.addr, "", rules),
        Arc::new(ManualClock::new(T0)),
    )
    .await;
    let gw = server.listen;
    let first = tokio::spawn(async move { get(gw, "/slow", &[]).await });
    wait_until(|| arrived(&up, 1)).await;
    let second = get(gw, "/slow", &[]).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    let policy = second.header("ratelimit-policy").unwrap().to_owned();
    assert!(policy.contains(r#"qu="concurrent-requests""#), "{policy}");
    up.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    // Finished: the permit is back.
    up.gate.add_permits(1);
    assert_eq!(get(gw, "/slow", &[]).await.status, StatusCode::OK);

    // A client that goes away gives its permit back too.
    let gone = tokio::spawn(async move { get(gw, "/slow", &[]).await });
    wait_until(|| arrived(&up, 3)).await;
    gone.abort();
    let _ = gone.await;
    // Asked through the decision API beside the gateway, which does not wait on the
    // upstream: the permit is free again once the server has seen the client go.
    let api = server.api.unwrap();
    let check = r#"{"ip": "127.0.0.1", "path": "/slow"}"#;
    let allowed = || async { post(api, "/v1/check", check).await.json()["allowed"] == true };
    assert!(eventually(allowed).await, "the permit came back");
}

/// Whether `n` requests have reached the upstream's `/slow`.
fn arrived(up: &Gated, n: usize) -> bool {
    up.arrived.load(Ordering::SeqCst) >= n
}

/// Polls `done` until it holds (a request reaching the upstream, a connection closing):
/// these wait on the network, not on a clock.
async fn wait_until(mut done: impl FnMut() -> bool) {
    assert!(
        eventually(|| std::future::ready(done())).await,
        "timed out waiting"
    );
}

#[tokio::test]
async fn at_capacity_the_server_sheds_with_503_but_critical_routes_get_through() {
    let up = upstream().await;
    let extra = r#"
max_in_flight = 2
critical_reserve = 1
queue_timeout = "0s"
critical = [{ path = "/payments*" }]
"#;
    let rules = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
"#;
    let server = start(
        &gateway_config(up.addr, extra, rules),
        Arc::new(ManualClock::new(T0)),
    )
    .await;
    let gw = server.listen;
    let busy = tokio::spawn(async move { get(gw, "/slow", &[]).await });
    let admin = server.admin.unwrap();
    wait_until(|| arrived(&up, 1)).await;
    let shed = get(gw, "/orders", &[]).await;
    assert_eq!(shed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.header("retry-after"), Some("1"));
    assert_eq!(shed.header("cache-control"), Some("no-store"));
    let problem = shed.json();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    // The reserved place lets a payment through.
    let payment = get(gw, "/payments/42", &[]).await;
    assert_eq!(payment.status, StatusCode::OK, "{}", payment.body);
    let metrics = get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains(r#"ratewarden_shed_total{reason="in_flight"} 1"#),
        "{metrics}"
    );
    up.gate.add_permits(1);
    assert_eq!(busy.await.unwrap().status, StatusCode::OK);
    assert_eq!(get(gw, "/orders", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish_and_refuses_new_ones() {
    let up = upstream().await;
    // Three workers: the test's runtime and two threads, all accepting on one socket.
    let server = start_with(
        &gateway_config(up.addr, "shutdown_grace = \"30s\"", GATEWAY_RULES),
        Arc::new(ManualClock::new(T0)),
        3,
    )
    .await;
    let gw = server.listen;
    let admin = server.admin.unwrap();
    let in_flight = tokio::spawn(async move { get(gw, "/slow", &[]).await });
    wait_until(|| arrived(&up, 1)).await;
    assert_eq!(get(admin, "/ready", &[]).await.status, StatusCode::OK);
    server.shutdown();
    // No longer accepting: a new connection is refused.
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(gw).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "the listener closed");
    up.gate.add_permits(1);
    let reply = in_flight.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "slow done");
    tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("the server stops once its requests are done");
}

// ---------------------------------------------------------------------------------------
// Reload and metrics

#[tokio::test]
async fn a_reload_that_fails_leaves_the_old_rules_working() {
    let dir = std::env::temp_dir().join(format!("ratewarden-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    let config = |limit: u64| API.replace("burst = 5", &format!("burst = {limit}"));
    std::fs::write(&path, config(2)).unwrap();
    let server = common::start(Options {
        config: ratewarden_policy::config::load(&path).unwrap(),
        config_path: Some(path.clone()),
        ..common::options("", Arc::new(ManualClock::new(T0)))
    })
    .await;
    let admin = server.admin.unwrap();
    let check = r#"{"api_key": "k"}"#;
    assert_eq!(
        post(server.listen, "/v1/check", check).await.json()["allowed"],
        true
    );

    // A typo: rejected with its place, and the old rules stay.
    std::fs::write(
        &path,
        config(2).replace("algorithm = \"gcra\"", "algoritm = \"gcra\""),
    )
    .unwrap();
    let reply = post(admin, "/reload", "").await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let problem = reply.json();
    let errors = problem["errors"].to_string();
    assert!(errors.contains("ratewarden.toml:"), "{errors}");
    assert!(errors.contains("did you mean `algorithm`"), "{errors}");
    assert_eq!(problem["config_version"], 1);
    assert_eq!(
        post(server.listen, "/v1/check", check).await.json()["allowed"],
        true
    );
    assert_eq!(
        post(server.listen, "/v1/check", check).await.json()["allowed"],
        false,
        "the old burst of 2 still holds"
    );
    assert!(server.reload().await.is_err());

    // A good file goes into force.
    std::fs::write(&path, config(10)).unwrap();
    let reply = post(admin, "/reload", "").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["config_version"], 2);
    let d = post(server.listen, "/v1/check", check).await.json();
    assert_eq!(d["allowed"], true);
    assert_eq!(d["config_version"], 2);

    let metrics = get(admin, "/metrics", &[]).await.body;
    for line in [
        r#"ratewarden_config_reloads_total{result="error"} 2"#,
        r#"ratewarden_config_reloads_total{result="ok"} 1"#,
        "ratewarden_config_version 2",
        r#"ratewarden_decisions_total{rule="per-key",outcome="rejected"} 1"#,
        r#"ratewarden_decisions_total{rule="watch",outcome="shadow_rejected"}"#,
        // Every decision was timed (on the manual clock, each in no time).
        "ratewarden_decision_duration_seconds_count 4",
        "ratewarden_in_flight 0",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
    let keys: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ratewarden_keys "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a keys gauge");
    assert!(keys >= 2, "the keys decided on are held: {keys}");
    assert_eq!(get(admin, "/live", &[]).await.status, StatusCode::OK);
    assert_eq!(
        get(admin, "/nothing", &[]).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(
            Request::builder()
                .method(Method::DELETE)
                .uri(format!("http://{admin}/reload"))
                .body(Full::new(Bytes::new()))
                .unwrap()
        )
        .await
        .status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A metric's value in a `/metrics` text (the first line of that name and labels).
fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
}

/// Decides `n` requests, each from a client address of its own, on one connection.
async fn flood(api: SocketAddr, n: u32) {
    let client = client();
    for i in 0..n {
        let body = format!(
            r#"{{"ip": "10.{}.{}.{}"}}"#,
            i >> 16,
            (i >> 8) & 255,
            i & 255
        );
        let request = Request::post(format!("http://{api}/v1/check"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = client.request(request).await.expect("a response");
        assert_eq!(response.status(), StatusCode::OK);
        let _ = response.into_body().collect().await;
    }
}

const PER_IP: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 10
window = "1h"
"#;

/// `[store] max_bytes` reaches the in-memory store `serve` builds: a flood of new keys is
/// held to the bytes configured, where the default would keep every one of them.
#[tokio::test]
async fn serve_builds_the_memory_store_with_store_max_bytes() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n[store]\nmax_bytes = 65536\n{PER_IP}"
    );
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    flood(server.listen, 2000).await;
    let metrics = get(server.admin.unwrap(), "/metrics", &[]).await.body;
    let keys = metric(&metrics, "ratewarden_keys").expect("a keys gauge");
    // Every key takes a 64-byte slot at least.
    assert!(
        keys > 0 && keys <= 65536 / 64,
        "{keys} keys held under max_bytes = 65536"
    );
}

/// Responses are counted per listener and status: the 200s through the counter each
/// listener keeps at hand, the rest through the labelled family, both in one series per
/// pair, and no series for a listener that has not answered.
#[tokio::test]
async fn metrics_count_every_response_by_listener_and_status() {
    let toml = format!("[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n{PER_IP}");
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    let (api, admin) = (server.listen, server.admin.unwrap());
    flood(api, 3).await;
    let missing = post(api, "/v1/nothing", "{}").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    flood(api, 2).await;
    let metrics = get(admin, "/metrics", &[]).await.body;
    let count = |labels: &str| metric(&metrics, &format!("ratewarden_responses_total{{{labels}}}"));
    assert_eq!(count("listener=\"api\",code=\"200\""), Some(5), "{metrics}");
    assert_eq!(count("listener=\"api\",code=\"404\""), Some(1), "{metrics}");
    assert_eq!(
        count("listener=\"gateway\",code=\"200\""),
        None,
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("listener=\"api\",code=\"200\"").count(),
        1,
        "{metrics}"
    );
}

/// What the in-memory store had to do shows in `/metrics`: a flood of new keys through a
/// store of 64 keys evicts keys with budget left, then, with only limited keys left to
/// evict, limited ones (answered as limited still); the bytes its keys take are shown.
#[tokio::test]
async fn metrics_show_the_store_evicting_under_a_flood() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n[store]\nmax_keys = 64\n{}",
        PER_IP.replace("limit = 10", "limit = 1")
    );
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    let admin = server.admin.unwrap();
    let scrape = || async move { get(admin, "/metrics", &[]).await.body };
    let evicted = |metrics: &str, state: &str| {
        metric(
            metrics,
            &format!(r#"ratewarden_store_evicted_total{{state="{state}"}}"#),
        )
        .unwrap_or_else(|| panic!("no {state} evictions in:\n{metrics}"))
    };
    let before = scrape().await;
    assert_eq!(evicted(&before, "live"), 0);
    assert_eq!(evicted(&before, "limited"), 0);
    assert_eq!(metric(&before, "ratewarden_store_key_bytes"), Some(0));

    // One request each: a limit of 1 leaves every key limited once it is decided.
    flood(server.listen, 1000).await;
    let after = scrape().await;
    let keys = metric(&after, "ratewarden_keys").unwrap();
    assert!(keys <= 64, "{keys} keys in a store of 64");
    assert!(evicted(&after, "limited") > 0, "{after}");
    assert!(
        metric(&after, "ratewarden_store_key_bytes").unwrap() > 0,
        "keys like `per-ip@…|10.0.3.7` are longer than 24 bytes: {after}"
    );
    assert!(metric(&after, "ratewarden_store_allocated_bytes").unwrap() > 0);
    assert!(metric(&after, "ratewarden_store_rejected_new_keys_total").is_some());
    assert_eq!(
        metric(&after, "ratewarden_store_late_timeouts_total"),
        Some(0),
        "the memory store has no deadline to miss"
    );
}

// ---------------------------------------------------------------------------------------
// The binary: signals

#[tokio::test]
async fn the_binary_reloads_on_sighup_keeps_old_rules_on_a_bad_file_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("ratewarden-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    let config = |burst: u64| API.replace("burst = 5", &format!("burst = {burst}"));
    std::fs::write(&path, config(1)).unwrap();
    let mut child = Served::serve_config(&path).await;
    let (listen, admin) = (child.listen, child.admin.unwrap());
    let check = r#"{"api_key": "k"}"#;
    let metrics_say =
        |line: &'static str| async move { get(admin, "/metrics", &[]).await.body.contains(line) };

    // A bad file: the old rules stay (a burst of 1).
    std::fs::write(
        &path,
        config(1).replace("rate = \"5/s\"", "rate = \"5/fortnight\""),
    )
    .unwrap();
    child.signal("HUP");
    let refused = r#"ratewarden_config_reloads_total{result="error"} 1"#;
    assert!(
        eventually(|| metrics_say(refused)).await,
        "SIGHUP read the bad file"
    );
    assert!(metrics_say("ratewarden_config_version 1").await);
    assert_eq!(
        post(listen, "/v1/check", check).await.json()["allowed"],
        true
    );
    assert_eq!(
        post(listen, "/v1/check", check).await.json()["allowed"],
        false
    );

    // A good one goes into force.
    std::fs::write(&path, config(100)).unwrap();
    child.signal("HUP");
    assert!(
        eventually(|| metrics_say("ratewarden_config_version 2")).await,
        "SIGHUP put the good file in force"
    );
    let d = post(listen, "/v1/check", check).await.json();
    assert_eq!(d["config_version"], 2);
    assert_eq!(d["policies"][0]["limit"], 100, "the new burst decides");

    let status = child.stop("TERM").await;
    let stderr = child.log();
    assert!(status.expect("it stopped on SIGTERM").success(), "{stderr}");
    assert!(stderr.contains("reload rejected"), "{stderr}");
    assert!(
        stderr.contains("ratewarden.toml:"),
        "the log names the place: {stderr}"
    );
    assert!(stderr.contains("stopped"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------
// On a shared Redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_redis_admit_no_more_than_one_limiter_would() {
    let redis = ratewarden_redis::testing::Server::start();
    let dir = std::env::temp_dir().join(format!("ratewarden-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..3 {
        let config = format!(
            r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
deadline = "2s"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "gcra"
rate = "200/s"
burst = 20
"#,
            url = redis.url()
        );
        let path = dir.join(format!("fleet{i}.toml"));
        std::fs::write(&path, config).unwrap();
        let server = Served::spawn([
            std::ffi::OsStr::new("serve"),
            "--workers".as_ref(),
            "1".as_ref(),
            "--config".as_ref(),
            path.as_ref(),
        ])
        .await;
        addrs.push(server.listen);
        servers.push(server);
    }
    // As fast as it can, spread over the three: 16 clients, 150 requests each.
    let start = tokio::time::Instant::now();
    let mut clients = Vec::new();
    for c in 0..16 {
        let addrs = addrs.clone();
        clients.push(tokio::spawn(async move {
            let mut allowed = 0u64;
            for n in 0..150 {
                let addr = addrs[(c + n) % addrs.len()];
                let d = post(addr, "/v1/check", r#"{"api_key": "fleet"}"#)
                    .await
                    .json();
                assert!(d["status"] == 200 || d["status"] == 429, "{d}");
                allowed += u64::from(d["allowed"] == true);
            }
            allowed
        }));
    }
    let mut admitted = 0;
    for c in clients {
        admitted += c.await.unwrap();
    }
    let elapsed = start.elapsed();
    // One limiter over the span: the burst, plus 200 a second (plus one for the edge).
    let most = 20 + (elapsed.as_nanos() * 200).div_ceil(1_000_000_000) as u64 + 1;
    assert!(
        admitted <= most,
        "admitted {admitted} in {elapsed:?}; one limiter allows {most}"
    );
    assert!(admitted >= 20, "the burst at least: {admitted}");
    // SIGINT stops them as SIGTERM does: cleanly, exit status 0.
    for mut s in servers {
        let status = s.stop("INT").await;
        assert!(status.expect("stopped on SIGINT").success(), "{}", s.log());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn when_redis_is_down_each_rule_follows_its_failure_policy() {
    let redis = ratewarden_redis::testing::Server::start();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
deadline = "100ms"
breaker_failures = 2
breaker_cool_down = "10s"

[[limit]]
name = "browse"
match = {{ path = "/browse" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "open"

[[limit]]
name = "pay"
match = {{ path = "/pay" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "closed"

[[limit]]
name = "search"
match = {{ path = "/search" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 30
window = "1m"
on_store_failure = "local"
local_divide_by = 3
"#,
        url = redis.url()
    );
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    let check = |path: &str| format!(r#"{{"ip": "198.51.100.4", "path": "{path}"}}"#);
    let d = post(server.listen, "/v1/check", &check("/pay"))
        .await
        .json();
    assert_eq!(d["allowed"], true, "Redis up: {d}");
    drop(redis);
    let started = tokio::time::Instant::now();
    let d = post(server.listen, "/v1/check", &check("/browse"))
        .await
        .json();
    assert_eq!(d["allowed"], true, "open: allowed while Redis is down");
    assert_eq!(d["policies"][0]["store_failed"], true);
    let d = post(server.listen, "/v1/check", &check("/pay"))
        .await
        .json();
    assert_eq!(d["allowed"], false, "closed: refused");
    assert_eq!(d["status"], 503);
    assert!(
        started.elapsed() < Duration::from_millis(2 * 100 + 500),
        "no call waits past the deadline"
    );
    // The breaker is open now: the local share (30 / 3 = 10) decides /search at once.
    let mut allowed = 0;
    for _ in 0..15 {
        let d = post(server.listen, "/v1/check", &check("/search"))
            .await
            .json();
        allowed += u64::from(d["allowed"] == true);
    }
    assert_eq!(allowed, 10, "the local share of the limit");
    let metrics = get(server.admin.unwrap(), "/metrics", &[]).await.body;
    for line in [
        r#"ratewarden_decisions_total{rule="browse",outcome="failed_open"} 1"#,
        r#"ratewarden_decisions_total{rule="pay",outcome="failed_closed"} 1"#,
        r#"ratewarden_decisions_total{rule="search",outcome="fell_back"} 15"#,
        "ratewarden_store_breaker 1",
        // A stopped Redis is Redis's fault, not a late caller's.
        "ratewarden_store_late_timeouts_total 0",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }
}

/// The store coalesces the calls that arrive while one is in flight into one batch. A batch
/// whose connection drops after Redis ran it, before its reply came (a relay in front of
/// Redis drops the first one so), fails each of its decisions alike: each rule's
/// `on_store_failure` answers its own (`open` allowed, `closed` 503), counted as such.
#[tokio::test]
async fn a_batch_cut_by_a_dropped_connection_is_answered_by_each_rules_failure_policy() {
    let redis = ratewarden_redis::testing::Server::start();
    let relay = ratewarden_redis::testing::Cut::start(redis.port);
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
deadline = "2s"
breaker_failures = 1000

[[limit]]
name = "browse"
match = {{ path = "/browse" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100000
window = "1m"
on_store_failure = "open"

[[limit]]
name = "pay"
match = {{ path = "/pay" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100000
window = "1m"
on_store_failure = "closed"
"#,
        url = relay.url()
    );
    let server = start(&toml, Arc::new(ManualClock::new(T0))).await;
    let check = |path: &str| format!(r#"{{"ip": "198.51.100.4", "path": "{path}"}}"#);
    let d = post(server.listen, "/v1/check", &check("/pay"))
        .await
        .json();
    assert_eq!(d["allowed"], true, "Redis up: {d}");
    // Rounds of requests at once, until one round's calls went as a batch and it was cut.
    let (mut open, mut closed) = (0, 0);
    for _ in 0..50 {
        let mut round = tokio::task::JoinSet::new();
        for i in 0..16 {
            let path = if i % 2 == 0 { "/browse" } else { "/pay" };
            let (listen, body) = (server.listen, check(path));
            round.spawn(async move { (path, post(listen, "/v1/check", &body).await.json()) });
        }
        while let Some(answer) = round.join_next().await {
            let (path, d) = answer.unwrap();
            if d["policies"][0]["store_failed"] != true {
                assert_eq!(d["allowed"], true, "{path}: {d}");
                continue;
            }
            match path {
                "/browse" => {
                    assert_eq!(d["allowed"], true, "open: allowed: {d}");
                    open += 1;
                }
                _ => {
                    assert_eq!(d["allowed"], false, "closed: refused: {d}");
                    assert_eq!(d["status"], 503, "{d}");
                    closed += 1;
                }
            }
        }
        if relay.cut() {
            break;
        }
    }
    assert!(relay.cut(), "no round's calls went as a batch");
    assert!(open + closed > 0, "the cut batch's decisions failed");
    let metrics = get(server.admin.unwrap(), "/metrics", &[]).await.body;
    for (rule, outcome, n) in [
        ("browse", "failed_open", open),
        ("pay", "failed_closed", closed),
    ] {
        if n > 0 {
            let line =
                format!(r#"ratewarden_decisions_total{{rule="{rule}",outcome="{outcome}"}} {n}"#);
            assert!(metrics.contains(&line), "missing `{line}` in:\n{metrics}");
        }
    }
    // Redis is reached again, on a new connection (the first call may find the old one gone).
    let mut d = Value::Null;
    for _ in 0..10 {
        d = post(server.listen, "/v1/check", &check("/pay"))
            .await
            .json();
        if d["allowed"] == true {
            break;
        }
    }
    assert_eq!(d["allowed"], true, "Redis up again: {d}");
}

// ---------------------------------------------------------------------------------------
// The admin listener's credential

#[tokio::test]
async fn serve_refuses_to_start_an_admin_listener_off_loopback_without_a_token() {
    let dir = std::env::temp_dir().join(format!("ratewarden-open-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    // TEST-NET-1 (RFC 5737): no host has it, so nothing is ever bound off loopback here.
    std::fs::write(
        &path,
        API.replace("admin = \"127.0.0.1:0\"", "admin = \"192.0.2.1:0\""),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .env_remove("RATEWARDEN_ADMIN_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ratewarden.toml:4:"), "located: {stderr}");
    for named in [
        "admin_token_file",
        "RATEWARDEN_ADMIN_TOKEN",
        "admin_insecure",
    ] {
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    assert!(stderr.contains("nothing started"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_takes_the_admin_token_from_the_environment_and_never_logs_it() {
    let dir = std::env::temp_dir().join(format!("ratewarden-env-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    std::fs::write(&path, API).unwrap();
    let token = "0123456789abcdef-environment";
    let mut child = Served::spawn_with_env(
        ["serve", "--config", path.to_str().unwrap()],
        &[("RATEWARDEN_ADMIN_TOKEN", token)],
    )
    .await;
    let admin = child.admin.unwrap();
    let reset = |bearer: Option<&'static str>| async move {
        let mut request = Request::post(format!("http://{admin}/v1/keys/reset"))
            .header("content-type", "application/json");
        if let Some(bearer) = bearer {
            request = request.header("authorization", format!("Bearer {bearer}"));
        }
        let body = r#"{"rule": "per-key", "key": "key:0123456789abcdef"}"#;
        send(request.body(Full::new(Bytes::from(body))).unwrap()).await
    };
    let refused = reset(None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
    assert_eq!(
        reset(Some("0123456789abcdef-environmenT")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let done = reset(Some("0123456789abcdef-environment")).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(
        get(admin, "/metrics", &[]).await.status,
        StatusCode::UNAUTHORIZED
    );
    let log = child.log();
    assert!(
        log.contains("bearer token from environment RATEWARDEN_ADMIN_TOKEN"),
        "{log}"
    );
    assert!(!log.contains(token), "the token is in the log: {log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn envoy_mode_moves_its_listeners_with_flags_alone() {
    let yaml = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/edge.yaml");
    // No TOML: every listener placed by a flag (their defaults take every interface).
    let mut child = Served::spawn([
        "serve",
        "--envoy-config",
        yaml.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--workers",
        "1",
    ])
    .await;
    let grpc = child.grpc.expect("a gRPC listener where --grpc said");
    assert!(grpc.ip().is_loopback() && grpc.port() != 0, "{grpc}");
    assert!(child.admin.is_some_and(|a| a.ip().is_loopback()));
    assert!(tokio::net::TcpStream::connect(grpc).await.is_ok());
    let log = child.log();
    assert!(
        !log.contains("every interface"),
        "nothing on 0.0.0.0:\n{log}"
    );

    // `--admin off` turns the admin listener off.
    let mut child = Served::spawn([
        "serve",
        "--envoy-config",
        yaml.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--admin",
        "off",
        "--workers",
        "1",
    ])
    .await;
    assert_eq!(child.admin, None);
    assert!(child.log().contains(" admin=off "));
}

#[test]
fn serve_without_a_config_points_at_the_example() {
    let dir = std::env::temp_dir().join(format!("ratewarden-noconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .arg("serve")
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--config FILE"), "{err}");
    assert!(err.contains("examples/ratewarden.toml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
