//! The overload scenarios of issue 14 on real sockets: an upstream of `WORKERS` workers,
//! each request holding one for `SERVICE`, the rest queueing in front of them (so latency
//! grows with the queue, as a real server's does), offered 1.4× then 3× its capacity, then
//! back. With an adaptive rule, goodput stays near capacity and p99 near the unloaded p99;
//! without, the upstream's queue and latency grow for as long as the overload lasts.
//!
//! Margins are for a noisy 2-core machine shared with other builds; the figures are
//! printed (`--nocapture`) for the record.

#[path = "../common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::workers::Workers;
use http::Request;
use http_body_util::Full;
use ratewarden_core::RealClock;
use tokio::time::Instant;

const WORKERS: usize = 8;
/// Long beside the machine's own noise (a 2-core machine shared with builds adds tens of
/// milliseconds now and then), and at 80 a second the load generator, the gateway and the
/// upstream together stay well within one core even at 3×.
const SERVICE: Duration = Duration::from_millis(100);
/// Requests a second the upstream can serve.
const CAPACITY: f64 = WORKERS as f64 / 0.100;

/// The upstream: `WORKERS` workers, each request served in `SERVICE`.
async fn upstream() -> Workers {
    Workers::start(WORKERS, |_| SERVICE).await
}

/// One request's fate.
#[derive(Debug, Clone, Copy)]
struct Done {
    phase: usize,
    /// Since its phase began.
    at: Duration,
    latency: Duration,
    status: u16,
    critical: bool,
    sheddable: bool,
}

/// A phase of the scenario: `load` times capacity for `length`.
struct Phase {
    load: f64,
    length: Duration,
}

/// Offers the phases open-loop (arrivals do not wait for answers, as real users do not),
/// every `critical_every`-th request marked critical and every other one sheddable when
/// asked; returns every request's fate and the upstream's queue at each phase's end.
async fn offer(
    gateway: SocketAddr,
    up: &Workers,
    phases: &[Phase],
    classes: bool,
) -> (Vec<Done>, Vec<usize>) {
    let client = common::client();
    let done = Arc::new(Mutex::new(Vec::new()));
    let mut queues = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    let seq = AtomicU64::new(0);
    for (phase, p) in phases.iter().enumerate() {
        let start = Instant::now();
        let gap = Duration::from_secs_f64(1.0 / (p.load * CAPACITY));
        let mut next = start;
        while next < start + p.length {
            tokio::time::sleep_until(next).await;
            next += gap;
            let n = seq.fetch_add(1, Ordering::Relaxed);
            // Critical requests spaced out (one in 40): at most one in flight at a time.
            let critical = classes && n % 40 == 0;
            let sheddable = classes && !critical && n % 2 == 1;
            let mut request = Request::get(format!("http://{gateway}/work"));
            if critical {
                request = request.header("x-criticality", "critical");
            } else if sheddable {
                request = request.header("x-criticality", "sheddable");
            }
            let request = request.body(Full::new(Bytes::new())).unwrap();
            let (client, done) = (client.clone(), Arc::clone(&done));
            tasks.spawn(async move {
                let sent = Instant::now();
                let status = common::status_of(&client, request).await;
                done.lock().unwrap().push(Done {
                    phase,
                    at: sent - start,
                    latency: sent.elapsed(),
                    status,
                    critical,
                    sheddable,
                });
            });
        }
        queues.push(up.queued.load(Ordering::SeqCst));
    }
    // What is still queued at the end is not waited for: without the rule it could take
    // many seconds, and the figures are taken from what completed in each phase.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !tasks.is_empty() && Instant::now() < deadline {
        let _ = tokio::time::timeout_at(deadline, tasks.join_next()).await;
    }
    tasks.abort_all();
    let done = done.lock().unwrap().clone();
    (done, queues)
}

