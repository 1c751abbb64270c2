//! The HTTP front doors under attack (issue 12): each test is a trick a hostile client
//! played on the gateway or the decision API, over real sockets, written as raw bytes where
//! a client library would have tidied the trick away.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::{Options, Running};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T0: u64 = 1_000_000_000_000;

#[path = "../common/mod.rs"]
mod common;

use common::raw::{raw, read_response, Raw};

async fn start(toml: &str) -> Running {
    start_at(toml, None).await
}

async fn start_at(toml: &str, config_path: Option<PathBuf>) -> Running {
    common::start(Options {
        config_path,
        ..common::options(toml, Arc::new(ManualClock::new(T0)))
    })
    .await
}

/// An upstream that echoes what it received as JSON: the path, the query, the headers (each
/// name with every value), and the body's length.
async fn echo_upstream() -> SocketAddr {
    common::upstream(|request: Request<Incoming>| async move {
        let (parts, body) = request.into_parts();
        let mut headers = serde_json::Map::new();
        for name in parts.headers.keys() {
            let values: Vec<Value> = parts
                .headers
                .get_all(name)
                .iter()
                .map(|v| json!(String::from_utf8_lossy(v.as_bytes())))
                .collect();
            headers.insert(name.to_string(), Value::Array(values));
        }
        let length = match body.collect().await {
            Ok(body) => body.to_bytes().len(),
            Err(_) => 0,
        };
        let echo = json!({
            "path": parts.uri.path(),
            "query": parts.uri.query(),
            "headers": headers,
            "length": length,
        });
        Response::new(Full::new(Bytes::from(echo.to_string())))
    })
    .await
}

fn gateway(upstream: SocketAddr, server: &str, rest: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
api = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
{server}

{rest}
"#
    )
}

async fn get(addr: SocketAddr, target: &str, headers: &str) -> Raw {
    raw(
        addr,
        &format!("GET {target} HTTP/1.1\nHost: {addr}\n{headers}Connection: close\n\n"),
    )
    .await
}

async fn check(addr: SocketAddr, body: &str) -> Raw {
    raw(
        addr,
        &format!(
            "POST /v1/check HTTP/1.1\nHost: {addr}\nContent-Type: application/json\nContent-Length: {}\nConnection: close\n\n{body}",
            body.len()
        ),
    )
    .await
}

// ---------------------------------------------------------------------------------------
// Item 1: the limiter keys on exactly what the upstream will see

const PER_KEY: &str = r#"
[keys]
api_key_header = "x-api-key"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 3
window = "1h"

[[limit]]
name = "per-user"
match = { path = "/users*" }
key = ["header:x-user"]
algorithm = "fixed-window"
limit = 3
window = "1h"
"#;

#[tokio::test]
async fn connection_may_not_strip_a_header_that_decides_who_the_request_is() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", PER_KEY)).await;
    let gw = server.listen;
    // The issue's trick: a fresh bearer token counted, then stripped; the upstream saw
    // only the real key. Six of them passed a limit of three.
    for i in 0..6 {
        let reply = get(
            gw,
            "/orders",
            &format!(
                "Authorization: Bearer random{i}\nx-api-key: REAL\nConnection: authorization\n"
            ),
        )
        .await;
        assert!(
            reply.is_problem(400),
            "{i}: {} {}",
            reply.status,
            reply.body
        );
        assert!(reply.body.contains("authorization"), "{}", reply.body);
    }
    // Every other header that decides who the request is, in any case and list position.
    for header in [
        "X-Api-Key",
        "host",
        "x-user",
        "x-tenant-id",
        "forwarded",
        "x-forwarded-for",
    ] {
        let reply = get(
            gw,
            "/users/7",
            &format!("x-api-key: REAL\nx-user: bob\nConnection: keep-alive, {header}\n"),
        )
        .await;
        assert!(
            reply.is_problem(400),
            "{header}: {} {}",
            reply.status,
            reply.body
        );
    }
    // The real key was never charged by any of it.
    for _ in 0..3 {
        let reply = get(gw, "/orders", "x-api-key: REAL\n").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert_eq!(get(gw, "/orders", "x-api-key: REAL\n").await.status, 429);
    // A harmless hop-by-hop header is still removed, and the request served.
    let reply = get(
        gw,
        "/users/1",
        "x-api-key: OTHER\nx-user: amy\nx-hop: 1\nConnection: x-hop\n",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["headers"].get("x-hop").is_none());
    assert_eq!(reply.json()["headers"]["x-user"], json!(["amy"]));
}

