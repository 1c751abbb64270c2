//! The one-check call (`src/lua/one_check.lua`, what the store sends for one check) against
//! the limb
//! path (`src/lua/bigint.lua`): the store's decisions through it are the limb path's, the
//! states it leaves are the limb path's byte for byte, and its keys live at least as long;
//! it answers for itself within its range and hands the rest to mode `decide1`; on Redis's
//! clock its arithmetic is the limb path's at the `now` it replied with.

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    Algorithm, AsyncStore, Decision, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit, Outcome,
    SlidingWindow, TokenBucket,
};
use ratewarden_redis::testing::Server;
use ratewarden_redis::{RedisConfig, RedisStore, Target, TimeSource};

use common::{random_numbers, rate, LIM, NOW, SEC};

mod common;

/// A limit of an algorithm the one-check call knows (and a sliding window, which it hands on),
/// small or near its bounds.
fn random_limit(rng: &mut Rng) -> Limit {
    let (r, window, burst) = random_numbers(rng);
    match rng.below(6) {
        0 => Gcra::new(r, burst).unwrap().into(),
        1 => LeakyQueue::new(r, burst).unwrap().into(),
        2 => TokenBucket::new(r, burst).unwrap().into(),
        3 => LeakyBucket::new(r, burst).unwrap().into(),
        4 => FixedWindow::new(burst, window).unwrap().into(),
        _ => SlidingWindow::new(burst, window).unwrap().into(),
    }
}

struct Redis {
    con: redis::Connection,
    function: &'static str,
    /// The store under test, on the caller's clock.
    store: RedisStore,
    // Last, so the connections close before the server stops.
    _server: Server,
}

impl Redis {
    fn start() -> Self {
        let (server, con, function) = common::with_library();
        let store = RedisStore::new(RedisConfig {
            target: Target::Single(server.url()),
            key_prefix: String::new(),
            deadline: Duration::from_secs(5),
            time: TimeSource::Caller,
            ..RedisConfig::default()
        })
        .expect("a store");
        Self {
            con,
            function,
            store,
            _server: server,
        }
    }

    /// One check in mode `mode` of the limb path on `key` at `now` (None: Redis's clock):
    /// the reply's `now` and decision.
    fn limbs(
        &mut self,
        peek: bool,
        key: &str,
        limit: &Limit,
        now: Option<u64>,
        cost: u64,
    ) -> (u64, Decision) {
        let (key, mut args) = self
            .store
            .decide_command(limit, key, cost, now.unwrap_or(NOW));
        args[0] = if peek { "peek:limbs" } else { "decide:limbs" }.to_owned();
        args[1] = now.map_or_else(String::new, |n| n.to_string());
        let reply: Vec<String> = redis::cmd("FCALL")
            .arg(self.function)
            .arg(1)
            .arg(key)
            .arg(args)
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("{limit:?}: the limb path failed: {e}"));
        let n = |i: usize| reply[i].parse::<u64>().expect("a decimal");
        let outcome = match reply[1].as_str() {
            "allowed" => Outcome::Allowed,
            "delayed" => Outcome::Delayed { delay_ns: n(2) },
            "limited" => Outcome::Limited {
                retry_after_ns: n(2),
            },
            "cost_too_high" => Outcome::CostTooHigh,
            other => panic!("outcome {other}"),
        };
        (n(0), Decision::new(outcome, n(3), n(4), n(5)))
    }

    /// The raw reply of a one-check call of `limit` on `key` (a peek: nothing changes), for the
    /// algorithms the store sends it for (`spec`: another check in its place).
    fn one_check_peek(
        &mut self,
        key: &str,
        limit: &Limit,
        spec: Option<&str>,
        now: Option<u64>,
        cost: u64,
    ) -> String {
        let (key, mut args) = self
            .store
            .one_check_command(limit, key, cost, now.unwrap_or(NOW));
        if let Some(spec) = spec {
            args = vec![spec.to_owned()];
        }
        assert_eq!(
            args.len(),
            1,
            "{limit:?} takes the one-check form: {args:?}"
        );
        args[0].replace_range(..1, "p");
        if let Some(now) = now {
            args.push(now.to_string());
        }
        redis::cmd("FCALL")
            .arg(self.function)
            .arg(1)
            .arg(key)
            .arg(args)
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("{limit:?}: the one_check peek failed: {e}"))
    }

    fn get(&mut self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.con)
            .expect("GET")
    }

    /// The key's time to live in milliseconds (-2 without the key).
    fn pttl(&mut self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.con)
            .expect("PTTL")
    }
}

