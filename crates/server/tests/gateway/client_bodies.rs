//! A client's request body through the gateway, over real sockets: the upstream's answer
//! is timed from the body's end (an upload may last longer than the upstream takes to
//! answer), and a body the client broke (malformed, too slow, cut) is the client's 400 or
//! 408, never the upstream's 502 or 504, and teaches an adaptive limit nothing.
//!
//! Each connection starts with a `GET` the lean path serves (where the rules let it), so
//! that the body, which only hyper's path takes, is handed over mid-connection as in life.

#[path = "../common/mod.rs"]
mod common;
use common::answers::Answers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use ratewarden_core::RealClock;
use ratewarden_server::serve::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const T0: u64 = 1_700_000_000_000_000_000;

/// An upstream that reads the whole body, then answers `got <length>`; under `/hang` it
/// reads the body and never answers, under `/fail` it answers 500.
async fn reading_upstream() -> SocketAddr {
    common::upstream(|request: Request<Incoming>| async move {
        let path = request.uri().path().to_owned();
        let length = match request.into_body().collect().await {
            Ok(body) => body.to_bytes().len(),
            Err(_) => 0,
        };
        match path.as_str() {
            "/hang" => std::future::pending().await,
            "/fail" => Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(Full::new(Bytes::new()))
                .unwrap(),
            _ => Response::new(Full::new(Bytes::from(format!("got {length}")))),
        }
    })
    .await
}

fn gateway(upstream: SocketAddr, server: &str, rules: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"http://{upstream}\"\n{server}\n{rules}"
    )
}

async fn start(toml: &str) -> Running {
    common::start_at(toml, T0).await
}

/// A connection whose first request, a `GET`, has been answered.
async fn after_a_get(addr: SocketAddr) -> Answers {
    let mut answers = Answers::connect(addr).await;
    answers
        .send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let answer = answers.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    answers
}

/// Sends a `POST` of `pieces` pieces of `size` bytes, one a second (paused time in the
/// tests that use it), and returns the answer.
async fn upload(answers: &mut Answers, target: &str, pieces: usize, size: usize) -> String {
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        pieces * size
    );
    answers.send(head.as_bytes()).await;
    for _ in 0..pieces {
        tokio::time::sleep(Duration::from_secs(1)).await;
        answers.send(&vec![b'a'; size]).await;
    }
    answers.next(false).await
}

