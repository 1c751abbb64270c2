//! The store's Redis Function (`src/lua/bigint.lua` + `src/lua/store.lua`, loaded as the library
//! `RedisStore::script()` gives) against the core, decision for
//! decision: randomized traces of every algorithm run through `ratewarden-core` and through
//! the script in a real `redis-server`, and must agree to the nanosecond. Also: the big-integer
//! library against `u128`, all-or-nothing layered decisions, key TTLs, Redis `TIME`,
//! concurrency permits, and argument validation.
//!
//! Each test starts its own `redis-server` on a free loopback port (killed when the test ends).
//! Time is always passed explicitly: nothing waits for a refill.

// The general form only: the compact call of one check is tested in tests/fast_path.rs.
#[allow(dead_code)]
#[path = "../src/encode.rs"]
mod encode;

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    Algorithm, AlgorithmKind, CalendarUnit, Clock, Concurrency, Decision, FixedWindow, Gcra,
    LeakyBucket, LeakyQueue, Limit, LimitState, Outcome, Quota, Rate, RealClock, SlidingLog,
    SlidingWindow, TokenBucket, NANOS_PER_SEC,
};
use ratewarden_redis::testing::Server;

const BIGINT: &str = include_str!("../src/lua/bigint.lua");

// ---------------------------------------------------------------------------------------------
// A redis-server of our own.

fn connect(server: &Server) -> redis::Connection {
    redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connecting to our redis-server")
}

// ---------------------------------------------------------------------------------------------
// The script.

/// One check of a script call: key, limit, cost (or signed delta), permit id.
#[derive(Clone)]
struct Call<'a> {
    key: String,
    limit: &'a Limit,
    amount: String,
    id: Option<u64>,
}

impl<'a> Call<'a> {
    fn new(key: &str, limit: &'a Limit, amount: impl ToString) -> Self {
        Self {
            key: key.to_owned(),
            limit,
            amount: amount.to_string(),
            id: None,
        }
    }

    fn with_id(mut self, id: u64) -> Self {
        self.id = Some(id);
        self
    }
}

struct Store {
    con: redis::Connection,
    /// The library's function, for FCALL.
    function: &'static str,
    // Last, so the connection closes before the server stops.
    _server: Server,
}

impl Store {
    fn start() -> Self {
        let server = Server::start();
        let mut con = connect(&server);
        let (function, library) = ratewarden_redis::RedisStore::script();
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(library)
            .query(&mut con)
            .expect("FUNCTION LOAD");
        Self {
            con,
            function,
            _server: server,
        }
    }

    /// Runs the script at `now` and, in the same transaction (so no key can expire in
    /// between), reads every `watch` key's expiry (Unix ms; -1 none, -2 no key) and removes
    /// it: a trace's logical time is not Redis's clock, and must not race it.
    fn traced(
        &mut self,
        mode: &str,
        now: u64,
        calls: &[Call<'_>],
        watch: &[String],
    ) -> (Vec<String>, Vec<i64>) {
        let args = Self::args(mode, Some(now), now, calls);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("FCALL")
            .arg(self.function)
            .arg(calls.len())
            .arg(calls.iter().map(|c| c.key.as_str()).collect::<Vec<_>>())
            .arg(&args);
        for key in watch {
            pipe.cmd("PEXPIRETIME")
                .arg(key)
                .cmd("PERSIST")
                .arg(key)
                .ignore();
        }
        let values: Vec<redis::Value> = pipe
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("the script failed in {mode} at {now}: {e}"));
        let mut values = values.into_iter();
        let reply = redis::from_redis_value(values.next().expect("the script's reply"))
            .expect("a reply of strings");
        let expires = values
            .map(|v| redis::from_redis_value(v).expect("PEXPIRETIME"))
            .collect();
        (reply, expires)
    }

    /// Runs the script with raw keys and arguments.
    fn raw(&mut self, keys: &[&str], args: &[String]) -> redis::RedisResult<Vec<String>> {
        redis::cmd("FCALL")
            .arg(self.function)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(&mut self.con)
    }