/// Whether the one-check call answered for itself (its reply starts with `+` or `-`) rather than
/// handing the check to mode `decide1` (five values).
fn answered_one_check(reply: &str) -> bool {
    reply.starts_with('+') || reply.starts_with('-')
}

/// Random limits, times and costs through the store (the one-check call, and `decide1` where it
/// declines) and through the limb path: the same decisions, the same states, and a key's
/// lifetime never shorter than the limb path gives it (a fixed window keeps the TTL of its
/// window's first write, which reaches the window's end, where the limb path writes the
/// same end again).
#[tokio::test]
async fn the_one_check_call_decides_as_the_limb_path_on_random_inputs() {
    let mut redis = Redis::start();
    let mut rng = Rng(0x5eed_1ea4_0000_0001);
    let mut one_check = 0;
    for case in 0..240 {
        let limit = random_limit(&mut rng);
        let (a, b) = (format!("one_check{case}"), format!("limbs{case}"));
        let mut now = common::random_start(&mut rng);
        for _ in 0..6 {
            let (later, cost) = common::random_step(&mut rng, now, limit.limit());
            now = later;
            let peek = rng.chance(20);
            let covered = !matches!(limit, Limit::SlidingWindow(_));
            if covered
                && answered_one_check(&redis.one_check_peek(&a, &limit, None, Some(now), cost))
            {
                one_check += 1;
            }
            let got = if peek {
                redis.store.peek(&limit, &a, now, cost).await
            } else {
                redis.store.decide(&limit, &a, now, cost).await
            }
            .unwrap_or_else(|e| panic!("{limit:?}: the store at {now} failed: {e}"));
            let (_, want) = redis.limbs(peek, &b, &limit, Some(now), cost);
            assert_eq!(got, want, "{limit:?}: peek {peek} of {cost} at {now}");
            assert_eq!(redis.get(&a), redis.get(&b), "{limit:?}: state at {now}");
            let (ta, tb) = (redis.pttl(&a), redis.pttl(&b));
            assert!(
                ta >= tb - 50 && (ta < 0) == (tb < 0),
                "{limit:?}: lifetimes {ta} ms (one_check) and {tb} ms (limbs) at {now}"
            );
        }
    }
    assert!(
        one_check > 400,
        "the one-check call answered {one_check} of 1,440 calls"
    );
}

/// Within its range the one-check call answers for itself; past it (a burst at 2^52, a window
/// that is no whole division of a second, an algorithm it does not cover) it hands the
/// check to mode `decide1`, whose reply is the five values.
#[test]
fn the_one_check_call_answers_within_its_range_and_hands_on_the_rest() {
    let mut redis = Redis::start();
    let within: [Limit; 5] = [
        Gcra::new(rate(100, SEC), 10).unwrap().into(),
        LeakyQueue::new(rate(3, SEC), 4).unwrap().into(),
        TokenBucket::new(rate(7, 11 * SEC), 4).unwrap().into(),
        LeakyBucket::new(rate(5, SEC), 2).unwrap().into(),
        FixedWindow::new(100, Duration::from_millis(100))
            .unwrap()
            .into(),
    ];
    for limit in &within {
        for now in [Some(NOW), None] {
            let reply = redis.one_check_peek("in", limit, None, now, 1);
            assert!(answered_one_check(&reply), "{limit:?} at {now:?}: {reply}");
        }
    }
    // A sliding window, which the store sends in the compact form, sent as a one-check call
    // all the same.
    let window: Limit = SlidingWindow::new(3, Duration::from_secs(1))
        .unwrap()
        .into();
    let past: [(Limit, Option<&str>); 3] = [
        (Gcra::new(rate(1, SEC), LIM + 1).unwrap().into(), None),
        (
            FixedWindow::new(3, Duration::from_nanos(3 * SEC / 7))
                .unwrap()
                .into(),
            None,
        ),
        (window, Some("d 1 sliding-window 3 1000000000")),
    ];
    for (limit, spec) in &past {
        let reply = redis.one_check_peek("past", limit, *spec, Some(NOW), 1);
        assert!(!answered_one_check(&reply), "{limit:?}: {reply}");
        assert_eq!(reply.split(' ').count(), 5, "{limit:?}: {reply}");
    }
}

