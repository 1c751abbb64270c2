//! Fuzzing what strangers send to the front doors (issue 12, "Fuzzing and soak"): arbitrary
//! bytes and structured mutations into the decision API's JSON, and arbitrary header lines
//! and paths into the gateway, each over a real socket to one live server.
//!
//! Whatever arrives: never a 5xx (the in-memory store cannot fail), never a dropped
//! connection (a panic), and every 4xx a problem+json naming what was wrong. Hyper's own
//! 400 for bytes that are not HTTP at all is bodiless; it never reaches our code.
//!
//! `PROPTEST_CASES=N` runs N cases per target (the default keeps the suite quick).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use proptest::prelude::*;
use ratewarden_core::Clock;
use ratewarden_server::serve::{Running, TokioClock};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

#[path = "../common/mod.rs"]
mod common;

const RULES: &str = r#"
[keys]
api_key_header = "x-api-key"

[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "gcra"
rate = "1000/s"
burst = 1000

[[limit]]
name = "per-key"
key = ["api_key", "route"]
algorithm = "token-bucket"
rate = "50/s"
burst = 50
cost = "header:x-cost"
max_cost = 100

[[limit]]
name = "estimates"
match = { path = "/reports*" }
key = ["tenant"]
algorithm = "token-bucket"
rate = "1000/s"
burst = 1000
settle = "1m"

[[limit]]
name = "api-host"
match = { host = "api.example.com" }
key = ["header:x-user"]
algorithm = "gcra"
rate = "1000/s"
burst = 1000

[[limit]]
name = "slots"
match = { path = "/exports*" }
key = ["header:x-user"]
algorithm = "concurrency"
limit = 1000
lease = "1m"
"#;

/// One runtime and two servers (gateway and decision API) for every case: one that trusts
/// no proxy, and one that trusts loopback (where the cases come from) to name the client in
/// `Forwarded`, so that the forwarding headers are read.
struct World {
    runtime: Runtime,
    server: Running,
    proxied: Running,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let start = |proxies: &'static str| async move {
            let upstream = upstream().await;
            let toml = format!(
                "[server]\nlisten = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\nmax_body = 4096\n{proxies}\n{RULES}"
            );
            let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(1_000_000_000_000));
            common::start_on(&toml, clock).await
        };
        let server = runtime.block_on(start(""));
        let proxied = runtime.block_on(start(
            "trusted_proxies = [\"127.0.0.1\"]\nclient_ip_header = \"Forwarded\"",
        ));
        World {
            runtime,
            server,
            proxied,
        }
    })
}

async fn upstream() -> SocketAddr {
    common::upstream(|_| async { Response::new(Full::new(Bytes::from_static(b"up"))) }).await
}

/// Sends `request`, reads the whole answer (the server closes: `Connection: close`), and
/// returns its status, head and body, or what went wrong.
fn exchange(addr: SocketAddr, request: Vec<u8>) -> Result<(u16, String, String), String> {
    world().runtime.block_on(async move {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        // The server may answer (a 4xx) and close before it has read everything.
        let _ = stream.write_all(&request).await;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            stream.read_to_end(&mut answer),
        )
        .await;
        match read {
            Err(_) => return Err("no answer within 20 s".to_owned()),
            Ok(Err(e)) if answer.is_empty() => return Err(format!("read failed: {e}")),
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&answer).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return Err(format!("no response (a panic?): {text:?}"));
        };
        let status = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status: {head:?}"))?;
        Ok((status, head.to_ascii_lowercase(), body.to_owned()))
    })
}

/// The invariant of every answer.
fn judge(answer: Result<(u16, String, String), String>) -> Result<u16, TestCaseError> {
    let (status, head, body) = answer.map_err(TestCaseError::fail)?;
    prop_assert!(status < 500, "{status}: {head}\n{body}");
    if (400..500).contains(&status) && !body.is_empty() {
        prop_assert!(
            head.contains("content-type: application/problem+json"),
            "a {status} that is not problem+json: {head}\n{body}"
        );
        let problem: Value = serde_json::from_str(&body)
            .map_err(|e| TestCaseError::fail(format!("{status} body is not JSON ({e}): {body}")))?;
        prop_assert_eq!(&problem["status"], &json!(status));
        prop_assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()) || status == 429);
    }
    Ok(status)
}

