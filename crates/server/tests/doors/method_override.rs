//! Framework conventions that make the upstream serve a request as another one than the
//! rules decided, over real sockets: a `_method` parameter (Rails, Laravel, Symfony), in
//! the query or a form, multipart or JSON body, and a format suffix (`/login.json` is
//! Rails' `/login`). Each connection starts with a `GET` the lean path serves, so that
//! both of the gateway's HTTP/1.1 paths meet each trick.

#[path = "../common/mod.rs"]
mod common;
use common::answers::Answers;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use ratewarden_core::{Clock, ManualClock};
use ratewarden_server::serve::Running;

const T0: u64 = 1_700_000_000_000_000_000;

/// `DELETE /account` and `/login` once an hour per client.
const RULES: &str = r#"
[[limit]]
name = "delete-account"
match = { method = "DELETE", path = "/account" }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"

[[limit]]
name = "login"
match = { path = "/login" }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;

/// An upstream that reads the body and answers `<method> <path> <length>`.
async fn upstream() -> SocketAddr {
    common::upstream(|request: Request<Incoming>| async move {
        let (parts, body) = request.into_parts();
        let length = match body.collect().await {
            Ok(body) => body.to_bytes().len().to_string(),
            Err(_) => "cut".to_owned(),
        };
        let said = format!("{} {} {length}", parts.method, parts.uri.path());
        Response::new(Full::new(Bytes::from(said)))
    })
    .await
}

async fn start(server: &str) -> Running {
    let up = upstream().await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"http://{up}\"\nretry_after_jitter = \"0s\"\n{server}\n{RULES}"
    );
    common::start_at(&toml, T0).await
}

/// A connection whose first request, a `GET` the lean path serves, has been answered.
async fn connection(addr: SocketAddr) -> Answers {
    let mut answers = Answers::connect(addr).await;
    answers
        .send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    answers
}

/// The answer to `request` (its head's end and body as written) on a fresh connection.
async fn ask(addr: SocketAddr, request: &[u8]) -> String {
    let mut answers = connection(addr).await;
    answers.send(request).await;
    answers.next(false).await
}

/// A `POST` to `target` of `body` as `content_type` (none when empty).
fn post(target: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!("POST {target} HTTP/1.1\r\nHost: x\r\n");
    if !content_type.is_empty() {
        request.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut request = request.into_bytes();
    request.extend_from_slice(body);
    request
}

fn status(answer: &str) -> u16 {
    answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn is_problem(answer: &str, code: u16) -> bool {
    status(answer) == code && answer.contains("content-type: application/problem+json")
}

const FORM: &str = "application/x-www-form-urlencoded";
const MULTIPART: &str = "multipart/form-data; boundary=XyZ";
const MULTIPART_BODY: &[u8] = b"--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\ndelete\r\n--XyZ--\r\n";

/// Every way the issue's class has of making a `POST /account` a `DELETE` upstream.
fn overriding_posts() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("form", post("/account", FORM, b"a=1&_method=DELETE")),
        ("no content type", post("/account", "", b"_method=DELETE")),
        ("encoded name", post("/account", FORM, b"%5Fmethod=delete")),
        ("PHP's dot", post("/account", FORM, b".method=DELETE")),
        ("multipart", post("/account", MULTIPART, MULTIPART_BODY)),
        (
            "json",
            post(
                "/account",
                "application/json",
                br#"{"id": 1, "\u005fmethod": "DELETE"}"#,
            ),
        ),
        ("query", post("/account?_method=DELETE", FORM, b"a=1")),
        (
            "chunked form",
            b"POST /account HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n_met\r\na\r\nhod=DELETE\r\n0\r\n\r\n"
                .to_vec(),
        ),
    ]
}

