//! An OpenAI-compatible chat completions server that answers without a model: for the
//! LLM tests and the docs' walk-through, so that neither needs a real model or a network.
//!
//! `POST /v1/chat/completions` answers as OpenAI's API does, in JSON or (with
//! `"stream": true`) as a `text/event-stream` of chunks, with a `usage` object whose
//! numbers follow from the request alone:
//!
//! - `prompt_tokens`: the bytes of every message's `content`, one token per 4 bytes
//!   rounded up (a rough tokenizer, but a fixed one);
//! - `completion_tokens`: `max_completion_tokens`, else `max_tokens`, else 16; the
//!   `x-fake-completion-tokens` header overrides it (a test picks the exact usage);
//! - `total_tokens`: their sum.
//!
//! A stream carries `usage` in its last chunk when `stream_options.include_usage` is true
//! (as OpenAI's does: `null` in every other chunk), then `data: [DONE]`. Headers a test
//! sets to make the answer misbehave: `x-fake-usage: none` (no usage at all),
//! `x-fake-usage: malformed` (`total_tokens` as a string), `x-fake-cut-after: N` (the
//! stream's connection is closed after N content chunks, before its usage),
//! `x-fake-together: N` (a stream's first chunk waits until N such streams have begun, or
//! ten seconds, so a test holds N streams in flight at once). `GET
//! /v1/models` lists the one model, `fake`; anything else is a 404.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! ratewarden_fake_openai::serve(listener).await;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The completion length when the request names none.
pub const DEFAULT_COMPLETION_TOKENS: u64 = 16;

/// The largest request body read.
const MAX_BODY: usize = 1 << 20;

/// What a request asks of the fake model, read from its body and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The `model` named (`fake` when none).
    pub model: String,
    /// Whether the answer streams.
    pub stream: bool,
    /// Whether a stream ends with a usage chunk.
    pub include_usage: bool,
    /// The prompt's tokens: one per 4 bytes of message content, rounded up.
    pub prompt_tokens: u64,
    /// The completion's tokens.
    pub completion_tokens: u64,
    /// What the answer's usage looks like.
    pub usage: UsageShape,
    /// For a stream: close the connection after this many content chunks.
    pub cut_after: Option<u64>,
    /// For a stream: wait to begin until this many such streams have.
    pub together: Option<usize>,
}

/// How an answer reports its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageShape {
    /// As OpenAI does.
    Correct,
    /// Not at all.
    Missing,
    /// `total_tokens` as a string.
    Malformed,
}

impl Asked {
    /// What `body` and `headers` ask; `Err` with a message when the body is not a chat
    /// completion request.
    pub fn read(body: &[u8], header: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let request: Value =
            serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .ok_or("`messages` must be an array")?;
        let bytes: u64 = messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_str))
            .map(|c| c.len() as u64)
            .sum();
        let named = request
            .get("max_completion_tokens")
            .or_else(|| request.get("max_tokens"))
            .and_then(Value::as_u64);
        let completion_tokens = match header("x-fake-completion-tokens") {
            Some(n) => n
                .trim()
                .parse()
                .map_err(|_| format!("x-fake-completion-tokens: `{n}` is not a whole number"))?,
            None => named.unwrap_or(DEFAULT_COMPLETION_TOKENS),
        };
        let usage = match header("x-fake-usage").as_deref() {
            None => UsageShape::Correct,
            Some("none") => UsageShape::Missing,
            Some("malformed") => UsageShape::Malformed,
            Some(other) => return Err(format!("x-fake-usage: `{other}` is not none or malformed")),
        };
        let cut_after = match header("x-fake-cut-after") {
            Some(n) => Some(
                n.trim()
                    .parse()
                    .map_err(|_| format!("x-fake-cut-after: `{n}` is not a whole number"))?,
            ),
            None => None,
        };
        let together = match header("x-fake-together") {
            Some(n) => match n.trim().parse() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(format!("x-fake-together: `{n}` is not a count above 0")),
            },
            None => None,
        };
        Ok(Asked {
            together,
            model: request
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("fake")
                .to_owned(),
            stream: request.get("stream").and_then(Value::as_bool) == Some(true),
            include_usage: request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true),
            prompt_tokens: bytes.div_ceil(4),
            completion_tokens,
            usage,
            cut_after,
        })
    }

    /// The answer's `usage` object, as its shape says.
    pub fn usage(&self) -> Option<Value> {
        let total = self.prompt_tokens + self.completion_tokens;
        match self.usage {
            UsageShape::Correct => Some(json!({
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": total,
            })),
            UsageShape::Missing => None,
            UsageShape::Malformed => Some(json!({
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": total.to_string(),
            })),
        }
    }

    /// The whole JSON answer.
    pub fn completion(&self) -> Value {
        let mut answer = json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content(self.completion_tokens)},
                "finish_reason": "length",
            }],
        });
        if let Some(usage) = self.usage() {
            answer["usage"] = usage;
        }
        answer
    }

    /// The stream's events, each a `data:` line and a blank line, up to its cut.
    pub fn events(&self) -> Vec<String> {
        let mut events = Vec::new();
        let usage_field = if self.include_usage {
            Value::Null
        } else {
            Value::Bool(false)
        };
        let chunk = |choices: Value, usage: &Value| {
            let mut chunk = json!({
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": self.model,
                "choices": choices,
            });
            // OpenAI sends `"usage": null` in every chunk once usage was asked for.
            if !usage.is_boolean() {
                chunk["usage"] = usage.clone();
            }
            format!("data: {chunk}\n\n")
        };
        for n in 0..self.completion_tokens {
            if self.cut_after == Some(n) {
                return events;
            }
            let delta = json!([{"index": 0, "delta": {"content": "tok "}, "finish_reason": null}]);
            events.push(chunk(delta, &usage_field));
        }
        if self.cut_after.is_some_and(|c| c <= self.completion_tokens) {
            return events;
        }
        let done = json!([{"index": 0, "delta": {}, "finish_reason": "length"}]);
        events.push(chunk(done, &usage_field));
        if self.include_usage {
            if let Some(usage) = self.usage() {
                events.push(chunk(json!([]), &usage));
            }
        }
        events.push("data: [DONE]\n\n".to_owned());
        events
    }
}

