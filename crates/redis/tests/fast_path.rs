//! The fast path in doubles (`src/lua/fast.lua`) against the limb path (`src/lua/bigint.lua`,
//! the code every call took before it): the same replies and the same stored states, on random
//! inputs and on each side of the fast path's bound (2^52), with keys handed back and forth
//! between the paths as a rolling deploy hands them between old and new servers.
//!
//! The script's test modes choose the path: `decide:limbs` never takes the fast path,
//! `decide:fast` takes it or fails saying it declined (and the same for `peek`).

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    Algorithm, CalendarUnit, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit, Quota,
    SlidingWindow, TokenBucket,
};
use ratewarden_redis::testing::Server;
use ratewarden_redis::{RedisConfig, RedisStore};

use common::{random_numbers, rate, LIM, NOW, SEC};

mod common;

struct Redis {
    con: redis::Connection,
    function: &'static str,
    /// Encodes checks exactly as the store does (never connects).
    encoder: RedisStore,
    // Last, so the connection closes before the server stops.
    _server: Server,
}

impl Redis {
    fn start() -> Self {
        let (server, con, function) = common::with_library();
        let encoder = RedisStore::new(RedisConfig {
            key_prefix: String::new(),
            ..RedisConfig::default()
        })
        .expect("a store to encode with");
        Self {
            con,
            function,
            encoder,
            _server: server,
        }
    }

    /// One check of `cost` under `limit` on `key` in `mode`, at `now` (None: Redis's TIME).
    fn call(
        &mut self,
        mode: &str,
        key: &str,
        limit: &Limit,
        now: Option<u64>,
        cost: u64,
    ) -> redis::RedisResult<Vec<String>> {
        let hint = now.unwrap_or(NOW);
        let (key, mut args) = self.encoder.decide_command(limit, key, cost, hint);
        args[0] = mode.to_owned();
        args[1] = now.map_or_else(String::new, |n| n.to_string());
        redis::cmd("FCALL")
            .arg(self.function)
            .arg(1)
            .arg(key)
            .arg(args)
            .query(&mut self.con)
    }

    /// Several checks (`key`, `limit`, `cost`) in one call in `mode`, at `now`.
    fn layered(
        &mut self,
        mode: &str,
        prefix: &str,
        checks: &[(String, &Limit, u64)],
        now: u64,
    ) -> redis::RedisResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut args = vec![mode.to_owned(), now.to_string(), checks.len().to_string()];
        for (key, limit, cost) in checks {
            let (key, one) =
                self.encoder
                    .decide_command(limit, &format!("{prefix}{key}"), *cost, now);
            keys.push(key);
            args.extend(one.into_iter().skip(3));
        }
        redis::cmd("FCALL")
            .arg(self.function)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(&mut self.con)
    }

    fn ok(&mut self, mode: &str, key: &str, limit: &Limit, now: u64, cost: u64) -> Vec<String> {
        self.call(mode, key, limit, Some(now), cost)
            .unwrap_or_else(|e| panic!("{mode} of {cost} on {key} at {now} failed: {e}"))
    }

    /// Whether the fast path takes this call (a peek: nothing changes).
    fn fast_takes(&mut self, key: &str, limit: &Limit, now: u64, cost: u64) -> bool {
        match self.call("peek:fast", key, limit, Some(now), cost) {
            Ok(_) => true,
            Err(e) if e.to_string().contains("the fast path declined") => false,
            Err(e) => panic!("peek:fast failed otherwise: {e}"),
        }
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

    /// Decides `cost` at `now` on `fast` by the default path and on `limbs` by the limb path,
    /// and checks that the replies, the stored states and their lifetimes agree.
    fn agree(&mut self, limit: &Limit, fast: &str, limbs: &str, now: u64, cost: u64, peek: bool) {
        let (mode, limb_mode) = if peek {
            ("peek", "peek:limbs")
        } else {
            ("decide", "decide:limbs")
        };
        let a = self.ok(mode, fast, limit, now, cost);
        let b = self.ok(limb_mode, limbs, limit, now, cost);
        assert_eq!(a, b, "{limit:?}: {mode} of {cost} at {now}");
        assert_eq!(
            self.get(fast),
            self.get(limbs),
            "{limit:?}: the state after {mode} of {cost} at {now}"
        );
        // Both were set a moment apart with the same PX: within a few ms of each other.
        let (ta, tb) = (self.pttl(fast), self.pttl(limbs));
        assert!(
            (ta - tb).abs() <= 50 && (ta < 0) == (tb < 0),
            "{limit:?}: lifetimes {ta} ms and {tb} ms after {mode} of {cost} at {now}"
        );
    }
}

