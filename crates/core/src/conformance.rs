//! The conformance suite every [`Store`] must pass, so that the in-memory store and the shared
//! ones decide alike. A store's tests call [`run_all`] with a way to make a fresh store.
//!
//! Each scenario panics (fails the calling test) with a message naming the scenario, the
//! algorithm and the step that went wrong.

use std::collections::HashMap;
use std::fmt::Debug;
use std::time::Duration;

use crate::{
    parse_decimal, Algorithm, CalendarUnit, Check, Concurrency, Decision, FixedWindow, Gcra,
    LeakyBucket, LeakyQueue, Limit, LimitState, Quota, Rate, SlidingLog, SlidingWindow, Store,
    TokenBucket, NANOS_PER_SEC,
};

const FIGURE1: &str = include_str!("../fixtures/figure1.csv");
const FIGURE1_EXPECTED: &str = include_str!("../fixtures/figure1.expected.csv");

/// Runs every scenario, each on a fresh store from `new_store`.
pub fn run_all<S: Store>(new_store: impl Fn() -> S) {
    figure1_per_key(&new_store());
    matches_the_algorithms(&new_store());
    layered_is_all_or_nothing(&new_store());
    peek_charges_nothing(&new_store());
    settle_carries_a_debt(&new_store());
    concurrency_permits_and_leases(&new_store());
    idle_keys_decide_as_fresh(&new_store());
    clear_forgets_a_key(&new_store());
}

fn ok<T, E: Debug>(scenario: &str, result: Result<T, E>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{scenario}: the store failed: {e:?}"),
    }
}

/// Every algorithm at 5 a second, per key, must decide the lesson's Figure 1 as the lesson
/// says, with three keys interleaved so no key's state leaks into another's.
pub fn figure1_per_key<S: Store>(store: &S) {
    let rows = |csv: &'static str| {
        csv.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("time_s") && !l.trim().is_empty())
            .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let times: Vec<u64> = rows(FIGURE1)
        .iter()
        .map(|r| parse_decimal(r[0], NANOS_PER_SEC).expect("fixture times parse"))
        .collect();
    let expected = rows(FIGURE1_EXPECTED);
    let header: Vec<&str> = FIGURE1_EXPECTED
        .lines()
        .find(|l| l.starts_with("time_s"))
        .expect("fixture header")
        .split(',')
        .collect();
    let window = Duration::from_secs(1);
    let rate = Rate::per_second(5).expect("valid");
    for (column, name) in header.iter().enumerate().skip(1) {
        let limit: Limit = match *name {
            "fixed-window" => FixedWindow::new(5, window).expect("valid").into(),
            "sliding-log" => SlidingLog::new(5, window).expect("valid").into(),
            "sliding-window" => SlidingWindow::new(5, window).expect("valid").into(),
            "token-bucket" => TokenBucket::new(rate, 5).expect("valid").into(),
            "leaky-bucket" => LeakyBucket::new(rate, 5).expect("valid").into(),
            "gcra" => Gcra::new(rate, 5).expect("valid").into(),
            other => panic!("figure1: unknown column {other}"),
        };
        for (t, row) in times.iter().zip(&expected) {
            for key in ["a", "b", "c"] {
                let key = format!("figure1|{name}|{key}");
                let d = ok("figure1", store.decide(&limit, &key, *t, 1));
                assert_eq!(
                    d.is_allowed(),
                    row[column] == "1",
                    "figure1: {name}, key {key}, at {} s",
                    row[0]
                );
            }
        }
    }
}

/// Every limit we have, for the scenarios that run them all.
fn every_limit() -> Vec<Limit> {
    let rate = Rate::new(7, Duration::from_secs(2)).expect("valid");
    let window = Duration::from_millis(900);
    vec![
        FixedWindow::new(4, window).expect("valid").into(),
        SlidingLog::new(4, window).expect("valid").into(),
        SlidingWindow::new(4, window).expect("valid").into(),
        SlidingWindow::new(4, window)
            .and_then(|sw| sw.with_sub_windows(7))
            .expect("valid")
            .into(),
        TokenBucket::new(rate, 4).expect("valid").into(),
        LeakyBucket::new(rate, 4).expect("valid").into(),
        LeakyQueue::new(rate, 3).expect("valid").into(),
        Gcra::new(rate, 4).expect("valid").into(),
        Quota::new(4, CalendarUnit::Second, "UTC")
            .expect("valid")
            .into(),
        Concurrency::new(4, window).expect("valid").into(),
    ]
}

/// A limit's name in keys and messages: its algorithm, and a sliding window's sub-windows.
fn label(limit: &Limit) -> String {
    match limit {
        Limit::SlidingWindow(sw) if sw.sub_windows() > 1 => {
            format!("{}/{}", limit.kind(), sw.sub_windows())
        }
        _ => limit.kind().to_string(),
    }
}