fn status(answer: &str) -> u16 {
    answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A 4xx must say what was wrong, as problem+json.
fn is_problem(answer: &str, code: u16) -> bool {
    status(answer) == code && answer.contains("content-type: application/problem+json")
}

// ---------------------------------------------------------------------------------------
// The upstream's answer is timed from the body's end

#[tokio::test(start_paused = true)]
async fn an_upload_longer_than_the_response_timeout_reaches_a_healthy_upstream() {
    let up = reading_upstream().await;
    let server = start(&gateway(up, "upstream_response_timeout = \"2s\"", "")).await;
    let mut answers = after_a_get(server.listen).await;
    // Ten seconds at 4 KiB/s (above the minimum rate), the upstream answering at once
    // after the last byte: five times the upstream's timeout, and no fault of it.
    let answer = upload(&mut answers, "/upload", 10, 4096).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(answer.ends_with("got 40960"), "{answer}");
    assert_eq!(
        common::gateway_paths(&server).await,
        (1, 1),
        "a GET on the lean path, then hyper's"
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_that_hangs_after_an_upload_is_timed_from_the_body_s_end() {
    let up = reading_upstream().await;
    let server = start(&gateway(up, "upstream_response_timeout = \"2s\"", "")).await;
    let mut answers = after_a_get(server.listen).await;
    let started = tokio::time::Instant::now();
    let answer = upload(&mut answers, "/hang", 5, 4096).await;
    assert!(is_problem(&answer, 504), "{answer}");
    assert!(answer.contains("within 2s"), "{answer}");
    // The five seconds of the upload were not the upstream's: two seconds after its end.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_that_stops_reading_the_body_is_a_504_at_the_response_timeout() {
    // Takes the connection and never reads: the body fills the socket's buffers, and the
    // gateway waits on the upstream, not the client.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let server = start(&gateway(up, "upstream_response_timeout = \"2s\"", "")).await;
    let mut answers = Answers::connect(server.listen).await;
    let size = 64 * 1024 * 1024;
    let head = format!("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n");
    answers.send(head.as_bytes()).await;
    let writer = {
        let (mut reader, mut writer) = answers.stream.into_split();
        let sending = tokio::spawn(async move {
            let piece = vec![b'a'; 64 * 1024];
            for _ in 0..size / piece.len() {
                if writer.write_all(&piece).await.is_err() {
                    return;
                }
            }
        });
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(120), async {
            loop {
                let n = reader.read(&mut chunk).await.unwrap_or(0);
                buf.extend_from_slice(&chunk[..n]);
                if n == 0 || buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        })
        .await;
        assert!(
            read.is_ok(),
            "the gateway waited on the upstream for two minutes"
        );
        let answer = String::from_utf8_lossy(&buf).into_owned();
        assert!(answer.starts_with("HTTP/1.1 504 "), "{answer}");
        sending
    };
    writer.abort();
    held.abort();
}

// ---------------------------------------------------------------------------------------
// A body the client broke is the client's fault

/// A chunked body whose second chunk size is not hex.
const MALFORMED: &[u8] =
    b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_problem_not_a_502() {
    let up = reading_upstream().await;
    let server = start(&gateway(up, "", "")).await;
    let mut answers = after_a_get(server.listen).await;
    answers.send(MALFORMED).await;
    let answer = answers.next(false).await;
    assert!(is_problem(&answer, 400), "{answer}");
    assert!(answer.contains("request body"), "{answer}");
    assert_eq!(common::gateway_paths(&server).await, (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_upload_is_a_408_problem_on_a_connection_the_lean_path_began() {
    let up = reading_upstream().await;
    let server = start(&gateway(up, "", "")).await;
    let mut answers = after_a_get(server.listen).await;
    answers
        .send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
        .await;
    let answer = answers.next(false).await;
    assert!(is_problem(&answer, 408), "{answer}");
}

/// An `aimd` rule that moves at every answer, from 20.
fn aimd(upstream: SocketAddr) -> String {
    gateway(
        upstream,
        "upstream_response_timeout = \"2s\"\nbody_idle_timeout = \"2s\"",
        r#"
[[limit]]
name = "up"
key = ["global"]
algorithm = "adaptive-concurrency"
strategy = "aimd"

[limit.adaptive]
initial = 20
min = 1
max = 20
window = "1ns"
window_samples = 1
min_rtt = "0s"
"#,
    )
}

/// The value of `ratewarden_adaptive_limit` for rule `up`.
async fn learnt(admin: SocketAddr) -> Option<u64> {
    let metrics = common::get(admin, "/metrics", &[]).await.body;
    metrics
        .lines()
        .find(|l| l.starts_with("ratewarden_adaptive_limit{") && l.contains("rule=\"up\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn bodies_a_client_broke_teach_an_adaptive_limit_nothing() {
    let up = reading_upstream().await;
    let server = common::start_on(&aimd(up), Arc::new(RealClock::new())).await;
    let admin = server.admin.unwrap();
    for _ in 0..3 {
        // Malformed.
        let mut answers = Answers::connect(server.listen).await;
        answers.send(MALFORMED).await;
        let _ = answers.next(false).await;
        // Stalled past `body_idle_timeout`.
        let mut answers = Answers::connect(server.listen).await;
        answers
            .send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
            .await;
        let _ = answers.next(false).await;
        // Cut: the client goes away mid-body.
        let mut answers = Answers::connect(server.listen).await;
        answers
            .send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nsome")
            .await;
        answers.stream.shutdown().await.unwrap();
        let _ = answers.next(false).await;
    }
    // The limit was never lowered: the first drop that is the upstream's takes it from 20
    // to 18 (⌊20 · 0.9⌋).
    let mut answers = Answers::connect(server.listen).await;
    answers
        .send(b"POST /fail HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na")
        .await;
    assert_eq!(status(&answers.next(false).await), 500);
    assert!(
        common::eventually(|| async { learnt(admin).await == Some(18) }).await,
        "{:?}",
        learnt(admin).await
    );
    // Slower than the upstream's timeout but steady: a healthy upload, answered 200, and
    // no drop.
    let mut answers = Answers::connect(server.listen).await;
    answers
        .send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5120\r\n\r\n")
        .await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let _ = answers.stream.write_all(&[b'a'; 1024]).await;
    }
    let answer = answers.next(false).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert_eq!(common::get(server.listen, "/", &[]).await.status, 200);
    assert_eq!(learnt(admin).await, Some(18));
}
