//! Overload must not switch limiting off: three `ratewarden serve` processes on one Redis,
//! one hot key, driven as hard as this machine allows. A process saturated by its own load
//! misses Redis deadlines although Redis answered in time; that must neither open the
//! breaker on a healthy Redis nor, when a rule fails open, admit without limit.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use common::fleet::Fleet;

#[path = "../common/mod.rs"]
mod common;

/// The hot key's rule: 20 a second, a burst of 20.
const RATE: u64 = 20;
const BURST: u64 = 20;

/// Three servers on `url`, with `store_extra` in their `[store]` (nothing: the defaults).
async fn fleet(name: &str, url: &str, store_extra: &str) -> Fleet {
    common::fleet::start(name, |listen, admin| {
        format!(
            r#"
[server]
listen = "127.0.0.1:{listen}"
admin = "127.0.0.1:{admin}"

[store]
kind = "redis"
url = "{url}"
{store_extra}

[[limit]]
name = "hot"
key = ["api_key"]
algorithm = "gcra"
rate = "{RATE}/s"
burst = {BURST}
"#
        )
    })
    .await
}

/// Drives the hot key through every server from `callers` loops each for `span`; answers
/// how many requests were admitted and how long the drive took.
async fn drive(fleet: &Fleet, callers: usize, span: Duration) -> (u64, u64, Duration) {
    let driven = common::fleet::drive(fleet, callers, span, br#"{"api_key": "hot"}"#).await;
    (driven.total(), driven.answered, driven.elapsed)
}

/// The fleet's `/metrics` lines about store failures, to say why a run admitted too much.
async fn failures(fleet: &Fleet) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut out = String::new();
    for admin in &fleet.admin {
        let request = Request::get(format!("http://{admin}/metrics"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let Ok(response) = client.request(request).await else {
            continue;
        };
        let body = response.into_body().collect().await.unwrap().to_bytes();
        for line in String::from_utf8_lossy(&body).lines() {
            if !line.starts_with('#')
                && (line.contains("fail") || line.contains("breaker") || line.contains("shed"))
            {
                out.push_str(&format!("\n  {admin}: {line}"));
            }
        }
    }
    out
}

/// What one limiter admits over `elapsed`: the burst, the rate, one for the edge.
fn bound(elapsed: Duration) -> u64 {
    BURST + (elapsed.as_nanos() * u128::from(RATE)).div_ceil(1_000_000_000) as u64 + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_fleet_at_default_settings_admits_at_most_three_limiters_worth() {
    let redis = ratewarden_redis::testing::Server::start();
    let fleet = fleet("overload-default", &redis.url(), "").await;
    let (admitted, answered, elapsed) = drive(&fleet, 192, Duration::from_secs(4)).await;
    let one = bound(elapsed);
    // Hard enough that a fleet that did not limit at all would fail the bound below.
    assert!(answered > 3 * one, "the drive was hard: {answered} answers");
    eprintln!("admitted {admitted} of {answered} in {elapsed:?}; one limiter allows {one}");
    assert!(
        admitted <= 3 * one,
        "admitted {admitted} of {answered} in {elapsed:?}; three limiters allow {}{}",
        3 * one,
        failures(&fleet).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_fleet_with_a_generous_deadline_stays_exact() {
    let redis = ratewarden_redis::testing::Server::start();
    let fleet = fleet("overload-generous", &redis.url(), r#"deadline = "5s""#).await;
    let (admitted, answered, elapsed) = drive(&fleet, 192, Duration::from_secs(4)).await;
    let one = bound(elapsed);
    // Hard enough that a fleet that did not limit at all would fail the bound below.
    assert!(answered > 3 * one, "the drive was hard: {answered} answers");
    eprintln!("admitted {admitted} of {answered} in {elapsed:?}; one limiter allows {one}");
    assert!(
        admitted <= one,
        "admitted {admitted} of {answered} in {elapsed:?}; one limiter allows {one}{}",
        failures(&fleet).await
    );
    // And it still admits: refusing everything would pass the bound above.
    assert!(
        admitted >= one * 3 / 4,
        "admitted {admitted} of {answered} in {elapsed:?}; one limiter allows {one}"
    );
}