/// `n` tokens of content.
fn content(n: u64) -> String {
    "tok ".repeat(usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20))
}

type Body = http_body_util::combinators::BoxBody<Bytes, io::Error>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let body = Full::new(body.into()).map_err(|never: Infallible| match never {});
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(body.boxed())
        .expect("a valid response")
}

/// A stream's body: its events as they are sent, then its end, or for a cut stream an
/// error, on which hyper closes the connection without the body's last chunk (as a model
/// server that crashed mid-answer would).
struct Events {
    receiver: mpsc::Receiver<Bytes>,
    cut: bool,
}

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.receiver.poll_recv(cx) {
            Poll::Ready(Some(event)) => Poll::Ready(Some(Ok(Frame::data(event)))),
            Poll::Ready(None) if self.cut => {
                Poll::Ready(Some(Err(io::Error::other("the stream was cut"))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    full(status, "application/json", body.to_string())
}

/// How long a stream waits for the others of its `x-fake-together` group.
const TOGETHER_AT_MOST: std::time::Duration = std::time::Duration::from_secs(10);

/// What one server's answers share: the `x-fake-together` groups, by size.
#[derive(Default)]
struct Shared {
    groups: std::sync::Mutex<std::collections::HashMap<usize, Arc<tokio::sync::Barrier>>>,
}

impl Shared {
    fn group(&self, n: usize) -> Arc<tokio::sync::Barrier> {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            groups
                .entry(n)
                .or_insert_with(|| Arc::new(tokio::sync::Barrier::new(n))),
        )
    }
}

/// Answers one request.
async fn answer(request: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    match (parts.method.as_str(), parts.uri.path()) {
        ("GET", "/v1/models") => {
            let models = json!({"object": "list", "data": [{"id": "fake", "object": "model"}]});
            return full(StatusCode::OK, "application/json", models.to_string());
        }
        ("POST", "/v1/chat/completions") => {}
        _ => return error(StatusCode::NOT_FOUND, "no such endpoint"),
    }
    let Ok(body) = http_body_util::Limited::new(body, MAX_BODY).collect().await else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large");
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let asked = match Asked::read(&body.to_bytes(), header) {
        Ok(asked) => asked,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    if !asked.stream {
        let body = asked.completion().to_string();
        return full(StatusCode::OK, "application/json", body);
    }
    // Each event its own frame, sent as the client takes them.
    let (sender, receiver) = mpsc::channel::<Bytes>(4);
    let cut = asked
        .cut_after
        .is_some_and(|c| c <= asked.completion_tokens);
    let events = asked.events();
    let together = asked.together.map(|n| shared.group(n));
    tokio::spawn(async move {
        if let Some(group) = together {
            let _ = tokio::time::timeout(TOGETHER_AT_MOST, group.wait()).await;
        }
        for event in events {
            if sender.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(Events { receiver, cut }))
        .expect("a valid response")
}

/// Serves `listener` over HTTP/1.1 until the task is dropped, every connection on a task
/// of its own.
pub async fn serve(listener: TcpListener) {
    let shared = Arc::new(Shared::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|r| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(answer(r, shared).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
