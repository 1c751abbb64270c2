//! GCRA decided in one word under the shard's read lock (`TatWord`): threads racing on one
//! hot key admit exactly what the limit allows, and one thread gets the decisions the
//! algorithm gives on a state of its own, on both sides of the 64-bit word.

use std::collections::HashMap;
use std::sync::Barrier;
use std::time::Duration;

use proptest::prelude::*;
use ratewarden_core::algorithm::GcraState;
use ratewarden_core::{Algorithm, Gcra, Rate};
use ratewarden_memory::{MemoryStore, StoreConfig};

/// A second in nanoseconds.
const SEC: u64 = 1_000_000_000;

fn store() -> MemoryStore<Gcra> {
    MemoryStore::new(StoreConfig {
        max_keys: 1_000,
        shards: 4,
        ..StoreConfig::default()
    })
}

#[derive(Debug, Clone)]
enum Op {
    Decide { key: usize, cost: u64 },
    Peek { key: usize, cost: u64 },
    Settle { key: usize, delta: i64 },
    Sweep,
}

fn op() -> impl Strategy<Value = (Op, u64)> {
    let op = prop_oneof![
        6 => (0..4usize, 0..5u64).prop_map(|(key, cost)| Op::Decide { key, cost }),
        1 => (0..4usize, 0..5u64).prop_map(|(key, cost)| Op::Peek { key, cost }),
        1 => (0..4usize, -3..4i64).prop_map(|(key, delta)| Op::Settle { key, delta }),
        1 => Just(Op::Sweep),
    ];
    let step = prop_oneof![Just(0u64), 0..1_000u64, 0..300_000_000u64, 0..3 * SEC];
    (op, step)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One thread: every decision, peek and settle through the store is what `Gcra` says on
    /// a state of its own per key. The rates span both sides of the word: `5/s` keeps the
    /// arrival time in 64 bits (decided by compare-and-swap), `13/s` at today's clock needs
    /// more (decided under the write lock), and `13/s` can cross over mid-run.
    #[test]
    fn one_thread_decides_as_the_algorithm_in_one_word_or_two(
        count in prop_oneof![Just(5u64), Just(13u64), 1..50u64],
        burst in 1..6u64,
        start in prop_oneof![Just(0u64), Just(1_700_000_000 * SEC), Just(u64::MAX / 13 - 10 * SEC)],
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let gcra = Gcra::new(Rate::per_second(count).unwrap(), burst).unwrap();
        let store = store();
        let mut model: HashMap<usize, GcraState> = HashMap::new();
        let mut now = start;
        for (op, step) in ops {
            now = now.saturating_add(step);
            match op {
                Op::Decide { key, cost } => {
                    let want = gcra.decide(model.entry(key).or_default(), now, cost);
                    prop_assert_eq!(store.decide(&gcra, &format!("k{key}"), now, cost), want);
                }
                Op::Peek { key, cost } => {
                    let want = gcra.peek(model.entry(key).or_default(), now, cost);
                    prop_assert_eq!(store.peek(&gcra, &format!("k{key}"), now, cost), want);
                }
                Op::Settle { key, delta } => {
                    gcra.settle(model.entry(key).or_default(), now, delta);
                    store.settle(&gcra, &format!("k{key}"), now, delta);
                }
                Op::Sweep => {
                    store.sweep(now, usize::MAX);
                }
            }
        }
    }
}

/// Threads racing on one key at one instant admit exactly the burst, round after round as
/// the clock moves on (each round refills exactly `elapsed / interval` cells): never more
/// (a lost compare-and-swap would double-spend) and never fewer.
#[test]
fn racing_threads_on_one_hot_key_admit_exactly_the_limit() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 2_000;
    let burst = 1_000;
    // 1000/s: an interval of 1 ms.
    let gcra = Gcra::new(Rate::per_second(1_000).unwrap(), burst).unwrap();
    let store = store();
    let mut model = GcraState::default();
    let start = 1_700_000_000 * SEC;
    let rounds = [0, 0, 3, 250, 999, 1_000, 5_000];
    let mut now = start;
    for (round, ms) in rounds.into_iter().enumerate() {
        now += ms * 1_000_000;
        let barrier = Barrier::new(THREADS);
        let allowed: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        (0..PER_THREAD)
                            .filter(|_| store.decide(&gcra, "hot", now, 1).is_allowed())
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let want = (0..THREADS * PER_THREAD)
            .filter(|_| gcra.decide(&mut model, now, 1).is_allowed())
            .count() as u64;
        assert_eq!(allowed, want, "round {round}, {ms} ms on");
        // The store's state is the model's: the next request is answered alike.
        assert_eq!(store.peek(&gcra, "hot", now, 1), gcra.peek(&model, now, 1));
    }
    assert_eq!(store.stats().keys, 1);
}

/// A racing key stays in the store while it is limited: the last decision recorded
/// (whichever thread recorded it last) leaves the slot's expiry at the latest state's, so
/// a sweep at any time before then keeps the key limited.
#[test]
fn a_sweep_after_racing_threads_keeps_the_hot_key_limited() {
    let gcra = Gcra::new(Rate::per_second(10).unwrap(), 100).unwrap();
    let store = store();
    let now = 1_700_000_000 * SEC;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..500 {
                    store.decide(&gcra, "hot", now, 1);
                }
            });
        }
    });
    // 100 admitted at `now`: fresh again 10 s later, and not a nanosecond earlier.
    let just_before = now + 10 * SEC - 1;
    assert_eq!(store.sweep(just_before, usize::MAX), 0);
    assert!(!store
        .decide(
            &gcra,
            "hot",
            now + Duration::from_millis(99).as_nanos() as u64,
            1
        )
        .is_allowed());
    assert_eq!(store.sweep(now + 10 * SEC, usize::MAX), 1);
}
