//! Many threads on one hot key never get more than the algorithm allows, and layered
//! decisions across shared keys neither deadlock nor overspend.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ratewarden_core::{Clock, FixedWindow, Gcra, Limit, ManualClock, Rate, TokenBucket};
use ratewarden_memory::{MemoryStore, StoreConfig};

const THREADS: usize = 4;
const DECISIONS: usize = 20_000;

/// Checks `admitted ≤ burst + rate·span` in integers, for a run from `start` to `end`.
fn assert_within(admitted: u64, rate: Rate, burst: u64, start: u64, end: u64) {
    let span = u128::from(end - start);
    let allowed =
        u128::from(burst) * u128::from(rate.period_ns()) + u128::from(rate.count()) * span;
    assert!(
        u128::from(admitted) * u128::from(rate.period_ns()) <= allowed,
        "{admitted} admitted in {span} ns at {rate} with burst {burst}"
    );
}

fn hammer(limit: Limit, rate: Rate, burst: u64) {
    let store: MemoryStore = MemoryStore::new(StoreConfig::default());
    let clock = ManualClock::new(1_000_000_000);
    let start = clock.now();
    let admitted = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Time moves in small steps while the deciders run.
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                clock.advance(Duration::from_micros(50));
                std::hint::spin_loop();
            }
        });
        let deciders: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..DECISIONS {
                        if store.decide(&limit, "hot", clock.now(), 1).is_allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for d in deciders {
            d.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let end = clock.now();
    let admitted = admitted.into_inner();
    assert!(admitted >= burst, "at least the burst passes: {admitted}");
    assert_within(admitted, rate, burst, start, end);
}

#[test]
fn threads_on_one_hot_gcra_key_never_exceed_burst_plus_rate_times_span() {
    let rate = Rate::per_second(1_000).unwrap();
    hammer(Gcra::new(rate, 50).unwrap().into(), rate, 50);
}

#[test]
fn threads_on_one_hot_token_bucket_never_exceed_burst_plus_rate_times_span() {
    let rate = Rate::new(3, Duration::from_millis(7)).unwrap();
    hammer(TokenBucket::new(rate, 20).unwrap().into(), rate, 20);
}

#[test]
fn layered_decisions_from_many_threads_neither_deadlock_nor_overspend() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        shards: 4,
        ..StoreConfig::default()
    });
    let window = Duration::from_secs(3_600);
    let global = Limit::from(FixedWindow::new(5_000, window).unwrap());
    let per_tenant = Limit::from(FixedWindow::new(1_000, window).unwrap());
    let now = 7_200_000_000_000;
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, global, per_tenant, admitted) = (&store, &global, &per_tenant, &admitted);
            s.spawn(move || {
                for i in 0..5_000 {
                    // Threads take tenants in different orders, so shards are locked in
                    // different orders by the callers: the store must order them itself.
                    let tenant = format!("tenant|{}", (i + t) % 3);
                    let layers = [(per_tenant, tenant.as_str(), 1), (global, "global", 1)];
                    let layers = if t % 2 == 0 {
                        layers
                    } else {
                        [layers[1], layers[0]]
                    };
                    let decisions = store.decide_all(&layers, now);
                    if decisions.iter().all(|d| d.is_allowed()) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    // Three tenants of 1,000 each: exactly 3,000 pass, and the global count agrees.
    assert_eq!(admitted.into_inner(), 3_000);
    assert_eq!(store.peek(&global, "global", now, 0).remaining, 2_000);
}