/// A small deterministic generator (xorshift64): the same pseudo-random trace on every run,
/// for the stores' randomized tests.
///
/// # Examples
///
/// ```
/// use ratewarden_core::conformance::Rng;
///
/// let (mut a, mut b) = (Rng(42), Rng(42));
/// assert_eq!(a.below(100), b.below(100));
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number (the seed must not be 0, which stays 0).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.next() % n,
        }
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A store must decide exactly as the algorithm does on its own: the same pseudo-random
/// trace of decisions, peeks and settles over several keys, through the store and through
/// a map of states, gives the same answers.
pub fn matches_the_algorithms<S: Store>(store: &S) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = move |n: u64| rng.below(n);
    for limit in every_limit() {
        let name = label(&limit);
        let mut reference: HashMap<String, LimitState> = HashMap::new();
        let mut now = 1_700_000_000 * NANOS_PER_SEC;
        for step in 0..600 {
            now += match next(4) {
                0 => 0,
                1 => next(1_000),
                2 => next(300_000_000),
                _ => next(2_000_000_000),
            };
            let key = format!("diff|{name}|{}", next(5));
            let state = reference.entry(key.clone()).or_default();
            match next(10) {
                0 => {
                    let delta = next(5) as i64 - 2;
                    limit.settle(state, now, delta);
                    ok("matches", store.settle(&limit, &key, now, delta));
                }
                1 => {
                    let cost = next(4);
                    let want = limit.peek(state, now, cost);
                    let got = ok("matches", store.peek(&limit, &key, now, cost));
                    assert_eq!(got, want, "matches: {name} peek, step {step}, key {key}");
                }
                _ => {
                    let cost = next(4);
                    let want = limit.decide(state, now, cost);
                    let got = ok("matches", store.decide(&limit, &key, now, cost));
                    assert_eq!(got, want, "matches: {name} decide, step {step}, key {key}");
                }
            }
        }
    }
}

/// A layered decision charges every limit or none.
pub fn layered_is_all_or_nothing<S: Store>(store: &S) {
    let window = Duration::from_secs(60);
    let per_ip = Limit::from(FixedWindow::new(2, window).expect("valid"));
    let per_key = Limit::from(SlidingLog::new(3, window).expect("valid"));
    let global = Limit::from(Gcra::new(Rate::per_second(100).expect("valid"), 100).expect("valid"));
    let layers = |ip: &'static str| {
        [
            Check {
                limit: &global,
                key: "layers|global",
                cost: 1,
            },
            Check {
                limit: &per_ip,
                key: ip,
                cost: 1,
            },
            Check {
                limit: &per_key,
                key: "layers|key|k1",
                cost: 1,
            },
        ]
    };
    let now = 3_600 * NANOS_PER_SEC;
    // Two from one IP pass; the third is over the per-IP limit and charges nothing.
    for _ in 0..2 {
        let all = ok("layered", store.decide_all(&layers("layers|ip|a"), now));
        assert!(all.iter().all(Decision::is_allowed), "layered: {all:?}");
    }
    let third = ok("layered", store.decide_all(&layers("layers|ip|a"), now));
    assert!(
        !third[1].is_allowed(),
        "layered: the per-IP limit must reject"
    );
    assert!(third[0].is_allowed() && third[2].is_allowed());
    let key_left = ok("layered", store.peek(&per_key, "layers|key|k1", now, 0)).remaining;
    assert_eq!(
        key_left, 1,
        "layered: a rejected request charged the per-key limit"
    );
    let global_left = ok("layered", store.peek(&global, "layers|global", now, 0)).remaining;
    assert_eq!(
        global_left, 98,
        "layered: a rejected request charged the global limit"
    );
    // Another IP gets the key's last unit; then the key's limit rejects, charging no IP.
    let all = ok("layered", store.decide_all(&layers("layers|ip|b"), now));
    assert!(all.iter().all(Decision::is_allowed));
    let over = ok("layered", store.decide_all(&layers("layers|ip|c"), now));
    assert!(!over[2].is_allowed() && over[1].is_allowed());
    let ip_left = ok("layered", store.peek(&per_ip, "layers|ip|c", now, 0)).remaining;
    assert_eq!(
        ip_left, 2,
        "layered: a rejected request charged the per-IP limit"
    );
}

/// Peeking, however often, charges nothing.
pub fn peek_charges_nothing<S: Store>(store: &S) {
    for limit in every_limit() {
        let key = format!("peek|{}", label(&limit));
        for _ in 0..10 {
            let d = ok("peek", store.peek(&limit, &key, NANOS_PER_SEC, 1));
            assert!(d.is_allowed(), "peek: {}", label(&limit));
        }
        let d = ok("peek", store.decide(&limit, &key, NANOS_PER_SEC, 1));
        assert_eq!(
            d.remaining,
            limit.limit() - 1,
            "peek: {} was charged",
            label(&limit)
        );
    }
}

