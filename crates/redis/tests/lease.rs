//! The script's leased shares of fleet budgets against a real `redis-server`: the same
//! grants, step for step, as core's `Leases` (through the in-memory store) makes them, for
//! random members, wants, weights, capacities and times; lapsed leases and a want of zero
//! give back what they held, and the budget's hash expires with its last lease.

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::lease::{Ask, MAX_UNITS};
use ratewarden_core::AsyncStore;
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_redis::testing::{Cluster, Server};
use ratewarden_redis::{RedisConfig, RedisStore, Target, TimeSource};

const MS: u64 = 1_000_000;
const T0: u64 = 1_796_169_600_000 * MS;

fn store(url: String) -> RedisStore {
    on(Target::Single(url))
}

fn on(target: Target) -> RedisStore {
    RedisStore::new(RedisConfig {
        target,
        deadline: Duration::from_secs(2),
        time: TimeSource::Caller,
        key_prefix: "share-test:".to_owned(),
        ..RedisConfig::default()
    })
    .expect("a valid config")
}

#[tokio::test]
async fn leases_are_granted_exactly_as_the_memory_store_grants_them() {
    let server = Server::start();
    same_grants_as_memory(&store(server.url())).await;
}

/// On a Cluster each budget's hash lives in its key's slot, wherever that is.
#[tokio::test]
async fn leases_on_a_cluster_are_granted_as_on_one_server() {
    let cluster = Cluster::start();
    same_grants_as_memory(&on(Target::Cluster(cluster.urls()))).await;
}

/// Random asks of six members on six budgets, each answered as the in-memory store does.
async fn same_grants_as_memory(redis: &RedisStore) {
    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    let members = ["a", "b", "c", "d", "e", "f"];
    let mut rng = Rng(0x5a4e_0001);
    for budget in 0..6 {
        let key = format!("api|budget-{budget}");
        let mut now = T0 + rng.below(1_000) * MS + rng.below(MS);
        let capacity = match budget {
            0 => 600,
            1 => 1,
            2 => MAX_UNITS + 7, // taken as MAX_UNITS
            _ => 1 + rng.below(5_000),
        };
        for step in 0..400 {
            now += rng.below(400 * MS);
            let want = match rng.below(10) {
                0 => 0,
                1 => u64::MAX,
                _ => rng.below(2 * capacity.min(10_000)),
            };
            let ask = Ask {
                member: members[usize::try_from(rng.below(6)).unwrap()],
                want,
                weight: if budget % 2 == 0 { 1 } else { rng.below(6) },
                // Now and then a reload changes the capacity.
                capacity: if rng.below(50) == 0 {
                    capacity / 2
                } else {
                    capacity
                },
                ttl_ms: 200 + rng.below(1_500),
            };
            let got = redis.lease(&key, ask, now).await.expect("granted");
            let expected = AsyncStore::lease(&memory, &key, ask, now)
                .await
                .expect("granted");
            assert_eq!(got, expected, "budget {budget} step {step}: {ask:?}");
            assert!(got <= ask.want.min(ask.capacity.min(MAX_UNITS)));
        }
    }
}

#[tokio::test]
async fn a_lease_lapses_on_its_time_and_the_hash_expires_with_the_last_one() {
    let server = Server::start();
    let redis = store(server.url());
    let ask = |member, want| Ask {
        member,
        want,
        weight: 1,
        capacity: 600,
        ttl_ms: 60_000,
    };
    assert_eq!(redis.lease("api|x", ask("a", 1000), T0).await.unwrap(), 600);
    // b gets nothing while a holds everything, then all once a's lease lapses.
    assert_eq!(redis.lease("api|x", ask("b", 1000), T0).await.unwrap(), 0);
    let later = T0 + 60_000 * MS;
    assert_eq!(
        redis.lease("api|x", ask("b", 1000), later).await.unwrap(),
        600
    );
    // The hash is there, with a TTL no longer than the longest lease.
    let pttl: i64 = server
        .cli(&["PTTL", "share-test:share:api|{x}"])
        .trim()
        .parse()
        .expect("a PTTL");
    assert!((1..=60_000).contains(&pttl), "{pttl}");
    // A want of zero gives it back: a takes everything again.
    assert_eq!(redis.lease("api|x", ask("b", 0), later).await.unwrap(), 0);
    assert_eq!(
        redis.lease("api|x", ask("a", 1000), later).await.unwrap(),
        600
    );
}
