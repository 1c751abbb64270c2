//! A client that paces its token spend against an LLM API, end to end on this machine: the
//! fake OpenAI-compatible model (`ratewarden-fake-openai`), `ratewarden serve` as the gateway
//! in front of it with 1,000 tokens per 10 s per key (charged the caller's estimate, settled
//! from the answer's `usage`, reported in OpenAI's `x-ratelimit-*` fields), and a caller
//! that knows each prompt's size and asks `ratewarden-client`'s `Pacer` how long to wait for
//! that many tokens before it sends. It reads OpenAI's fields alone, as it would from OpenAI.
//!
//! ```text
//! cargo run -p ratewarden-server --example llm_client
//! ```
//!
//! prints each call's wait and what the answer said is left: four calls fill a window, the
//! fifth waits for the next one, and none is refused. `--unpaced` sends the same calls as
//! fast as they go, to see the refusals the pacing avoids.

use std::sync::Arc;
use std::time::Duration;

use ratewarden_client::{quotas, retry_after, Pacer};
use ratewarden_core::{Clock, RealClock};
use ratewarden_server::serve::{self, Options};
use serde_json::json;

/// Each call's prompt: 400 bytes, 100 tokens to the fake model; and its completion.
const PROMPT_BYTES: usize = 400;
const COMPLETION: u64 = 150;
const CALL_TOKENS: u64 = 100 + COMPLETION;

const RULES: &str = r#"
[[limit]]
name = "tokens"
match = { path = "/v1/chat/*" }
key = ["header:authorization"]
algorithm = "fixed-window"
limit = 1000
window = "10s"
cost = "header:x-estimated-tokens"
max_cost = 100000
settle_from = "usage.total_tokens"
openai_headers = "tokens"
"#;

#[tokio::main]
async fn main() {
    let unpaced = std::env::args().any(|a| a == "--unpaced");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port for the model");
    let model = listener.local_addr().expect("its address");
    tokio::spawn(ratewarden_fake_openai::serve(listener));
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{model}\"\n{RULES}"
    );
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let gateway = serve::start(Options {
        config: ratewarden_policy::config::parse("llm.toml", &toml).expect("a valid config"),
        config_path: None,
        clock: Arc::clone(&clock),
        workers: 1,
        envoy: Default::default(),
        envoy_path: None,
    })
    .await
    .expect("the gateway starts");
    let origin = format!("http://{}", gateway.listen);
    println!("model at {model}, gateway at {origin}: 1,000 tokens per 10 s, {CALL_TOKENS} a call");
    println!(
        "{:>4}  {:>8}  {:>6}  {:>16}",
        "call", "waited", "status", "tokens left"
    );
    let http = reqwest::Client::new();
    let mut pacer = Pacer::default();
    for i in 1..=12 {
        let wait = if unpaced {
            Duration::ZERO
        } else {
            pacer.reserve_units(&origin, "tokens", CALL_TOKENS, clock.now())
        };
        tokio::time::sleep(wait).await;
        let response = http
            .post(format!("{origin}/v1/chat/completions"))
            .bearer_auth("project-1")
            .header("x-estimated-tokens", CALL_TOKENS.to_string())
            .header("content-type", "application/json")
            .body(
                json!({
                    "model": "fake",
                    "max_tokens": COMPLETION,
                    "messages": [{"role": "user", "content": "x".repeat(PROMPT_BYTES)}],
                })
                .to_string(),
            )
            .send()
            .await
            .expect("an answer");
        let now = clock.now();
        // What OpenAI's own API would send: its fields, and Retry-After on a 429.
        let fields: http::HeaderMap = response
            .headers()
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-ratelimit-") || *name == "retry-after")
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let status = response.status();
        let _ = response.bytes().await;
        let found = quotas(&fields, now).unwrap_or_default();
        let after = fields
            .get("retry-after")
            .and_then(|v| retry_after(v.to_str().ok()?, now).ok());
        pacer.observe(&origin, &found, after, now);
        let left = found
            .iter()
            .find(|q| q.policy.as_deref() == Some("tokens"))
            .map_or("?".to_owned(), |q| {
                format!("{} for {:?}", q.remaining, q.reset)
            });
        println!(
            "{i:>4}  {:>7.1}s  {:>6}  {left:>16}",
            wait.as_secs_f64(),
            status.as_u16()
        );
    }
    gateway.shutdown();
}
