//! Decisions per second and latency through the Redis store, for `scripts/bench-redis`.
//!
//! ```text
//! cargo run --release -p ratewarden-redis --example bench -- \
//!     --url redis://127.0.0.1:6379 --callers 16 --seconds 5 [--naive] [--rate 20000]
//! cargo run --release -p ratewarden-redis --example bench -- --print-command [--algorithm gcra] [--general | --compact]
//! ```
//!
//! Each caller decides in a loop (closed loop), or, with `--rate`, all callers together
//! start decisions at that many a second (open loop). Latency is measured from when a call
//! was sent (`p99_us`) and, in open loop, also from when it was due (`p99_due_us`: a slow
//! store cannot hide its queueing there, but tokio's timer wakes up to a millisecond late,
//! which inflates it; `late_p50_us` and `late_p99_us` say by how much; `--pacer thread` paces
//! from a thread of its own instead, within tens of microseconds). `--naive` turns pipelining off: one round trip at a time on the one
//! connection. `--algorithm` picks the limit (GCRA by default; any algorithm's name, such
//! as `token-bucket` or `sliding-log`), always one that never says no. Prints one JSON line.
//! `--print-command` prints the call the store sends (the one-check form where the
//! script's fast path knows the algorithm); with `--compact`, the compact form (mode
//! `decide1`) the store sent before, which libraries since then read; with `--general`, the
//! general form every version of the library reads (for measuring an older library beside
//! this one).
//!
//! `--floor` runs the same callers, keys and pacing without the store: a bare redis-rs
//! connection manager (the connection the store itself holds) calling `testing::FLOOR_LIBRARY`'s
//! function, which makes the three Redis calls any decision makes (`TIME`, `GET`, `SET`)
//! and nothing else. It is the physical baseline of a latency figure: what any client on
//! this machine at this rate sees, so that `ours / floor` in the same run says what the
//! store adds to a tail the machine sets. `--print-floor` prints the library's source.
//!
//! `--wait-for-replicas N` makes every decision wait for N replicas to acknowledge it
//! (`wait_for_replicas`), for measuring what that costs (`scripts/bench-wait`).
//!
//! `--batch-calls N` bounds the store's batches of coalesced calls (`batch_calls`; 1 sends
//! every decision in a call of its own, as the store did before it coalesced), and
//! `--batch-in-flight N` sets how many calls are in flight before the next ones wait to be
//! batched (`batch_in_flight`). `--peer` runs
//! the same callers and keys through the peer's fixed-window storage path instead of the
//! store (limitador's Redis storage: `MGET` of the counter, then its `INCRBY` script,
//! [`PEER_UPDATE`]) on a bare redis-rs connection manager.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ratewarden_core::{
    AlgorithmKind, AsyncStore, CalendarUnit, Clock, Concurrency, FixedWindow, Gcra, LeakyBucket,
    LeakyQueue, Limit, Quota, Rate, RealClock, SlidingLog, SlidingWindow, TokenBucket,
};
use ratewarden_redis::{testing, RedisConfig, RedisStore, TimeSource};
use redis::aio::ConnectionManager;
use tokio::sync::mpsc::UnboundedReceiver as Receiver;
use tokio::time::Instant;

struct Args {
    url: String,
    callers: usize,
    seconds: u64,
    naive: bool,
    rate: Option<u64>,
    thread_pacer: bool,
    keys: usize,
    print_command: bool,
    general: bool,
    compact: bool,
    algorithm: AlgorithmKind,
    floor: bool,
    print_floor: bool,
    wait_for_replicas: u32,
    batch_calls: Option<usize>,
    batch_in_flight: Option<usize>,
    peer: bool,
}

/// The peer's update, as limitador's Redis storage runs it after reading the counter with
/// `MGET`: adds the cost with `INCRBY` and, when that made the counter (a window's first unit),
/// sets its expiry to the window and adds it to the limit's set of counters. Not exact: two
/// callers can both read a count under the limit and both add. (`scripts/bench-redis` sends
/// the same script through redis-benchmark.)
const PEER_UPDATE: &str = "local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], KEYS[1])
end
return n";

/// The peer's limit in the benchmark: never reached during a run.
const PEER_LIMIT: u64 = 1_000_000_000;

