//! The fake OpenAI-compatible model (`ratewarden-fake-openai`) on a port of its own, and a
//! gateway in front of it.

use std::net::SocketAddr;
use std::sync::Arc;

use ratewarden_core::Clock;
use ratewarden_server::serve::Running;

/// The fake model, on a port of its own.
pub async fn fake_openai() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(ratewarden_fake_openai::serve(listener));
    addr
}

/// A gateway with `rules` on `clock` in front of a fake model of its own, on the in-memory
/// store, without an admin listener.
pub async fn gateway(rules: &str, clock: Arc<dyn Clock>) -> Running {
    let upstream = fake_openai().await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\n{rules}"
    );
    super::start_on(&toml, clock).await
}

/// A rule named `tokens`: per project key (`authorization`), a fixed window of `limit`
/// per `window`, each request charged the estimate its client sends
/// (`x-estimated-tokens`) and settled with the answer's `usage.total_tokens`.
pub fn tokens(limit: u64, window: &str) -> String {
    format!(
        r#"
[[limit]]
name = "tokens"
match = {{ path = "/v1/chat/*" }}
key = ["header:authorization"]
algorithm = "fixed-window"
limit = {limit}
window = "{window}"
cost = "header:x-estimated-tokens"
max_cost = 100000
settle_from = "usage.total_tokens"
"#
    )
}

/// A rule named `requests`: `limit` requests per `window` per project key, also sent as
/// OpenAI's `x-ratelimit-*-requests`.
pub fn requests(limit: u64, window: &str) -> String {
    format!(
        r#"
[[limit]]
name = "requests"
match = {{ path = "/v1/chat/*" }}
key = ["header:authorization"]
algorithm = "fixed-window"
limit = {limit}
window = "{window}"
openai_headers = "requests"
"#
    )
}
