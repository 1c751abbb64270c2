//! Spellings of one credential and of one host, over real sockets: the gateway (both of its
//! HTTP/1.1 paths), the decision API and forward-auth must count every spelling a server
//! reads as the same key or the same host under one budget, refuse the ones it cannot read
//! one way, and never let a rule stop counting because a part of its key is absent.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use ratewarden_server::serve::Running;
use serde_json::{json, Value};

#[path = "../common/mod.rs"]
mod common;

use common::raw::{raw, Raw};

const T0: u64 = 1_000_000_000_000;

async fn start(toml: &str) -> Running {
    common::start_at(toml, T0).await
}

/// An upstream that answers with the `Host` it received (`-` for none).
async fn host_echo() -> SocketAddr {
    common::upstream(|request: Request<Incoming>| async move {
        let host = request
            .headers()
            .get_all(http::header::HOST)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>();
        let body = json!({ "host": host }).to_string();
        Response::new(Full::new(Bytes::from(body)))
    })
    .await
}

fn config(upstream: SocketAddr, rules: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
api = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"

{rules}
"#
    )
}

/// `GET /x` through the gateway with `headers` (each line ending in `\n`, `Host` among
/// them when wanted).
async fn through(gateway: SocketAddr, headers: &str) -> Raw {
    raw(
        gateway,
        &format!("GET /x HTTP/1.1\n{headers}Connection: close\n\n"),
    )
    .await
}

/// `POST /v1/check` with `body`.
async fn check(api: SocketAddr, body: &Value) -> Raw {
    let body = body.to_string();
    raw(
        api,
        &format!(
            "POST /v1/check HTTP/1.1\nHost: {api}\nContent-Type: application/json\nContent-Length: {}\nConnection: close\n\n{body}",
            body.len()
        ),
    )
    .await
}

// ---------------------------------------------------------------------------------------
// One credential, many spellings

