//! The decision API's own HTTP/1.1 path for `POST /v1/check` (`serve/api/lean.rs`): its
//! answers are hyper's answers byte for byte (but the date), its bounds hold, and every
//! request it does not take is handed to hyper with the bytes already read.

#[path = "../common/mod.rs"]
mod common;
use common::answers::Answers;

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use ratewarden_server::serve::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const T0: u64 = 1_700_000_000_000_000_000;

/// One rule per API key, one request an hour: a second request is limited.
const RULES: &str = r#"
[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;

async fn start(toml: &str) -> Running {
    common::start_at(toml, T0).await
}

/// A connection hyper serves: its first request is not one the lean path takes.
async fn through_hyper(addr: SocketAddr) -> Answers {
    Answers::handed_over(
        addr,
        b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/1.1 200 OK\n",
    )
    .await
}

/// The decision API alone, with `extra` lines in `[server]`.
fn api(extra: &str, rules: &str) -> String {
    format!("[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nretry_after_jitter = \"0s\"\n{extra}\n{rules}")
}

fn check(body: &str, headers: &str) -> Vec<u8> {
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The cases both paths are held to, in order (the second check is over the limit).
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let body = r#"{"ip":"203.0.113.7","path":"/orders","api_key":"k-1"}"#;
    vec![
        ("allowed", check(body, "")),
        ("limited", check(body, "")),
        ("415", {
            let mut r = check(body, "");
            let at = r
                .windows(16)
                .position(|w| w == b"application/json")
                .unwrap();
            r.splice(at..at + 16, b"text/plain".iter().copied());
            r
        }),
        ("422", check(r#"{"ip":"not an address"}"#, "")),
        ("422 not an object", check("[]", "")),
        ("400 bad JSON", check("{x}", "")),
        ("400 empty", check("", "")),
        ("another header", check(body, "X-Other: 1\r\n")),
        (
            "content type with parameters",
            String::from_utf8(check(r#"{"api_key":"k-4"}"#, ""))
                .unwrap()
                .replacen("application/json", "Application/JSON; charset=utf-8", 1)
                .into_bytes(),
        ),
    ]
}

#[tokio::test]
async fn the_lean_answer_is_hypers_byte_for_byte_but_the_date() {
    // Two servers with the same rules and clock see the same requests in the same order,
    // one on its own path, one forced through hyper.
    let lean = start(&api("", RULES)).await;
    let hyper = start(&api("", RULES)).await;
    for (name, request) in cases() {
        let mut ours = Answers::connect(lean.listen).await;
        ours.send(&request).await;
        let mut theirs = through_hyper(hyper.listen).await;
        theirs.send(&request).await;
        let (ours, theirs) = (ours.next(false).await, theirs.next(false).await);
        assert_eq!(ours, theirs, "{name}");
    }
    // Connection: close is answered so, then closed, by both.
    let close = check(r#"{"api_key":"k-2"}"#, "Connection: close\r\n");
    let mut ours = Answers::connect(lean.listen).await;
    ours.send(&close).await;
    let mut theirs = through_hyper(hyper.listen).await;
    theirs.send(&close).await;
    let answer = ours.next(false).await;
    assert!(answer.contains("\nconnection: close\n"), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
    assert!(ours.closed().await && theirs.closed().await);
    // A declared body over `max_body`: 413 before the body, then closed, by both.
    let over = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n{";
    let mut ours = Answers::connect(lean.listen).await;
    ours.send(over).await;
    let mut theirs = through_hyper(hyper.listen).await;
    theirs.send(over).await;
    let answer = ours.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
    assert!(ours.closed().await && theirs.closed().await);
}

#[tokio::test]
async fn at_capacity_the_lean_503_is_hypers() {
    // The gateway's request to an upstream that never answers holds the only place in
    // flight, which the decision API shares.
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = upstream.local_addr().unwrap();
    let (reached, mut arrived) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let (mut held, _) = upstream.accept().await.unwrap();
        let mut chunk = [0u8; 1024];
        let _ = held.read(&mut chunk).await;
        reached.send(()).await.unwrap();
        // Held open, unanswered, until the test ends.
        std::future::pending::<()>().await;
        drop(held);
    });
    let server = start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\napi = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{up}\"\nmax_in_flight = 1\ncritical_reserve = 0\nqueue_timeout = \"0s\"\nretry_after_jitter = \"0s\"\nupstream_response_timeout = \"60s\"\n{RULES}"
    ))
    .await;
    let api = server.api.expect("an API listener");
    let mut busy = Answers::connect(server.listen).await;
    busy.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n").await;
    arrived.recv().await.unwrap();
    let request = check(r#"{"api_key":"k-1"}"#, "");
    let mut ours = Answers::connect(api).await;
    ours.send(&request).await;
    let mut theirs = through_hyper(api).await;
    theirs.send(&request).await;
    let answer = ours.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("\nretry-after: 1\n"), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
}

#[tokio::test]
async fn pipelined_checks_are_answered_in_order_and_a_request_after_them_goes_to_hyper() {
    let server = start(&api("", RULES)).await;
    let body = r#"{"api_key":"k-1"}"#;
    let mut stream = [
        check(body, ""),
        check(body, ""),
        b"GET /v1/check HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        check(body, ""),
    ]
    .concat();
    let mut answers = Answers::connect(server.listen).await;
    answers.send(&stream).await;
    let first = answers.next(false).await;
    assert!(first.contains(r#""allowed":true"#), "{first}");
    let second = answers.next(false).await;
    assert!(second.contains(r#""allowed":false"#), "{second}");
    let third = answers.next(false).await;
    assert!(third.starts_with("HTTP/1.1 405 "), "{third}");
    let fourth = answers.next(false).await;
    assert!(
        fourth.contains(r#""allowed":false"#),
        "hyper's, after: {fourth}"
    );
    // And a check split byte by byte is one request.
    stream = check(r#"{"api_key":"k-3"}"#, "");
    let mut answers = Answers::connect(server.listen).await;
    for byte in &stream {
        answers.send(std::slice::from_ref(byte)).await;
        tokio::task::yield_now().await;
    }
    let answer = answers.next(false).await;
    assert!(answer.contains(r#""allowed":true"#), "{answer}");
}

#[tokio::test]
async fn requests_the_lean_path_does_not_take_are_answered_by_hyper_as_before() {
    let server = start(&api("", "")).await;
    let addr = server.listen;
    let body = r#"{"path":"/orders"}"#;
    let expect = |request: Vec<u8>, starts: &'static str, contains: &'static str| async move {
        let mut answers = Answers::connect(addr).await;
        answers.send(&request).await;
        let mut answer = answers.next(false).await;
        if answer.starts_with("HTTP/1.1 100 Continue") {
            answer = answers.next(false).await;
        }
        assert!(
            answer.starts_with(starts) && answer.contains(contains),
            "{}\n->\n{answer}",
            String::from_utf8_lossy(&request)
        );
    };
    let replace = |from: &str, to: &str| {
        String::from_utf8(check(body, ""))
            .unwrap()
            .replacen(from, to, 1)
            .into_bytes()
    };
    expect(
        replace("HTTP/1.1", "HTTP/1.0"),
        "HTTP/1.0 200 OK",
        r#""allowed":true"#,
    )
    .await;
    expect(
        replace("/v1/check", "/v1/check?x=1"),
        "HTTP/1.1 200 OK",
        r#""allowed":true"#,
    )
    .await;
    expect(
        check(body, "Expect: 100-continue\r\n"),
        "HTTP/1.1 200 OK",
        r#""allowed":true"#,
    )
    .await;
    let chunked = format!(
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    expect(chunked.into_bytes(), "HTTP/1.1 200 OK", r#""allowed":true"#).await;
    expect(
        replace("POST", "PUT"),
        "HTTP/1.1 405 Method Not Allowed",
        "takes POST",
    )
    .await;
    expect(
        replace("/v1/check", "/v1/settle"),
        "HTTP/1.1 422 ",
        "reservation",
    )
    .await;
    expect(
        replace("/v1/check", "/nowhere"),
        "HTTP/1.1 404 Not Found",
        "no such endpoint",
    )
    .await;
    expect(
        b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}"
            .to_vec(),
        "HTTP/1.1 400 Bad Request",
        "",
    )
    .await;
}

#[tokio::test]
async fn a_check_head_over_max_header_bytes_is_refused_with_431() {
    let server = start(&api("max_header_bytes = 8192", "")).await;
    let head = |size: usize| check("{}", &format!("X-User: {}\r\n", "a".repeat(size)));
    let mut answers = Answers::connect(server.listen).await;
    let _ = answers.stream.write_all(&head(12 * 1024)).await;
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let mut answers = Answers::connect(server.listen).await;
    answers.send(&head(2 * 1024)).await;
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_check_head_is_cut_at_the_header_timeout_and_an_idle_one_at_idle_timeout() {
    let server = start(&api("idle_timeout = \"30s\"", "")).await;
    // A head a few bytes at a time (slowloris): cut 10 s after the accept.
    let mut slow = Answers::connect(server.listen).await;
    let started = tokio::time::Instant::now();
    slow.send(b"POST /v1/check HTTP/1.1\r\nHo").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    slow.send(b"st: x\r\n").await;
    assert!(slow.closed().await);
    let waited = started.elapsed();
    common::assert_waited(waited, Duration::from_secs(10), Duration::from_secs(11));
    // A kept-alive connection idles past the header timeout, and is cut at the idle one.
    let mut idle = Answers::connect(server.listen).await;
    idle.send(&check("{}", "")).await;
    assert!(idle.next(false).await.starts_with("HTTP/1.1 200 OK"));
    tokio::time::sleep(Duration::from_secs(20)).await;
    idle.send(&check("{}", "")).await;
    assert!(idle.next(false).await.starts_with("HTTP/1.1 200 OK"));
    let idled = tokio::time::Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), idle.stream.read_to_end(&mut rest))
        .await
        .expect("closed at the idle timeout")
        .unwrap();
    let waited = idled.elapsed();
    common::assert_waited(waited, Duration::from_secs(30), Duration::from_secs(31));
    // Its next head, once begun, has the header timeout, not the idle one.
    let mut kept = Answers::connect(server.listen).await;
    kept.send(&check("{}", "")).await;
    assert!(kept.next(false).await.starts_with("HTTP/1.1 200 OK"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    kept.send(b"POST /v1/check HTTP/1.1\r\n").await;
    let begun = tokio::time::Instant::now();
    assert!(kept.closed().await);
    let waited = begun.elapsed();
    common::assert_waited(waited, Duration::from_secs(10), Duration::from_secs(11));
}

#[tokio::test]
async fn shutdown_closes_an_idle_lean_connection_at_once_and_lets_a_busy_one_finish() {
    let server = start(&api("shutdown_grace = \"30s\"", "")).await;
    let mut idle = Answers::connect(server.listen).await;
    idle.send(&check("{}", "")).await;
    assert!(idle.next(false).await.starts_with("HTTP/1.1 200 OK"));
    // Busy: its head is read, its body not whole.
    let body = r#"{"path":"/orders"}"#;
    let request = check(body, "");
    let (head, tail) = request.split_at(request.len() - 5);
    let mut busy = Answers::connect(server.listen).await;
    busy.send(head).await;
    // The head is read before the shutdown: a request on a fresh connection is served
    // after it by the one worker's accept loop.
    let mut probe = Answers::connect(server.listen).await;
    probe.send(&check("{}", "")).await;
    assert!(probe.next(false).await.starts_with("HTTP/1.1 200 OK"));
    server.shutdown();
    assert!(
        idle.closed().await,
        "the idle connection was closed at once"
    );
    busy.send(tail).await;
    let answer = busy.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("\nconnection: close\n"), "{answer}");
    assert!(busy.closed().await);
    drop(probe);
    tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("the server stops once its connections are done");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// However a pipelined stream is cut into writes, the answers are the same.
    #[test]
    fn random_splits_of_a_pipelined_stream_give_the_same_answers(
        cuts in proptest::collection::vec(0usize..600, 0..12),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            // No rule applies: every check has the same answer, case after case.
            let rules = "[[limit]]\nname = \"never\"\nmatch = { path = \"/never\" }\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1h\"\n";
            let server = start(&api("", rules)).await;
            let stream = [
                check(r#"{"path":"/orders"}"#, ""),
                check("{x}", ""),
                check(r#"{"ip":"bad"}"#, "Content-Type: text/plain\r\n"),
                check(r#"{"path":"/a"}"#, ""),
                b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                check(r#"{"path":"/b"}"#, ""),
            ]
            .concat();
            let mut whole = Answers::connect(server.listen).await;
            whole.send(&stream).await;
            let mut split = Answers::connect(server.listen).await;
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for cut in cuts.into_iter().chain([stream.len()]) {
                split.send(&stream[at..cut]).await;
                at = cut;
                tokio::task::yield_now().await;
            }
            for n in 0..6 {
                let (a, b) = (whole.next(false).await, split.next(false).await);
                assert!(!a.is_empty(), "answer {n}");
                assert_eq!(a, b, "answer {n}");
            }
        });
    }
}

#[tokio::test]
async fn a_body_as_large_as_max_body_is_read_whole_and_the_connection_goes_on() {
    let server = start(&api("max_body = 100000", "")).await;
    let large = format!(r#"{{"tenant":"{}"}}"#, "t".repeat(90_000));
    let request = check(&large, "");
    let mut answers = Answers::connect(server.listen).await;
    // In pieces, so the buffer grows while the body arrives.
    for piece in request.chunks(7_000) {
        answers.send(piece).await;
        tokio::task::yield_now().await;
    }
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    for _ in 0..3 {
        answers.send(&check(r#"{"path":"/orders"}"#, "")).await;
        let answer = answers.next(false).await;
        assert!(answer.contains(r#""allowed":true"#), "{answer}");
    }
    // One byte over is refused before it is sent (a body the server will not read would
    // make its close a reset).
    let over = check(&"x".repeat(100_001), "");
    let head_end = over.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut answers = Answers::connect(server.listen).await;
    answers.send(&over[..head_end]).await;
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
}
