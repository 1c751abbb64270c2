//! Load for `scripts/bench-prefetch`: `ShouldRateLimit` calls spread over several servers
//! (one HTTP/2 connection each, N concurrent callers per server) on one descriptor value
//! or many, for a time; prints the calls answered, how many were OK, the calls per second
//! and the p50 and p99 latency, as one line of `key=value` pairs.
//!
//! Each caller sends its next call when the last is answered (as fast as the servers go),
//! or with `--rate R` at fixed times, R calls per second in all: a call's latency is then
//! counted from the time it was due when its caller is behind (past the timer's slack), so
//! a server that falls behind is charged the wait it caused, not just the call it finally
//! answers.
//!
//! ```text
//! cargo run --release -p ratewarden-server --example fleet_load -- \
//!     --targets http://127.0.0.1:8081,http://127.0.0.1:8082 --streams 32 --seconds 5 --keys 1
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tokio::sync::Mutex;

/// How late tokio's timer may wake a caller that is not behind: it counts whole
/// milliseconds.
const TIMER_SLACK: Duration = Duration::from_millis(2);

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(targets) = flag(&args, "--targets") else {
        eprintln!("usage: fleet_load --targets URL,URL.. [--streams N] [--seconds S] [--keys K] [--domain D] [--rate R]");
        return ExitCode::from(2);
    };
    let number = |name: &str, default: u64| {
        flag(&args, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let streams = number("--streams", 32) as usize;
    let seconds = number("--seconds", 5);
    let keys = number("--keys", 1).max(1);
    let domain = flag(&args, "--domain").unwrap_or_else(|| "fleet".to_owned());
    let rate = number("--rate", 0);
    let mut clients = Vec::new();
    for target in targets.split(',') {
        match RateLimitServiceClient::connect(target.to_owned()).await {
            Ok(c) => clients.push(c),
            Err(e) => {
                eprintln!("error: cannot connect to {target}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let span = Duration::from_secs(seconds);
    // Every caller's latencies and counts, gathered at the end.
    let results = Arc::new(Mutex::new((Vec::<u32>::new(), 0u64, 0u64)));
    let start = tokio::time::Instant::now();
    let callers = (clients.len() * streams).max(1) as u64;
    // With a rate, each caller's calls are due this far apart, staggered among callers.
    let every = (rate > 0).then(|| Duration::from_nanos(1_000_000_000 * callers / rate));
    let mut tasks = Vec::new();
    for (t, client) in clients.iter().enumerate() {
        for s in 0..streams {
            let mut client = client.clone();
            let (domain, results) = (domain.clone(), Arc::clone(&results));
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let (mut ok, mut answered) = (0u64, 0u64);
                let mut n = (t * 7919 + s * 104_729) as u64;
                let caller = (t * streams + s) as u32;
                let mut due = every.map(|e| start + e * caller / callers as u32);
                while start.elapsed() < span {
                    n = n.wrapping_add(1);
                    let request = RateLimitRequest {
                        domain: domain.clone(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "k".to_owned(),
                                value: format!("k{}", n % keys),
                            }],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 0,
                    };
                    let began = match (due.as_mut(), every) {
                        (Some(due), Some(every)) => {
                            tokio::time::sleep_until(*due).await;
                            let woke = tokio::time::Instant::now();
                            // Counted from when it was due if this caller is behind; from
                            // when it woke if only the timer (whole milliseconds) was late.
                            let began = if woke.duration_since(*due) > TIMER_SLACK {
                                *due
                            } else {
                                woke
                            };
                            *due += every;
                            began
                        }
                        _ => tokio::time::Instant::now(),
                    };
                    let Ok(answer) = client.should_rate_limit(request).await else {
                        continue;
                    };
                    latencies.push(u32::try_from(began.elapsed().as_micros()).unwrap_or(u32::MAX));
                    answered += 1;
                    if answer.into_inner().overall_code == Code::Ok as i32 {
                        ok += 1;
                    }
                }
                let mut r = results.lock().await;
                r.0.extend(latencies);
                r.1 += ok;
                r.2 += answered;
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = results.lock().await;
    r.0.sort_unstable();
    let at = |q: f64| {
        r.0.get(((r.0.len() as f64 * q) as usize).min(r.0.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "answered={} ok={} seconds={:.3} per_second={:.0} p50_us={} p99_us={}",
        r.2,
        r.1,
        elapsed,
        r.2 as f64 / elapsed,
        at(0.50),
        at(0.99)
    );
    ExitCode::SUCCESS
}
