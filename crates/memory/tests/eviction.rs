//! Bounded memory: fresh state is dropped without changing any decision, and a full store
//! evicts or refuses as configured, counting what it did.

use std::time::Duration;

use ratewarden_core::{
    Algorithm, CalendarUnit, Concurrency, FixedWindow, Gcra, LeakyBucket, Limit, Outcome, Quota,
    Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use ratewarden_memory::{MemoryStore, StoreConfig, WhenFull};

mod common;

use common::{every_limit, SEC};
use ratewarden_core::conformance::Rng;

#[test]
fn dropping_fresh_state_changes_no_decision() {
    // One store sweeps everything fresh after every decision; the other never needs to.
    let sweeping: MemoryStore = MemoryStore::new(StoreConfig::default());
    let keeping: MemoryStore = MemoryStore::new(StoreConfig::default());
    let limits = every_limit();
    let mut rng = Rng(42);
    let mut now = 1_000 * SEC;
    let mut dropped = 0;
    for step in 0..20_000 {
        now += match rng.below(3) {
            0 => rng.below(1_000),
            1 => rng.below(200_000_000),
            _ => rng.below(3 * SEC),
        };
        let limit = &limits[rng.below(limits.len() as u64) as usize];
        let key = format!("{}|{}", limit.kind(), rng.below(20));
        let cost = rng.below(3);
        let a = sweeping.decide(limit, &key, now, cost);
        let b = keeping.decide(limit, &key, now, cost);
        assert_eq!(a, b, "step {step}: {key}");
        dropped += sweeping.sweep(now, usize::MAX);
    }
    assert!(
        dropped > 1_000,
        "the sweep should have had fresh state to drop: {dropped}"
    );
    assert!(sweeping.stats().evicted_fresh >= dropped);
    assert_eq!(sweeping.stats().evicted_live, 0);
}

#[test]
fn idle_keys_leave_by_themselves() {
    let store: MemoryStore = MemoryStore::new(StoreConfig::default());
    let limit = Limit::from(Gcra::new(Rate::per_second(10).unwrap(), 10).unwrap());
    for i in 0..10_000 {
        store.decide(&limit, &format!("idle|{i}"), SEC, 1);
    }
    assert_eq!(store.len(), 10_000);
    // A tenth of a second later every bucket is full again; sweeping drops them all.
    let later = SEC + SEC / 10;
    store.sweep(later, usize::MAX);
    assert!(store.is_empty(), "{} keys left", store.len());
    // Rejections of new keys store nothing.
    let strict = Limit::from(Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap());
    let d = store.decide(&strict, "idle|too-big", later, 2);
    assert_eq!(d.outcome, Outcome::CostTooHigh);
    assert!(store.is_empty());
}

#[test]
fn a_full_store_evicts_the_least_recently_used() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 64,
        shards: 1,
        ..StoreConfig::default()
    });
    // A slow rate: every key stays live for a minute.
    let limit = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 2).unwrap());
    let now = 10 * SEC;
    store.decide(&limit, "hot", now, 1);
    for i in 0..200 {
        // The hot key is used between every two new keys, so CLOCK keeps it.
        store.decide(&limit, &format!("cold|{i}"), now, 1);
        store.peek(&limit, "hot", now, 1);
        store.decide(&limit, "hot", now, 0);
    }
    assert_eq!(store.len(), 64);
    let stats = store.stats();
    assert_eq!(stats.evicted_live, 200 + 1 - 64);
    // The hot key kept its state: one of its two units is still spent.
    assert_eq!(store.peek(&limit, "hot", now, 0).remaining, 1);
}

#[test]
fn a_full_store_can_refuse_new_keys_instead() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 8,
        shards: 1,
        when_full: WhenFull::RejectNewKeys,
        full_retry_after: Duration::from_secs(2),
        ..StoreConfig::default()
    });
    let limit = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 5).unwrap());
    for i in 0..8 {
        assert!(store.decide(&limit, &format!("k{i}"), SEC, 1).is_allowed());
    }
    let refused = store.decide(&limit, "newcomer", SEC, 1);
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(2)));
    // Known keys are still decided exactly.
    assert_eq!(store.decide(&limit, "k0", SEC, 1).remaining, 3);
    let stats = store.stats();
    assert_eq!(
        (stats.keys, stats.rejected_new_keys, stats.evicted_live),
        (8, 1, 0)
    );
}

