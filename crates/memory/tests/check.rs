//! The cheap check (`MemoryStore::check`) against `decide`: on the same sequence of
//! requests, two stores answer alike, the check's `Ok` is `decide`'s "allowed now", its
//! lazy refusal computes `decide`'s decision, and the stores are left alike (the same keys
//! held, evicted and traced).

use std::hash::RandomState;
use std::time::Duration;

use proptest::prelude::*;
use ratewarden_core::{Gcra, Limit, Outcome, Rate};
use ratewarden_memory::{MemoryStore, StoreConfig, Stored};

mod common;

use common::{every_limit, SEC};

/// A store of four shards holding at most `max_keys`, so a few keys fill it and evictions
/// (of live and of limited keys) happen; two stores given one hasher spread keys alike.
fn store<A: Stored>(max_keys: usize, hasher: RandomState) -> MemoryStore<A> {
    MemoryStore::with_hasher(
        StoreConfig {
            max_keys,
            shards: 4,
            ..StoreConfig::default()
        },
        hasher,
    )
}

/// GCRA at random numbers: counts dividing the period (decided in one 64-bit word) as often
/// as not (decided in full).
fn gcra() -> impl Strategy<Value = Gcra> {
    (
        prop_oneof![Just(1u64), Just(5), Just(50), 1u64..20],
        1u64..3_000,
        1u64..6,
    )
        .prop_map(|(count, period_ms, burst)| {
            Gcra::new(
                Rate::new(count, Duration::from_millis(period_ms)).unwrap(),
                burst,
            )
            .unwrap()
        })
}

/// Requests: a key of six, a cost (sometimes above any burst here), and the time step
/// before it.
fn requests() -> impl Strategy<Value = Vec<(usize, u64, u64)>> {
    let step = prop_oneof![Just(0u64), 0..1_000u64, 0..300_000_000u64, 0..3 * SEC];
    prop::collection::vec(
        (0usize..6, prop_oneof![4 => 0u64..3, 1 => 0u64..8], step),
        1..120,
    )
}

/// Runs `requests` through `decide` on one store and `check` on another, and compares.
fn same_answers<A: Stored>(
    limit: &A,
    requests: &[(usize, u64, u64)],
    max_keys: usize,
) -> Result<(), TestCaseError> {
    let hasher = RandomState::new();
    let decided: MemoryStore<A> = store(max_keys, hasher.clone());
    let checked: MemoryStore<A> = store(max_keys, hasher);
    let mut now = SEC;
    for &(key, cost, step) in requests {
        now += step;
        let key = format!("key-{key}");
        let decision = decided.decide(limit, &key, now, cost);
        match checked.check(limit, &key, now, cost) {
            Ok(()) => prop_assert_eq!(decision.outcome, Outcome::Allowed, "{} at {}", key, now),
            Err(not_now) => {
                prop_assert_eq!(not_now.decision(), decision, "{} at {}", key, now);
                prop_assert_eq!(not_now.retry_after_ns(), decision.retry_after_ns());
            }
        }
        // What each store now says of the key, and of a request of one.
        prop_assert_eq!(
            checked.peek(limit, &key, now, 1),
            decided.peek(limit, &key, now, 1)
        );
    }
    prop_assert_eq!(checked.stats(), decided.stats());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// GCRA, held in one word: random rates, bursts, times and costs, in a store with room
    /// for every key and in one too small for them.
    #[test]
    fn a_lazy_refusal_decides_what_decide_decides_under_gcra(
        gcra in gcra(),
        requests in requests(),
        max_keys in prop_oneof![Just(1_000usize), 2usize..6],
    ) {
        same_answers(&gcra, &requests, max_keys)?;
    }

    /// Every algorithm, held as it is (decided in full, the refusal computed at once).
    #[test]
    fn a_refusal_decides_what_decide_decides_under_every_limit(
        which in 0usize..9,
        requests in requests(),
        max_keys in prop_oneof![Just(1_000usize), 2usize..6],
    ) {
        let limit: Limit = every_limit()[which].clone();
        same_answers(&limit, &requests, max_keys)?;
    }
}

/// A flood's refusals are answered from the word they were refused on: the numbers read
/// later, after other requests moved the key, are the refusal's own.
#[test]
fn a_refusal_read_later_keeps_the_numbers_of_its_instant() {
    let gcra = Gcra::new(Rate::per_second(5).unwrap(), 2).unwrap();
    let store: MemoryStore<Gcra> = store(100, RandomState::new());
    assert!(store.check(&gcra, "k", 0, 1).is_ok());
    assert!(store.check(&gcra, "k", 0, 1).is_ok());
    let refused = store.check(&gcra, "k", 0, 1).unwrap_err();
    // The key moves on: a cell is due at 200 ms, and is taken.
    assert!(store.check(&gcra, "k", 200_000_000, 1).is_ok());
    let decision = refused.decision();
    assert_eq!(decision.retry_after_ns(), Some(200_000_000));
    assert_eq!(decision.remaining, 0);
    assert_eq!(decision.reset_after_ns, 400_000_000);
}