/// A settled debt delays the next request by exactly the debt; a refund gives units back.
pub fn settle_carries_a_debt<S: Store>(store: &S) {
    let rate = Rate::per_second(10).expect("valid");
    let gcra = Limit::from(Gcra::new(rate, 10).expect("valid"));
    let now = 50 * NANOS_PER_SEC;
    let key = "settle|gcra";
    // Reserve an estimate of 10, then learn the request really cost 15.
    assert!(ok("settle", store.decide(&gcra, key, now, 10)).is_allowed());
    ok("settle", store.settle(&gcra, key, now, 5));
    let d = ok("settle", store.decide(&gcra, key, now, 1));
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_millis(600)),
        "settle: debt of 5 at 10/s"
    );
    // A refund on another key gives units back.
    let other = "settle|refund";
    assert!(ok("settle", store.decide(&gcra, other, now, 8)).is_allowed());
    ok("settle", store.settle(&gcra, other, now, -3));
    assert_eq!(ok("settle", store.peek(&gcra, other, now, 0)).remaining, 5);
}

/// Permits cap what is in flight, come back on release, and lapse after their lease.
pub fn concurrency_permits_and_leases<S: Store>(store: &S) {
    let limit = Limit::from(Concurrency::new(2, Duration::from_secs(30)).expect("valid"));
    let key = "permits|k";
    let now = 10 * NANOS_PER_SEC;
    let first = ok("permits", store.acquire(&limit, key, now, 1)).expect("first permit");
    let second = ok("permits", store.acquire(&limit, key, now, 1)).expect("second permit");
    assert_ne!(first, second, "permits: ids must differ");
    let refused = ok("permits", store.acquire(&limit, key, now, 1));
    let Err(decision) = refused else {
        panic!("permits: a third permit was granted over a cap of 2")
    };
    assert_eq!(decision.retry_after(), Some(Duration::from_secs(30)));
    assert!(ok("permits", store.release(&limit, key, first)));
    assert!(
        !ok("permits", store.release(&limit, key, first)),
        "released twice"
    );
    let third = ok("permits", store.acquire(&limit, key, now, 1)).expect("a freed permit");
    // Nobody releases `second` or `third`: their leases run out after 30 s.
    let later = now + 30 * NANOS_PER_SEC;
    let a = ok("permits", store.acquire(&limit, key, later, 1)).expect("lapsed permits");
    let b = ok("permits", store.acquire(&limit, key, later, 1)).expect("lapsed permits");
    assert!(
        !ok("permits", store.release(&limit, key, third)),
        "a lapsed permit released"
    );
    assert!(ok("permits", store.release(&limit, key, a)));
    assert!(ok("permits", store.release(&limit, key, b)));
    let _ = second;
}

/// Once a key's reset time has passed, it decides exactly as a key never seen, whatever
/// the store did with its state meanwhile.
pub fn idle_keys_decide_as_fresh<S: Store>(store: &S) {
    for limit in every_limit() {
        let key = format!("idle|{}", label(&limit));
        let now = 20 * NANOS_PER_SEC;
        let mut last = Decision::new(crate::Outcome::Allowed, 0, 0, 0);
        for _ in 0..6 {
            last = ok("idle", store.decide(&limit, &key, now, 1));
        }
        let later = now + last.reset_after_ns.max(1);
        let fresh = limit.peek(&LimitState::default(), later, 1);
        let got = ok("idle", store.decide(&limit, &key, later, 1));
        assert_eq!(got, fresh, "idle: {} after its reset", label(&limit));
    }
}

/// A cleared key decides as a key never seen, at once (an operator's reset), and only that
/// key is cleared; clearing a key never seen says so.
pub fn clear_forgets_a_key<S: Store>(store: &S) {
    for limit in every_limit() {
        let key = format!("clear|{}", label(&limit));
        let other = format!("clear-other|{}", label(&limit));
        let now = 30 * NANOS_PER_SEC;
        for _ in 0..20 {
            ok("clear", store.decide(&limit, &key, now, 1));
            ok("clear", store.decide(&limit, &other, now, 1));
        }
        assert!(
            ok("clear", store.clear(&key)),
            "clear: {} held no state",
            label(&limit)
        );
        let fresh = limit.peek(&LimitState::default(), now, 1);
        assert_eq!(
            ok("clear", store.peek(&limit, &key, now, 1)),
            fresh,
            "clear: {} after a reset",
            label(&limit)
        );
        assert_ne!(
            ok("clear", store.peek(&limit, &other, now, 1)),
            fresh,
            "clear: {} cleared another key too",
            label(&limit)
        );
        assert!(
            !ok("clear", store.clear(&key)),
            "clear: {} cleared twice",
            label(&limit)
        );
    }
}