#[tokio::test]
async fn a_header_that_decides_who_the_request_is_may_come_only_once() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", PER_KEY)).await;
    let gw = server.listen;
    for (what, headers) in [
        ("x-api-key", "x-api-key: SPENT\nx-api-key: REAL\n"),
        (
            "authorization",
            "Authorization: Bearer a\nAuthorization: Bearer b\n",
        ),
        ("x-user", "x-api-key: K\nx-user: a\nx-user: b\n"),
        // One variable to CGI, WSGI and PHP.
        ("x_api_key", "x-api-key: SPENT\nx_api_key: REAL\n"),
        ("x_user", "x-api-key: K\nx-user: a\nX_User: b\n"),
    ] {
        let reply = get(gw, "/users/1", headers).await;
        assert!(
            reply.is_problem(400),
            "{what}: {} {}",
            reply.status,
            reply.body
        );
        assert!(reply.body.contains(what), "{}", reply.body);
    }
    // A key the engine could not read as text would be decided as absent.
    let reply = get(gw, "/users/1", "x-api-key: K\nx-user: caf\u{e9}\n").await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
}

// ---------------------------------------------------------------------------------------
// Item 2: one spelling per path

#[tokio::test]
async fn headers_that_change_the_method_or_path_upstream_are_refused() {
    let up = echo_upstream().await;
    let rule = LOGIN.replace("match = { path", "match = { method = \"POST\", path");
    let server = start(&gateway(up, "", &rule)).await;
    let gw = server.listen;
    // `GET /login` is not limited; upstream, these make it the `POST /login` that is.
    for header in [
        "X-HTTP-Method-Override: POST",
        "X-HTTP-Method: POST",
        "X-Method-Override: post",
        "X-Original-URL: /login",
        "X-Rewrite-URL: /admin",
    ] {
        let reply = get(gw, "/login", &format!("{header}\n")).await;
        assert!(
            reply.is_problem(400),
            "{header}: {} {}",
            reply.status,
            reply.body
        );
    }
    // An override naming the method it overrides changes nothing.
    let reply = get(gw, "/login", "X-HTTP-Method-Override: GET\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

const LOGIN: &str = r#"
[[limit]]
name = "login"
match = { path = "/login" }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;

#[tokio::test]
async fn path_aliases_are_limited_as_the_path_they_reach() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", LOGIN)).await;
    let gw = server.listen;
    let reply = get(gw, "/login?next=%2Fhome", "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    for alias in [
        "//login",
        "/%6Cogin",
        "/%6cogin",
        "/./login",
        "/x/../login",
        "/x/%2e%2E/login",
    ] {
        let reply = get(gw, alias, "").await;
        assert_eq!(reply.status, 429, "{alias} got through: {}", reply.body);
    }
    // And through the decision API, for another client.
    let api = server.api.unwrap();
    let reply = check(api, r#"{"ip": "192.0.2.1", "path": "/login"}"#).await;
    assert_eq!(reply.json()["allowed"], true);
    for alias in ["//login", "/%6Cogin", "/./login", "/x/../login?a=b"] {
        let reply = check(api, &format!(r#"{{"ip": "192.0.2.1", "path": "{alias}"}}"#)).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.json()["allowed"], false, "{alias} got through");
    }
}

#[tokio::test]
async fn case_and_trailing_slash_aliases_are_limited_as_the_path_and_forwarded_as_sent() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", LOGIN)).await;
    let gw = server.listen;
    assert_eq!(get(gw, "/login", "").await.status, 200);
    for alias in ["/login/", "/LOGIN", "/Login/", "/lOgIn", "//LOGIN//"] {
        let reply = get(gw, alias, "").await;
        assert_eq!(reply.status, 429, "{alias} got through: {}", reply.body);
    }
    // The first request of a client may be any alias: it spends the path's one budget.
    let api = server.api.unwrap();
    let reply = check(api, r#"{"ip": "192.0.2.2", "path": "/LOGIN/"}"#).await;
    assert_eq!(reply.json()["allowed"], true, "{}", reply.body);
    for alias in ["/login", "/login/", "/Login", "/LOGIN/?x=1"] {
        let reply = check(api, &format!(r#"{{"ip": "192.0.2.2", "path": "{alias}"}}"#)).await;
        assert_eq!(reply.json()["allowed"], false, "{alias} got through");
    }
    // What is forwarded is what the client wrote (normalized), not the folded spelling.
    let other = start(&gateway(up, "", "")).await;
    let reply = get(other.listen, "/Login/?next=%2Fhome", "").await;
    assert_eq!(reply.json()["path"], "/Login/");
}

#[tokio::test]
async fn an_exact_path_rule_tells_case_and_trailing_slash_apart() {
    let up = echo_upstream().await;
    let exact = r#"
[[limit]]
name = "reports"
match = { path = "/Reports", path_exact = true }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;
    let server = start(&gateway(up, "", exact)).await;
    let gw = server.listen;
    assert_eq!(get(gw, "/Reports", "").await.status, 200);
    assert_eq!(get(gw, "/Reports", "").await.status, 429);
    for other in ["/reports", "/Reports/", "/REPORTS"] {
        let reply = get(gw, other, "").await;
        assert_eq!(
            reply.status, 200,
            "{other} is another resource: {}",
            reply.body
        );
    }
}

#[tokio::test]
async fn the_gateway_forwards_the_path_it_matched_and_refuses_ambiguous_ones() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", "")).await;
    let gw = server.listen;
    for (alias, normal) in [
        ("//login?next=%2Fhome", "/login"),
        ("/%6Cogin?next=%2Fhome", "/login"),
        ("/a/./b/../c//d%7e%3f?next=%2Fhome", "/a/c/d~%3F"),
    ] {
        let reply = get(gw, alias, "").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let echo = reply.json();
        assert_eq!(echo["path"], normal);
        assert_eq!(echo["query"], "next=%2Fhome", "the query goes as it came");
    }
    for ambiguous in [
        "/a%2Fb",
        "/a%5clogin",
        "/a\\login",
        "/login%00",
        "/login;jsessionid=1",
    ] {
        let reply = get(gw, ambiguous, "").await;
        assert!(
            reply.is_problem(400),
            "{ambiguous}: {} {}",
            reply.status,
            reply.body
        );
    }
    let reply = check(server.api.unwrap(), r#"{"path": "/a%2Fb"}"#).await;
    assert!(reply.is_problem(422), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("`path`"), "{}", reply.body);
}

// ---------------------------------------------------------------------------------------
// "Smaller": forwarding headers, Host, CONNECT

#[tokio::test]
async fn forwarding_headers_from_an_untrusted_client_are_replaced_and_from_a_proxy_extended() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", "")).await;
    let reply = get(
        server.listen,
        "/x",
        "Forwarded: for=1.2.3.4\nX-Forwarded-For: 1.2.3.4\nX-Real-IP: 1.2.3.4\nX-Forwarded-Host: evil\n\
         True-Client-IP: 1.2.3.4\nCF-Connecting-IP: 1.2.3.4\n",
    )
    .await;
    let headers = &reply.json()["headers"];
    assert_eq!(headers["forwarded"], json!(["for=127.0.0.1;proto=http"]));
    assert_eq!(headers["x-forwarded-for"], json!(["127.0.0.1"]));
    for name in ["x-real-ip", "true-client-ip", "cf-connecting-ip"] {
        assert_eq!(headers[name], json!(["127.0.0.1"]), "{name}");
    }
    assert!(headers.get("x-forwarded-host").is_none());

    let server = start(&gateway(up, r#"trusted_proxies = ["127.0.0.1"]"#, "")).await;
    let reply = get(
        server.listen,
        "/x",
        "Forwarded: for=203.0.113.9\nX-Forwarded-For: 198.51.100.7\nX-Real-IP: 203.0.113.9\n",
    )
    .await;
    let headers = &reply.json()["headers"];
    // Our proxy writes `X-Forwarded-For`: its list, our hop added; `Forwarded` it passed
    // through as the client wrote it, so it is written anew.
    assert_eq!(
        headers["x-forwarded-for"],
        json!(["198.51.100.7, 127.0.0.1"])
    );
    assert_eq!(
        headers["forwarded"],
        json!(["for=198.51.100.7, for=127.0.0.1;proto=http"])
    );
    assert_eq!(headers["x-real-ip"], json!(["198.51.100.7"]));
    // A trusted proxy that sent none: ours are the first hop.
    let reply = get(server.listen, "/x", "").await;
    let headers = &reply.json()["headers"];
    assert_eq!(headers["forwarded"], json!(["for=127.0.0.1;proto=http"]));
    assert_eq!(headers["x-forwarded-for"], json!(["127.0.0.1"]));
    assert_eq!(headers["x-forwarded-proto"], json!(["http"]));
}

#[tokio::test]
async fn only_the_configured_client_ip_header_names_the_client_and_the_upstream_is_told_it() {
    let up = echo_upstream().await;
    let per_ip = "[[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\n\
                  limit = 1\nwindow = \"1m\"\n";
    // (client_ip_header, the lines our proxy sends, the client the upstream is told of in
    // `X-Forwarded-For` and in `Forwarded`)
    let cases = [
        (
            "Forwarded",
            "Forwarded: for=203.0.113.9\nX-Forwarded-For: 198.51.100.7\n",
            "203.0.113.9, 127.0.0.1",
            "for=203.0.113.9, for=127.0.0.1",
        ),
        (
            "X-Real-IP",
            "X-Real-IP: 203.0.113.9\nForwarded: for=198.51.100.8\nX-Forwarded-For: 198.51.100.7\n",
            "203.0.113.9, 127.0.0.1",
            "for=203.0.113.9, for=127.0.0.1;proto=http",
        ),
        (
            "CF-Connecting-IP",
            "CF-Connecting-IP: 2001:db8::9\nX-Real-IP: 198.51.100.8\n",
            "2001:db8::9, 127.0.0.1",
            "for=\"[2001:db8::9]\", for=127.0.0.1;proto=http",
        ),
    ];
    for (header, lines, forwarded_for, forwarded) in cases {
        let server = format!("trusted_proxies = [\"127.0.0.1\"]\nclient_ip_header = \"{header}\"");
        let server = start(&gateway(up, &server, per_ip)).await;
        let reply = get(server.listen, "/x", lines).await;
        assert_eq!(reply.status, 200, "{header}: {}", reply.body);
        let told = &reply.json()["headers"];
        assert_eq!(told["x-forwarded-for"], json!([forwarded_for]), "{header}");
        assert_eq!(told["forwarded"], json!([forwarded]), "{header}");
        // The same client again, whatever the headers the proxy does not write say.
        let again = lines.replace("198.51.100", "192.0.2");
        let reply = get(server.listen, "/x", &again).await;
        assert_eq!(reply.status, 429, "{header}: {again}");
        // A trusted proxy that names no address where the client belongs: refused.
        let reply = get(server.listen, "/x", &format!("{header}: unknown\n")).await;
        assert!(reply.is_problem(400), "{header}: {}", reply.body);
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(
            detail.contains(&format!("`{}`", header.to_ascii_lowercase()))
                && detail.contains("`unknown`"),
            "{detail}"
        );
    }
}

#[tokio::test]
async fn the_decision_api_reads_the_client_from_the_configured_header_only() {
    let per_ip = "[[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\n\
                  limit = 1\nwindow = \"1m\"\n";
    let server = start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ntrusted_proxies = [\"127.0.0.1\"]\n{per_ip}"
    ))
    .await;
    // The caller is our proxy: the client is the one its `X-Forwarded-For` names, whatever
    // `Forwarded` says.
    let asked = |forwarded: &str| {
        format!(
            r#"{{"path": "/", "headers": {{"forwarded": "for={forwarded}", "x-forwarded-for": "203.0.113.9"}}}}"#
        )
    };
    let first = check(server.listen, &asked("198.51.100.1")).await;
    assert_eq!(first.json()["allowed"], json!(true), "{}", first.body);
    let again = check(server.listen, &asked("198.51.100.2")).await;
    assert_eq!(again.json()["allowed"], json!(false), "{}", again.body);
    let unknown = check(
        server.listen,
        r#"{"path": "/", "headers": {"x-forwarded-for": "unknown"}}"#,
    )
    .await;
    assert!(unknown.is_problem(400), "{}", unknown.body);
}

#[tokio::test]
async fn two_hosts_a_host_against_the_target_and_connect_are_refused() {
    let up = echo_upstream().await;
    let server = start(&gateway(up, "", "")).await;
    let gw = server.listen;
    let reply = raw(gw, "GET /x HTTP/1.1\nHost: a.example\nHost: b.example\n\n").await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    let reply = raw(gw, "GET http://a.example/x HTTP/1.1\nHost: b.example\n\n").await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    let reply = raw(
        gw,
        "GET http://a.example/x HTTP/1.1\nHost: A.example\nConnection: close\n\n",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = raw(
        gw,
        "CONNECT a.example:443 HTTP/1.1\nHost: a.example:443\n\n",
    )
    .await;
    assert!(reply.is_problem(405), "{} {}", reply.status, reply.body);
    assert!(reply.header("allow").is_some_and(|a| a.contains("GET")));
}

// ---------------------------------------------------------------------------------------
// Item 6: bytes and time a client controls

const API: &str = r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
max_in_flight = 20
critical_reserve = 0
queue_timeout = "10ms"

[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 1000000
window = "1h"
"#;

#[tokio::test]
async fn slow_bodies_do_not_take_in_flight_slots_from_other_requests() {
    let server = start(API).await;
    let api = server.listen;
    // Fifteen times the in-flight cap of clients (from 30 addresses, under the cap on
    // connections per client), each sending its headers and one byte of a 100-byte body,
    // then nothing.
    let mut slow = Vec::new();
    for i in 0..300 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from(([127, 0, 0, 2 + (i % 30) as u8], 0)))
            .unwrap();
        let mut stream = socket.connect(api).await.unwrap();
        stream
            .write_all(
                b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .await
            .unwrap();
        slow.push(stream);
    }
    // Each slow request has reached the handler by the time a later connection is served
    // (one worker, one accept loop, in order): then every honest request is decided.
    for i in 0..20 {
        let reply = check(api, r#"{"path": "/orders"}"#).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.body);
    }
    drop(slow);
}

/// The decision API waits for a body that comes after its head, and cuts one that stalls
/// at `api_body_timeout` (the gateway's stalled body has its own test below).
#[tokio::test(start_paused = true)]
async fn a_check_body_after_its_head_is_waited_for_and_a_stalled_one_cut_with_408() {
    let server = start(&api_with("api_body_timeout = \"2s\"")).await;
    let head = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n";
    // The body a second after its head, within the bound: decided.
    let mut late = TcpStream::connect(server.listen).await.unwrap();
    late.write_all(head).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    late.write_all(br#"{"path": "/orders"}"#).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(60), read_response(&mut late))
        .await
        .expect("the late body was never answered");
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Half a body, then nothing: cut at the bound, not before.
    let mut stalled = TcpStream::connect(server.listen).await.unwrap();
    stalled.write_all(head).await.unwrap();
    stalled.write_all(b"{\"path\"").await.unwrap();
    let sent = tokio::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(60), read_response(&mut stalled))
        .await
        .expect("the stalled body was never cut");
    assert!(reply.is_problem(408), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("api_body_timeout"), "{}", reply.body);
    let waited = sent.elapsed();
    common::assert_waited(waited, Duration::from_millis(1900), Duration::from_secs(3));
}

/// `api_body_timeout` is read per request (a reload changes it): the decision API's own
/// HTTP/1.1 path kept the bound it started with.
#[tokio::test(start_paused = true)]
async fn a_reload_that_shortens_api_body_timeout_cuts_the_next_stalled_body_at_the_new_bound() {
    let path = temp_config("reload-api-body");
    let before = api_with("api_body_timeout = \"60s\"");
    std::fs::write(&path, &before).unwrap();
    let server = start_at(&before, Some(path.clone())).await;
    std::fs::write(&path, api_with("api_body_timeout = \"2s\"")).unwrap();
    assert_eq!(server.reload().await.expect("a valid config"), 2);
    let mut stalled = TcpStream::connect(server.listen).await.unwrap();
    stalled
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n{\"path\"")
        .await
        .unwrap();
    let sent = tokio::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(120), read_response(&mut stalled))
        .await
        .expect("the stalled body was never cut");
    assert!(reply.is_problem(408), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("within 2s"), "{}", reply.body);
    common::assert_waited(
        sent.elapsed(),
        Duration::from_millis(1900),
        Duration::from_secs(3),
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// A head whose body never starts is cut at `api_body_timeout` too: the body's timer is
/// armed only when the body is not there at once, and this one never is.
#[tokio::test(start_paused = true)]
async fn a_check_whose_body_never_starts_is_cut_with_408_at_the_bound() {
    let server = start(&api_with("api_body_timeout = \"2s\"")).await;
    let mut silent = TcpStream::connect(server.listen).await.unwrap();
    silent
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n")
        .await
        .unwrap();
    let sent = tokio::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(60), read_response(&mut silent))
        .await
        .expect("the missing body was waited for without end");
    assert!(reply.is_problem(408), "{} {}", reply.status, reply.body);
    let waited = sent.elapsed();
    common::assert_waited(waited, Duration::from_millis(1900), Duration::from_secs(3));
}

/// A chunked body (no declared length) is read piece by piece: pieces within `max_body`
/// are joined into one body and decided, and pieces past it are refused with 413.
#[tokio::test]
async fn a_chunked_check_body_is_joined_and_one_over_max_body_refused() {
    let server = start(&api_with("max_body = 64")).await;
    let head = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunked = |pieces: &[&str]| {
        let mut out = head.to_vec();
        for piece in pieces {
            out.extend_from_slice(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    };
    // hyper hands over each chunk as a piece of its own, read together or not.
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    let request = chunked(&[r#"{"path":"#, r#" "/orders","#, r#" "api_key": "k"}"#]);
    stream.write_all(&request).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), read_response(&mut stream))
        .await
        .expect("the chunked body was never answered");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.contains(r#""allowed":true"#), "{}", reply.body);

    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    let long = format!(r#""/{}""#, "a".repeat(80));
    let request = chunked(&[r#"{"path":"#, &long, "}"]);
    stream.write_all(&request).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), read_response(&mut stream))
        .await
        .expect("the long chunked body was never answered");
    assert!(reply.is_problem(413), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("max_body"), "{}", reply.body);
}

#[tokio::test]
async fn a_declared_body_over_max_body_is_refused_before_it_is_sent() {
    let server = start(API).await;
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    stream
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n")
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), read_response(&mut stream))
        .await
        .expect("the server waited for a body it would refuse");
    assert!(reply.is_problem(413), "{} {}", reply.status, reply.body);
}

#[tokio::test]
async fn a_head_of_200_kb_is_refused_with_431() {
    let server = start(API).await;
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    let big = "a".repeat(200 * 1024);
    let request = format!("GET /live HTTP/1.1\r\nHost: x\r\nX-User: {big}\r\n\r\n");
    // The server may answer and close before it has read all of it.
    let _ = stream.write_all(request.as_bytes()).await;
    let reply = read_response(&mut stream).await;
    assert_eq!(reply.status, 431);
}

#[tokio::test]
async fn a_client_may_hold_only_its_share_of_connections() {
    let server = start(API).await;
    let api = server.listen;
    let mut held = Vec::new();
    for _ in 0..256 {
        held.push(TcpStream::connect(api).await.unwrap());
    }
    // One more is closed at once, not after a header timeout.
    let mut extra = TcpStream::connect(api).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the 257th connection was kept open");
    // Closing one makes room.
    held.pop();
    let mut served = false;
    for _ in 0..100 {
        let mut stream = TcpStream::connect(api).await.unwrap();
        let request = "GET /healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        if answer.starts_with(b"HTTP/1.1 ") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "no room after a connection closed");
}

#[tokio::test(start_paused = true)]
async fn a_slow_head_is_cut_after_the_header_timeout() {
    let server = start(API).await;
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    stream.write_all(b"GET /live HTTP/1.1\r\nHo").await.unwrap();
    let start = tokio::time::Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection was held for a minute");
    assert!(start.elapsed() <= Duration::from_secs(10));
}

/// Reads `stream` to its end (the server closing it), within `limit`; how long that took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Duration {
    let start = tokio::time::Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(limit, stream.read_to_end(&mut rest))
        .await
        .expect("the connection was not closed")
        .expect("a clean close");
    start.elapsed()
}

/// One keep-alive request on `stream` (`/healthcheck`), answered 200.
async fn healthcheck(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let reply = read_response(stream).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_outlives_the_header_timeout() {
    // The header timeout closed idle kept-alive connections too: a client retrying after a
    // 10 s Retry-After on its pooled connection raced the close.
    let server = start(&api_with("idle_timeout = \"30s\"")).await;
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    healthcheck(&mut stream).await;
    // Past the 10 s header timeout, within the idle timeout: still served.
    tokio::time::sleep(Duration::from_secs(20)).await;
    healthcheck(&mut stream).await;
    // Idle past `idle_timeout`: closed then, not before.
    let waited = closed_within(&mut stream, Duration::from_secs(60)).await;
    common::assert_waited(waited, Duration::from_secs(30), Duration::from_secs(31));
}

#[tokio::test(start_paused = true)]
async fn a_slow_head_on_a_kept_alive_connection_is_still_cut_after_the_header_timeout() {
    let server = start(&api_with("idle_timeout = \"30s\"")).await;
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    healthcheck(&mut stream).await;
    // Idle a while (under the idle timeout), then a head a few bytes at a time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stream.write_all(b"GET /live HTTP/1.1\r\nHo").await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stream.write_all(b"st: x").await.unwrap();
    // Cut 10 s after the head's first byte, whatever the idle timeout.
    let waited = closed_within(&mut stream, Duration::from_secs(60)).await;
    common::assert_waited(waited, Duration::from_secs(5), Duration::from_secs(7));
    // A fresh connection that says nothing is not an idle keep-alive: the header timeout.
    let mut silent = TcpStream::connect(server.listen).await.unwrap();
    let waited = closed_within(&mut silent, Duration::from_secs(60)).await;
    assert!(waited <= Duration::from_secs(10), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_through_the_gateway_is_cut_and_frees_its_slot() {
    let up = echo_upstream().await;
    let server = start(&gateway(
        up,
        "max_in_flight = 1\ncritical_reserve = 0\nqueue_timeout = \"10ms\"",
        "",
    ))
    .await;
    let gw = server.listen;
    let mut stalled = TcpStream::connect(gw).await.unwrap();
    stalled
        .write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nsome")
        .await
        .unwrap();
    // It holds the only slot while it sends, then is cut: 408, and the slot is free.
    let reply = tokio::time::timeout(Duration::from_secs(60), read_response(&mut stalled))
        .await
        .expect("the stalled body was never cut");
    assert!(reply.is_problem(408), "{} {}", reply.status, reply.body);
    let reply = get(gw, "/orders", "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

// ---------------------------------------------------------------------------------------
// Item 7: an upstream that never answers

#[tokio::test(start_paused = true)]
async fn an_upstream_that_never_answers_is_a_504_problem() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let server = start(&gateway(up, "", "")).await;
    let reply = tokio::time::timeout(Duration::from_secs(120), get(server.listen, "/x", ""))
        .await
        .expect("the gateway waited on the upstream for two minutes");
    assert!(reply.is_problem(504), "{} {}", reply.status, reply.body);
    held.abort();
}

// ---------------------------------------------------------------------------------------
// "Smaller": the admin listener's /reload, and the CLI's own examples

const RELOADABLE: &str = r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
"#;

fn temp_config(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratewarden-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    std::fs::write(&path, RELOADABLE).unwrap();
    path
}

#[tokio::test]
async fn a_web_page_cannot_trigger_a_reload() {
    let path = temp_config("reload-csrf");
    let server = start_at(RELOADABLE, Some(path.clone())).await;
    let admin = server.admin.unwrap();
    let post = |headers: &'static str| async move {
        raw(
            admin,
            &format!("POST /reload HTTP/1.1\nHost: {admin}\n{headers}Content-Length: 2\nConnection: close\n\n{{}}"),
        )
        .await
    };
    // A cross-origin form or fetch sends a "simple" content type without asking first.
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let headers: &'static str = Box::leak(
            format!("Origin: http://evil.example\nContent-Type: {kind}\n").into_boxed_str(),
        );
        assert!(post(headers).await.is_problem(415), "{kind}");
    }
    assert!(post("Content-Type: text/plain\n").await.is_problem(415));
    // A JSON POST from a page of another origin, or from a rebound domain name.
    assert!(
        post("Origin: http://evil.example\nContent-Type: application/json\n")
            .await
            .is_problem(403)
    );
    let rebound = raw(
        admin,
        "POST /reload HTTP/1.1\nHost: evil.example\nOrigin: http://evil.example\nContent-Type: application/json\nContent-Length: 2\nConnection: close\n\n{}",
    )
    .await;
    assert!(
        rebound.is_problem(403),
        "{} {}",
        rebound.status,
        rebound.body
    );
    // Operators' tools: a JSON content type, or the custom header.
    let reply = post("Content-Type: application/json\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["reloaded"], true);
    let reply = post("X-Ratewarden-Reload: 1\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The `curl` commands of `ratewarden serve --help`, continuation lines joined.
fn help_curls() -> Vec<String> {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap().replace("\\\n", " ");
    help.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("curl "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_curl_examples_of_serve_help_work_against_a_live_server() {
    let path = temp_config("help-curl");
    let server = start_at(RELOADABLE, Some(path.clone())).await;
    let curls = help_curls();
    assert_eq!(curls.len(), 2, "{curls:?}");
    let run = |command: &str| {
        let command = command
            .replace("localhost:8080", &server.listen.to_string())
            .replace("localhost:9090", &server.admin.unwrap().to_string());
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{command} -w ' %{{http_code}}'")])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let checked = run(&curls[0]);
    assert!(checked.ends_with(" 200"), "{}: {checked}", curls[0]);
    assert!(checked.contains(r#""allowed":true"#), "{checked}");
    let reloaded = run(&curls[1]);
    assert!(reloaded.ends_with(" 200"), "{}: {reloaded}", curls[1]);
    assert!(reloaded.contains(r#""reloaded":true"#), "{reloaded}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

// ---------------------------------------------------------------------------------------
// The bounds above, set in `[server]`

/// `API` with `lines` added to its `[server]`.
fn api_with(lines: &str) -> String {
    API.replacen("[server]\n", &format!("[server]\n{lines}\n"), 1)
}

#[tokio::test]
async fn max_header_bytes_from_the_config_refuses_a_modest_head_with_431() {
    let server = start(&api_with("max_header_bytes = 8192")).await;
    let head = |size: usize| {
        format!(
            "GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-User: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(size)
        )
    };
    // 12 KB: under the default 64 KiB, over the configured 8 KiB.
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    let _ = stream.write_all(head(12 * 1024).as_bytes()).await;
    assert_eq!(read_response(&mut stream).await.status, 431);
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    stream.write_all(head(2 * 1024).as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut stream).await.status, 200);
}

#[tokio::test]
async fn max_connections_per_client_from_the_config_closes_the_third() {
    let server = start(&api_with("max_connections_per_client = 2")).await;
    let api = server.listen;
    let held = [
        TcpStream::connect(api).await.unwrap(),
        TcpStream::connect(api).await.unwrap(),
    ];
    let mut third = TcpStream::connect(api).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the third connection was kept open"
    );
    // Another client address is not held to this one's share.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 9], 0))).unwrap();
    let mut other = socket.connect(api).await.unwrap();
    other
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut other).await.status, 200);
    drop(held);
}

/// An upstream that takes connections and never answers.
async fn hanging_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    (up, held)
}

#[tokio::test(start_paused = true)]
async fn upstream_response_timeout_from_the_config_answers_504_in_that_time() {
    let (up, held) = hanging_upstream().await;
    let server = start(&gateway(up, "upstream_response_timeout = \"2s\"", "")).await;
    let started = tokio::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(120), get(server.listen, "/x", ""))
        .await
        .expect("the gateway waited on the upstream for two minutes");
    assert!(reply.is_problem(504), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("within 2s"), "{}", reply.body);
    // Two seconds, not the default thirty.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    held.abort();
}

/// Which `[server]` fields a reload changes: those read per request apply to the next one;
/// those set up once per connection are named in `/reload`'s answer, not silently ignored.
#[tokio::test]
async fn a_reload_applies_per_request_bounds_and_names_those_needing_a_restart() {
    let (up, held) = hanging_upstream().await;
    let path = temp_config("reload-bounds");
    let before = gateway(up, "", "");
    std::fs::write(&path, &before).unwrap();
    let server = start_at(&before, Some(path.clone())).await;
    let admin = server.admin.unwrap();
    let after = gateway(
        up,
        "upstream_response_timeout = \"100ms\"\nmax_header_bytes = 8192\nidle_timeout = \"5s\"",
        "",
    );
    std::fs::write(&path, &after).unwrap();
    let reloaded = raw(
        admin,
        &format!("POST /reload HTTP/1.1\nHost: {admin}\nContent-Type: application/json\nContent-Length: 2\nConnection: close\n\n{{}}"),
    )
    .await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(
        reloaded.json()["needs_restart"],
        json!(["[server] idle_timeout", "[server] max_header_bytes"]),
        "{}",
        reloaded.body
    );
    // The per-request timeout is in force for the next request...
    let reply = tokio::time::timeout(Duration::from_secs(10), get(server.listen, "/x", ""))
        .await
        .expect("the reloaded upstream_response_timeout was not applied");
    assert!(reply.is_problem(504), "{} {}", reply.status, reply.body);
    assert!(reply.body.contains("within 100ms"), "{}", reply.body);
    // ...and the listener's header bound is still the one it started with.
    let mut stream = TcpStream::connect(server.listen).await.unwrap();
    let head = format!(
        "GET /x HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(12 * 1024)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut stream).await.status, 504);
    held.abort();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The headers that decide who a request is are worked out with the rule set: a reload
/// that keys a rule on a new header protects that header from the next request on.
#[tokio::test]
async fn a_reload_that_keys_a_rule_on_a_new_header_protects_it_at_once() {
    let up = echo_upstream().await;
    let path = temp_config("reload-identity");
    let before = gateway(up, "", "");
    std::fs::write(&path, &before).unwrap();
    let server = start_at(&before, Some(path.clone())).await;
    let gw = server.listen;
    // No rule reads `x-team` yet: it is any header, and `Connection` may name it.
    let twice = "x-team: red\nx-team: blue\n";
    assert_eq!(get(gw, "/x", twice).await.status, 200);
    let hop = "x-team: red\nConnection: x-team\n";
    let reply = get(gw, "/x", hop).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.json()["headers"].get("x-team").is_none(),
        "hop-by-hop"
    );

    let per_team = r#"
[[limit]]
name = "per-team"
key = ["header:x-team"]
algorithm = "fixed-window"
limit = 100
window = "1h"
"#;
    std::fs::write(&path, gateway(up, "", per_team)).unwrap();
    assert_eq!(server.reload().await.expect("a valid config"), 2);
    let reply = get(gw, "/x", twice).await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    assert!(
        reply.body.contains("two `x-team` headers"),
        "{}",
        reply.body
    );
    let reply = get(gw, "/x", hop).await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    assert!(
        reply.body.contains("`Connection` names `x-team`"),
        "{}",
        reply.body
    );
    // One line, not named in `Connection`, is decided and forwarded as it came.
    let reply = get(gw, "/x", "x-team: red\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["headers"]["x-team"], json!(["red"]));
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The connection cap spares the proxies trusted by the rules in force: it read the list
/// once at start, so a proxy trusted by a reload was still cut to a client's share.
#[tokio::test]
async fn a_proxy_trusted_by_a_reload_is_spared_the_connection_cap_at_once() {
    let path = temp_config("reload-trusted");
    let before = api_with("max_connections_per_client = 2");
    std::fs::write(&path, &before).unwrap();
    let server = start_at(&before, Some(path.clone())).await;
    std::fs::write(
        &path,
        api_with("max_connections_per_client = 2\ntrusted_proxies = [\"127.0.0.1\"]"),
    )
    .unwrap();
    assert_eq!(server.reload().await.expect("a valid config"), 2);
    let mut held = Vec::new();
    for i in 0..3 {
        let mut stream = TcpStream::connect(server.listen).await.unwrap();
        stream
            .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), read_response(&mut stream))
            .await
            .unwrap_or_else(|_| panic!("connection {i} was not served"));
        assert_eq!(reply.status, 200, "connection {i}");
        held.push(stream);
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