/// The `q` quantile of the latencies of successes in `phase` sent after `from`.
fn quantile(done: &[Done], phase: usize, from: Duration, q: f64) -> Duration {
    let mut l: Vec<Duration> = done
        .iter()
        .filter(|d| d.phase == phase && d.at >= from && d.status == 200)
        .map(|d| d.latency)
        .collect();
    l.sort();
    if l.is_empty() {
        return Duration::MAX;
    }
    l[((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1]
}

/// Successes a second in `phase`, over requests sent from `from` to `to`.
fn goodput(done: &[Done], phase: usize, from: Duration, to: Duration) -> f64 {
    let ok = done
        .iter()
        .filter(|d| d.phase == phase && d.at >= from && d.at < to && d.status == 200)
        .count();
    ok as f64 / (to - from).as_secs_f64()
}

/// The learnt limit over time, read from `/metrics` every 100 ms.
static LIMITS: Mutex<Vec<(Duration, u64)>> = Mutex::new(Vec::new());

async fn watch_limit(admin: SocketAddr) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let metrics = common::get(admin, "/metrics", &[]).await.body;
        let limit = metrics
            .lines()
            .find(|l| l.starts_with("ratewarden_adaptive_limit{"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok());
        if let Some(limit) = limit {
            LIMITS.lock().unwrap().push((start.elapsed(), limit));
        }
    }
}

fn config(upstream: SocketAddr, rule: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
upstream_response_timeout = "10s"
trusted_proxies = ["127.0.0.1/32"]
{rule}
"#
    )
}

const GRADIENT2: &str = r#"
[[limit]]
name = "upstream"
key = ["global"]
algorithm = "adaptive-concurrency"
strategy = "gradient2"

[limit.adaptive]
initial = 10
min = 2
max = 100
tolerance = 1.2
queue_size = 2
window = "100ms"
reserve = 0.2
"#;

