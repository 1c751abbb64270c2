//! OpenAI's own Python SDK (`openai`, which the project did not write) against the gateway
//! in front of the fake OpenAI-compatible model, over real sockets: it reads a JSON answer
//! and a streamed one with their `usage`, OpenAI's `x-ratelimit-*` fields on both and on a
//! 429 (the reset durations parsed by `durationpy`, a parser of Go's duration format), and
//! honours `Retry-After`: with one retry allowed, it waits the 2 s the gateway said rather
//! than its own backoff of under half a second, and the retry is admitted.
//!
//! `scripts/test` installs `openai` and `durationpy` when they are missing.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use ratewarden_core::{ManualClock, RealClock};
use serde_json::Value;

/// 20 s into its minute and 800 s into its hour.
const T0: u64 = 1_700_000_000_000_000_000;

/// Two requests a minute and 5,000 tokens an hour per key, both in OpenAI's fields.
fn exact() -> String {
    format!(
        "{}{}openai_headers = \"tokens\"\n",
        common::llm::requests(2, "1m"),
        common::llm::tokens(5000, "1h")
    )
}

/// One request every 2 s per key, on the real clock.
const PACED: &str = r#"
[[limit]]
name = "requests"
key = ["header:authorization"]
algorithm = "gcra"
rate = "1/2s"
burst = 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openais_python_sdk_reads_the_answers_the_fields_and_waits_out_retry_after() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import openai, durationpy"])
        .status();
    assert!(
        have.is_ok_and(|s| s.success()),
        "this test needs python3 with `openai` and `durationpy`: scripts/test installs them \
         (python3 -m pip install openai durationpy)"
    );
    let exact = common::llm::gateway(&exact(), Arc::new(ManualClock::new(T0))).await;
    let paced = common::llm::gateway(PACED, Arc::new(RealClock::new())).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/client/openai_sdk.py");
    let (a, b) = (
        format!("http://{}", exact.listen),
        format!("http://{}", paced.listen),
    );
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &a, &b])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "the SDK failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    // The first answer: 1 prompt token + 99, charged 300 and settled at 100 after the
    // fields were sent, so they show the estimate.
    let json = &got["json"];
    assert_eq!(json["usage"], 100);
    assert_eq!(
        (
            json["limit_requests"].as_u64(),
            json["remaining_requests"].as_u64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(json["reset_requests_s"].as_f64(), Some(40.0));
    assert_eq!(
        (
            json["limit_tokens"].as_u64(),
            json["remaining_tokens"].as_u64()
        ),
        (Some(5000), Some(4700))
    );
    assert_eq!(json["reset_tokens_s"].as_f64(), Some(2800.0), "46m40s");
    // The stream: its usage in the last chunk; the first answer settled at 100 before it.
    let stream = &got["stream"];
    assert_eq!(stream["usage"], 100);
    assert!(stream["chunks"].as_u64() > Some(1), "{stream}");
    assert_eq!(stream["remaining_requests"], 0);
    assert_eq!(stream["remaining_tokens"], 5000 - 100 - 300);
    // The third request is over the requests rule: a 429 the SDK raises as RateLimitError.
    let refused = &got["refused"];
    assert_eq!(refused["status"], 429, "{got}");
    assert_eq!(refused["retry_after"], "40");
    assert_eq!(refused["remaining_requests"], 0);
    assert_eq!(refused["reset_requests_s"].as_f64(), Some(40.0));
    assert_eq!(refused["limit_tokens"], 5000);
    // Waited what Retry-After said (2 s), not its own backoff; the retry got through.
    let waited = got["retried_after_s"].as_f64().unwrap();
    assert!((1.9..6.0).contains(&waited), "waited {waited} s");
    exact.shutdown();
    paced.shutdown();
}