const PER_KEY: &str = r#"
[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 3
window = "1h"
"#;

#[tokio::test]
async fn the_bearer_scheme_in_any_case_and_spacing_is_one_api_key() {
    let server = start(&config(host_echo().await, PER_KEY)).await;
    let spellings = [
        "Bearer t",
        "BEARER t",
        "bearer t",
        "bEaReR t",
        "Bearer   t",
        "BEARER  t",
        "bearer t ",
        "Bearer t",
    ];
    let mut through_count = 0;
    for spelling in spellings {
        let reply = through(
            server.listen,
            &format!("Host: a.example\nAuthorization: {spelling}\n"),
        )
        .await;
        match reply.status {
            200 => through_count += 1,
            429 => {}
            other => panic!("`{spelling}`: {other} {}", reply.body),
        }
    }
    assert_eq!(through_count, 3, "one key, limit 3");
    // The token itself is case-sensitive: `T` is another key.
    let reply = through(server.listen, "Host: a.example\nAuthorization: Bearer T\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    // The decision API reads the same header the same way, into the same budget.
    let reply = check(
        server.api.expect("an api listener"),
        &json!({ "ip": "198.51.100.1", "headers": { "authorization": "BEARER t" } }),
    )
    .await;
    assert_eq!(reply.json()["allowed"], false, "{}", reply.body);
}

#[tokio::test]
async fn a_credential_that_cannot_be_read_one_way_is_refused_and_other_schemes_are_keys() {
    let server = start(&config(host_echo().await, PER_KEY)).await;
    // A bearer credential with junk after its token, a tab for the space, a comma list:
    // an upstream may take any piece of it as the key.
    for bad in [
        "Bearer t u",
        "Bearer\tt",
        "Bearer t,u",
        "Bearer t\"",
        "Bearer=t",
    ] {
        let reply = through(
            server.listen,
            &format!("Host: a.example\nAuthorization: {bad}\n"),
        )
        .await;
        assert!(
            reply.is_problem(400),
            "`{bad}`: {} {}",
            reply.status,
            reply.body
        );
        assert!(
            reply.json()["detail"].as_str().unwrap().contains("per-key"),
            "{}",
            reply.body
        );
    }
    // Another scheme's token68 credential is a key of its own, whatever the scheme's case.
    let mut statuses = Vec::new();
    for scheme in ["Basic", "BASIC", "basic", "Basic", "Token"] {
        let reply = through(
            server.listen,
            &format!("Host: a.example\nAuthorization: {scheme} dXNlcjpwYXNz\n"),
        )
        .await;
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 200]);
}

const PER_USER: &str = r#"
[[limit]]
name = "per-user"
match = { path = "/x" }
key = ["header:x-user"]
algorithm = "fixed-window"
limit = 3
window = "1h"
"#;

#[tokio::test]
async fn a_rule_without_its_key_part_counts_the_client_address_by_default() {
    let server = start(&config(host_echo().await, PER_USER)).await;
    let gw = server.listen;
    // The client's address stands in for the missing part.
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(through(gw, "Host: a.example\n").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    // A user that names itself has its own budget.
    assert_eq!(
        through(gw, "Host: a.example\nX-User: u1\n").await.status,
        200
    );
    // The decision API counts the same way.
    let api = server.api.expect("an api listener");
    for expected in [true, true, true, false] {
        let reply = check(api, &json!({ "ip": "198.51.100.2", "path": "/x" })).await;
        assert_eq!(reply.json()["allowed"], expected, "{}", reply.body);
    }
}

#[tokio::test]
async fn a_rule_may_skip_or_refuse_a_request_without_its_key_part() {
    let rules = r#"
[[limit]]
name = "per-key-or-skip"
match = { path = "/skip" }
key = ["api_key"]
when_key_missing = "skip"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[limit]]
name = "per-tenant-or-refuse"
match = { path = "/refuse" }
key = ["tenant"]
when_key_missing = "refuse"
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;
    let server = start(&config(host_echo().await, rules)).await;
    let gw = server.listen;
    // `skip`, opted into: the rule does not apply.
    for _ in 0..3 {
        let reply = raw(
            gw,
            "GET /skip HTTP/1.1\nHost: a.example\nConnection: close\n\n",
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // `refuse`: a 400 naming the rule and the part.
    let reply = raw(
        gw,
        "GET /refuse HTTP/1.1\nHost: a.example\nConnection: close\n\n",
    )
    .await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    let detail = reply.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("per-tenant-or-refuse") && detail.contains("tenant"),
        "{detail}"
    );
    // The decision API follows the same setting.
    let api = server.api.expect("an api listener");
    let reply = check(api, &json!({ "ip": "198.51.100.1", "path": "/refuse" })).await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    // `explain` shows each rule's choice, and what it makes of the request.
    let admin = server.admin.expect("an admin listener");
    let explained = common::post(admin, "/v1/explain", r#"{"path": "/skip"}"#)
        .await
        .json();
    let rules = &explained["rules"];
    assert!(
        rules[0]["mode"]
            .as_str()
            .unwrap()
            .contains("skipped without its key part"),
        "{explained}"
    );
    assert_eq!(
        rules[0]["missing_key_part"]
            .as_str()
            .map(|p| p.starts_with("api_key")),
        Some(true),
        "{explained}"
    );
    assert!(
        rules[1]["mode"]
            .as_str()
            .unwrap()
            .contains("refuses without its key part"),
        "{explained}"
    );
}

// ---------------------------------------------------------------------------------------
// One host, many spellings

const API_HOST: &str = r#"
[[limit]]
name = "api-host"
match = { host = "api.example.com" }
key = ["global"]
algorithm = "fixed-window"
limit = 3
window = "1h"
"#;

#[tokio::test]
async fn a_host_rule_counts_every_spelling_of_its_host() {
    let server = start(&config(host_echo().await, API_HOST)).await;
    let mut through_count = 0;
    for host in [
        "api.example.com.",
        "API.EXAMPLE.COM.",
        "api.example.com.:80",
        "Api.Example.Com:8080",
        "api.example.com.",
        "api.example.com.",
    ] {
        let reply = through(server.listen, &format!("Host: {host}\n")).await;
        match reply.status {
            200 => {
                through_count += 1;
                // Forwarded as it was decided on.
                assert_eq!(reply.json()["host"], json!([host]), "{}", reply.body);
            }
            429 => {}
            other => panic!("`Host: {host}`: {other} {}", reply.body),
        }
    }
    assert_eq!(through_count, 3, "one host, limit 3");
    // The decision API and the absolute form count the same host.
    let api = server.api.expect("an api listener");
    let reply = check(api, &json!({ "host": "API.example.com." })).await;
    assert_eq!(reply.json()["allowed"], false, "{}", reply.body);
    let reply = raw(
        server.listen,
        "GET http://api.example.com./x HTTP/1.1\nHost: api.example.com\nConnection: close\n\n",
    )
    .await;
    assert_eq!(reply.status, 429, "{}", reply.body);
}

#[tokio::test]
async fn a_host_that_is_no_host_or_is_missing_is_refused() {
    let server = start(&config(host_echo().await, API_HOST)).await;
    for host in [
        "api..example.com",
        "api.example.com..",
        ".api.example.com",
        "user@api.example.com",
        "api.example.com:x",
        "api.example.com:99999",
        "api example.com",
        "api.example.com/x",
        "api.%65xample.com",
        "[::1",
        "[fe80::1%25eth0]",
        "",
    ] {
        let reply = through(server.listen, &format!("Host: {host}\n")).await;
        assert!(
            reply.is_problem(400),
            "`{host}`: {} {}",
            reply.status,
            reply.body
        );
    }
    // HTTP/1.1 without `Host` (RFC 9112 §3.2), origin-form or absolute.
    let reply = raw(server.listen, "GET /x HTTP/1.1\nConnection: close\n\n").await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    let reply = raw(
        server.listen,
        "GET http://api.example.com/x HTTP/1.1\nConnection: close\n\n",
    )
    .await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    // A `Host` naming another host than the target's, compared as hosts.
    let reply = raw(
        server.listen,
        "GET http://api.example.com/x HTTP/1.1\nHost: www.example.com.\nConnection: close\n\n",
    )
    .await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
    // The decision API refuses a host that is none.
    let api = server.api.expect("an api listener");
    let reply = check(api, &json!({ "host": "api..example.com" })).await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
}

#[tokio::test]
async fn the_gateway_forwards_the_host_it_decided_on() {
    let server = start(&config(host_echo().await, API_HOST)).await;
    // HTTP/1.0 in absolute form without `Host`: decided on the target's host, and the
    // upstream is told that host, not its own address.
    let reply = raw(server.listen, "GET http://api.example.com/x HTTP/1.0\n\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["host"], json!(["api.example.com"]));
    // The target's authority wins over a `Host` spelled otherwise.
    let reply = raw(
        server.listen,
        "GET http://api.example.com./x HTTP/1.1\nHost: API.example.com\nConnection: close\n\n",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["host"], json!(["api.example.com."]));
    // Both were counted: one left.
    let reply = through(server.listen, "Host: api.example.com\n").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = through(server.listen, "Host: api.example.com\n").await;
    assert_eq!(reply.status, 429, "{}", reply.body);
}

#[tokio::test]
async fn forward_auth_counts_every_spelling_of_the_forwarded_host() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ntrusted_proxies = [\"127.0.0.1\"]\n{API_HOST}"
    );
    let server = start(&toml).await;
    let mut statuses = Vec::new();
    for host in [
        "api.example.com.",
        "API.example.com",
        "api.example.com:443",
        "api.example.com.",
    ] {
        let reply = raw(
            server.listen,
            &format!(
                "GET /v1/auth HTTP/1.1\nHost: {}\nX-Forwarded-Method: GET\nX-Forwarded-Uri: /x\nX-Forwarded-For: 203.0.113.7\nX-Forwarded-Host: {host}\nConnection: close\n\n",
                server.listen
            ),
        )
        .await;
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    let reply = raw(
        server.listen,
        &format!(
            "GET /v1/auth HTTP/1.1\nHost: {}\nX-Forwarded-Method: GET\nX-Forwarded-Uri: /x\nX-Forwarded-For: 203.0.113.7\nX-Forwarded-Host: api..example.com\nConnection: close\n\n",
            server.listen
        ),
    )
    .await;
    assert!(reply.is_problem(400), "{} {}", reply.status, reply.body);
}