fn post(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn endpoint() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("/v1/check"), Just("/v1/settle"), Just("/v1/release")]
}

/// JSON values of every kind, the odd ones often: huge and negative numbers, floats,
/// strings with control characters, escapes and path tricks, nesting.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        Just(json!(u64::MAX)),
        Just(json!(1_000_000_000u64)),
        Just(json!(0)),
        "\\PC{0,12}".prop_map(Value::from),
        "[ -~]{0,24}".prop_map(Value::from),
        prop_oneof![
            Just("//login"),
            Just("/%2F/x"),
            Just("/a/../../b"),
            Just("/%zz"),
            Just("/\u{0}"),
            Just("203.0.113.7"),
            Just("::ffff:10.0.0.1"),
            Just("GET"),
            Just("Bearer x"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_-]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object of the API's own fields (and a stranger now and then), with arbitrary values.
fn request_object() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just("ip"),
        Just("method"),
        Just("path"),
        Just("host"),
        Just("headers"),
        Just("api_key"),
        Just("tenant"),
        Just("cost"),
        Just("reservation"),
        Just("permit"),
        Just("unknown"),
    ];
    prop::collection::btree_map(field, value(), 0..6)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// A header line: a known name or a random token, and a value of visible ASCII, spaces
/// and obs-text (never CR or LF, which would end the line).
fn header_line() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("connection".to_owned()),
        Just("authorization".to_owned()),
        Just("x-api-key".to_owned()),
        Just("x-tenant-id".to_owned()),
        Just("x-user".to_owned()),
        Just("x-cost".to_owned()),
        Just("host".to_owned()),
        Just("forwarded".to_owned()),
        Just("x-forwarded-for".to_owned()),
        // Not the framing headers: a declared body never sent is a 10 s wait, tested apart.
        "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,12}".prop_filter("framing", |n| {
            !["content-length", "transfer-encoding", "expect"].contains(&&*n.to_ascii_lowercase())
        }),
    ];
    let value = prop::collection::vec(
        prop_oneof![8 => 0x20u8..0x7f, 1 => 0x80u8..=0xff, 1 => Just(b'\t')],
        0..40,
    );
    (name, value).prop_map(|(name, value)| {
        let mut line = name.into_bytes();
        line.extend_from_slice(b": ");
        line.extend(value);
        line.extend_from_slice(b"\r\n");
        line
    })
}

/// A forwarding header line as a proxy, or a client behind it, might write it.
fn forwarding_line() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("Forwarded"),
        Just("forwarded"),
        Just("X-Forwarded-For"),
        Just("X-Real-IP"),
        Just("True-Client-IP"),
        Just("CF-Connecting-IP"),
    ];
    let piece = prop_oneof![
        Just("for=".to_owned()),
        Just("203.0.113.9".to_owned()),
        Just("127.0.0.1".to_owned()),
        Just("\"[2001:db8::1]:443\"".to_owned()),
        Just("[::1]".to_owned()),
        Just("unknown".to_owned()),
        Just("_hidden".to_owned()),
        Just(";proto=https".to_owned()),
        Just(", ".to_owned()),
        Just("\"".to_owned()),
        "[ -~]{0,6}",
    ];
    (name, prop::collection::vec(piece, 0..6))
        .prop_map(|(name, value)| format!("{name}: {}\r\n", value.concat().trim()).into_bytes())
}

fn target() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just("//".to_owned()),
        Just("/.".to_owned()),
        Just("/..".to_owned()),
        Just("/%2e%2E".to_owned()),
        Just("%2F".to_owned()),
        Just("%5c".to_owned()),
        Just(";x=1".to_owned()),
        Just("%00".to_owned()),
        Just("reports".to_owned()),
        Just("exports".to_owned()),
        Just("?q=1&r=%2F".to_owned()),
        "[a-zA-Z0-9._~!$&'()*+,=:@%-]{1,6}",
    ];
    prop::collection::vec(piece, 0..8).prop_map(|p| format!("/{}", p.concat()))
}

