//! `scope = "global"` rules: engines in several regions, each with a store of its own,
//! counting one limit in a home store they share, on exact injected time. Top-ups run as a
//! server runs them (off the request path: `global_due`, then `top_up_global`), and a
//! region's home can be cut off.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ratewarden_core::{now_or_panic, Check, Decision, Limit, Store};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{Engine, Verdict};

const START: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;
const WINDOW: u64 = 10_000 * MS;
const LIMIT: u64 = 300;

/// A store as a region (or the home) sees it: calls counted, and cut off on demand.
#[derive(Clone)]
struct Side {
    inner: Arc<MemoryStore>,
    calls: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("the store is cut off")]
struct Cut;

impl Side {
    fn new() -> Self {
        Self {
            inner: Arc::new(MemoryStore::new(StoreConfig::default())),
            calls: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicBool::new(false)),
        }
    }
    fn call(&self) -> Result<(), Cut> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.down.load(Ordering::Relaxed) {
            Err(Cut)
        } else {
            Ok(())
        }
    }
}

impl Store for Side {
    type Error = Cut;
    fn decide(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Cut> {
        self.call()?;
        Ok(Store::decide(&*self.inner, l, k, now, c).expect("memory"))
    }
    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Cut> {
        self.call()?;
        Ok(Store::decide_all(&*self.inner, checks, now).expect("memory"))
    }
    fn peek(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Cut> {
        self.call()?;
        Ok(Store::peek(&*self.inner, l, k, now, c).expect("memory"))
    }
    fn settle(&self, l: &Limit, k: &str, now: u64, d: i64) -> Result<(), Cut> {
        self.call()?;
        Store::settle(&*self.inner, l, k, now, d).expect("memory");
        Ok(())
    }
    fn acquire(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Result<u64, Decision>, Cut> {
        self.call()?;
        Ok(Store::acquire(&*self.inner, l, k, now, c).expect("memory"))
    }
    fn release(&self, l: &Limit, k: &str, id: u64) -> Result<bool, Cut> {
        self.call()?;
        Ok(Store::release(&*self.inner, l, k, id).expect("memory"))
    }
    fn clear(&self, k: &str) -> Result<bool, Cut> {
        self.call()?;
        Ok(Store::clear(&*self.inner, k).expect("memory"))
    }
}

/// A global fixed window of `LIMIT` per `WINDOW` on one key, a regional one beside it on
/// the same requests, and a partitioned region falling to a third of the limit.
fn config() -> String {
    format!(
        r#"
[regions]
name = "test"
horizon = "500ms"
[regions.home]
kind = "redis"
url = "redis://192.0.2.1:6379"

[[limit]]
name = "everyone"
key = ["literal:all"]
algorithm = "fixed-window"
limit = {LIMIT}
window = "10s"
scope = "global"
on_store_failure = "local"
local_divide_by = 3

[[limit]]
name = "per-region"
key = ["literal:all"]
algorithm = "fixed-window"
limit = 1000000
window = "10s"
"#
    )
}

/// Three regions, each its own store, sharing `home`.
struct Fleet {
    home: Side,
    stores: Vec<Side>,
    engines: Vec<Engine<Side>>,
}

impl Fleet {
    fn new() -> Self {
        let home = Side::new();
        let stores: Vec<Side> = (0..3).map(|_| Side::new()).collect();
        let engines = stores
            .iter()
            .map(|store| {
                let config = parse("regions.toml", &config()).expect("valid");
                Engine::new(config, store.clone()).with_home(home.clone())
            })
            .collect();
        Self {
            home,
            stores,
            engines,
        }
    }

    fn decide(&self, region: usize, now: u64) -> Verdict {
        let request = common::request("192.0.2.7", "/", &[]);
        common::decide(&self.engines[region], &request, now)
    }

    /// What a server's upkeep does every tick: top-ups of the keys running low, and the
    /// lapsed allowances given back.
    fn tick(&self, now: u64) {
        for engine in &self.engines {
            for key in engine.global_due(64) {
                let _ = now_or_panic(engine.top_up_global(&key, || now));
            }
            now_or_panic(engine.sweep_allowances(now));
        }
    }
}

/// Runs `windows` windows in 1 ms steps, region `r` offered `demand(window, r)` requests a
/// second, the upkeep ticking every 20 ms; admitted requests per window and region.
fn run(fleet: &Fleet, windows: u64, demand: impl Fn(u64, usize) -> u64) -> Vec<[u64; 3]> {
    let mut admitted = vec![[0u64; 3]; windows as usize];
    // Requests are spread over each second: region r's i-th of n at i/n of it.
    let steps = windows * WINDOW / MS;
    let mut owed = [0u64; 3];
    for step in 0..steps {
        let now = START + step * MS;
        let window = step * MS / WINDOW;
        if step % 20 == 0 {
            fleet.tick(now);
        }
        for (r, owed) in owed.iter_mut().enumerate() {
            // Bresenham: `demand` per 1,000 steps, evenly.
            let rate = demand(window, r);
            *owed += rate;
            while *owed >= 1000 {
                *owed -= 1000;
                if fleet.decide(r, now).allowed {
                    admitted[window as usize][r] += 1;
                }
            }
        }
    }
    admitted
}

/// The windows start on a multiple of the window (the store's fixed windows do).
fn aligned() {
    assert_eq!(START % WINDOW, 0);
}

/// Steady demand of twice the limit spread over three regions: no window admits more than
/// the limit, and nearly all of it is used; the regions' own stores never see the global
/// rule (only the regional one), and most requests are decided without calling the home
/// (the rest are mostly refused asks again of a spent window, a jittered half horizon apart).
#[test]
fn steady_load_over_three_regions_never_passes_the_limit_and_uses_it() {
    aligned();
    let fleet = Fleet::new();
    let per_second = 2 * LIMIT / 10 / 3 + 1;
    let windows = run(&fleet, 6, |_, _| per_second);
    for (w, admitted) in windows.iter().enumerate() {
        let total: u64 = admitted.iter().sum();
        assert!(total <= LIMIT, "window {w}: {admitted:?} admitted {total}");
        assert!(
            total * 100 >= LIMIT * 95,
            "window {w}: {admitted:?} admitted {total}, under 95% of {LIMIT}"
        );
        for (r, &n) in admitted.iter().enumerate() {
            assert!(
                n >= LIMIT / 6,
                "window {w}: region {r} got {n} of {admitted:?}"
            );
        }
    }
    let decisions: u64 = 6 * 10 * per_second * 3;
    let home_calls = fleet.home.calls.load(Ordering::Relaxed);
    assert!(
        home_calls * 3 < decisions,
        "{home_calls} home calls for {decisions} decisions"
    );
    let stats = fleet.engines[0].global_stats();
    assert!(
        stats.local_decisions > stats.remote_decisions * 5,
        "{stats:?}"
    );
    // Each region's store decided the regional rule, one call a request; the global rule
    // never went there.
    for store in &fleet.stores {
        let calls = store.calls.load(Ordering::Relaxed);
        assert!(calls <= 6 * 10 * per_second, "{calls}");
    }
}

/// Demand moving from one region to another, window by window: the limit follows it (the
/// loaded region gets nearly all of it) and is never passed.
#[test]
fn load_moving_between_regions_takes_the_limit_with_it() {
    aligned();
    let fleet = Fleet::new();
    let windows = run(&fleet, 6, |w, r| {
        if r == (w / 2) as usize % 3 {
            2 * LIMIT / 10
        } else {
            2
        }
    });
    for (w, admitted) in windows.iter().enumerate() {
        let total: u64 = admitted.iter().sum();
        assert!(total <= LIMIT, "window {w}: {admitted:?} admitted {total}");
        let loaded = (w / 2) % 3;
        assert!(
            admitted[loaded] * 100 >= (LIMIT - 2 * 20) * 95,
            "window {w}: region {loaded} is loaded and got {admitted:?}"
        );
    }
}

/// A region cut off from the home keeps the units it holds until they lapse, then decides
/// on a third of the limit in process: every window admits at most the limit plus that
/// third (the stated bound), the others still share the limit, and once the cut heals the
/// limit holds again.
#[test]
fn a_partitioned_region_falls_to_its_share_and_the_bound_holds() {
    aligned();
    let fleet = Fleet::new();
    // Region 2's view of the home is a store of its own that can be cut: the same home
    // state, a separate switch.
    let cut = Side {
        inner: Arc::clone(&fleet.home.inner),
        calls: Arc::new(AtomicU64::new(0)),
        down: Arc::new(AtomicBool::new(false)),
    };
    let config = parse("regions.toml", &config()).expect("valid");
    let engines = [
        &fleet.engines[0],
        &fleet.engines[1],
        &Engine::new(config, fleet.stores[2].clone()).with_home(cut.clone()),
    ];
    let per_second = LIMIT / 10; // each region alone would take the whole limit
    let mut admitted = vec![[0u64; 3]; 8];
    for step in 0..8 * WINDOW / MS {
        let now = START + step * MS;
        let window = (step * MS / WINDOW) as usize;
        // Cut in the middle of window 2 (its units from the home spent, it then decides on
        // its share too: that window may see both), healed at the start of window 6.
        cut.down
            .store((25_000..60_000).contains(&step), Ordering::Relaxed);
        if step % 20 == 0 {
            for engine in engines {
                for key in engine.global_due(64) {
                    let _ = now_or_panic(engine.top_up_global(&key, || now));
                }
                now_or_panic(engine.sweep_allowances(now));
            }
        }
        if step % (1000 / per_second) == 0 {
            for (r, engine) in engines.iter().enumerate() {
                let request = common::request("192.0.2.7", "/", &[]);
                if common::decide(engine, &request, now).allowed {
                    admitted[window][r] += 1;
                }
            }
        }
    }
    let share = LIMIT / 3;
    for (w, a) in admitted.iter().enumerate() {
        let total: u64 = a.iter().sum();
        let bound = if (2..6).contains(&w) {
            LIMIT + share
        } else {
            LIMIT
        };
        assert!(
            total <= bound,
            "window {w}: {a:?} admitted {total} > {bound}"
        );
        if (3..6).contains(&w) {
            // The cut region decides on its share alone; the others still use the limit.
            assert!(a[2] <= share, "window {w}: {a:?}");
            assert!(a[0] + a[1] >= LIMIT * 95 / 100, "window {w}: {a:?}");
        }
    }
    assert!(
        admitted[3][2] > 0,
        "the cut region decided on its share: {admitted:?}"
    );
}
