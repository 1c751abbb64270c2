//! Fuzzing (proptest; cargo-fuzz needs a nightly toolchain) of the store against the core
//! algorithms, with arbitrary keys: empty, odd Unicode and control bytes, just over the
//! 24-byte inline size, and 70 KB long.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use ratewarden_core::{Algorithm, Gcra, Limit, LimitState, Rate};
use ratewarden_memory::{MemoryStore, StoreConfig, WhenFull};

mod common;

use common::{every_limit, SEC};

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        any::<String>(),
        "[\\x00-\\x1f|{}]{0,8}",
        ".{23,26}",
        (any::<char>(), 1_000..70_000usize).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Decide {
        key: usize,
        limit: usize,
        cost: u64,
    },
    Peek {
        key: usize,
        limit: usize,
        cost: u64,
    },
    Settle {
        key: usize,
        limit: usize,
        delta: i64,
    },
    Both {
        a: (usize, usize),
        b: (usize, usize),
        cost: u64,
    },
    Sweep,
}

fn op() -> impl Strategy<Value = (Op, u64)> {
    let at = (0..8usize, 0..9usize);
    let op = prop_oneof![
        4 => (at.clone(), 0..4u64).prop_map(|((key, limit), cost)| Op::Decide { key, limit, cost }),
        1 => (at.clone(), 0..4u64).prop_map(|((key, limit), cost)| Op::Peek { key, limit, cost }),
        1 => (at.clone(), -2..3i64).prop_map(|((key, limit), delta)| Op::Settle { key, limit, delta }),
        1 => (at.clone(), at, 0..3u64).prop_map(|(a, b, cost)| Op::Both { a, b, cost }),
        1 => Just(Op::Sweep),
    ];
    let step = prop_oneof![Just(0u64), 0..1_000u64, 0..300_000_000u64, 0..3 * SEC];
    (op, step)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// With room for every key, the store answers exactly as the algorithm on a state of
    /// its own per key, whatever the keys' bytes.
    #[test]
    fn the_store_decides_as_the_algorithms_on_arbitrary_keys(
        keys in prop::collection::vec(key(), 8),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let limits = every_limit();
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_keys: 1_000,
            max_bytes: usize::MAX,
            shards: 4,
            ..StoreConfig::default()
        });
        let mut model: HashMap<String, LimitState> = HashMap::new();
        let name = |k: usize, l: usize| format!("{l}|{}", keys[k]);
        let mut now = 1_000 * SEC;
        for (op, step) in ops {
            now += step;
            match op {
                Op::Decide { key, limit, cost } => {
                    let state = model.entry(name(key, limit)).or_default();
                    let want = limits[limit].decide(state, now, cost);
                    prop_assert_eq!(store.decide(&limits[limit], &name(key, limit), now, cost), want);
                }
                Op::Peek { key, limit, cost } => {
                    let state = model.entry(name(key, limit)).or_default();
                    let want = limits[limit].peek(state, now, cost);
                    prop_assert_eq!(store.peek(&limits[limit], &name(key, limit), now, cost), want);
                }
                Op::Settle { key, limit, delta } => {
                    let state = model.entry(name(key, limit)).or_default();
                    limits[limit].settle(state, now, delta);
                    store.settle(&limits[limit], &name(key, limit), now, delta);
                }
                Op::Both { a, b, cost } => {
                    let (ka, kb) = (name(a.0, a.1), name(b.0, b.1));
                    if ka == kb {
                        continue;
                    }
                    let (la, lb) = (&limits[a.1], &limits[b.1]);
                    let got = store.decide_all(&[(la, &ka, cost), (lb, &kb, cost)], now);
                    let sa = model.entry(ka.clone()).or_default().clone();
                    let sb = model.entry(kb.clone()).or_default().clone();
                    let peeks = [la.peek(&sa, now, cost), lb.peek(&sb, now, cost)];
                    let want = if peeks.iter().all(|d| d.is_allowed()) {
                        let da = la.decide(model.get_mut(&ka).unwrap(), now, cost);
                        let db = lb.decide(model.get_mut(&kb).unwrap(), now, cost);
                        vec![da, db]
                    } else {
                        peeks.to_vec()
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Sweep => {
                    store.sweep(now, usize::MAX);
                }
            }
        }
        let stats = store.stats();
        prop_assert_eq!(stats.evicted_live + stats.evicted_limited + stats.rejected_new_keys, 0);
    }

    /// A small store under arbitrary keys and traffic: never past its bounds, never a
    /// panic, and a limited key stays limited through it all.
    #[test]
    fn a_small_store_stays_bounded_and_keeps_a_limited_key_limited(
        keys in prop::collection::vec(key(), 8),
        ops in prop::collection::vec(op(), 1..200),
        when_full in prop_oneof![Just(WhenFull::EvictLeastRecentlyUsed), Just(WhenFull::RejectNewKeys)],
    ) {
        let limits = every_limit();
        let (max_keys, max_bytes) = (8, 200_000);
        let store: MemoryStore = MemoryStore::new(StoreConfig {
            max_keys,
            max_bytes,
            shards: 2,
            when_full,
            ..StoreConfig::default()
        });
        // One request an hour: the victim, once spent, is refused for the whole run.
        let hourly = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), 1).unwrap());
        let mut now = 1_000 * SEC;
        let victim_allowed = store.decide(&hourly, "victim", now, 1).is_allowed();
        let name = |k: usize, l: usize| format!("{l}|{}", keys[k]);
        for (op, step) in ops {
            now += step.min(SEC);
            match op {
                Op::Decide { key, limit, cost } | Op::Peek { key, limit, cost } => {
                    store.decide(&limits[limit], &name(key, limit), now, cost);
                }
                Op::Settle { key, limit, delta } => {
                    store.settle(&limits[limit], &name(key, limit), now, delta);
                }
                Op::Both { a, b, cost } => {
                    let (ka, kb) = (name(a.0, a.1), name(b.0, b.1));
                    if ka != kb {
                        store.decide_all(&[(&limits[a.1], &ka, cost), (&limits[b.1], &kb, cost)], now);
                    }
                }
                Op::Sweep => {
                    store.sweep(now, usize::MAX);
                }
            }
            let stats = store.stats();
            prop_assert!(stats.keys <= max_keys, "{:?}", stats);
            prop_assert!(stats.key_bytes <= max_bytes, "{:?}", stats);
        }
        if victim_allowed {
            let d = store.decide(&hourly, "victim", now, 1);
            prop_assert!(!d.is_allowed(), "the victim got {:?}: {:?}", d, store.stats());
        }
    }
}