#[tokio::test]
async fn a_method_parameter_naming_another_method_is_refused_by_default() {
    let server = start("").await;
    for (what, request) in overriding_posts() {
        let answer = ask(server.listen, &request).await;
        assert!(is_problem(&answer, 400), "{what}: {answer}");
        assert!(answer.contains("_method=DELETE"), "{what}: {answer}");
    }
    // A `GET` the lean path would take: refused as well, by hyper's path.
    let answer = ask(
        server.listen,
        b"GET /account?x=1&_method=delete HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(is_problem(&answer, 400), "{answer}");
    // Naming its own method changes nothing; a body of another type is not read for it.
    for request in [
        post("/account", FORM, b"_method=post"),
        post("/account", "text/plain", b"_method=DELETE"),
        post("/account", FORM, b"_method[]=DELETE&note=_method%3DDELETE"),
    ] {
        let answer = ask(server.listen, &request).await;
        assert_eq!(status(&answer), 200, "{answer}");
        assert!(answer.contains("POST /account "), "{answer}");
    }
}

#[tokio::test]
async fn under_decide_a_post_is_limited_as_the_method_it_names_and_forwarded_as_sent() {
    let server = start("method_override = \"decide\"").await;
    let first = ask(server.listen, &post("/account", FORM, b"_method=DELETE")).await;
    assert_eq!(status(&first), 200, "{first}");
    assert!(
        first.ends_with("POST /account 14"),
        "forwarded as sent: {first}"
    );
    // The `DELETE /account` rule counted it: every other spelling is now over it.
    for (what, request) in overriding_posts() {
        let answer = ask(server.listen, &request).await;
        assert_eq!(status(&answer), 429, "{what}: {answer}");
    }
    let header = b"POST /account HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: DELETE\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(status(&ask(server.listen, header).await), 429);
    // Frameworks override only a POST; two different methods have no one meaning.
    let get = b"GET /account?_method=DELETE HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(is_problem(&ask(server.listen, get).await, 400));
    let two = post("/account?_method=PUT", FORM, b"_method=DELETE");
    assert!(is_problem(&ask(server.listen, &two).await, 400));
}

#[tokio::test]
async fn a_method_named_past_the_bytes_read_before_deciding_cuts_the_body() {
    let server = start("method_override_scan = 1024").await;
    let mut body = vec![b'a'; 8 * 1024];
    body.splice(0..2, *b"x=");
    body.extend_from_slice(b"&_method=DELETE");
    let answer = ask(server.listen, &post("/account", FORM, &body)).await;
    assert!(is_problem(&answer, 400), "{answer}");
    assert!(answer.contains("_method=DELETE"), "{answer}");
    // Sent in two pieces, the second once the request has been decided and forwarded:
    // cut as it streams, before the upstream has it all.
    let mut answers = connection(server.listen).await;
    let request = post("/account", FORM, &body);
    answers.send(&request[..2048]).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    answers.send(&request[2048..]).await;
    let cut = answers.next(false).await;
    assert!(is_problem(&cut, 400), "{cut}");
    assert!(cut.contains("past the first 1024 bytes"), "{cut}");
    // Past the bound with none: forwarded whole.
    let body = vec![b'a'; 8 * 1024];
    let whole = ask(server.listen, &post("/account", FORM, &body)).await;
    assert!(whole.ends_with("POST /account 8192"), "{whole}");
}

#[tokio::test]
async fn a_format_suffix_is_limited_as_the_path_on_both_paths() {
    let server = start("").await;
    let get = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    assert_eq!(status(&ask(server.listen, &get("/login")).await), 200);
    for target in ["/login.json", "/Login.XML", "/login.html/"] {
        let answer = ask(server.listen, &get(target)).await;
        assert_eq!(status(&answer), 429, "{target}: {answer}");
    }
    // Through hyper's path (a body), likewise.
    let answer = ask(server.listen, &post("/login.json", FORM, b"user=a")).await;
    assert_eq!(status(&answer), 429, "{answer}");
}

#[test]
fn a_bad_method_override_setting_is_located() {
    let error = ratewarden_policy::config::parse(
        "gw.toml",
        "[server]\nmethod_override = \"sometimes\"\nmethod_override_scan = 0\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("gw.toml:2"), "{error}");
    assert!(error.contains("\"refuse\" or \"decide\""), "{error}");
    assert!(error.contains("method_override_scan"), "{error}");
}

#[tokio::test]
async fn forward_auth_refuses_a_query_s_method_override_as_it_refuses_the_headers() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ntrusted_proxies = [\"127.0.0.1\"]\n{RULES}"
    );
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let server = common::start_on(&toml, clock).await;
    let ask = |uri: &'static str| async move {
        let headers = [
            ("x-forwarded-method", "POST"),
            ("x-forwarded-uri", uri),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        common::get(server.listen, "/v1/auth", &headers).await
    };
    let refused = ask("/account?_method=DELETE#x").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("_method=DELETE"), "{}", refused.body);
    assert_eq!(ask("/account?_method=post").await.status, 200);
}

#[tokio::test]
async fn a_query_that_names_no_other_method_stays_on_the_lean_path() {
    let server = start("").await;
    for target in ["/a?_method=get", "/a?page=2", "/a?q=%41"] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status(&ask(server.listen, request.as_bytes()).await), 200);
    }
    // Each connection's first `GET` and the one asked: all six on the lean path.
    assert_eq!(common::gateway_paths(&server).await, (6, 0));
    let refused = ask(
        server.listen,
        b"GET /a?_%6Dethod=PUT HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(is_problem(&refused, 400), "{refused}");
    assert_eq!(
        common::gateway_paths(&server).await,
        (7, 1),
        "handed to hyper, which refused it"
    );
}