/// On Redis's clock the one-check call reads `TIME` and replies with it: the limb path at that
/// `now`, on a key of its own with the same history, leaves the same state, with calls of
/// the same check on the caller's clock in between.
#[test]
fn on_redis_time_the_one_check_call_is_the_limb_path_at_the_now_it_replied_with() {
    let mut redis = Redis::start();
    let limits: [Limit; 5] = [
        Gcra::new(rate(2, SEC), 2).unwrap().into(),
        LeakyQueue::new(rate(1, 10 * SEC), 3).unwrap().into(),
        TokenBucket::new(rate(3, 7 * SEC), 2).unwrap().into(),
        FixedWindow::new(2, Duration::from_secs(3600))
            .unwrap()
            .into(),
        FixedWindow::new(2, Duration::from_millis(250))
            .unwrap()
            .into(),
    ];
    for (i, limit) in limits.iter().enumerate() {
        let (a, b) = (format!("t{i}"), format!("tl{i}"));
        for step in 0..4 {
            let (key, args) = redis.store.one_check_command(limit, &a, 1, NOW);
            let reply: String = redis::cmd("FCALL")
                .arg(redis.function)
                .arg(1)
                .arg(key)
                .arg(args)
                .query(&mut redis.con)
                .expect("a one-check call on Redis's clock");
            assert!(answered_one_check(&reply), "{limit:?}: {reply}");
            let mut fields = reply[1..].splitn(3, ' ');
            let seconds: u64 = fields.next().unwrap().parse().expect("seconds");
            let micros: u64 = fields.next().unwrap().parse().expect("microseconds");
            let now = seconds * SEC + micros * 1_000;
            let (_, d) = redis.limbs(false, &b, limit, Some(now), 1);
            assert_eq!(
                reply.starts_with('+'),
                d.is_allowed(),
                "{limit:?}: step {step}"
            );
            assert_eq!(redis.get(&a), redis.get(&b), "{limit:?}: step {step}");
            // The same check on the caller's clock, years earlier, in between: what one
            // check's closure remembers of Redis's clock is not taken for the caller's.
            let (key, mut args) = redis.store.one_check_command(limit, "elsewhen", 1, NOW);
            args.push(NOW.to_string());
            let _: String = redis::cmd("FCALL")
                .arg(redis.function)
                .arg(1)
                .arg(key)
                .arg(args)
                .query(&mut redis.con)
                .expect("a one-check call on the caller's clock");
        }
    }
}

/// On Redis's clock, a fixed window's writes within one window keep the TTL of the first
/// (which reaches the window's end), and the store's decisions count down.
#[tokio::test]
async fn a_fixed_window_keeps_its_ttl_within_the_window_on_redis_time() {
    let mut redis = Redis::start();
    let store = RedisStore::new(RedisConfig {
        target: Target::Single(redis._server.url()),
        key_prefix: String::new(),
        deadline: Duration::from_secs(5),
        time: TimeSource::Redis,
        ..RedisConfig::default()
    })
    .expect("a store");
    let hour: Limit = FixedWindow::new(1_000, Duration::from_secs(3600))
        .unwrap()
        .into();
    let first = store.decide(&hour, "w", NOW, 1).await.unwrap();
    let ttl = redis.pttl("w");
    assert!(ttl > 0 && ttl <= 3_600_001, "{ttl}");
    let mut last = first;
    for _ in 0..5 {
        let d = store.decide(&hour, "w", NOW, 2).await.unwrap();
        assert_eq!(d.remaining, last.remaining - 2, "{d:?} after {last:?}");
        last = d;
    }
    let kept = redis.pttl("w");
    assert!(kept <= ttl && kept > ttl - 1_000, "{kept} after {ttl}");
    // Unless the window turned over meanwhile (once an hour), the count is 11.
    let state = redis.get("w").expect("a state");
    assert!(state.ends_with(",11") || state.ends_with(",2"), "{state}");
}

/// A value the one-check call cannot read is handed on, and answered as the limb path answers
/// it: another kind's state is a key never seen; a value that is no state, and a key of
/// another Redis type, are errors naming the key.
#[tokio::test]
async fn values_the_one_check_call_cannot_read_are_answered_as_the_limb_path_answers_them() {
    let mut redis = Redis::start();
    let gcra: Limit = Gcra::new(rate(1, SEC), 3).unwrap().into();
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg("fixed-window:5,1")
        .query(&mut redis.con)
        .unwrap();
    let d = redis.store.decide(&gcra, "other", NOW, 1).await.unwrap();
    assert_eq!(d.remaining, 2, "another kind's state is a key never seen");
    for (key, value) in [("junk", "gcra:12x"), ("plain", "hello")] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut redis.con)
            .unwrap();
        let e = redis.store.decide(&gcra, key, NOW, 1).await.unwrap_err();
        assert!(e.to_string().contains("ratewarden:"), "{value}: {e}");
    }
    let _: () = redis::cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .query(&mut redis.con)
        .unwrap();
    let e = redis.store.decide(&gcra, "hash", NOW, 1).await.unwrap_err();
    assert!(e.to_string().contains("hash"), "{e}");
}
