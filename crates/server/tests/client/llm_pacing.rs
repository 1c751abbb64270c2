//! The calling side of a token limit, over real sockets: `ratewarden-client`'s [`Pacer`]
//! reading what the gateway answers in front of the fake OpenAI-compatible model, and
//! waiting for tokens (not only for a request's turn) before each call whose prompt it
//! knows. Read from OpenAI's `x-ratelimit-*` fields alone (as OpenAI's own API sends them)
//! and from the IETF `RateLimit` fields, it sends twelve calls into a budget of four per
//! window without one refusal; the same calls unpaced are refused at the fifth.
//!
//! Time stands still (a manual clock the test moves by what the pacer says to wait): no
//! test sleeps for a refill.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use ratewarden_client::{quotas, retry_after, Pacer};
use ratewarden_core::ManualClock;
use serde_json::json;

/// Whole seconds, and the start of a 10 s window.
const T0: u64 = 1_700_000_000_000_000_000;

/// Each call's prompt: 400 bytes, which the fake model counts as 100 tokens.
const PROMPT_BYTES: usize = 400;
/// Each call's completion, as `max_tokens` (the fake model writes exactly that many).
const COMPLETION: u64 = 150;
/// What the caller knows each call will cost, before it sends it.
const CALL_TOKENS: u64 = 100 + COMPLETION;

/// 1,000 tokens per 10 s (four calls), charged the caller's estimate and settled from the
/// answer's usage, beside 100 requests per 10 s; both in OpenAI's fields too.
fn rules() -> String {
    format!(
        "{}{}openai_headers = \"tokens\"\n",
        common::llm::requests(100, "10s"),
        common::llm::tokens(1000, "10s")
    )
}

/// Which of the answer's fields the client is shown.
#[derive(Debug, Clone, Copy)]
enum Fields {
    /// OpenAI's `x-ratelimit-*` alone, as OpenAI's API sends them.
    OpenAi,
    /// Everything the gateway sends (the IETF `RateLimit` fields are read first).
    All,
}

/// One chat completion whose cost the caller states: its status and the fields it is shown.
async fn call(
    server: &ratewarden_server::serve::Running,
    fields: Fields,
) -> (StatusCode, HeaderMap) {
    let body = json!({
        "model": "fake",
        "max_tokens": COMPLETION,
        "messages": [{"role": "user", "content": "x".repeat(PROMPT_BYTES)}],
    });
    let request = Request::post(format!("http://{}/v1/chat/completions", server.listen))
        .header("content-type", "application/json")
        .header("authorization", "Bearer project-1")
        .header("x-estimated-tokens", CALL_TOKENS.to_string())
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let text = body.collect().await.unwrap().to_bytes();
    if parts.status == StatusCode::OK {
        let answer: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            answer["usage"]["total_tokens"], CALL_TOKENS,
            "the estimate is exact"
        );
    }
    let shown = match fields {
        Fields::All => parts.headers,
        Fields::OpenAi => parts
            .headers
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-ratelimit-") || *name == "retry-after")
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    };
    assert!(
        shown.contains_key("x-ratelimit-remaining-tokens"),
        "{shown:?}"
    );
    (parts.status, shown)
}

#[tokio::test]
async fn a_client_that_knows_its_prompt_waits_for_tokens_and_is_never_refused() {
    for fields in [Fields::OpenAi, Fields::All] {
        let clock = Arc::new(ManualClock::new(T0));
        let server = common::llm::gateway(&rules(), clock.clone()).await;
        let origin = format!("http://{}", server.listen);
        let mut pacer = Pacer::default();
        let mut now = T0;
        let mut waits = Vec::new();
        for i in 0..12 {
            let wait = pacer.reserve_units(&origin, "tokens", CALL_TOKENS, now);
            waits.push(wait);
            now += u64::try_from(wait.as_nanos()).unwrap();
            clock.set(now);
            let (status, headers) = call(&server, fields).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "call {i} ({fields:?}), waits {waits:?}"
            );
            let found = quotas(&headers, now).unwrap();
            let tokens = found
                .iter()
                .find(|q| q.policy.as_deref() == Some("tokens"))
                .unwrap_or_else(|| panic!("{found:?}"));
            // Charged at the estimate, settled at the same: what is left is exact.
            assert_eq!(
                tokens.remaining,
                1000 - CALL_TOKENS * (i % 4 + 1),
                "call {i}"
            );
            let after = headers
                .get("retry-after")
                .and_then(|v| retry_after(v.to_str().ok()?, now).ok());
            pacer.observe(&origin, &found, after, now);
        }
        // Four calls fill a window; the fifth and the ninth wait for the next one, exactly.
        let expected: Vec<Duration> = (0..12)
            .map(|i| {
                if i > 0 && i % 4 == 0 {
                    Duration::from_secs(10)
                } else {
                    Duration::ZERO
                }
            })
            .collect();
        assert_eq!(waits, expected, "{fields:?}");
        server.shutdown();
    }
}

#[tokio::test]
async fn the_same_calls_unpaced_are_refused_at_the_fifth() {
    let server = common::llm::gateway(&rules(), Arc::new(ManualClock::new(T0))).await;
    for i in 0..4 {
        assert_eq!(
            call(&server, Fields::OpenAi).await.0,
            StatusCode::OK,
            "call {i}"
        );
    }
    let (status, headers) = call(&server, Fields::OpenAi).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-ratelimit-remaining-tokens"], "0");
    assert_eq!(headers["x-ratelimit-reset-tokens"], "10s");
    assert_eq!(headers["retry-after"], "10");
    server.shutdown();
}
