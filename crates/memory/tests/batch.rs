//! `decide_many`: a batch decides exactly as `decide` called for each key in turn, with
//! repeated keys, new keys and states past GCRA's 64-bit word in one batch, and threads
//! racing batches on shared keys admit exactly the limit.

use std::collections::HashMap;
use std::sync::Barrier;

use proptest::prelude::*;
use ratewarden_core::algorithm::GcraState;
use ratewarden_core::{Algorithm, Gcra, Limit, Rate};
use ratewarden_memory::{MemoryStore, StoreConfig};

/// A second in nanoseconds.
const SEC: u64 = 1_000_000_000;

fn config() -> StoreConfig {
    StoreConfig {
        max_keys: 10_000,
        shards: 8,
        ..StoreConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Batches of up to 40 keys (more than one chunk) drawn from 24 names, so keys repeat
    /// within a batch and new keys arrive in the middle of one, at rates inside the word
    /// (5/s) and past it (13/s at today's clock): every decision is the algorithm's on a
    /// state of its own, in the batch's order.
    #[test]
    fn a_batch_decides_as_one_key_after_another(
        count in prop_oneof![Just(5u64), Just(13u64)],
        burst in 1..4u64,
        batches in prop::collection::vec(
            (prop::collection::vec(0..24usize, 0..40), 0..2 * SEC, 0..3u64),
            1..12,
        ),
    ) {
        let gcra = Gcra::new(Rate::per_second(count).unwrap(), burst).unwrap();
        let store: MemoryStore<Gcra> = MemoryStore::new(config());
        let mut model: HashMap<String, GcraState> = HashMap::new();
        let mut now = 1_700_000_000 * SEC;
        let mut out = Vec::new();
        for (picks, step, cost) in batches {
            now += step;
            let names: Vec<String> = picks.iter().map(|p| format!("key-{p}")).collect();
            let keys: Vec<&str> = names.iter().map(String::as_str).collect();
            out.clear();
            store.decide_many(&gcra, &keys, now, cost, &mut out);
            let want: Vec<_> = names
                .iter()
                .map(|k| gcra.decide(model.entry(k.clone()).or_default(), now, cost))
                .collect();
            prop_assert_eq!(&out, &want);
        }
    }
}

/// The store of the `Limit` enum (state held as it is) takes the same API, one key at a
/// time.
#[test]
fn a_batch_under_the_limit_enum_decides_as_one_key_after_another() {
    let limit = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 2).unwrap());
    let store: MemoryStore = MemoryStore::new(config());
    let mut out = Vec::new();
    store.decide_many(&limit, &["a", "b", "a", "a", "b"], 0, 1, &mut out);
    let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    assert_eq!(allowed, [true, true, true, false, true]);
}

/// Four threads deciding batches over the same eight keys at one instant admit exactly
/// each key's burst, no more (a batch's decisions are compare-and-swaps like any other).
#[test]
fn racing_batches_admit_exactly_the_limit() {
    let burst = 50;
    let gcra = Gcra::new(Rate::per_second(10).unwrap(), burst).unwrap();
    let store: MemoryStore<Gcra> = MemoryStore::new(config());
    let names: Vec<String> = (0..8).map(|k| format!("shared-{k}")).collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let now = 1_700_000_000 * SEC;
    // Present before the race (one unit spent each), so the batches decide in the word.
    for key in &keys {
        assert!(store.decide(&gcra, key, now, 1).is_allowed());
    }
    let barrier = Barrier::new(4);
    let allowed: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let mut out = Vec::new();
                    for _ in 0..40 {
                        store.decide_many(&gcra, &keys, now, 1, &mut out);
                    }
                    out.iter().filter(|d| d.is_allowed()).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(allowed, keys.len() * (burst as usize - 1));
}
