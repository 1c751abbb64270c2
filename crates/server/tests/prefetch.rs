//! `prefetch` end to end: three `ratewarden serve` processes on one real Redis, one global
//! GCRA key offered several times its rate over real sockets. The fleet admits no more than
//! one limiter would, nearly all of what the rate allows, and calls Redis's script about
//! once per allowance, not once per decision (counted by Redis, `INFO commandstats`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// An eighth of the issue's 2,000/s, which debug servers on a busy two-core machine cannot
/// be offered several times over; the horizon is eight times as long, so that one server's
/// share of a horizon is the same 33 units.
const RATE: u64 = 250;
const BURST: u64 = 100;

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
        if std::env::var_os("RATEWARDEN_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

async fn fleet(name: &str, url: &str) -> Fleet {
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
deadline = "1s"

[[limit]]
name = "global"
key = ["literal:all"]
algorithm = "gcra"
rate = "{RATE}/s"
burst = {BURST}
prefetch = "400ms"
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

/// Drives the global key through every server from `callers` loops for `span`: admitted
/// per server, answered, and how long the drive took.
async fn drive(fleet: &Fleet, callers: usize, span: Duration) -> (Vec<u64>, u64, Duration) {
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let answered = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let server = c % fleet.listen.len();
        let addr = fleet.listen[server];
        let (admitted, answered) = (Arc::clone(&admitted), Arc::clone(&answered));
        tasks.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            while start.elapsed() < span {
                let request = Request::post(format!("http://{addr}/v1/check"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .unwrap();
                let Ok(response) = client.request(request).await else {
                    continue;
                };
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let d: serde_json::Value = serde_json::from_slice(&body).unwrap();
                answered.fetch_add(1, Ordering::Relaxed);
                if d["allowed"] == true {
                    admitted[server].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (
        admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        answered.load(Ordering::Relaxed),
        start.elapsed(),
    )
}

/// `FCALL`s Redis has run so far.
fn script_calls(redis: &ratewarden_redis::testing::Server) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

async fn metrics(admin: SocketAddr) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::get(format!("http://{admin}/metrics"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_prefetching_one_global_key_stay_under_one_limiter_and_rarely_call_redis() {
    let redis = ratewarden_redis::testing::Server::start();
    let fleet = fleet("prefetch", &redis.url()).await;
    let before = script_calls(&redis);
    let (admitted, answered, elapsed) = drive(&fleet, 48, Duration::from_secs(4)).await;
    let calls = script_calls(&redis) - before;
    let total: u64 = admitted.iter().sum();
    let allows = (elapsed.as_nanos() * u128::from(RATE) / 1_000_000_000) as u64;
    eprintln!(
        "admitted {total} {admitted:?} of {answered} in {elapsed:?} with {calls} script calls; \
         the rate allows {allows} (+ a burst of {BURST})"
    );
    assert!(
        answered > 2 * (allows + BURST),
        "the drive was hard: {answered} answers"
    );
    // Never over: every unit admitted was charged in Redis first (+1 for the edge).
    assert!(
        total <= BURST + allows + 1,
        "{total} admitted; one limiter allows {}",
        BURST + allows
    );
    assert!(
        total * 10 >= allows * 9,
        "{total} admitted of the {allows} the rate allows"
    );
    assert!(
        calls * 10 <= total,
        "{calls} script calls for {total} admitted"
    );
    for (i, a) in admitted.iter().enumerate() {
        assert!(a * 6 >= total, "server {i} admitted {a} of {total}");
    }
    let text = metrics(fleet.admin[0]).await;
    for family in [
        "ratewarden_prefetch_fetches_total",
        "ratewarden_prefetch_units_fetched_total",
        "ratewarden_prefetch_units_returned_total",
        "ratewarden_prefetch_decisions_total{decided=\"local\"}",
        "ratewarden_prefetch_decisions_total{decided=\"remote\"}",
    ] {
        assert!(text.contains(family), "{family} missing from {text}");
    }
}
