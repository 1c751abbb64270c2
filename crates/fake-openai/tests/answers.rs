//! The fake model server over a real socket: its JSON and streamed answers carry the usage
//! the request implies, read by the policy crate's reader as the gateway will read it; a
//! cut stream ends before its usage, and a malformed usage reads as none.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::Response;
use hyper_util::rt::TokioIo;
use ratewarden_policy::usage::{EventStream, UsagePath};
use serde_json::{json, Value};

async fn start() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(ratewarden_fake_openai::serve(listener));
    addr
}

async fn post(addr: SocketAddr, body: Value, headers: &[(&str, &str)]) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::post("/v1/chat/completions")
        .header("host", "fake")
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

fn chat(stream: bool, max_tokens: u64) -> Value {
    json!({
        "model": "fake",
        // 40 bytes of content: 10 prompt tokens.
        "messages": [{"role": "system", "content": "0123456789abcdef"},
                     {"role": "user", "content": "0123456789abcdefghijklmn"}],
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

fn total() -> UsagePath {
    "usage.total_tokens".parse().unwrap()
}

/// The stream's body fed to the reader frame by frame; whether it ended cleanly.
async fn read_stream(response: Response<Incoming>) -> (EventStream, bool) {
    let mut events = EventStream::new(total());
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    events.feed(data);
                }
            }
            Err(_) => return (events, false),
        }
    }
    (events, true)
}

#[tokio::test]
async fn a_json_answer_carries_the_usage_the_request_implies() {
    let addr = start().await;
    let response = post(addr, chat(false, 30), &[]).await;
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(total().read_json(&body), Some(40));
    let sum: UsagePath = "usage.prompt_tokens + usage.completion_tokens"
        .parse()
        .unwrap();
    assert_eq!(sum.read_json(&body), Some(40));
    let picked = post(addr, chat(false, 30), &[("x-fake-completion-tokens", "5")]).await;
    let body = picked.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(total().read_json(&body), Some(15));
}

#[tokio::test]
async fn a_stream_ends_with_its_usage_read_exactly() {
    let addr = start().await;
    for completion in [0u64, 1, 7, 200] {
        let response = post(addr, chat(true, completion), &[]).await;
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let (events, clean) = read_stream(response).await;
        assert!(clean);
        assert_eq!(
            events.usage(),
            Some(10 + completion),
            "{completion} completion tokens"
        );
        assert_eq!(events.unreadable(), 0);
    }
}

#[tokio::test]
async fn a_cut_stream_ends_early_without_its_usage() {
    let addr = start().await;
    let response = post(addr, chat(true, 50), &[("x-fake-cut-after", "20")]).await;
    let (events, clean) = read_stream(response).await;
    assert!(!clean, "a cut stream's body fails");
    assert_eq!(events.usage(), None);
}

#[tokio::test]
async fn a_missing_or_malformed_usage_reads_as_none() {
    let addr = start().await;
    let missing = post(addr, chat(true, 3), &[("x-fake-usage", "none")]).await;
    let (events, clean) = read_stream(missing).await;
    assert!(clean);
    assert_eq!((events.usage(), events.unreadable()), (None, 0));
    let malformed = post(addr, chat(true, 3), &[("x-fake-usage", "malformed")]).await;
    let (events, _) = read_stream(malformed).await;
    assert_eq!((events.usage(), events.unreadable()), (None, 1));
    let json = post(addr, chat(false, 3), &[("x-fake-usage", "malformed")]).await;
    let body = json.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(total().read_json(&body), None);
}

#[tokio::test]
async fn a_request_that_is_not_a_chat_completion_is_a_400_that_says_why() {
    let addr = start().await;
    let response = post(addr, json!({"model": "fake"}), &[]).await;
    assert_eq!(response.status(), 400);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["message"], "`messages` must be an array");
}
