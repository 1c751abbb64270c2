//! `prefetch` end to end: three `ratewarden serve` processes on one real Redis, one global
//! GCRA key offered several times its rate over real sockets. The fleet admits no more than
//! one limiter would, nearly all of what the rate allows, and calls Redis's script about
//! once per allowance, not once per decision (counted by Redis, `INFO commandstats`).

use std::net::SocketAddr;
use std::time::Duration;

use common::fleet::Fleet;

#[path = "../common/mod.rs"]
mod common;

/// An eighth of the issue's 2,000/s, which debug servers on a busy two-core machine cannot
/// be offered several times over; the horizon is eight times as long, so that one server's
/// share of a horizon is the same 33 units.
const RATE: u64 = 250;
const BURST: u64 = 100;

async fn fleet(name: &str, url: &str) -> Fleet {
    common::fleet::start(name, |listen, admin| {
        format!(
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
        )
    })
    .await
}

/// Drives the global key through every server from `callers` loops for `span`: admitted
/// per server, answered, and how long the drive took.
async fn drive(fleet: &Fleet, callers: usize, span: Duration) -> (Vec<u64>, u64, Duration) {
    let driven = common::fleet::drive(fleet, callers, span, b"{}").await;
    (driven.admitted, driven.answered, driven.elapsed)
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
    common::get(admin, "/metrics", &[]).await.body
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