/// A limit of an algorithm the fast path knows, small or near its bounds.
fn random_limit(rng: &mut Rng) -> Limit {
    let (r, window, burst) = random_numbers(rng);
    let unit = [
        CalendarUnit::Second,
        CalendarUnit::Hour,
        CalendarUnit::Day,
        CalendarUnit::Month,
        CalendarUnit::Year,
    ][rng.below(5) as usize];
    match rng.below(7) {
        6 => SlidingWindow::new(burst, window).unwrap().into(),
        0 => Gcra::new(r, burst).unwrap().into(),
        1 => LeakyQueue::new(r, burst).unwrap().into(),
        2 => TokenBucket::new(r, burst).unwrap().into(),
        3 => LeakyBucket::new(r, burst).unwrap().into(),
        4 => FixedWindow::new(burst, window).unwrap().into(),
        _ => Quota::new(burst, unit, "Europe/Paris").unwrap().into(),
    }
}

/// Random limits, times and costs: the default path (fast when it can) and the limb path
/// answer the same and leave the same state, and the fast path took most of the calls.
#[test]
fn the_fast_path_agrees_with_the_limb_path_on_random_inputs() {
    let mut redis = Redis::start();
    let mut rng = Rng(0x5eed_fa57_0000_0001);
    let (mut fast, mut calls) = (0, 0);
    for case in 0..300 {
        let limit = random_limit(&mut rng);
        let (f, l) = (format!("fast{case}"), format!("limbs{case}"));
        let mut now = common::random_start(&mut rng);
        for _ in 0..8 {
            now = now.saturating_add(match rng.below(4) {
                0 => 0,
                1 => rng.below(1_000),
                2 => rng.below(10 * SEC),
                _ => rng.below(1 << 56),
            });
            let cap = limit.limit();
            let cost = match rng.below(6) {
                0 => 0,
                1 | 2 => 1,
                3 => cap,
                4 => cap.saturating_add(1),
                _ => rng.below(cap.min(LIM)),
            };
            if redis.fast_takes(&f, &limit, now, cost) {
                fast += 1;
            }
            calls += 1;
            redis.agree(&limit, &f, &l, now, cost, rng.chance(20));
        }
    }
    // Both paths ran often (about a third of these limits are beyond the fast path's bound).
    assert!(
        fast * 4 > calls && fast * 5 < calls * 4,
        "the fast path took {fast} of {calls} calls"
    );
}

/// Layered checks (several rules in one call, all or nothing, some on one key): the default
/// path (fast when it can) and the limb path answer the same and leave the same states.
#[test]
fn layered_checks_agree_with_the_limb_path() {
    let mut redis = Redis::start();
    let mut rng = Rng(0x1a7e_4ed0_0000_0003);
    let mut limits: Vec<Limit> = (0..40).map(|_| random_limit(&mut rng)).collect();
    limits.extend([
        Gcra::new(rate(5, SEC), 3).unwrap().into(),
        TokenBucket::new(rate(2, SEC), 4).unwrap().into(),
        FixedWindow::new(6, Duration::from_secs(1)).unwrap().into(),
        SlidingWindow::new(5, Duration::from_secs(2))
            .unwrap()
            .into(),
        Quota::new(7, CalendarUnit::Minute, "UTC").unwrap().into(),
    ]);
    let small = limits.len() - 5;
    let (mut fast, mut calls) = (0, 0);
    let mut now = NOW;
    for _ in 0..600 {
        now += rng.below(SEC / 3);
        let n = 1 + rng.below(4) as usize;
        let checks: Vec<(String, &Limit, u64)> = (0..n)
            .map(|_| {
                // Mostly the small limits, which say no now and then; each key names its
                // limit, and two checks may share one.
                let i = if rng.chance(75) {
                    small + rng.below(5) as usize
                } else {
                    rng.below(limits.len() as u64) as usize
                };
                let cost = rng.below(3).min(limits[i].limit());
                (format!("k{i}"), &limits[i], cost)
            })
            .collect();
        let peek = rng.chance(15);
        let (mode, limb_mode) = if peek {
            ("peek", "peek:limbs")
        } else {
            ("decide", "decide:limbs")
        };
        match redis.layered("peek:fast", "f:", &checks, now) {
            Ok(_) => fast += 1,
            Err(e) if e.to_string().contains("the fast path declined") => {}
            Err(e) => panic!("peek:fast failed otherwise: {e}"),
        }
        calls += 1;
        let a = redis.layered(mode, "f:", &checks, now).expect(mode);
        let b = redis
            .layered(limb_mode, "l:", &checks, now)
            .expect(limb_mode);
        assert_eq!(a, b, "{mode} of {n} checks at {now}");
        for (key, _, _) in &checks {
            assert_eq!(
                redis.get(&format!("f:{key}")),
                redis.get(&format!("l:{key}")),
                "{key} after {mode} at {now}"
            );
        }
    }
    assert!(
        fast * 2 > calls,
        "the fast path took {fast} of {calls} layered calls"
    );
}

