//! One decision through the Redis store against a real `redis-server`, beside the floor: a
//! bare redis-rs call of a function making only the three Redis calls every decision makes
//! (`testing::FLOOR_LIBRARY`: `TIME`, `GET`, `SET`). Both in one group, on one server and
//! one runtime, so `store / floor` comes from a single run: what the store adds to the round
//! trip any client pays (the client's encoding and decoding, the deadline, the breaker, and
//! the script's arithmetic inside Redis).
//!
//! - `redis one decision/{store,floor}`: one call at a time (the latency of one).
//! - `redis 16 at once/{store,floor}`: sixteen calls in flight on the one multiplexed
//!   connection, as a busy server's requests share it (pipelined: the cost per batch).
//!
//! Needs `redis-server` on the `PATH` (`scripts/test` installs it); the server is started on a
//! free port and stopped at the end. GCRA over 10,000 keys, on Redis's clock, with a limit
//! that never says no, as `scripts/bench-redis` measures it.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use ratewarden_core::{AsyncStore, Clock, Gcra, Limit, Rate, RealClock};
use ratewarden_redis::testing::{self, Server};
use ratewarden_redis::{RedisConfig, RedisStore, Target, TimeSource};
use tokio::task::JoinSet;

/// Keys the decisions spread over.
const KEYS: usize = 10_000;
/// Calls in flight at once in the pipelined group.
const AT_ONCE: usize = 16;

/// What one benchmark calls: the store deciding, or the floor.
#[derive(Clone)]
enum Caller {
    Store(Arc<RedisStore>, Arc<Limit>),
    Floor(redis::aio::ConnectionManager),
}

impl Caller {
    /// One decision (or the floor's call) for `key`; a failure ends the bench.
    async fn call(&self, key: &str) {
        match self {
            Caller::Store(store, limit) => {
                let decision = store
                    .decide(limit, key, RealClock::new().now(), 1)
                    .await
                    .expect("the store decides");
                assert!(decision.is_allowed(), "the bench's limit never says no");
            }
            Caller::Floor(connection) => testing::floor_call(connection, key)
                .await
                .expect("the floor answers"),
        }
    }
}

/// Both groups, the store and the floor on the same server.
fn bench(c: &mut Criterion) {
    let server = Server::start();
    // One thread, as each of the server's workers runs: the connection's own task and the
    // callers on it, no wake-up crossing threads (on a multi-threaded runtime those made
    // the one-call figures of both sides drift by 2x between runs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = RedisStore::new(RedisConfig {
        target: Target::Single(server.url()),
        deadline: Duration::from_secs(5),
        time: TimeSource::Redis,
        ..RedisConfig::default()
    })
    .expect("a store for the test server");
    let big = 1_000_000_000;
    let limit: Limit = Gcra::new(Rate::per_second(big).expect("a rate"), big)
        .expect("a limit")
        .into();
    let callers = [
        ("store", Caller::Store(Arc::new(store), Arc::new(limit))),
        (
            "floor",
            Caller::Floor(
                runtime
                    .block_on(testing::floor(&server.url()))
                    .expect("the floor's connection"),
            ),
        ),
    ];
    // Warm each: the library loaded, the connection made, the keys' states present.
    for (_, caller) in &callers {
        runtime.block_on(async {
            for k in 0..KEYS {
                caller.call(&format!("bench|k{k}")).await;
            }
        });
    }

    let mut group = c.benchmark_group("redis one decision");
    for (name, caller) in &callers {
        let mut n = 0usize;
        group.bench_function(*name, |b| {
            b.iter(|| {
                n = (n + 1) % KEYS;
                runtime.block_on(caller.call(&format!("bench|k{n}")));
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("redis 16 at once");
    for (name, caller) in &callers {
        let mut n = 0usize;
        group.bench_function(*name, |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let mut calls = JoinSet::new();
                    for _ in 0..AT_ONCE {
                        n = (n + 1) % KEYS;
                        let (caller, key) = (caller.clone(), format!("bench|k{n}"));
                        calls.spawn(async move { caller.call(&key).await });
                    }
                    while let Some(done) = calls.join_next().await {
                        done.expect("a call ran to its end");
                    }
                });
            });
        });
    }
    group.finish();
    drop(server);
}

/// The group `criterion_main!` runs (in a private module: the macro's function has no docs).
mod group {
    use super::bench;
    use criterion::{criterion_group, Criterion};
    use std::time::Duration;

    criterion_group! {
        name = benches;
        // Each call is a round trip to a server process: a few seconds a case is enough.
        config = Criterion::default().measurement_time(Duration::from_secs(4));
        targets = bench
    }
}

criterion_main!(group::benches);