    /// The arguments for `calls` in `mode` (`now` None: Redis TIME), encoded as the store does.
    fn args(mode: &str, now: Option<u64>, hint: u64, calls: &[Call<'_>]) -> Vec<String> {
        let mut args = vec![
            mode.to_owned(),
            now.map_or_else(String::new, |n| n.to_string()),
            calls.len().to_string(),
        ];
        for call in calls {
            if let Some(id) = call.id {
                args.push(id.to_string());
            }
            encode::push_check(&mut args, call.limit, &call.amount, hint);
        }
        args
    }

    fn call(
        &mut self,
        mode: &str,
        now: Option<u64>,
        calls: &[Call<'_>],
    ) -> redis::RedisResult<Vec<String>> {
        let hint = now.unwrap_or_else(|| RealClock::new().now());
        let args = Self::args(mode, now, hint, calls);
        let keys: Vec<&str> = calls.iter().map(|c| c.key.as_str()).collect();
        self.raw(&keys, &args)
    }

    /// Decisions from a decide, peek, settle or acquire call at an explicit `now`.
    fn decisions(&mut self, mode: &str, now: u64, calls: &[Call<'_>]) -> Vec<Decision> {
        let reply = self
            .call(mode, Some(now), calls)
            .unwrap_or_else(|e| panic!("the script failed in {mode} at {now}: {e}"));
        let (used, decisions) = encode::decode(&reply).expect("a well-formed reply");
        assert_eq!(used, now, "the script must use the `now` it was given");
        assert_eq!(decisions.len(), calls.len());
        decisions
    }

    fn release(&mut self, now: u64, call: &Call<'_>) -> bool {
        let reply = self
            .call("release", Some(now), std::slice::from_ref(call))
            .expect("release");
        assert_eq!(
            reply.len(),
            2,
            "release replies now and one flag: {reply:?}"
        );
        match reply[1].as_str() {
            "1" => true,
            "0" => false,
            other => panic!("release replied {other}"),
        }
    }

    fn get(&mut self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.con)
            .expect("GET")
    }

    /// Redis's clock, in milliseconds since the epoch (rounded down).
    fn time_ms(&mut self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut self.con).expect("TIME");
        s * 1_000 + us / 1_000
    }

    /// When `key` expires (Unix ms), -1 without an expiry, -2 when it does not exist.
    fn expire_time(&mut self, key: &str) -> i64 {
        redis::cmd("PEXPIRETIME")
            .arg(key)
            .query(&mut self.con)
            .expect("PEXPIRETIME")
    }
}

// ---------------------------------------------------------------------------------------------
// The reference: the core, per key, as the in-memory store runs it.

/// Decides every check all or nothing, as `MemoryStore::decide_all` does; `acquire` takes
/// concurrency permits (`Limit::acquire`) instead of deciding.
fn reference_all(
    states: &mut HashMap<String, LimitState>,
    calls: &[Call<'_>],
    now: u64,
    acquire: bool,
) -> (Vec<Decision>, bool) {
    let cost = |c: &Call<'_>| c.amount.parse::<u64>().expect("a cost");
    let mut decisions = Vec::new();
    let mut all = true;
    for c in calls {
        let state = states.get(&c.key).cloned().unwrap_or_default();
        let d = match (acquire, c.limit) {
            (true, Limit::Concurrency(_)) => {
                let mut scratch = state;
                c.limit
                    .acquire(&mut scratch, now, cost(c), c.id.unwrap_or(0))
            }
            _ => c.limit.peek(&state, now, cost(c)),
        };
        all &= d.is_allowed();
        decisions.push(d);
    }
    if all {
        for (k, c) in calls.iter().enumerate() {
            let state = states.entry(c.key.clone()).or_default();
            decisions[k] = if acquire {
                c.limit.acquire(state, now, cost(c), c.id.unwrap_or(0))
            } else {
                c.limit.decide(state, now, cost(c))
            };
        }
    }
    (decisions, all)
}

/// Gives back permit `id` as the script does: lapsed permits first drop out (as every
/// acquire does), so a lapsed permit is not released.
fn reference_release(state: &mut LimitState, limit: &Limit, now: u64, id: u64) -> bool {
    if matches!(
        (limit, &*state),
        (Limit::Concurrency(_), LimitState::Concurrency(_))
    ) {
        limit.settle(state, now, 0);
        limit.release(state, id)
    } else {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized traces.

/// A limit under test, with the time scale its trace moves at.
struct Subject {
    limit: Limit,
    scale: u64,
}

fn subject(limit: impl Into<Limit>, scale: u64) -> Subject {
    Subject {
        limit: limit.into(),
        scale: scale.max(1),
    }
}

fn rate(count: u64, period_ns: u64) -> Rate {
    Rate::new(count, Duration::from_nanos(period_ns)).expect("a valid rate")
}

const SEC: u64 = NANOS_PER_SEC;
const MAX: u64 = u64::MAX;

/// Small limits, odd rates whose ticks are not nanoseconds, and huge values near u64::MAX.
fn subjects(kind: AlgorithmKind) -> Vec<Subject> {
    let ns = Duration::from_nanos;
    let rates = [
        (rate(5, SEC), 5, SEC),
        (rate(3, SEC), 3, SEC),
        (rate(7, 11 * SEC), 4, 11 * SEC),
        (rate(3, 7), 2, 7),
        (rate(MAX, MAX - 1), MAX, MAX),
        (rate(MAX, 1), 1, 1),
        (rate(1, MAX), 2, MAX),
        (rate(MAX - 2, 3 * SEC), MAX / 3, 3 * SEC),
    ];
    let windows = [
        (5, SEC),
        (3, SEC),
        (7, 11 * SEC),
        (1, 1),
        (2, 3),
        (MAX, MAX),
        (MAX - 1, 2 * SEC),
        (4, MAX / 2 + 1),
    ];
    match kind {
        AlgorithmKind::FixedWindow => windows
            .iter()
            .map(|&(l, w)| subject(FixedWindow::new(l, ns(w)).unwrap(), w))
            .collect(),
        AlgorithmKind::SlidingLog => windows
            .iter()
            .map(|&(l, w)| subject(SlidingLog::new(l, ns(w)).unwrap(), w))
            .collect(),
        AlgorithmKind::SlidingWindow => {
            // And split into sub-windows, evenly or not, down to slots of a nanosecond.
            let split = [
                (5, SEC, 10),
                (3, SEC, 2),
                (7, 11 * SEC, 7),
                (2, 3, 3),
                (4, 7, 6),
                (MAX, MAX, 60),
                (MAX - 1, 2 * SEC, 60),
                (4, MAX / 2 + 1, 13),
                // Slots of about 1,000 ns, which the short steps land inside: slots of many
                // charges, with the oldest one's first and last charges on either side of
                // the window's start.
                (40, 4_000, 4),
                (25, 3_001, 3),
            ];
            windows
                .iter()
                .map(|&(l, w)| subject(SlidingWindow::new(l, ns(w)).unwrap(), w))
                .chain(split.iter().map(|&(l, w, n)| {
                    let sw = SlidingWindow::new(l, ns(w)).unwrap();
                    subject(sw.with_sub_windows(n).unwrap(), w)
                }))
                .collect()
        }
        AlgorithmKind::TokenBucket => rates
            .iter()
            .map(|&(r, b, s)| subject(TokenBucket::new(r, b).unwrap(), s))
            .collect(),
        AlgorithmKind::LeakyBucket => rates
            .iter()
            .map(|&(r, b, s)| subject(LeakyBucket::new(r, b).unwrap(), s))
            .collect(),
        AlgorithmKind::Gcra => rates
            .iter()
            .map(|&(r, b, s)| subject(Gcra::new(r, b).unwrap(), s))
            .collect(),
        AlgorithmKind::LeakyQueue => rates
            .iter()
            .map(|&(r, b, s)| subject(LeakyQueue::new(r, b.min(MAX - 1)).unwrap(), s))
            .collect(),
        AlgorithmKind::Quota => [
            (5, CalendarUnit::Second, "UTC", SEC),
            (3, CalendarUnit::Minute, "America/New_York", 60 * SEC),
            (2, CalendarUnit::Hour, "Australia/Lord_Howe", 3_600 * SEC),
            (7, CalendarUnit::Day, "Asia/Kolkata", 86_400 * SEC),
            (4, CalendarUnit::Week, "Europe/London", 7 * 86_400 * SEC),
            (MAX, CalendarUnit::Month, "Europe/Berlin", 30 * 86_400 * SEC),
            (3, CalendarUnit::Year, "Pacific/Chatham", 365 * 86_400 * SEC),
        ]
        .iter()
        .map(|&(l, u, tz, s)| subject(Quota::new(l, u, tz).unwrap(), s))
        .collect(),
        AlgorithmKind::Concurrency => [
            (5, SEC),
            (3, 7 * SEC / 11),
            (1, 1),
            (MAX / 2, MAX),
            (4, MAX / 2),
        ]
        .iter()
        .map(|&(m, l)| subject(Concurrency::new(m, ns(l)).unwrap(), l))
        .collect(),
    }
}

fn cost(rng: &mut Rng, limit: &Limit) -> u64 {
    let l = limit.limit();
    match rng.below(10) {
        0 => 0,
        1..=3 => 1,
        4 => 2,
        5 => l,
        6 => l.saturating_add(1),
        7 => l.saturating_add(1 + rng.below(3)),
        _ => rng.below(l.saturating_add(1).max(1)).min(l),
    }
}

fn delta(rng: &mut Rng, limit: &Limit) -> i64 {
    let l = i64::try_from(limit.limit()).unwrap_or(i64::MAX);
    if matches!(limit, Limit::Concurrency(_)) {
        // Larger ones could overflow the core's own count of permits (see the report).
        return rng.below(7) as i64 - 3;
    }
    match rng.below(12) {
        0 => i64::MIN,
        1 => i64::MAX,
        2 => -l,
        3 => l,
        4 => (rng.next() >> 1) as i64,
        5 => -((rng.next() >> 1) as i64),
        _ => rng.below(7) as i64 - 3,
    }
}

/// How far the clock moves before a step.
fn advance(rng: &mut Rng, scale: u64) -> u64 {
    match rng.below(12) {
        0..=2 => 0,
        3 | 4 => rng.below(1_000),
        5..=7 => rng.below(scale),
        8 | 9 => rng.below(scale.saturating_mul(3)),
        10 => rng.below(1 << 40),
        _ => rng.below(1 << 20) * rng.below(1 << 30),
    }
}

/// One operation of a trace.
enum Op {
    Decide,
    Peek,
    Settle,
    Acquire,
    Release,
}

/// Runs one randomized trace: `steps` operations on a few keys. Limits of different
/// algorithms share keys (a state of another algorithm is a key never seen); limits of the
/// same algorithm do not, since a key must name its limit (a state is read under whatever
/// parameters the next check brings, in the core as in the script).
fn trace(
    store: &mut Store,
    name: &str,
    subjects: &[Subject],
    start: u64,
    seed: u64,
    steps: usize,
    tally: &mut Tally,
) {
    let mut rng = Rng(seed | 1);
    // keys[i]: subject i's keys, shared with the subjects of other algorithms.
    let keys: Vec<Vec<String>> = subjects
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let slot = subjects[..i]
                .iter()
                .filter(|o| o.limit.kind() == s.limit.kind())
                .count();
            (0..4)
                .map(|k| format!("{name}|{seed}|{slot}|k{k}"))
                .collect()
        })
        .collect();
    let mut all_keys: Vec<String> = keys.iter().flatten().cloned().collect();
    all_keys.sort();
    all_keys.dedup();
    let mut states: HashMap<String, LimitState> = HashMap::new();
    // The limit that last wrote each key, to judge whether its state is fresh.
    let mut writer: HashMap<String, usize> = HashMap::new();
    let mut now = start;
    let scale = subjects.iter().map(|s| s.scale).min().unwrap_or(SEC);
    let pick = |rng: &mut Rng| {
        let which = rng.below(subjects.len() as u64) as usize;
        let key = keys[which][rng.below(4) as usize].clone();
        (which, key)
    };
    for step in 0..steps {
        now = now.saturating_add(advance(&mut rng, scale));
        let (op, picks): (Op, Vec<(usize, String, String)>) = match rng.below(20) {
            0..=8 => {
                let (w, k) = pick(&mut rng);
                let c = cost(&mut rng, &subjects[w].limit);
                // Permits are mostly taken with ids, so that releases find them.
                let permits = matches!(subjects[w].limit, Limit::Concurrency(_));
                let op = match rng.below(10) {
                    0..=4 if permits => Op::Acquire,
                    5 | 6 if permits => Op::Release,
                    _ => Op::Decide,
                };
                (op, vec![(w, k, c.to_string())])
            }
            9..=11 => {
                let (w, k) = pick(&mut rng);
                let c = cost(&mut rng, &subjects[w].limit);
                (Op::Peek, vec![(w, k, c.to_string())])
            }
            12..=14 => {
                let (w, k) = pick(&mut rng);
                let d = delta(&mut rng, &subjects[w].limit);
                (Op::Settle, vec![(w, k, d.to_string())])
            }
            15..=17 => {
                // Layered: two or three checks, all or nothing (a key may appear twice).
                let n = 2 + rng.below(2);
                let picks = (0..n)
                    .map(|_| {
                        let (w, k) = pick(&mut rng);
                        let c = cost(&mut rng, &subjects[w].limit).min(2);
                        (w, k, c.to_string())
                    })
                    .collect();
                let op = if rng.chance(30) {
                    Op::Acquire
                } else {
                    Op::Decide
                };
                (op, picks)
            }
            18 => {
                let (w, k) = pick(&mut rng);
                let c = cost(&mut rng, &subjects[w].limit);
                (Op::Acquire, vec![(w, k, c.to_string())])
            }
            _ => {
                let (w, k) = pick(&mut rng);
                (Op::Release, vec![(w, k, "0".to_owned())])
            }
        };
        let with_ids = matches!(op, Op::Acquire | Op::Release);
        let calls: Vec<Call<'_>> = picks
            .iter()
            .map(|(w, k, amount)| {
                let call = Call::new(k, &subjects[*w].limit, amount);
                // A release mostly names a permit the key holds (or held: it may have lapsed).
                let held: Vec<u64> = match states.get(k) {
                    Some(LimitState::Concurrency(c)) => c.held.iter().map(|h| h.id).collect(),
                    _ => Vec::new(),
                };
                if matches!(op, Op::Release) && !held.is_empty() && rng.chance(80) {
                    call.with_id(held[rng.below(held.len() as u64) as usize])
                } else if with_ids {
                    call.with_id(rng.below(3) + 1)
                } else {
                    call
                }
            })
            .collect();
        let mode = match op {
            Op::Decide => "decide",
            Op::Peek => "peek",
            Op::Settle => "settle",
            Op::Acquire => "acquire",
            Op::Release => "release",
        };
        let at = format!("{name} seed {seed} step {step} at {now}: {mode} {picks:?}");
        let t0 = store.time_ms();
        let (reply, expires) = store.traced(mode, now, &calls, &all_keys);
        // The keys the script wrote (set or deleted), each with its last writer.
        let mut written: Vec<(String, usize)> = Vec::new();
        match op {
            Op::Decide | Op::Acquire => {
                let (used, got) = encode::decode(&reply).expect("a reply");
                assert_eq!(used, now);
                let acquire = matches!(op, Op::Acquire);
                let (want, all) = reference_all(&mut states, &calls, now, acquire);
                assert_eq!(got, want, "{at}");
                tally.count(&want, calls.len() > 1);
                if all {
                    for ((w, k, _), d) in picks.iter().zip(&want) {
                        let permits = matches!(subjects[*w].limit, Limit::Concurrency(_));
                        if d.is_allowed() || (acquire && permits) {
                            written.push((k.clone(), *w));
                        }
                    }
                }
            }
            Op::Peek => {
                let (_, got) = encode::decode(&reply).expect("a reply");
                let c = &calls[0];
                let state = states.get(&c.key).cloned().unwrap_or_default();
                let want = c.limit.peek(&state, now, c.amount.parse().expect("a cost"));
                assert_eq!(got, [want], "{at}");
                tally.peeks += 1;
            }
            Op::Settle => {
                let (_, got) = encode::decode(&reply).expect("a reply");
                let c = &calls[0];
                let state = states.entry(c.key.clone()).or_default();
                c.limit
                    .settle(state, now, c.amount.parse().expect("a delta"));
                let after = c.limit.peek(state, now, 0);
                let want = Decision::new(
                    Outcome::Allowed,
                    after.limit,
                    after.remaining,
                    after.reset_after_ns,
                );
                assert_eq!(got, [want], "{at}");
                tally.settles += 1;
                written.push((c.key.clone(), picks[0].0));
            }
            Op::Release => {
                let c = &calls[0];
                let state = states.entry(c.key.clone()).or_default();
                let matching = matches!(
                    (c.limit, &*state),
                    (Limit::Concurrency(_), LimitState::Concurrency(_))
                );
                let want = reference_release(state, c.limit, now, c.id.unwrap_or(0));
                assert_eq!(reply[1..], [if want { "1" } else { "0" }], "{at}");
                tally.releases[usize::from(want)] += 1;
                if matching {
                    written.push((c.key.clone(), picks[0].0));
                }
            }
        }
        // A written key exists exactly when its state is not fresh, and lives at least until
        // its reset; a key holding a live state is never missing.
        let mut fresh_writes: Vec<&String> = Vec::new();
        for (k, w) in written.iter().rev() {
            if !fresh_writes.contains(&k) {
                fresh_writes.push(k);
                writer.insert(k.clone(), *w);
            }
        }
        for (k, &expires) in all_keys.iter().zip(&expires) {
            let Some(&w) = writer.get(k) else {
                assert_eq!(expires, -2, "{k} was never written: {at}");
                continue;
            };
            let limit = &subjects[w].limit;
            let state = states.get(k).cloned().unwrap_or_default();
            let fresh = limit.is_fresh(&state, now);
            tally.keys_checked += 1;
            if fresh_writes.contains(&k) {
                if fresh {
                    assert_eq!(expires, -2, "{k}: a fresh state must be deleted: {at}");
                } else {
                    let reset = limit.peek(&state, now, 0).reset_after_ns;
                    let at_least = reset.div_ceil(1_000_000) + 1;
                    assert!(
                        expires >= 0 && (expires as u64).saturating_sub(t0) >= at_least,
                        "{k} expires at {expires} ms, set after {t0}, resets in {reset} ns: {at}"
                    );
                }
            } else if !fresh {
                assert!(expires != -2, "{k} holds a live state but is gone: {at}");
            }
        }
    }
}

/// What the traces covered, printed so a run shows it tested more than `allowed`.
#[derive(Debug, Default)]
struct Tally {
    allowed: usize,
    delayed: usize,
    limited: usize,
    cost_too_high: usize,
    layered: usize,
    peeks: usize,
    settles: usize,
    /// Releases refused and granted.
    releases: [usize; 2],
    /// Key states compared for existence and expiry after a step.
    keys_checked: usize,
}

impl Tally {
    fn count(&mut self, decisions: &[Decision], layered: bool) {
        self.layered += usize::from(layered);
        for d in decisions {
            match d.outcome {
                Outcome::Allowed => self.allowed += 1,
                Outcome::Delayed { .. } => self.delayed += 1,
                Outcome::Limited { .. } => self.limited += 1,
                Outcome::CostTooHigh => self.cost_too_high += 1,
            }
        }
    }
}

fn run_traces(kind: AlgorithmKind, steps: usize) {
    let mut store = Store::start();
    let subjects = subjects(kind);
    let mut tally = Tally::default();
    let starts = [
        1_700_000_000 * SEC + 123_456_789,
        0,
        MAX - (1 << 44),
        MAX - 5 * SEC,
    ];
    for (i, s) in subjects.iter().enumerate() {
        for (j, &start) in starts.iter().enumerate() {
            let seed = 0x9e37_79b9_7f4a_7c15 ^ ((i as u64) << 8 | j as u64);
            let steps = if j == 0 { steps } else { steps / 4 };
            trace(
                &mut store,
                kind.as_str(),
                std::slice::from_ref(s),
                start,
                seed,
                steps,
                &mut tally,
            );
        }
    }
    // Every limit of the kind at once, in layered checks too.
    trace(
        &mut store,
        &format!("{kind}-mixed"),
        &subjects,
        1_700_000_000 * SEC,
        42,
        steps * 2,
        &mut tally,
    );
    println!("{kind}: {} limits, {tally:?}", subjects.len());
    assert!(tally.allowed > 0 && tally.limited > 0 && tally.cost_too_high > 0);
}

#[test]
fn fixed_window_matches_the_core() {
    run_traces(AlgorithmKind::FixedWindow, 300);
}

#[test]
fn sliding_log_matches_the_core() {
    run_traces(AlgorithmKind::SlidingLog, 300);
}

#[test]
fn sliding_window_matches_the_core() {
    run_traces(AlgorithmKind::SlidingWindow, 300);
}

#[test]
fn token_bucket_matches_the_core() {
    run_traces(AlgorithmKind::TokenBucket, 300);
}

#[test]
fn leaky_bucket_matches_the_core() {
    run_traces(AlgorithmKind::LeakyBucket, 300);
}

#[test]
fn leaky_queue_matches_the_core() {
    run_traces(AlgorithmKind::LeakyQueue, 300);
}

#[test]
fn gcra_matches_the_core() {
    run_traces(AlgorithmKind::Gcra, 300);
}

#[test]
fn quota_matches_the_core() {
    run_traces(AlgorithmKind::Quota, 300);
}

#[test]
fn concurrency_matches_the_core() {
    run_traces(AlgorithmKind::Concurrency, 300);
}

/// Every algorithm's limits on the same few keys: a key's state changes algorithm (as when a
/// rule is edited), and the script must treat another algorithm's state as the core does.
#[test]
fn every_algorithm_on_shared_keys_matches_the_core() {
    let mut store = Store::start();
    let subjects: Vec<Subject> = AlgorithmKind::ALL
        .into_iter()
        .flat_map(|k| subjects(k).into_iter().take(3))
        .collect();
    let mut tally = Tally::default();
    trace(
        &mut store,
        "all",
        &subjects,
        1_700_000_000 * SEC,
        7,
        1_500,
        &mut tally,
    );
    println!("all algorithms on shared keys: {tally:?}");
}

// ---------------------------------------------------------------------------------------------
// The big-integer library against u128.

/// EVAL of bigint.lua and a small driver running one operation per call.
const DRIVER: &str = r#"
local a, b = BN.from_dec(ARGV[1]), BN.from_dec(ARGV[2])
local out = {}
local function put(x) out[#out + 1] = BN.to_dec(x) end
put(BN.sat128(BN.add(a, b)))
put(BN.ssub(a, b))
out[#out + 1] = tostring(BN.cmp(a, b))
put(BN.mul(BN.sat64(a), BN.sat64(b)))
if not BN.is_zero(b) then
  local q, r = BN.divmod(a, b)
  put(q) put(r) put(BN.div_ceil(a, b))
end
put(BN.sat64(a))
put(BN.min(a, b)) put(BN.max(a, b))
return out
"#;

fn bigint_expected(a: u128, b: u128) -> Vec<String> {
    let sat64 = |x: u128| x.min(u128::from(u64::MAX));
    let mut out = vec![
        a.saturating_add(b).to_string(),
        a.saturating_sub(b).to_string(),
        (a.cmp(&b) as i8).to_string(),
        (sat64(a) * sat64(b)).to_string(),
    ];
    if let (Some(q), Some(r)) = (a.checked_div(b), a.checked_rem(b)) {
        out.extend([q.to_string(), r.to_string(), a.div_ceil(b).to_string()]);
    }
    out.extend([
        sat64(a).to_string(),
        a.min(b).to_string(),
        a.max(b).to_string(),
    ]);
    out
}

fn bigint_eval(
    con: &mut redis::Connection,
    script: &redis::Script,
    a: u128,
    b: u128,
) -> Vec<String> {
    script
        .arg(a.to_string())
        .arg(b.to_string())
        .invoke(con)
        .unwrap_or_else(|e| panic!("bigint driver on {a}, {b}: {e}"))
}

/// Values that stress the limbs: any width, powers of two and their neighbours, limb edges.
fn wide() -> impl Strategy<Value = u128> {
    prop_oneof![
        any::<u128>(),
        any::<u64>().prop_map(u128::from),
        (0u32..128, any::<bool>()).prop_map(|(s, below)| (1u128 << s) - u128::from(below)),
        (0u32..128).prop_flat_map(|bits| 0..=u128::MAX >> (127 - bits)),
        (1u32..6, any::<u128>()).prop_map(|(limbs, x)| x & ((1u128 << (24 * limbs)) - 1) | 1),
        Just(0u128),
        Just(u128::MAX),
        0u128..1_000,
    ]
}

#[test]
fn bigint_agrees_with_u128() {
    let server = Server::start();
    let con = RefCell::new(connect(&server));
    let script = redis::Script::new(&format!("{BIGINT}\n{DRIVER}"));
    // Fixed cases: Knuth's add-back step (rare at random), limb edges, the extremes.
    let fixed: [(u128, u128); 9] = [
        (
            39_614_078_895_948_927_361_949_368_320,
            2_361_183_241_434_822_606_849,
        ),
        (
            664_613_958_278_376_679_319_734_733_368_197_120,
            2_361_183_241_434_822_606_849,
        ),
        (
            4_364_394_676_360_941_355_464_220_446_695_130,
            19_612_609_029_198_577_663,
        ),
        (u128::MAX, u128::MAX),
        (u128::MAX, 1),
        (u128::MAX, u128::from(u64::MAX)),
        (u128::MAX, (1 << 24) - 1),
        (1 << 24, 1 << 24),
        (0, 0),
    ];
    for (a, b) in fixed {
        let got = bigint_eval(&mut con.borrow_mut(), &script, a, b);
        assert_eq!(got, bigint_expected(a, b), "{a} op {b}");
    }
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(wide(), wide()), |(a, b)| {
            let got = bigint_eval(&mut con.borrow_mut(), &script, a, b);
            prop_assert_eq!(got, bigint_expected(a, b), "{} op {}", a, b);
            Ok(())
        })
        .unwrap();
    // Decimal strings: malformed or too wide ones are refused.
    let parse = redis::Script::new(&format!(
        "{BIGINT}\nlocal v = BN.from_dec(ARGV[1]) if v == nil then return 'nil' end return BN.to_dec(v)"
    ));
    let mut con = con.borrow_mut();
    for (input, want) in [
        ("007", "7"),
        ("0", "0"),
        ("", "nil"),
        ("-1", "nil"),
        ("1e3", "nil"),
        (" 1", "nil"),
        ("22300745198530623141535718272648361505980416", "nil"), // 2^144: 44 digits
        ("00000000000000000000000000000000000000000001", "nil"), // 44 digits
        (
            "9999999999999999999999999999999999999999999",
            "9999999999999999999999999999999999999999999",
        ),
        (
            "340282366920938463463374607431768211456",
            "340282366920938463463374607431768211456",
        ),
    ] {
        let got: String = parse.arg(input).invoke(&mut *con).expect("from_dec");
        assert_eq!(got, want, "from_dec({input:?})");
    }
}

// ---------------------------------------------------------------------------------------------
// Layered decisions, TTLs, TIME, permits and validation.

#[test]
fn layered_is_all_or_nothing() {
    let mut store = Store::start();
    let window = Duration::from_secs(60);
    let per_ip = Limit::from(FixedWindow::new(2, window).unwrap());
    let per_key = Limit::from(SlidingLog::new(3, window).unwrap());
    let global = Limit::from(Gcra::new(Rate::per_second(100).unwrap(), 100).unwrap());
    let layers = |ip: &str| {
        vec![
            Call::new("layers|global", &global, 1),
            Call::new(ip, &per_ip, 1),
            Call::new("layers|key", &per_key, 1),
        ]
    };
    let now = 3_600 * SEC;
    for _ in 0..2 {
        let d = store.decisions("decide", now, &layers("layers|ip|a"));
        assert!(d.iter().all(Decision::is_allowed), "{d:?}");
    }
    let snapshot =
        |store: &mut Store| ["layers|global", "layers|ip|a", "layers|key"].map(|k| store.get(k));
    let before = snapshot(&mut store);
    let third = store.decisions("decide", now, &layers("layers|ip|a"));
    assert!(!third[1].is_allowed() && third[0].is_allowed() && third[2].is_allowed());
    assert_eq!(
        snapshot(&mut store),
        before,
        "a rejected layer changed a key"
    );
    assert_eq!(
        third[0].remaining, 97,
        "the peeked global layer reports as if charged"
    );
    // Every layer rejecting the same way: none charged, whatever the order.
    let all = store.decisions("decide", now, &layers("layers|ip|b"));
    assert!(all.iter().all(Decision::is_allowed));
    let before = snapshot(&mut store);
    let over = store.decisions("decide", now, &layers("layers|ip|c"));
    assert!(!over[2].is_allowed() && over[1].is_allowed());
    assert_eq!(snapshot(&mut store), before);
    assert_eq!(
        store.get("layers|ip|c"),
        None,
        "a rejected layer created a key"
    );
}

/// How much longer a key lives on Redis's clock when the caller gives the time (store.lua).
const CALLER_SLACK_MS: u64 = 3_600_000;

#[test]
fn keys_live_until_their_reset_and_fresh_states_are_deleted() {
    let mut store = Store::start();
    let gcra = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap());
    let now = 1_000 * SEC;
    // Nothing charged, nothing stored.
    store.decisions("decide", now, &[Call::new("ttl|a", &gcra, 0)]);
    assert_eq!(store.expire_time("ttl|a"), -2);
    // Three cells at 5/s: fresh again in 600 ms; the key lives 601 ms (one to spare), plus
    // the hour a caller's clock is given to lag Redis's (this test gives the time).
    let t0 = store.time_ms();
    let d = store.decisions("decide", now, &[Call::new("ttl|a", &gcra, 3)]);
    let t1 = store.time_ms();
    assert_eq!(d[0].reset_after_ns, 600_000_000);
    let expires = store.expire_time("ttl|a") as u64;
    assert!(
        expires >= t0 + 601 + CALLER_SLACK_MS && expires <= t1 + 601 + CALLER_SLACK_MS,
        "expires at {expires}, set between {t0} and {t1}"
    );
    // A reset that is not a whole number of milliseconds rounds up.
    let odd = Limit::from(
        Gcra::new(
            Rate::new(3, Duration::from_nanos(1_000_000_001)).unwrap(),
            3,
        )
        .unwrap(),
    );
    let t0 = store.time_ms();
    let d = store.decisions("decide", now, &[Call::new("ttl|odd", &odd, 1)]);
    let t1 = store.time_ms();
    assert_eq!(d[0].reset_after_ns, 333_333_334);
    let expires = store.expire_time("ttl|odd") as u64;
    assert!(
        expires >= t0 + 335 + CALLER_SLACK_MS && expires <= t1 + 335 + CALLER_SLACK_MS,
        "{expires} vs {t0}..{t1}"
    );
    // Refunding everything makes the state fresh: the key goes.
    store.decisions("settle", now, &[Call::new("ttl|a", &gcra, -3)]);
    assert_eq!(store.expire_time("ttl|a"), -2);
    // A settle that leaves a debt keeps the key as long as the debt.
    let t0 = store.time_ms();
    store.decisions("settle", now, &[Call::new("ttl|b", &gcra, 50)]);
    let expires = store.expire_time("ttl|b") as u64;
    assert!(
        expires >= t0 + 10_001,
        "a 10 s debt expires at {expires}, set after {t0}"
    );
    // A state that is fresh by the time of a write is deleted rather than rewritten.
    store.decisions("decide", now + 20 * SEC, &[Call::new("ttl|b", &gcra, 0)]);
    assert_eq!(store.expire_time("ttl|b"), -2);
    // Huge resets (centuries) still make valid expiries.
    let slow = Limit::from(Gcra::new(rate(1, MAX), 2).unwrap());
    let d = store.decisions("decide", now, &[Call::new("ttl|slow", &slow, 2)]);
    assert_eq!(d[0].reset_after_ns, MAX);
    assert!(store.expire_time("ttl|slow") > 0);
}

#[test]
fn now_comes_from_redis_time_when_not_given() {
    let mut store = Store::start();
    let limit = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap());
    let clock = RealClock::new().now();
    let reply = store
        .call("decide", None, &[Call::new("time|a", &limit, 1)])
        .expect("decide at Redis's time");
    let (now, d) = encode::decode(&reply).expect("a reply");
    assert!(
        now.abs_diff(clock) < SEC,
        "Redis TIME gave {now}, the system clock {clock}"
    );
    assert!(d[0].is_allowed());
    // On Redis's own clock the key lives to its reset (200 ms, one to spare), with no
    // slack: the clock that decides is the clock that expires. (Redis stamps the expiry
    // with the script's start, a millisecond either side of its TIME.)
    let expires = store.expire_time("time|a") as u64;
    let decided_ms = now / 1_000_000;
    assert!(
        expires >= decided_ms + 200 && expires <= decided_ms + 202,
        "expires at {expires}, decided at {decided_ms} ms"
    );
    // The charge was made at that time: a peek there sees it.
    let peek = store.decisions("peek", now, &[Call::new("time|a", &limit, 0)]);
    assert_eq!(peek[0].remaining, 4);
    assert_eq!(peek[0].reset_after_ns, 200_000_000);
    // Quotas pick the period holding Redis's time.
    let quota = Limit::from(Quota::new(3, CalendarUnit::Day, "UTC").unwrap());
    let reply = store
        .call("decide", None, &[Call::new("time|q", &quota, 1)])
        .expect("quota at Redis's time");
    let (now, d) = encode::decode(&reply).expect("a reply");
    let want = quota.peek(&LimitState::default(), now, 1);
    assert_eq!(d[0], want);
}

#[test]
fn quota_periods_around_the_callers_clock() {
    let mut store = Store::start();
    let quota = Limit::from(Quota::new(3, CalendarUnit::Hour, "America/New_York").unwrap());
    let hour = 3_600 * SEC;
    let now = 1_700_000_000 * SEC;
    let mut state = LimitState::default();
    // The caller's clock an hour behind or ahead of the script's `now` still finds the period.
    for (i, hint) in [now - hour, now, now + hour - 1].into_iter().enumerate() {
        let at = now + i as u64;
        let args = Store::args("decide", Some(at), hint, &[Call::new("quota|a", &quota, 1)]);
        let reply = store.raw(&["quota|a"], &args).expect("decide");
        let (_, got) = encode::decode(&reply).expect("a reply");
        assert_eq!(got, [quota.decide(&mut state, at, 1)], "hint {hint}");
    }
    // Two periods off: the script cannot know the period, and says so.
    let args = Store::args(
        "decide",
        Some(now + 3 * hour),
        now,
        &[Call::new("quota|b", &quota, 1)],
    );
    let err = store
        .raw(&["quota|b"], &args)
        .expect_err("now outside the periods");
    assert!(
        err.to_string().contains("outside every calendar period"),
        "{err}"
    );
}

#[test]
fn concurrency_permits_and_leases() {
    let mut store = Store::start();
    let limit = Limit::from(Concurrency::new(2, Duration::from_secs(30)).unwrap());
    let key = "permits|k";
    let now = 10 * SEC;
    let acquire = |store: &mut Store, at: u64, id: u64| {
        store.decisions("acquire", at, &[Call::new(key, &limit, 1).with_id(id)])[0]
    };
    assert!(acquire(&mut store, now, 1).is_allowed());
    assert!(acquire(&mut store, now, 2).is_allowed());
    let refused = acquire(&mut store, now, 3);
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(30)));
    assert!(store.release(now, &Call::new(key, &limit, 0).with_id(1)));
    assert!(
        !store.release(now, &Call::new(key, &limit, 0).with_id(1)),
        "released twice"
    );
    assert!(acquire(&mut store, now, 3).is_allowed());
    // Nobody releases 2 or 3: their leases run out after 30 s.
    let later = now + 30 * SEC;
    assert!(acquire(&mut store, later, 4).is_allowed());
    assert!(acquire(&mut store, later, 5).is_allowed());
    assert!(
        !store.release(later, &Call::new(key, &limit, 0).with_id(3)),
        "a lapsed permit"
    );
    assert!(store.release(later, &Call::new(key, &limit, 0).with_id(4)));
    assert!(store.release(later, &Call::new(key, &limit, 0).with_id(5)));
    assert_eq!(store.expire_time(key), -2, "no permit held: the key goes");
    // Release under another algorithm gives nothing back, and acquire just decides.
    let gcra = Limit::from(Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap());
    assert!(acquire(&mut store, later, 6).is_allowed());
    assert!(!store.release(later, &Call::new(key, &gcra, 0).with_id(6)));
    let d = store.decisions(
        "acquire",
        later,
        &[Call::new("permits|g", &gcra, 1).with_id(9)],
    );
    assert!(d[0].is_allowed());
    assert!(!store.release(later, &Call::new("permits|g", &gcra, 0).with_id(9)));
}