/// Right below the bound (2^52 ticks of allowance, or a count of 2^52) the fast path answers,
/// and as the limb path does; at the bound it declines and the limb path answers.
#[test]
fn the_fast_path_answers_below_2_pow_52_and_the_limb_path_at_it() {
    let mut redis = Redis::start();
    // One tick a nanosecond: the allowance in ticks is the burst.
    let r = rate(SEC, SEC);
    for (i, burst) in [LIM - 1, LIM].into_iter().enumerate() {
        let limits: [Limit; 5] = [
            Gcra::new(r, burst).unwrap().into(),
            LeakyQueue::new(r, burst - 1).unwrap().into(),
            TokenBucket::new(r, burst).unwrap().into(),
            LeakyBucket::new(r, burst).unwrap().into(),
            FixedWindow::new(burst, Duration::from_secs(60))
                .unwrap()
                .into(),
        ];
        for (j, limit) in limits.iter().enumerate() {
            let (f, l) = (format!("f{i}-{j}"), format!("l{i}-{j}"));
            // A fresh key, a full burst, one more (limited), a cost above the burst, a refill
            // (or the next window).
            let steps = [
                (NOW, 0),
                (NOW, burst - 1),
                (NOW, 1),
                (NOW + 1, 1),
                (NOW + 1, burst + 1),
                (NOW + 7, 3),
                (NOW + 2 * LIM, burst - 1),
            ];
            for (now, cost) in steps {
                // Below the bound, every number is: the fast path answers.
                let below = burst < LIM && cost < LIM;
                assert_eq!(
                    redis.fast_takes(&f, limit, now, cost),
                    below,
                    "{limit:?}: cost {cost} at {now}"
                );
                redis.agree(limit, &f, &l, now, cost, false);
            }
        }
    }
}

/// A quota's period ends in under 2^52 ns: the fast path; in 2^52 ns or more (only a yearly
/// quota's can): the limb path, with the same answers.
#[test]
fn a_quota_ending_within_2_pow_52_ns_takes_the_fast_path_and_later_the_limbs() {
    let mut redis = Redis::start();
    let Limit::Quota(quota) = Limit::from(Quota::new(3, CalendarUnit::Year, "UTC").unwrap()) else {
        unreachable!()
    };
    let (_, end) = quota.period_at(NOW);
    let limit = Limit::from(quota);
    for (i, (ends_in, fast)) in [(LIM, false), (LIM - 1, true), (1, true)]
        .iter()
        .enumerate()
    {
        let now = end - ends_in;
        let (f, l) = (format!("q-f{i}"), format!("q-l{i}"));
        for cost in [0, 1, 2, 4, 1] {
            assert_eq!(
                redis.fast_takes(&f, &limit, now, cost),
                *fast,
                "{ends_in} ns before the end"
            );
            redis.agree(&limit, &f, &l, now, cost, false);
        }
    }
}

/// The sliding window weighs counts by nanoseconds: a limit times the window below 2^52 takes
/// the fast path, at 2^52 or more the limb path, with the same answers.
#[test]
fn a_sliding_window_below_2_pow_52_limit_nanoseconds_takes_the_fast_path_and_at_it_the_limbs() {
    let mut redis = Redis::start();
    // 4,503,599 * 10^9 < 2^52 <= 4,503,600 * 10^9.
    for (i, (limit, fast)) in [(4_503_599, true), (4_503_600, false)].iter().enumerate() {
        let limit = Limit::from(SlidingWindow::new(*limit, Duration::from_secs(1)).unwrap());
        let (f, l) = (format!("sw-f{i}"), format!("sw-l{i}"));
        let steps = [
            (NOW, 4_000_000),
            (NOW + SEC / 3, 503_599),
            (NOW + SEC / 2, 1),
            (NOW + SEC, 2_000_000),
            (NOW + SEC + SEC / 4, 3_000_000),
            (NOW + 3 * SEC, 1),
        ];
        for (now, cost) in steps {
            assert_eq!(
                redis.fast_takes(&f, &limit, now, cost),
                *fast,
                "{limit:?} at {now}"
            );
            redis.agree(&limit, &f, &l, now, cost, false);
        }
    }
}

