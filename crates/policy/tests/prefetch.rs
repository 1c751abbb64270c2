//! Prefetched allowances: several engines on one shared store, deciding from allowances
//! charged in the store before they are spent, on exact injected time.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ratewarden_core::{now_or_panic, Check, Decision, Limit, Store};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{Engine, Request, Verdict};

const START: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;

/// One store shared by several engines (as one Redis is by a fleet), counting the calls
/// made to it.
#[derive(Clone)]
struct Shared {
    inner: Arc<MemoryStore>,
    calls: Arc<AtomicU64>,
}

impl Shared {
    fn new() -> Self {
        Self {
            inner: Arc::new(MemoryStore::new(StoreConfig::default())),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }
    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Store for Shared {
    type Error = std::convert::Infallible;
    fn decide(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Self::Error> {
        self.count();
        Store::decide(&*self.inner, l, k, now, c)
    }
    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Self::Error> {
        self.count();
        Store::decide_all(&*self.inner, checks, now)
    }
    fn peek(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Self::Error> {
        self.count();
        Store::peek(&*self.inner, l, k, now, c)
    }
    fn settle(&self, l: &Limit, k: &str, now: u64, d: i64) -> Result<(), Self::Error> {
        self.count();
        Store::settle(&*self.inner, l, k, now, d)
    }
    fn acquire(
        &self,
        l: &Limit,
        k: &str,
        now: u64,
        c: u64,
    ) -> Result<Result<u64, Decision>, Self::Error> {
        self.count();
        Store::acquire(&*self.inner, l, k, now, c)
    }
    fn release(&self, l: &Limit, k: &str, id: u64) -> Result<bool, Self::Error> {
        self.count();
        Store::release(&*self.inner, l, k, id)
    }
    fn clear(&self, k: &str) -> Result<bool, Self::Error> {
        self.count();
        Store::clear(&*self.inner, k)
    }
}

fn request<'a>(headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    common::request("192.0.2.7", "/", headers)
}

fn decide<S: ratewarden_core::AsyncStore>(
    engine: &Engine<S>,
    headers: &[(&str, &str)],
    now: u64,
) -> Verdict {
    common::decide(engine, &request(headers), now)
}

fn fleet(toml: &str, n: usize) -> (Shared, Vec<Engine<Shared>>) {
    let store = Shared::new();
    let engines = (0..n)
        .map(|_| Engine::new(parse("fleet.toml", toml).expect("valid"), store.clone()))
        .collect();
    (store, engines)
}

const GLOBAL_GCRA: &str = r#"
[[limit]]
name = "global"
key = ["literal:all"]
algorithm = "gcra"
rate = "2000/s"
burst = 100
prefetch = "50ms"
"#;

/// Three engines offered 7.5 times the rate on one key: never more than one limiter admits
/// at any instant, nearly all of what it allows, with a store call per ten admissions or
/// fewer, and each engine gets a share.
#[test]
fn a_fleet_on_one_key_never_admits_more_than_one_limiter_and_rarely_asks_the_store() {
    let (store, engines) = fleet(GLOBAL_GCRA, 3);
    let mut admitted = [0u64; 3];
    let step = MS / 5;
    let steps = 10_000; // two seconds
    for s in 0..steps {
        let now = START + s * step;
        for (i, engine) in engines.iter().enumerate() {
            for _ in 0..1 + (s as usize + i) % 5 {
                if decide(engine, &[], now).allowed {
                    admitted[i] += 1;
                }
            }
        }
        let total: u64 = admitted.iter().sum();
        let elapsed = s * step;
        // GCRA at 2000/s: a burst of 100 at once, then two per millisecond.
        let bound = 100 + 2 * elapsed / MS;
        assert!(
            total <= bound,
            "{total} admitted by {elapsed} ns, over {bound}"
        );
    }
    let total: u64 = admitted.iter().sum();
    let allows = 100 + 2 * steps * step / MS;
    assert!(total * 10 >= allows * 9, "{total} of {allows} allowed");
    // In memory a partial grant is two calls (a peek, then the charge); Redis's script
    // makes it one: count the grants and the give-backs.
    let calls: u64 = engines
        .iter()
        .map(|e| {
            let s = e.prefetch_stats();
            s.fetches + u64::from(s.units_returned > 0)
        })
        .sum();
    assert!(
        calls * 10 <= total,
        "{calls} store calls for {total} admitted"
    );
    assert!(store.calls.load(Ordering::Relaxed) <= 3 * calls);
    for (i, a) in admitted.iter().enumerate() {
        assert!(*a * 6 >= total, "engine {i} admitted {a} of {total}");
    }
    let stats = engines[0].prefetch_stats();
    assert!(stats.fetches > 0 && stats.local_decisions > stats.remote_decisions * 10);
}

/// Unspent units go back when an allowance lapses and when the process stops: the store's
/// budget is whole again at once, not a burst's refill later.
#[test]
fn unspent_units_go_back_when_the_allowance_lapses_and_when_the_process_stops() {
    let (store, engines) = fleet(GLOBAL_GCRA, 1);
    let engine = &engines[0];
    // A demand of 40 in one horizon sizes the next fetch.
    for i in 0..40 {
        assert!(decide(engine, &[], START + i * MS).allowed);
    }
    let stats = engine.prefetch_stats();
    assert!(stats.units_fetched > 40, "{stats:?}");
    let held = stats.units_fetched - 40;
    // Not lapsed yet: nothing given back.
    assert_eq!(now_or_panic(engine.sweep_allowances(START + 40 * MS)), 0);
    let given = now_or_panic(engine.return_allowances(START + 41 * MS));
    assert_eq!(given, held);
    assert_eq!(engine.prefetch_stats().units_returned, held);
    // Everything this engine did not spend is the store's again: 40 spent over 41 ms at
    // two per millisecond leaves the whole burst.
    let other = Engine::new(parse("fleet.toml", GLOBAL_GCRA).unwrap(), store.clone());
    let mut more = 0;
    while decide(&other, &[], START + 41 * MS).allowed {
        more += 1;
    }
    assert_eq!(more, 100);
}

/// A request another rule refuses is charged nowhere: its units go back to the allowance.
#[test]
fn a_request_another_rule_refuses_keeps_its_units_in_the_allowance() {
    let toml = r#"
[[limit]]
name = "global"
key = ["literal:all"]
algorithm = "gcra"
rate = "1000/s"
burst = 100
prefetch = "50ms"

[[limit]]
name = "per-client"
key = ["header:x-client"]
algorithm = "fixed-window"
limit = 2
window = "1s"
"#;
    let (_store, engines) = fleet(toml, 1);
    let engine = &engines[0];
    let a = [("x-client", "a")];
    assert!(decide(engine, &a, START).allowed);
    assert!(decide(engine, &a, START).allowed);
    let fetched = engine.prefetch_stats().units_fetched;
    for _ in 0..50 {
        let v = decide(engine, &a, START);
        assert!(!v.allowed);
        assert_eq!(v.violated().count(), 1);
    }
    // Fifty refusals spent nothing: the global rule still holds what it fetched but two.
    let b = [("x-client", "b")];
    let before = engine.prefetch_stats().fetches;
    for _ in 0..(fetched - 2).min(2) {
        assert!(decide(engine, &b, START).allowed);
    }
    assert_eq!(engine.prefetch_stats().fetches, before);
}

/// A fixed window's allowance lapses with its window: three engines never admit more than
/// the limit in one window, and each window is used nearly whole.
#[test]
fn window_allowances_never_cross_their_window() {
    let toml = r#"
[[limit]]
name = "global"
key = ["literal:all"]
algorithm = "fixed-window"
limit = 300
window = "1s"
prefetch = "100ms"
"#;
    let (_store, engines) = fleet(toml, 3);
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    let step = MS / 2;
    for s in 0..8_000u64 {
        let now = START + s * step;
        for engine in &engines {
            if decide(engine, &[], now).allowed {
                *per_window.entry(now / 1_000_000_000).or_default() += 1;
            }
        }
        if s % 20 == 0 {
            for engine in &engines {
                now_or_panic(engine.sweep_allowances(now));
            }
        }
    }

    for (window, admitted) in &per_window {
        assert!(*admitted <= 300, "window {window}: {admitted}");
        assert!(*admitted >= 270, "window {window}: {admitted}");
    }
}

/// `prefetch` is refused, with its place, where units cannot be taken ahead exactly.
#[test]
fn prefetch_is_refused_where_units_cannot_be_taken_ahead() {
    for (algorithm, numbers) in [
        ("sliding-log", "limit = 5\nwindow = \"1s\""),
        ("concurrency", "limit = 5"),
        ("leaky-queue", "rate = \"5/s\"\nburst = 5"),
    ] {
        let toml = format!(
            "[[limit]]\nname = \"r\"\nkey = [\"ip\"]\nalgorithm = \"{algorithm}\"\n{numbers}\nprefetch = \"50ms\"\n"
        );
        let error = parse("f.toml", &toml).expect_err("refused").to_string();
        assert!(error.contains("f.toml:"), "{error}");
        assert!(error.contains("`prefetch` does not apply to"), "{error}");
        assert!(error.contains(algorithm) && error.contains("r"), "{error}");
    }
    let both = "[[limit]]\nname = \"r\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\nlocal_first = true\nprefetch = \"50ms\"\n";
    let error = parse("f.toml", both).expect_err("refused").to_string();
    assert!(error.contains("local_first"), "{error}");
    let zero = "[[limit]]\nname = \"r\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\nprefetch = \"0s\"\n";
    let error = parse("f.toml", zero).expect_err("refused").to_string();
    assert!(
        error.contains("`prefetch` must be longer than zero"),
        "{error}"
    );
}

/// Three engines, each offered several times the rate on one key, one of them twice as
/// much as the others, always asking in the same order: each admits about a third of what
/// the fleet admits. No engine refills ahead of the others because it asks first, or
/// because its last grant happened to be whole, or because it is offered more.
#[test]
fn engines_over_their_share_admit_about_the_same_whatever_their_load_and_order() {
    let (_store, engines) = fleet(GLOBAL_GCRA, 3);
    let mut admitted = [0u64; 3];
    let step = MS / 5;
    let steps = 100_000u64; // twenty seconds
    for s in 0..steps {
        let now = START + s * step;
        // Every 0.2 ms: 4 requests to engine 0, 2 to each other (20,000/s and 10,000/s).
        for (i, engine) in engines.iter().enumerate() {
            for _ in 0..2 + 2 * usize::from(i == 0) {
                if decide(engine, &[], now).allowed {
                    admitted[i] += 1;
                }
            }
        }
    }
    let total: u64 = admitted.iter().sum();
    let allows = 100 + 2 * steps * step / MS;
    assert!(total * 10 >= allows * 9, "{total} of {allows} allowed");
    let (least, most) = (
        admitted.iter().min().unwrap(),
        admitted.iter().max().unwrap(),
    );
    // The jittered waits make each grant's size random; over twenty seconds the engines'
    // totals stay within a few percent of each other (1.02 to 1.09 apart in eight runs).
    assert!(most * 100 <= least * 120, "admitted {admitted:?}: uneven");
}

/// A shared store whose partial grants wait, while `hold` is set, until `gate` opens.
#[derive(Clone)]
struct Gated {
    inner: Shared,
    hold: Arc<std::sync::atomic::AtomicBool>,
    gate: Arc<tokio::sync::Notify>,
}

impl ratewarden_core::AsyncStore for Gated {
    type Error = std::convert::Infallible;
    fn is_shared(&self) -> bool {
        true
    }
    async fn decide(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Self::Error> {
        Store::decide(&self.inner, l, k, now, c)
    }
    async fn decide_all(&self, c: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Self::Error> {
        Store::decide_all(&self.inner, c, now)
    }
    async fn peek(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Self::Error> {
        Store::peek(&self.inner, l, k, now, c)
    }
    async fn settle(&self, l: &Limit, k: &str, now: u64, d: i64) -> Result<(), Self::Error> {
        Store::settle(&self.inner, l, k, now, d)
    }
    async fn clear(&self, k: &str) -> Result<bool, Self::Error> {
        Store::clear(&self.inner, k)
    }
    async fn take(
        &self,
        l: &Limit,
        k: &str,
        now: u64,
        want: u64,
    ) -> Result<(u64, Decision), Self::Error> {
        if self.hold.load(Ordering::Relaxed) {
            self.gate.notified().await;
        }
        ratewarden_core::AsyncStore::take(&self.inner, l, k, now, want).await
    }
}

/// While the store is contested and a fetch is on its way, a request that finds the
/// allowance empty is refused at once rather than queued behind the fetch's round trip.
#[test]
fn a_request_behind_a_fetch_of_a_contested_store_is_refused_at_once() {
    let store = Gated {
        inner: Shared::new(),
        hold: Arc::default(),
        gate: Arc::default(),
    };
    let engine = Engine::new(parse("fleet.toml", GLOBAL_GCRA).unwrap(), store.clone());
    let decide_at = |now| now_or_panic(engine.decide(&request(&[]), now)).expect("decided");
    // Spend the burst at one instant: the grants grow with demand until one comes back
    // short, and the store is contested.
    let mut now = START;
    while decide_at(now).allowed {}
    // Past every quiet wait, the next request fetches; the store holds it.
    now += 100 * MS;
    store.hold.store(true, Ordering::Relaxed);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let first = request(&[]);
    let mut fetching = std::pin::pin!(engine.decide(&first, now));
    assert!(
        fetching.as_mut().poll(&mut cx).is_pending(),
        "held at the store"
    );
    // Another request finds the allowance empty and the fetch on its way: refused now.
    let behind = decide_at(now);
    assert!(!behind.allowed);
    // The fetch lands and admits the request that made it.
    store.hold.store(false, Ordering::Relaxed);
    store.gate.notify_one();
    let std::task::Poll::Ready(fetched) = fetching.as_mut().poll(&mut cx) else {
        panic!("the fetch was let through");
    };
    assert!(fetched.expect("decided").allowed);
}