#[test]
fn bad_arguments_are_refused_before_anything_is_written() {
    let mut store = Store::start();
    let gcra = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap());
    let good = Store::args("decide", Some(SEC), SEC, &[Call::new("bad|a", &gcra, 1)]);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let cases: Vec<(Vec<&str>, Vec<String>, &str)> = vec![
        (vec!["bad|a"], s(&["charge", "1", "1"]), "unknown mode"),
        (vec!["bad|a"], s(&["decide", "-1", "0"]), "now must be"),
        (
            vec!["bad|a"],
            s(&["decide", "18446744073709551616", "0"]),
            "now must be",
        ),
        (vec!["bad|a"], s(&["decide", "1", "x"]), "number of checks"),
        (
            vec!["bad|a"],
            s(&["decide", "1", "2"]),
            "differs from the number of keys",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcrx", "1", "0"]),
            "unknown algorithm 'gcrx'",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcra", "-1", "3", "1", "1", "1"]),
            "cost must be",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcra", "1", "2", "1", "1"]),
            "gcra takes 3 parameters",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcra", "1", "3", "0", "1", "1"]),
            "ticks_per_ns must not be zero",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcra", "1", "3", "1", "1"]),
            "missing parameters",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "gcra", "1", "3", "1", "1", "1", "extra"]),
            "unexpected arguments",
        ),
        (
            vec!["bad|a"],
            s(&[
                "settle",
                "1",
                "1",
                "gcra",
                "9223372036854775808",
                "3",
                "1",
                "1",
                "1",
            ]),
            "delta",
        ),
        (
            vec!["bad|a"],
            s(&[
                "settle",
                "1",
                "1",
                "gcra",
                "-9223372036854775809",
                "3",
                "1",
                "1",
                "1",
            ]),
            "delta",
        ),
        (
            vec!["bad|a"],
            s(&["acquire", "1", "1", "concurrency", "1", "2", "1", "1"]),
            "permit id must be",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "quota", "1", "3", "5", "10", "9"]),
            "ends before it starts",
        ),
        (
            vec!["bad|a"],
            s(&["decide", "1", "1", "fixed-window", "1", "2", "5", "1.5"]),
            "window_ns must be",
        ),
    ];
    for (keys, args, message) in cases {
        let err = store.raw(&keys, &args).expect_err(message);
        let text = err.to_string();
        assert!(
            text.contains("ratewarden:") && text.contains(message),
            "{message}: got {text}"
        );
    }
    // A bad second check: the first key is not charged.
    let mut args = good.clone();
    args[2] = "2".to_owned();
    args.extend(s(&["gcra", "1", "3", "1", "0", "1"]));
    let err = store
        .raw(&["bad|a", "bad|b"], &args)
        .expect_err("zero ticks_per_cell");
    assert!(
        err.to_string()
            .contains("check 2: gcra ticks_per_cell must not be zero"),
        "{err}"
    );
    assert_eq!(store.get("bad|a"), None);
    // Keys that hold something else are refused, not overwritten.
    let _: () = redis::cmd("SET")
        .arg("bad|s")
        .arg("hello")
        .query(&mut store.con)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("bad|l")
        .arg("x")
        .query(&mut store.con)
        .unwrap();
    for key in ["bad|s", "bad|l"] {
        let args = Store::args(
            "decide",
            Some(SEC),
            SEC,
            &[Call::new("bad|a", &gcra, 1), Call::new(key, &gcra, 1)],
        );
        let err = store.raw(&["bad|a", key], &args).expect_err("not a state");
        assert!(err.to_string().contains("ratewarden:"), "{err}");
        assert_eq!(store.get("bad|a"), None);
    }
    let _: () = redis::cmd("SET")
        .arg("bad|g")
        .arg("gcra:12x")
        .query(&mut store.con)
        .unwrap();
    let args = Store::args("decide", Some(SEC), SEC, &[Call::new("bad|g", &gcra, 1)]);
    let err = store.raw(&["bad|g"], &args).expect_err("unreadable");
    assert!(err.to_string().contains("unreadable gcra state"), "{err}");
    // And the good call works.
    let reply = store.raw(&["bad|a"], &good).expect("a good call");
    assert_eq!(reply[1], "allowed");
}