/// Old servers (the limb path only) and new ones (fast first) share one Redis during a
/// rolling deploy: a key handed back and forth between the paths decides exactly as a key
/// only the limb path ever touched.
#[test]
fn keys_handed_between_the_fast_and_the_limb_path_decide_as_the_limb_path_alone() {
    let mut redis = Redis::start();
    let mut rng = Rng(0x0dd_5eed);
    let limits: Vec<Limit> = vec![
        Gcra::new(rate(5, SEC), 3).unwrap().into(),
        LeakyQueue::new(rate(7, 11 * SEC), 4).unwrap().into(),
        TokenBucket::new(rate(3, SEC), 4).unwrap().into(),
        LeakyBucket::new(rate(100, SEC), 10).unwrap().into(),
        FixedWindow::new(5, Duration::from_secs(1)).unwrap().into(),
        Quota::new(9, CalendarUnit::Second, "UTC").unwrap().into(),
        SlidingWindow::new(4, Duration::from_secs(1))
            .unwrap()
            .into(),
    ];
    for (i, limit) in limits.iter().enumerate() {
        let (mixed, limbs) = (format!("mixed{i}"), format!("only-limbs{i}"));
        let mut now = NOW;
        let mut fast = 0;
        for _ in 0..60 {
            now += rng.below(SEC / 2);
            let cost = rng.below(3);
            let mode = if rng.chance(50) {
                "decide"
            } else {
                "decide:limbs"
            };
            if mode == "decide" && redis.fast_takes(&mixed, limit, now, cost) {
                fast += 1;
            }
            let a = redis.ok(mode, &mixed, limit, now, cost);
            let b = redis.ok("decide:limbs", &limbs, limit, now, cost);
            assert_eq!(a, b, "{limit:?}: {mode} of {cost} at {now}");
            assert_eq!(redis.get(&mixed), redis.get(&limbs), "{limit:?} at {now}");
        }
        assert!(fast > 10, "{limit:?}: the fast path took {fast} calls");
    }
}

/// On Redis's clock the fast path reads TIME as the limb path does: its decision is the limb
/// path's at the `now` it replied with.
#[test]
fn redis_time_on_the_fast_path_is_the_limb_paths_at_the_same_now() {
    let mut redis = Redis::start();
    let limits: [Limit; 3] = [
        Gcra::new(rate(2, SEC), 2).unwrap().into(),
        TokenBucket::new(rate(2, SEC), 2).unwrap().into(),
        FixedWindow::new(2, Duration::from_secs(3600))
            .unwrap()
            .into(),
    ];
    for (i, limit) in limits.iter().enumerate() {
        for step in 0..4 {
            let reply = redis
                .call("decide:fast", &format!("t{i}"), limit, None, 1)
                .expect("decide:fast on Redis's clock");
            let now: u64 = reply[0].parse().expect("now in nanoseconds");
            let limbs = redis.ok("decide:limbs", &format!("tl{i}"), limit, now, 1);
            assert_eq!(reply, limbs, "{limit:?}: step {step}");
        }
    }
}

impl Redis {
    /// One check of `cost` under `limit` on `key` in the compact form the store sends (mode
    /// `decide1` or `peek1`) at `now`: the spec as the store builds it, or `spec` when given.
    fn compact(
        &mut self,
        peek: bool,
        key: &str,
        limit: &Limit,
        spec: Option<&str>,
        now: u64,
        cost: u64,
    ) -> redis::RedisResult<String> {
        let (key, mut args) = self.encoder.sent_command(limit, key, cost, now);
        if let Some(spec) = spec {
            args = vec![
                String::new(),
                String::new(),
                cost.to_string(),
                spec.to_owned(),
            ];
        }
        assert_eq!(args.len(), 4, "{limit:?} takes the compact form: {args:?}");
        args[0] = if peek { "peek1" } else { "decide1" }.to_owned();
        args[1] = now.to_string();
        redis::cmd("FCALL")
            .arg(self.function)
            .arg(1)
            .arg(key)
            .arg(args)
            .query(&mut self.con)
    }
}