/// A layered decision whose one key is held but fresh, and whose other key is new, in a full
/// store that refuses new keys: the sweep making room for the new key dropped the fresh one,
/// both were then stored, and the store held one key more than `max_keys` (found by the
/// fuzz suite, one run in three).
#[test]
fn a_layered_decision_does_not_take_a_full_store_past_its_bound() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 2,
        shards: 1,
        when_full: WhenFull::RejectNewKeys,
        ..StoreConfig::default()
    });
    let quick = Limit::from(Gcra::new(Rate::per_second(10).unwrap(), 1).unwrap());
    let hourly =
        Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), 1).unwrap());
    assert!(store.decide(&quick, "fresh-soon", SEC, 1).is_allowed());
    assert!(store.decide(&hourly, "held", SEC, 1).is_allowed());
    assert_eq!(store.stats().keys, 2);
    // A second later "fresh-soon" is fresh again but still held; "new" needs a third slot.
    let now = 2 * SEC;
    let decisions = store.decide_all(&[(&quick, "fresh-soon", 1), (&quick, "new", 1)], now);
    let stats = store.stats();
    assert!(stats.keys <= 2, "{stats:?}");
    // The store is full of a key it must keep: the new key is refused, and nothing charged.
    assert!(!decisions[1].is_allowed(), "{decisions:?}");
    assert!(store.peek(&quick, "fresh-soon", now, 1).is_allowed());
    // Layered the other way round, the same.
    let decisions = store.decide_all(&[(&quick, "new", 1), (&quick, "fresh-soon", 1)], now);
    let stats = store.stats();
    assert!(stats.keys <= 2, "{stats:?}");
    assert!(
        !decisions[0].is_allowed() || !decisions[1].is_allowed(),
        "{decisions:?}"
    );
}

#[test]
fn memory_stays_flat_under_a_flood_of_one_off_keys() {
    // One-off IPv6 addresses, each seen once, a few microseconds apart.
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 10_000,
        shards: 8,
        ..StoreConfig::default()
    });
    let limit = Limit::from(Gcra::new(Rate::per_second(100).unwrap(), 20).unwrap());
    let mut now = SEC;
    // The cap's budget: a 64-byte slot and an index entry per key, with the index's slack.
    let budget = 10_000 * 96;
    for round in 0..10 {
        for i in 0..10_000u64 {
            now += 5_000;
            let key = format!("ip|2001:db8:{round:x}:{i:x}::/64");
            assert!(store.decide(&limit, &key, now, 1).is_allowed());
        }
        let stats = store.stats();
        assert!(stats.keys <= 10_000);
        assert!(
            stats.allocated_bytes <= budget,
            "round {round}: {} bytes allocated, over the cap's {budget}",
            stats.allocated_bytes
        );
    }
    let stats = store.stats();
    // Each key's state is fresh 10 ms after its request: most left by expiry, not eviction.
    assert!(stats.evicted_fresh > stats.evicted_live, "{stats:?}");
}

#[test]
fn permits_are_given_back_when_the_guard_drops() {
    let store: MemoryStore = MemoryStore::new(StoreConfig::default());
    let limit = Limit::from(Concurrency::new(1, Duration::from_secs(30)).unwrap());
    {
        let permit = store.acquire(&limit, "db", SEC, 1).expect("free");
        assert!(permit.id() > 0);
        assert!(store.acquire(&limit, "db", SEC, 1).is_err());
    }
    let kept = store
        .acquire(&limit, "db", SEC, 1)
        .expect("given back")
        .into_id();
    assert!(store.acquire(&limit, "db", SEC, 1).is_err());
    assert!(store.release(&limit, "db", kept));
    assert!(store.acquire(&limit, "db", SEC, 1).is_ok());
}

#[test]
fn a_store_of_one_algorithm_keeps_smaller_state() {
    let store: MemoryStore<Gcra> = MemoryStore::new(StoreConfig::default());
    let gcra = Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap();
    for _ in 0..5 {
        assert!(store.decide(&gcra, "k", 0, 1).is_allowed());
    }
    let d = store.decide(&gcra, "k", 0, 1);
    assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
    assert!(gcra.limit() == 5);
}

#[test]
fn a_rejected_layered_request_evicts_nothing() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 4,
        shards: 1,
        ..StoreConfig::default()
    });
    let slow = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 1).unwrap());
    for i in 0..4 {
        assert!(store.decide(&slow, &format!("k{i}"), SEC, 1).is_allowed());
    }
    // k0 is spent, so the layered request is rejected: the new key must not push anyone out.
    let decisions = store.decide_all(&[(&slow, "newcomer", 1), (&slow, "k0", 1)], SEC);
    assert!(!decisions[1].is_allowed());
    let stats = store.stats();
    assert_eq!((stats.keys, stats.evicted_live), (4, 0));
}

