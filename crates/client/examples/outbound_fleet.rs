//! Three worker processes pacing their calls to one partner limit on Redis.
//!
//! ```sh
//! cargo run -p ratewarden-client --example outbound_fleet                      # starts its own redis-server
//! cargo run -p ratewarden-client --example outbound_fleet -- redis://127.0.0.1:6379
//! ```
//!
//! The parent starts three copies of itself as workers (`--worker URL`). Each sends 40
//! calls from 10 tasks through an [`Outbound`] limiter of 20 calls a second, waiting at most
//! 2 s; they share one leaky queue on Redis, so together they send at 20 a second, and
//! the parent prints the rate it measured from their release times.
//! `tests/outbound.rs` checks the same setup (rate within 2%, no wait past the maximum).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ratewarden_client::{Error, Outbound};
use ratewarden_core::{Clock, Rate, RealClock};
use ratewarden_redis::{RedisConfig, RedisStore, Target};

const RATE: u64 = 20;
const TASKS: usize = 10;
const CALLS_PER_TASK: usize = 4;
const MAX_WAIT: Duration = Duration::from_secs(2);

async fn worker(url: String) {
    let store = RedisStore::new(RedisConfig {
        target: Target::Single(url),
        deadline: Duration::from_secs(1),
        ..RedisConfig::default()
    })
    .expect("a Redis URL");
    let clock: Arc<dyn Clock> = Arc::new(RealClock::new());
    let rate = Rate::per_second(RATE).expect("a rate");
    let sms = Outbound::new("sms-gateway", rate, MAX_WAIT, store, Arc::clone(&clock))
        .expect("an outbound limiter");
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (sms, clock) = (sms.clone(), Arc::clone(&clock));
            tokio::spawn(async move {
                let mut sent = 0;
                while sent < CALLS_PER_TASK {
                    match sms.acquire().await {
                        // The call to the partner would go here.
                        Ok(_) => {
                            sent += 1;
                            println!("sent {}", clock.now());
                        }
                        Err(Error::MaxWait { wait, .. }) => {
                            eprintln!("queue full ({wait:?} away): trying again later");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker task");
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") {
        return worker(args[2].clone()).await;
    }
    // Without a URL, a redis-server of our own (stopped when this ends).
    let own = args
        .get(1)
        .is_none()
        .then(ratewarden_redis::testing::Server::start);
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| own.as_ref().map(|s| s.url()).unwrap_or_default());
    let me = std::env::current_exe().expect("this program's path");
    let workers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&me)
                .args(["--worker", &url])
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    let mut times: Vec<u64> = Vec::new();
    for w in workers {
        let out = w.wait_with_output().expect("a worker's output");
        let text = String::from_utf8_lossy(&out.stdout);
        times.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("sent ")?.parse::<u64>().ok()),
        );
    }
    times.sort_unstable();
    let span = (times[times.len() - 1] - times[0]) as f64 / 1e9;
    println!(
        "3 workers sent {} calls at {:.2}/s against a partner limit of {RATE}/s",
        times.len(),
        (times.len() - 1) as f64 / span
    );
}