fn phases(unloaded: Duration, over: Duration, back: Duration) -> Vec<Phase> {
    [(0.5, unloaded), (1.4, over), (3.0, over), (0.5, back)]
        .into_iter()
        .map(|(load, length)| Phase { load, length })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rule_goodput_and_p99_hold_through_an_overload_and_without_they_do_not() {
    let up = upstream().await;
    let server = common::start_on(&config(up.addr, GRADIENT2), Arc::new(RealClock::new())).await;
    let over = Duration::from_millis(2500);
    let secs = Duration::from_secs;
    let watch = tokio::spawn(watch_limit(server.admin.unwrap()));
    let (done, queues) = offer(server.listen, &up, &phases(secs(2), over, secs(1)), false).await;
    watch.abort();
    let limits = LIMITS.lock().unwrap().clone();
    let unloaded = quantile(&done, 0, Duration::from_millis(500), 0.99);
    // The limit settles within a second of each step; the figures are taken after it.
    let settle = Duration::from_millis(1000);
    let capacity = up.capacity();
    println!("the upstream's capacity, measured: {capacity:.1}/s (nominal {CAPACITY:.0}/s)");
    let mut figures = Vec::new();
    for phase in [1, 2] {
        let p99 = quantile(&done, phase, settle, 0.99);
        let p50 = quantile(&done, phase, settle, 0.5);
        let good = goodput(&done, phase, settle, over);
        let shed = done
            .iter()
            .filter(|d| d.phase == phase && d.status == 503)
            .count();
        println!(
            "with gradient2, phase {phase}: goodput {good:.0}/s = {:.2} of capacity; p50 {p50:?}, p99 {p99:?} = {:.2}x unloaded p99 {unloaded:?}; {shed} shed; upstream queue at the end {}",
            good / capacity,
            p99.as_secs_f64() / unloaded.as_secs_f64(),
            queues[phase],
        );
        figures.push((phase, good, p99));
    }
    // How long after each step the limit stays within a third of where it ends the step.
    let step = |from: Duration, to: Duration| {
        let during: Vec<(Duration, u64)> = limits
            .iter()
            .copied()
            .filter(|(t, _)| *t >= from && *t < to)
            .collect();
        let mut tail: Vec<u64> = during
            .iter()
            .filter(|(t, _)| *t + secs(1) >= to)
            .map(|(_, l)| *l)
            .collect();
        tail.sort();
        let settled = *tail.get(tail.len() / 2)? as f64;
        let off = |l: u64| (l as f64 - settled).abs() > settled / 3.0;
        let last_off = during.iter().rev().find(|(_, l)| off(*l)).map(|(t, _)| *t);
        Some((
            settled,
            last_off.map_or(Duration::ZERO, |t| t + Duration::from_millis(100) - from),
        ))
    };
    let starts = [
        secs(2),
        secs(2) + over,
        secs(2) + 2 * over,
        secs(3) + 2 * over,
    ];
    let mut settles = Vec::new();
    for i in 0..3 {
        if let Some((limit, took)) = step(starts[i], starts[i + 1]) {
            println!(
                "step {}: the limit settled at {limit:.0} within {took:?}",
                i + 1
            );
            settles.push(took);
        }
    }
    // Back to half the capacity: nothing is shed once the overload has drained.
    let back: Vec<&Done> = done
        .iter()
        .filter(|d| d.phase == 3 && d.at >= Duration::from_millis(500))
        .collect();
    let refused = back.iter().filter(|d| d.status != 200).count();
    println!("back at 0.5x: {refused} of {} not served", back.len());
    server.shutdown();
    drop(up);

    // Without the rule: the upstream's queue grows for as long as the overload lasts.
    let up = upstream().await;
    let server = common::start_on(&config(up.addr, ""), Arc::new(RealClock::new())).await;
    let (without, queues) = offer(
        server.listen,
        &up,
        &phases(secs(1), secs(1), Duration::ZERO),
        false,
    )
    .await;
    let plain = quantile(&without, 0, Duration::ZERO, 0.99);
    let overloaded = quantile(&without, 2, Duration::from_millis(500), 0.99);
    println!(
        "without: unloaded p99 {plain:?}; upstream queue after 1.4x {}, after 3x {}; 3x p99 {overloaded:?} = {:.1}x",
        queues[1],
        queues[2],
        overloaded.as_secs_f64() / plain.as_secs_f64()
    );
    server.shutdown();

    for (phase, good, p99) in figures {
        assert!(
            good >= 0.9 * capacity,
            "phase {phase}: goodput {good:.0}/s of {capacity:.1}/s"
        );
        assert!(
            p99 <= unloaded * 2,
            "phase {phase}: p99 {p99:?} vs {unloaded:?}"
        );
    }
    assert_eq!(refused, 0);
    assert!(
        settles.len() == 3 && settles.iter().all(|t| *t <= secs(2)),
        "{settles:?}"
    );
    assert!(queues[1] >= 10, "queue after 1.4x: {}", queues[1]);
    assert!(
        queues[2] > 3 * queues[1],
        "the queue kept growing: {queues:?}"
    );
    assert!(overloaded > plain * 4, "{overloaded:?} vs {plain:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_3x_critical_requests_all_succeed_and_sheddable_ones_go_first() {
    let up = upstream().await;
    let server = common::start_on(&config(up.addr, GRADIENT2), Arc::new(RealClock::new())).await;
    let phases = [
        Phase {
            load: 0.5,
            length: Duration::from_millis(1500),
        },
        Phase {
            load: 3.0,
            length: Duration::from_millis(2500),
        },
    ];
    let (done, _) = offer(server.listen, &up, &phases, true).await;
    let overload: Vec<&Done> = done.iter().filter(|d| d.phase == 1).collect();
    let rate = |pick: &dyn Fn(&Done) -> bool| {
        let of: Vec<&&Done> = overload.iter().filter(|d| pick(d)).collect();
        let ok = of.iter().filter(|d| d.status == 200).count();
        (ok, of.len())
    };
    let critical = rate(&|d| d.critical);
    let default = rate(&|d| !d.critical && !d.sheddable);
    let sheddable = rate(&|d| d.sheddable);
    println!("at 3x, served: critical {critical:?}, default {default:?}, sheddable {sheddable:?}");
    assert_eq!(critical.0, critical.1, "every critical request is served");
    let share = |(ok, of): (usize, usize)| ok as f64 / of as f64;
    assert!(
        share(sheddable) < share(default),
        "sheddable requests are shed first"
    );
    server.shutdown();
}