/// 5 an hour, under each algorithm that has a rate.
fn five_an_hour() -> Vec<Limit> {
    let hour = Duration::from_secs(3600);
    let rate = Rate::new(5, hour).unwrap();
    vec![
        FixedWindow::new(5, hour).unwrap().into(),
        SlidingLog::new(5, hour).unwrap().into(),
        SlidingWindow::new(5, hour).unwrap().into(),
        TokenBucket::new(rate, 5).unwrap().into(),
        LeakyBucket::new(rate, 5).unwrap().into(),
        Gcra::new(rate, 5).unwrap().into(),
        Quota::new(5, CalendarUnit::Day, "UTC").unwrap().into(),
    ]
}

/// Exhausts `key` under `limit` at `now`: five allowed, the sixth refused.
fn exhaust(store: &MemoryStore, limit: &Limit, key: &str, now: u64) {
    for _ in 0..5 {
        assert!(store.decide(limit, key, now, 1).is_allowed(), "{key}");
    }
    assert!(!store.decide(limit, key, now, 1).is_allowed(), "{key}");
}

#[test]
fn a_flood_of_junk_keys_does_not_reset_a_limited_key() {
    let max_keys = 1_000;
    for limit in five_an_hour() {
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_keys,
            shards: 4,
            ..StoreConfig::default()
        });
        let mut now = 1_000 * SEC;
        exhaust(&store, &limit, "victim", now);
        // Ten times `max_keys` random keys, one request each: they keep budget left.
        let mut rng = Rng(7);
        for _ in 0..10 * max_keys {
            now += 1_000;
            let junk = format!("junk|{}", rng.below(u64::MAX));
            store.decide(&limit, &junk, now, 1);
        }
        let d = store.decide(&limit, "victim", now, 1);
        assert!(!d.is_allowed(), "{}: the victim got {d:?}", limit.kind());
        let stats = store.stats();
        assert!(
            stats.evicted_live > 0,
            "{}: the flood evicted",
            limit.kind()
        );
        assert_eq!(stats.evicted_limited, 0, "{}", limit.kind());
    }
}

#[test]
fn a_flood_of_exhausted_junk_keys_does_not_reset_a_limited_key_either() {
    // Every junk key is exhausted too, so shards hold nothing but limited keys: the victim
    // is evicted in the end, and must come back limited, not fresh.
    let max_keys = 200;
    for limit in five_an_hour() {
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_keys,
            shards: 2,
            ..StoreConfig::default()
        });
        let now = 1_000 * SEC;
        exhaust(&store, &limit, "victim", now);
        let mut rng = Rng(11);
        for _ in 0..10 * max_keys {
            let junk = format!("junk|{}", rng.below(u64::MAX));
            for _ in 0..6 {
                store.decide(&limit, &junk, now, 1);
            }
        }
        let stats = store.stats();
        assert!(
            stats.evicted_limited > 0,
            "{}: limited keys had to go: {stats:?}",
            limit.kind()
        );
        assert!(stats.keys <= max_keys, "{}: {stats:?}", limit.kind());
        let d = store.decide(&limit, "victim", now, 1);
        assert!(!d.is_allowed(), "{}: the victim got {d:?}", limit.kind());
        assert!(!store.peek(&limit, "victim", now, 1).is_allowed());
        // Not refused forever: by the time its state would have been fresh, it is free.
        let day = 24 * 3600 * SEC;
        assert!(
            store.decide(&limit, "victim", now + day, 1).is_allowed(),
            "{}",
            limit.kind()
        );
        // More limited keys than the trace holds: the rest of the newcomers were refused.
        assert!(stats.rejected_new_keys > 0, "{}: {stats:?}", limit.kind());
    }
}

#[test]
fn a_full_store_evicts_keys_with_budget_before_limited_ones() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 64,
        shards: 1,
        ..StoreConfig::default()
    });
    let limit = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 2).unwrap());
    let now = 10 * SEC;
    // Half the store limited, never touched again; the other half with budget left.
    for i in 0..32 {
        let key = format!("limited|{i}");
        store.decide(&limit, &key, now, 2);
        store.decide(&limit, &format!("spare|{i}"), now, 1);
    }
    for i in 0..500 {
        store.decide(&limit, &format!("new|{i}"), now, 1);
    }
    for i in 0..32 {
        let d = store.peek(&limit, &format!("limited|{i}"), now, 1);
        assert!(!d.is_allowed(), "limited|{i} kept its state");
        assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
    }
    let stats = store.stats();
    assert_eq!((stats.evicted_limited, stats.keys), (0, 64));
}