/// A host as clients spell hosts, and as they should not: labels in any case, dots
/// (trailing, doubled), ports, brackets, userinfo, escapes, spaces.
fn host_spelling() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("api".to_owned()),
        Just("API".to_owned()),
        Just("example".to_owned()),
        Just("com".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just(":".to_owned()),
        Just(":80".to_owned()),
        Just(":99999".to_owned()),
        Just("[::1]".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("@".to_owned()),
        Just("%41".to_owned()),
        Just(" ".to_owned()),
        Just("_".to_owned()),
        Just("-".to_owned()),
        "[a-zA-Z0-9]{1,8}",
        "[ -~]{1,3}",
    ];
    prop::collection::vec(piece, 0..7).prop_map(|p| p.concat())
}

/// An `Authorization` value: a scheme in any case, spaces or a tab or nothing, then
/// anything visible.
fn authorization() -> impl Strategy<Value = String> {
    let scheme = prop_oneof![
        Just("Bearer"),
        Just("BEARER"),
        Just("bearer"),
        Just("Basic"),
        Just("Digest"),
        Just("Token"),
        Just(""),
    ];
    let gap = prop_oneof![
        Just(" "),
        Just("   "),
        Just("\t"),
        Just(""),
        Just("="),
        Just(" ,")
    ];
    (scheme, gap, "[ -~]{0,16}").prop_map(|(s, g, t)| format!("{s}{g}{t}"))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_into_the_decision_api(path in endpoint(), body in prop::collection::vec(any::<u8>(), 0..300)) {
        judge(exchange(world().server.api.unwrap(), post(path, "application/json", &body)))?;
    }

    #[test]
    fn structured_requests_into_the_decision_api(path in endpoint(), object in request_object(), wrap in prop::bool::weighted(0.1)) {
        // Now and then, inside an array rather than as the object itself.
        let body = if wrap { json!([object]).to_string() } else { object.to_string() };
        judge(exchange(world().server.api.unwrap(), post(path, "application/json", body.as_bytes())))?;
    }

    #[test]
    fn arbitrary_headers_and_paths_through_the_gateway(
        method in prop_oneof![Just("GET"), Just("POST"), Just("CONNECT"), Just("OPTIONS"), Just("DELETE")],
        target in target(),
        lines in prop::collection::vec(header_line(), 0..8),
    ) {
        let mut request = format!("{method} {target} HTTP/1.1\r\nHost: fuzz\r\n").into_bytes();
        for line in &lines {
            request.extend_from_slice(line);
        }
        request.extend_from_slice(b"Connection: close\r\n\r\n");
        judge(exchange(world().server.listen, request))?;
    }

    #[test]
    fn spellings_of_hosts_and_credentials_through_the_gateway_and_the_decision_api(
        host in host_spelling(),
        authorization in authorization(),
        absolute in prop::bool::weighted(0.3),
        version in prop_oneof![Just("1.1"), Just("1.0")],
        with_host in prop::bool::weighted(0.9),
    ) {
        let target = if absolute { format!("http://{host}/x") } else { "/x".to_owned() };
        let host_line = if with_host { format!("Host: {host}\r\n") } else { String::new() };
        let request = format!(
            "GET {target} HTTP/{version}\r\n{host_line}Authorization: {authorization}\r\nConnection: close\r\n\r\n"
        );
        judge(exchange(world().server.listen, request.into_bytes()))?;
        let body = json!({ "host": host, "headers": { "authorization": authorization } }).to_string();
        judge(exchange(world().server.api.unwrap(), post("/v1/check", "application/json", body.as_bytes())))?;
    }

    #[test]
    fn arbitrary_forwarding_headers_from_a_trusted_proxy_through_the_gateway_and_forward_auth(
        method in prop_oneof![Just("GET"), Just("POST")],
        lines in prop::collection::vec(forwarding_line(), 0..4),
        auth in any::<bool>(),
    ) {
        let (addr, target) = if auth {
            (world().proxied.api.unwrap(), "/v1/auth")
        } else {
            (world().proxied.listen, "/")
        };
        let mut request = format!("{method} {target} HTTP/1.1\r\nHost: fuzz\r\nX-Forwarded-Uri: /x\r\n").into_bytes();
        for line in &lines {
            request.extend_from_slice(line);
        }
        request.extend_from_slice(b"Content-Length: 0\r\nConnection: close\r\n\r\n");
        judge(exchange(addr, request))?;
    }
}
