//! What the script's path tests share (`fast_path.rs`, `one_check_path.rs`): their constants, a
//! connection to a fresh `redis-server` with the library loaded, and random limits' numbers.
#![allow(dead_code)]

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::Rate;
use ratewarden_redis::testing::Server;
use ratewarden_redis::RedisStore;

pub const SEC: u64 = 1_000_000_000;
/// The fast path's bound: every number it computes with stays below it.
pub const LIM: u64 = 1 << 52;
/// A realistic time: nanoseconds since the epoch in 2023.
pub const NOW: u64 = 1_700_000_000 * SEC + 123_456_789;

/// A fresh `redis-server`, a connection to it, and the name of the library's function,
/// loaded there.
pub fn with_library() -> (Server, redis::Connection, &'static str) {
    let server = Server::start();
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connecting to our redis-server");
    let (function, library) = RedisStore::script();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library)
        .query(&mut con)
        .expect("FUNCTION LOAD");
    (server, con, function)
}

pub fn rate(count: u64, period_ns: u64) -> Rate {
    Rate::new(count, Duration::from_nanos(period_ns)).expect("a valid rate")
}

/// A random limit's numbers, small or near the fast path's bound: its rate, the same
/// period as a window, and its burst (or a window's limit).
pub fn random_numbers(rng: &mut Rng) -> (Rate, Duration, u64) {
    let count = match rng.below(4) {
        0 => 1 + rng.below(10),
        1 => 1 + rng.below(1_000_000),
        2 => SEC,
        _ => 1 + rng.below(LIM),
    };
    let period = match rng.below(4) {
        0 => SEC,
        1 => SEC * (1 + rng.below(3_600)),
        2 => 1 + rng.below(1_000),
        _ => SEC / [2, 4, 10, 1_000][rng.below(4) as usize],
    };
    let burst = match rng.below(4) {
        0 => 1 + rng.below(10),
        1 => 1 + rng.below(1_000_000_000),
        2 => LIM - 1 - rng.below(3),
        _ => LIM + rng.below(3),
    };
    (rate(count, period), Duration::from_nanos(period), burst)
}

/// A random first time: a realistic one, zero, or near the end of `u64`.
pub fn random_start(rng: &mut Rng) -> u64 {
    [NOW, 0, u64::MAX - 5 * SEC, 1 << 60][rng.below(4) as usize]
}

/// The next random time after `now`, and a random cost under a limit of `cap`: nothing,
/// one, just past the limit, or anything below it.
pub fn random_step(rng: &mut Rng, now: u64, cap: u64) -> (u64, u64) {
    let now = now.saturating_add(match rng.below(3) {
        0 => 0,
        1 => rng.below(10 * SEC),
        _ => rng.below(1 << 56),
    });
    let cost = match rng.below(4) {
        0 => 0,
        1 => 1,
        2 => cap.saturating_add(rng.below(2)),
        _ => rng.below(cap.min(LIM)),
    };
    (now, cost)
}