/// The compact call of one check (what the store sends for a decide or a peek of one rule of
/// an algorithm the fast path knows) answers as the general form on the limb path (one string
/// of the five values, without `now`), and leaves the same state with the same lifetime: fast when it can, and through the
/// limb path when the fast path declines (a third of these limits are past its bound).
#[test]
fn the_compact_call_agrees_with_the_general_form_on_random_inputs() {
    let mut redis = Redis::start();
    let mut rng = Rng(0x5eed_c0de_0000_0002);
    for case in 0..200 {
        let limit = random_limit(&mut rng);
        let (c, l) = (format!("compact{case}"), format!("general{case}"));
        let mut now = common::random_start(&mut rng);
        for _ in 0..6 {
            let (later, cost) = common::random_step(&mut rng, now, limit.limit());
            now = later;
            let peek = rng.chance(20);
            let a = redis
                .compact(peek, &c, &limit, None, now, cost)
                .unwrap_or_else(|e| panic!("{limit:?}: compact call at {now} failed: {e}"));
            let limb_mode = if peek { "peek:limbs" } else { "decide:limbs" };
            let b = redis.ok(limb_mode, &l, &limit, now, cost);
            assert_eq!(
                a,
                b[1..].join(" "),
                "{limit:?}: {limb_mode} of {cost} at {now}"
            );
            assert_eq!(redis.get(&c), redis.get(&l), "{limit:?}: state at {now}");
            let (ta, tb) = (redis.pttl(&c), redis.pttl(&l));
            assert!(
                (ta - tb).abs() <= 50 && (ta < 0) == (tb < 0),
                "{limit:?}: lifetimes {ta} ms and {tb} ms at {now}"
            );
        }
    }
}

/// A compact call of an algorithm without a fast path (the store never sends one, but a
/// client of another version might) is decided by the limb path; a malformed one is refused
/// with an error naming what is wrong, never a script crash.
#[test]
fn a_compact_call_the_fast_path_cannot_take_goes_to_the_limb_path_or_is_refused() {
    let mut redis = Redis::start();
    let log: Limit = ratewarden_core::SlidingLog::new(2, Duration::from_secs(1))
        .unwrap()
        .into();
    for step in 0..3 {
        let a = redis
            .compact(
                false,
                "log-c",
                &log,
                Some("sliding-log 2 1000000000"),
                NOW,
                1,
            )
            .expect("a sliding log through decide1");
        let b = redis.ok("decide:limbs", "log-g", &log, NOW, 1);
        assert_eq!(a, b[1..].join(" "), "step {step}");
    }
    let gcra: Limit = Gcra::new(rate(5, SEC), 3).unwrap().into();
    for (spec, error) in [
        ("", "the check's spec is empty"),
        ("gcra 1 1", "gcra takes 3 parameters"),
        ("gcra x 1 3", "must be a decimal integer"),
        ("no-such 1 2 3", "unknown algorithm 'no-such'"),
    ] {
        let e = redis
            .compact(false, "bad", &gcra, Some(spec), NOW, 1)
            .expect_err(spec);
        assert!(
            e.to_string().contains(error),
            "spec `{spec}`: {e} should say `{error}`"
        );
    }
    let e = redis::cmd("FCALL")
        .arg(redis.function)
        .arg(1)
        .arg("bad")
        .arg(&["decide1", ""])
        .query::<String>(&mut redis.con)
        .expect_err("decide1 without its arguments");
    assert!(
        e.to_string().contains("takes one key and three arguments"),
        "{e}"
    );
}

/// The fast path remembers a quota's specs and period bounds, at most 4,096 of each, then
/// forgets them all and learns again: a quota of a second decided every second for over
/// 4,096 seconds (a new spec and new bounds each time) answers as the limb path throughout,
/// across the forgetting.
#[test]
fn a_quota_past_the_fast_paths_memory_of_specs_and_bounds_agrees_with_the_limb_path() {
    let mut redis = Redis::start();
    let quota: Limit = Quota::new(3, CalendarUnit::Second, "UTC").unwrap().into();
    let mut now = NOW;
    for step in 0..4_200u64 {
        now += SEC + step % 7;
        let cost = step % 3;
        let a = redis
            .compact(false, "quota-c", &quota, None, now, cost)
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        let b = redis.ok("decide:limbs", "quota-g", &quota, now, cost);
        assert_eq!(a, b[1..].join(" "), "step {step} at {now}");
    }
    assert_eq!(redis.get("quota-c"), redis.get("quota-g"));
}