// ---------------------------------------------------------------------------------------------
// The library on the server.

#[test]
fn the_store_loads_its_library_again_when_redis_lost_it() {
    use ratewarden_core::AsyncStore;
    use ratewarden_redis::{RedisConfig, RedisStore, Target, TimeSource};

    let server = Server::start();
    let mut con = connect(&server);
    let store = RedisStore::new(RedisConfig {
        target: Target::Single(format!("redis://127.0.0.1:{}/", server.port)),
        deadline: Duration::from_secs(5),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .expect("a store");
    let limit = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (function, _) = RedisStore::script();
    let libraries = |con: &mut redis::Connection| -> Vec<redis::Value> {
        redis::cmd("FUNCTION")
            .arg("LIST")
            .query(con)
            .expect("FUNCTION LIST")
    };
    runtime.block_on(async {
        let d = store.decide(&limit, "lib|a", SEC, 1).await.expect("decide");
        assert_eq!(d.remaining, 4);
        assert_eq!(libraries(&mut con).len(), 1, "the library is loaded");
        // A flushed (or restarted, or failed-over) server: the next call loads it again.
        let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
        assert!(libraries(&mut con).is_empty());
        let d = store
            .decide(&limit, "lib|a", SEC, 1)
            .await
            .expect("decide after a flush");
        assert_eq!(d.remaining, 3);
        assert_eq!(libraries(&mut con).len(), 1, "loaded again");
    });
    // What the store calls is what `script()` names.
    let reply: Vec<String> = redis::cmd("FCALL")
        .arg(function)
        .arg(1)
        .arg("rw:lib|{a}")
        .arg(Store::args(
            "peek",
            Some(SEC),
            SEC,
            &[Call::new("lib|a", &limit, 0)],
        ))
        .query(&mut con)
        .expect("FCALL");
    let (_, d) = encode::decode(&reply).expect("a reply");
    assert_eq!(d[0].remaining, 3);
}
