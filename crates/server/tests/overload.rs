//! Overload must not switch limiting off: three `ratewarden serve` processes on one Redis,
//! one hot key, driven as hard as this machine allows. A process saturated by its own load
//! misses Redis deadlines although Redis answered in time; that must neither open the
//! breaker on a healthy Redis nor, when a rule fails open, admit without limit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The hot key's rule: 20 a second, a burst of 20.
const RATE: u64 = 20;
const BURST: u64 = 20;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Fleet {
    servers: Vec<std::process::Child>,
    listen: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
    dir: std::path::PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        // `RATEWARDEN_KEEP_LOGS=1` keeps the servers' configs and logs, to see why.
        if std::env::var_os("RATEWARDEN_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Three servers on `url`, with `store_extra` in their `[store]` (nothing: the defaults).
async fn fleet(name: &str, url: &str, store_extra: &str) -> Fleet {
    let dir = std::env::temp_dir().join(format!("ratewarden-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut fleet = Fleet {
        servers: Vec::new(),
        listen: Vec::new(),
        admin: Vec::new(),
        dir: dir.clone(),
    };
    for i in 0..3 {
        let (listen, admin) = (free_port(), free_port());
        let config = format!(
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
        );
        let path = dir.join(format!("server{i}.toml"));
        std::fs::write(&path, config).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
            .args(["serve", "--config"])
            .arg(&path)
            .stderr(std::fs::File::create(dir.join(format!("server{i}.log"))).unwrap())
            .spawn()
            .unwrap();
        fleet.servers.push(child);
        fleet.listen.push(([127, 0, 0, 1], listen).into());
        fleet.admin.push(([127, 0, 0, 1], admin).into());
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for admin in fleet.admin.clone() {
        let mut up = false;
        for _ in 0..1000 {
            let request = Request::get(format!("http://{admin}/ready"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            if let Ok(r) = client.request(request).await {
                if r.status() == 200 {
                    up = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(up, "a server did not come up; logs in {}", dir.display());
    }
    fleet
}

/// Drives the hot key through every server from `callers` loops each for `span`; answers
/// how many requests were admitted and how long the drive took.
async fn drive(fleet: &Fleet, callers: usize, span: Duration) -> (u64, u64, Duration) {
    let admitted = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let addr = fleet.listen[c % fleet.listen.len()];
        let (admitted, answered) = (Arc::clone(&admitted), Arc::clone(&answered));
        tasks.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            while start.elapsed() < span {
                let request = Request::post(format!("http://{addr}/v1/check"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(br#"{"api_key": "hot"}"#)))
                    .unwrap();
                let Ok(response) = client.request(request).await else {
                    continue;
                };
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let d: serde_json::Value = serde_json::from_slice(&body).unwrap();
                answered.fetch_add(1, Ordering::Relaxed);
                if d["allowed"] == true {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (
        admitted.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
        start.elapsed(),
    )
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