/// Who the callers call: the store deciding, the bare baseline, or the peer's path.
enum Target {
    Store(Arc<RedisStore>, Limit),
    Floor(ConnectionManager),
    /// The connection and the update script's SHA-1.
    Peer(ConnectionManager, String),
}

impl Target {
    /// One decision (or the baseline's one call) for `key`.
    async fn call(&self, key: &str, clock: &RealClock) -> Result<(), ()> {
        match self {
            Target::Store(store, limit) => store
                .decide(limit, key, clock.now(), 1)
                .await
                .map(drop)
                .map_err(drop),
            Target::Floor(connection) => testing::floor_call(connection, key).await.map_err(drop),
            Target::Peer(connection, sha) => {
                let mut connection = connection.clone();
                let key = format!("peer:{key}");
                // The check: the counter's value against the limit (over it: refused, and
                // nothing written).
                let counts: Vec<Option<u64>> = redis::cmd("MGET")
                    .arg(&key)
                    .query_async(&mut connection)
                    .await
                    .map_err(drop)?;
                if counts.first().copied().flatten().unwrap_or(0) + 1 > PEER_LIMIT {
                    return Ok(());
                }
                let _: u64 = redis::cmd("EVALSHA")
                    .arg(sha)
                    .arg(2)
                    .arg(&key)
                    .arg("peer-counters")
                    .arg(1)
                    .arg(1)
                    .query_async(&mut connection)
                    .await
                    .map_err(drop)?;
                Ok(())
            }
        }
    }
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        url: "redis://127.0.0.1:6379".to_owned(),
        callers: 16,
        seconds: 5,
        naive: false,
        rate: None,
        thread_pacer: false,
        keys: 10_000,
        print_command: false,
        general: false,
        compact: false,
        algorithm: AlgorithmKind::Gcra,
        floor: false,
        print_floor: false,
        wait_for_replicas: 0,
        batch_calls: None,
        batch_in_flight: None,
        peer: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |text: String, name: &str| {
            text.parse::<u64>()
                .map_err(|_| format!("{name} must be a whole number, not `{text}`"))
        };
        match flag.as_str() {
            "--url" => args.url = value("--url")?,
            "--callers" => args.callers = number(value("--callers")?, "--callers")? as usize,
            "--seconds" => args.seconds = number(value("--seconds")?, "--seconds")?,
            "--rate" => args.rate = Some(number(value("--rate")?, "--rate")?),
            "--keys" => args.keys = number(value("--keys")?, "--keys")? as usize,
            "--algorithm" => {
                let name = value("--algorithm")?;
                args.algorithm = name
                    .parse()
                    .map_err(|_| format!("--algorithm: no algorithm is called `{name}`"))?;
            }
            "--naive" => args.naive = true,
            "--pacer" => {
                args.thread_pacer = match value("--pacer")?.as_str() {
                    "timer" => false,
                    "thread" => true,
                    other => return Err(format!("--pacer: `timer` or `thread`, not `{other}`")),
                }
            }
            "--print-command" => args.print_command = true,
            "--general" => args.general = true,
            "--compact" => args.compact = true,
            "--floor" => args.floor = true,
            "--print-floor" => args.print_floor = true,
            "--peer" => args.peer = true,
            "--batch-in-flight" => {
                let n = number(value("--batch-in-flight")?, "--batch-in-flight")?;
                args.batch_in_flight = Some(
                    usize::try_from(n).map_err(|_| format!("--batch-in-flight: too many: {n}"))?,
                );
            }
            "--batch-calls" => {
                let n = number(value("--batch-calls")?, "--batch-calls")?;
                args.batch_calls =
                    Some(usize::try_from(n).map_err(|_| format!("--batch-calls: too many: {n}"))?);
            }
            "--wait-for-replicas" => {
                let n = number(value("--wait-for-replicas")?, "--wait-for-replicas")?;
                args.wait_for_replicas =
                    u32::try_from(n).map_err(|_| format!("--wait-for-replicas: too many: {n}"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if args.callers == 0 || args.keys == 0 {
        return Err("--callers and --keys must be above zero".to_owned());
    }
    Ok(args)
}

/// A limit of `kind` that never says no during a run, so every decision does the full work
/// (a log or a set of permits stays short: a second's worth over 10,000 keys).
fn limit(kind: AlgorithmKind) -> Limit {
    const BIG: u64 = 1_000_000_000;
    let rate = Rate::per_second(BIG).unwrap();
    let second = Duration::from_secs(1);
    match kind {
        AlgorithmKind::Gcra => Gcra::new(rate, BIG).unwrap().into(),
        AlgorithmKind::TokenBucket => TokenBucket::new(rate, BIG).unwrap().into(),
        AlgorithmKind::LeakyBucket => LeakyBucket::new(rate, BIG).unwrap().into(),
        AlgorithmKind::LeakyQueue => LeakyQueue::new(rate, BIG).unwrap().into(),
        AlgorithmKind::FixedWindow => FixedWindow::new(BIG, second).unwrap().into(),
        // A million a second: the limit times the window stays below 2^52 ns, in the fast
        // path's range, as for any limit under 4.5 million a second.
        AlgorithmKind::SlidingWindow => SlidingWindow::new(1_000_000, second).unwrap().into(),
        AlgorithmKind::SlidingLog => SlidingLog::new(BIG, second).unwrap().into(),
        AlgorithmKind::Quota => Quota::new(BIG, CalendarUnit::Day, "UTC").unwrap().into(),
        AlgorithmKind::Concurrency => Concurrency::new(BIG, second).unwrap().into(),
    }
}

/// Sends the due time of each of `rate` decisions a second from `start` to `end`, each at
/// that time, from a thread of its own: `std::thread::sleep` wakes within tens of
/// microseconds, where tokio's timer rounds every wake-up to its next millisecond, so that
/// all the callers due within one millisecond start together (a burst of rate / 1,000
/// decisions at each tick, whose queueing the latency then shows).
fn pacer(start: Instant, end: Instant, rate: u64) -> Receiver<Instant> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for k in 0u64.. {
            let due = start + Duration::from_nanos(k * 1_000_000_000 / rate.max(1));
            if due >= end {
                break;
            }
            let now = Instant::now();
            if due > now {
                // The benchmark paces real time: this is the one place it must sleep.
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(due - now);
            }
            if tx.send(due).is_err() {
                break;
            }
        }
    });
    rx
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}
usage: bench --url URL --callers N --seconds S [--naive] [--rate R [--pacer timer|thread]] [--keys K] [--floor] [--print-command [--general | --compact]] [--print-floor] [--wait-for-replicas N] [--batch-calls N] [--batch-in-flight N] [--peer]");
            return ExitCode::from(2);
        }
    };
    let store = match RedisStore::new(RedisConfig {
        target: ratewarden_redis::Target::Single(args.url.clone()),
        deadline: Duration::from_secs(5),
        time: TimeSource::Redis,
        pipeline: !args.naive,
        wait_for_replicas: args.wait_for_replicas,
        batch_calls: args
            .batch_calls
            .unwrap_or(RedisConfig::default().batch_calls),
        batch_in_flight: args
            .batch_in_flight
            .unwrap_or(RedisConfig::default().batch_in_flight),
        ..RedisConfig::default()
    }) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.print_floor {
        print!("{}", testing::FLOOR_LIBRARY);
        return ExitCode::SUCCESS;
    }
    if args.print_command {
        // The function's name, the number of keys, the key and the arguments of one
        // decision, one a line (an argument may be empty): for redis-benchmark's
        // `FCALL <function> 1 <key> <args>`, the very call the store makes.
        let (function, _) = RedisStore::script();
        // The caller's clock, for a quota's calendar periods around Redis's `now`.
        let hint = RealClock::new().now();
        let limit = limit(args.algorithm);
        let (key, argv) = if args.general {
            store.decide_command(&limit, "bench|k", 1, hint)
        } else if args.compact {
            store.sent_command(&limit, "bench|k", 1, hint)
        } else {
            store.one_check_command(&limit, "bench|k", 1, hint)
        };
        println!("{function}\n1\n{key}");
        for arg in argv {
            println!("{arg}");
        }
        return ExitCode::SUCCESS;
    }
    // Redis's clock decides; the caller's is only the hint a quota's periods are built from.
    let clock = RealClock::new();
    let target = if args.peer {
        let made = async {
            let mut connection = testing::floor(&args.url).await?;
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(PEER_UPDATE)
                .query_async(&mut connection)
                .await?;
            Ok::<_, redis::RedisError>(Target::Peer(connection, sha))
        };
        match made.await {
            Ok(target) => target,
            Err(e) => {
                eprintln!("error: the peer's connection: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if args.floor {
        match testing::floor(&args.url).await {
            Ok(connection) => Target::Floor(connection),
            Err(e) => {
                eprintln!("error: the baseline's connection: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        Target::Store(store, limit(args.algorithm))
    };
    // Load the library, warm the connection.
    if target.call("bench|warm", &clock).await.is_err() {
        eprintln!("error: the first call to Redis failed");
        return ExitCode::FAILURE;
    }
    let target = Arc::new(target);
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    let interval = args
        .rate
        .map(|r| Duration::from_nanos(1_000_000_000 * args.callers as u64 / r.max(1)));
    // With `--pacer thread`, one thread hands out the due times of every decision, in order,
    // to whichever caller is free.
    let paced: Option<Arc<tokio::sync::Mutex<Receiver<Instant>>>> = match args.rate {
        Some(rate) if args.thread_pacer => {
            Some(Arc::new(tokio::sync::Mutex::new(pacer(start, end, rate))))
        }
        _ => None,
    };
    let mut tasks = Vec::new();
    for c in 0..args.callers {
        let target = Arc::clone(&target);
        let paced = paced.clone();
        let keys = args.keys;
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut from_due: Vec<u32> = Vec::new();
            // How late each call was sent after it was due (the timer's wake-up and the
            // scheduler's delay), in open loop.
            let mut late: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            let mut n = 0usize;
            // Open loop: each caller's decisions are due at fixed times, staggered.
            let mut due = start + interval.map_or(Duration::ZERO, |i| i * c as u32 / 16);
            loop {
                if let Some(paced) = &paced {
                    // The next decision due, whenever this caller is free to take it.
                    match paced.lock().await.recv().await {
                        Some(next) => due = next,
                        None => break,
                    }
                } else if interval.is_some() {
                    tokio::time::sleep_until(due).await;
                }
                let sent = Instant::now();
                let began = if interval.is_some() { due } else { sent };
                if began >= end {
                    break;
                }
                let key = format!("bench|k{}", (c * 7919 + n) % keys);
                n += 1;
                match target.call(&key, &clock).await {
                    Ok(()) => {
                        let us = |from: Instant| {
                            u32::try_from(from.elapsed().as_micros()).unwrap_or(u32::MAX)
                        };
                        latencies.push(us(sent));
                        from_due.push(us(began));
                        late.push(
                            u32::try_from(sent.duration_since(began).as_micros())
                                .unwrap_or(u32::MAX),
                        );
                    }
                    Err(_) => errors += 1,
                }
                if let Some(i) = interval {
                    due += i;
                }
            }
            (latencies, from_due, late, errors)
        }));
    }
    let mut all: Vec<u32> = Vec::new();
    let mut due: Vec<u32> = Vec::new();
    let mut late: Vec<u32> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, d, w, e) = t.await.unwrap_or_default();
        all.extend(l);
        due.extend(d);
        late.extend(w);
        errors += e;
    }
    let took = start.elapsed().as_secs_f64().max(args.seconds as f64);
    all.sort_unstable();
    due.sort_unstable();
    late.sort_unstable();
    let at = |v: &[u32], p: f64| -> u32 {
        if v.is_empty() {
            return 0;
        }
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
    };
    let pct = |p: f64| at(&all, p);
    println!(
        "{{\"mode\":\"{}\",\"callers\":{},\"rate\":{},\"decisions\":{},\"errors\":{},\"per_second\":{:.0},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\"p99_due_us\":{},\"late_p50_us\":{},\"late_p99_us\":{}}}",
        match (args.peer, args.floor, args.naive, args.wait_for_replicas) {
            (true, _, _, _) => "peer",
            (_, true, _, _) => "floor",
            (_, false, true, _) => "naive",
            (_, false, false, 0) => "ours",
            (_, false, false, _) => "waited",
        },
        args.callers,
        args.rate.map_or("null".to_owned(), |r| r.to_string()),
        all.len(),
        errors,
        all.len() as f64 / took,
        pct(0.50),
        pct(0.90),
        pct(0.99),
        at(&due, 0.99),
        at(&late, 0.50),
        at(&late, 0.99),
    );
    ExitCode::SUCCESS
}