#[test]
fn a_layered_request_on_a_key_evicted_while_limited_is_refused_and_charges_nothing() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: 4,
        shards: 1,
        ..StoreConfig::default()
    });
    let slow = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 1).unwrap());
    let roomy = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 9).unwrap());
    // Five limited keys in a store of four: the first goes to the trace.
    for i in 0..5 {
        assert!(store.decide(&slow, &format!("k{i}"), SEC, 1).is_allowed());
    }
    assert_eq!(store.stats().evicted_limited, 1);
    let decisions = store.decide_all(&[(&roomy, "tenant", 1), (&slow, "k0", 1)], SEC);
    assert!(!decisions[1].is_allowed(), "{decisions:?}");
    assert_eq!(decisions[1].retry_after(), Some(Duration::from_secs(60)));
    assert_eq!(
        store.peek(&roomy, "tenant", SEC, 0).remaining,
        9,
        "nothing charged"
    );
}

/// A key of `len` bytes, distinct for each `i`.
fn long_key(i: usize, len: usize) -> String {
    let mut key = format!("tenant|{i}|");
    key.extend(std::iter::repeat_n('x', len - key.len()));
    key
}

#[test]
fn long_keys_never_take_the_store_past_max_bytes() {
    // 60 KB tenant values: a thousand of them are 60 MB, against a bound of 4 MiB.
    let max_bytes = 4 << 20;
    for when_full in [WhenFull::EvictLeastRecentlyUsed, WhenFull::RejectNewKeys] {
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_bytes,
            shards: 4,
            when_full,
            ..StoreConfig::default()
        });
        let limit = Limit::from(Gcra::new(Rate::per_second(10).unwrap(), 10).unwrap());
        let mut most = 0;
        let mut allowed = 0;
        for i in 0..1_000 {
            allowed += u64::from(
                store
                    .decide(&limit, &long_key(i, 60_000), SEC, 1)
                    .is_allowed(),
            );
            most = most.max(store.stats().allocated_bytes);
        }
        let stats = store.stats();
        eprintln!("{when_full:?}: at most {most} bytes allocated (bound {max_bytes}): {stats:?}");
        // The bound counts slots and keys; the index and the shard array come on top.
        assert!(most <= max_bytes + (64 << 10), "{when_full:?}: {most}");
        assert!(stats.key_bytes <= max_bytes && stats.key_bytes >= 60 * 60_000);
        match when_full {
            WhenFull::EvictLeastRecentlyUsed => assert_eq!(allowed, 1_000),
            WhenFull::RejectNewKeys => {
                assert_eq!(stats.rejected_new_keys, 1_000 - allowed);
                assert!(stats.rejected_new_keys > 900);
            }
        }
    }
}

#[test]
fn a_key_larger_than_a_shards_share_is_refused() {
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_bytes: 1 << 20,
        shards: 4,
        ..StoreConfig::default()
    });
    let limit = Limit::from(Gcra::new(Rate::per_second(10).unwrap(), 10).unwrap());
    assert!(store.decide(&limit, "small", SEC, 1).is_allowed());
    let d = store.decide(&limit, &long_key(0, 300_000), SEC, 1);
    assert!(!d.is_allowed(), "{d:?}");
    let d = store.decide_all(
        &[(&limit, "small", 1), (&limit, &long_key(1, 300_000), 1)],
        SEC,
    );
    assert!(!d[1].is_allowed(), "{d:?}");
    let stats = store.stats();
    assert_eq!(
        (stats.keys, stats.key_bytes, stats.rejected_new_keys),
        (1, 0, 2)
    );
    assert_eq!(
        store.peek(&limit, "small", SEC, 0).remaining,
        9,
        "nothing charged"
    );
}

#[test]
fn two_new_keys_of_one_layered_request_do_not_overfill_a_shard() {
    // Found by tests/fuzz.rs: each new key alone fitted, so both passed the check, and the
    // second was stored past `max_keys` (before that, it was refused after the first had
    // been charged: not all or nothing).
    for when_full in [WhenFull::RejectNewKeys, WhenFull::EvictLeastRecentlyUsed] {
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_keys: 2,
            shards: 1,
            when_full,
            ..StoreConfig::default()
        });
        let slow =
            Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 1).unwrap());
        let roomy =
            Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 9).unwrap());
        // One limited key: the other slot is free.
        assert!(store.decide(&slow, "old", SEC, 1).is_allowed());
        let d = store.decide_all(&[(&roomy, "new-a", 1), (&roomy, "new-b", 1)], SEC);
        let stats = store.stats();
        assert!(stats.keys <= 2, "{when_full:?}: {stats:?}");
        match when_full {
            WhenFull::RejectNewKeys => {
                assert!(!d[1].is_allowed(), "{d:?}");
                assert_eq!(stats.keys, 1, "nothing charged");
            }
            // The limited key goes to the trace to make room, and stays limited.
            WhenFull::EvictLeastRecentlyUsed => {
                assert!(d.iter().all(|d| d.is_allowed()), "{d:?}");
                assert!(!store.decide(&slow, "old", SEC, 1).is_allowed());
            }
        }
    }
}
