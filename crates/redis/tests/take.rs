//! The script's partial grant ("take up to k", for prefetched allowances) against a real
//! `redis-server`: as many units as fit, charged at once, exactly as core's transitions
//! (through the in-memory store) grant them.

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    AsyncStore, CalendarUnit, FixedWindow, Gcra, LeakyBucket, Limit, Quota, Rate, SlidingWindow,
    TokenBucket,
};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_redis::testing::Server;
use ratewarden_redis::{RedisConfig, RedisStore, Target, TimeSource};

const SEC: u64 = 1_000_000_000;
const T0: u64 = 1_796_169_600 * SEC;

fn store(url: String) -> RedisStore {
    RedisStore::new(RedisConfig {
        target: Target::Single(url),
        deadline: Duration::from_secs(2),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .expect("a valid config")
}

/// The algorithms a prefetch may take from, with rates whose ticks are not nanoseconds.
fn limits() -> Vec<Limit> {
    let rate = |count, ms| Rate::new(count, Duration::from_millis(ms)).unwrap();
    vec![
        Limit::from(FixedWindow::new(50, Duration::from_secs(1)).unwrap()),
        Limit::from(SlidingWindow::new(50, Duration::from_secs(1)).unwrap()),
        Limit::from(TokenBucket::new(rate(30, 1000), 40).unwrap()),
        Limit::from(LeakyBucket::new(rate(70, 11_000), 40).unwrap()),
        Limit::from(Gcra::new(rate(30, 1000), 40).unwrap()),
        Limit::from(Gcra::new(rate(2000, 1000), 100).unwrap()),
        Limit::from(Quota::new(200, CalendarUnit::Minute, "UTC").unwrap()),
    ]
}

#[tokio::test]
async fn a_partial_grant_takes_exactly_what_fits_as_the_memory_store_does() {
    let server = Server::start();
    let redis = store(server.url());
    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    let mut rng = Rng(0x5eed_7a4e);
    for (i, limit) in limits().iter().enumerate() {
        let key = format!("take-{i}");
        let mut now = T0;
        let mut granted_total = 0;
        for step in 0..300 {
            now += rng.below(SEC / 20);
            let want = 1 + rng.below(30);
            let got = redis.take(limit, &key, now, want).await.expect("taken");
            let expected = AsyncStore::take(&memory, limit, &key, now, want)
                .await
                .expect("taken");
            assert_eq!(got, expected, "{limit:?} step {step} want {want}");
            assert!(got.0 <= want);
            if got.0 == 0 {
                assert!(
                    got.1.retry_after_ns().is_some(),
                    "{limit:?}: a refusal says when"
                );
            }
            granted_total += got.0;
            // Some steps give units back, as a lapsed allowance does.
            if rng.chance(10) && got.0 > 0 {
                let back = -i64::try_from(rng.below(got.0) + 1).unwrap();
                redis.settle(limit, &key, now, back).await.expect("settled");
                AsyncStore::settle(&memory, limit, &key, now, back)
                    .await
                    .expect("settled");
            }
        }
        assert!(granted_total > 0, "{limit:?} granted nothing");
    }
}

/// The reference's vector for GCRA: with emission interval T and tolerance τ, n =
/// floor((now + τ − max(TAT, now)) / T) + 1 units fit; a grant takes min(k, n) and moves
/// the arrival time by that many intervals.
#[tokio::test]
async fn gcra_grants_the_units_its_tolerance_leaves() {
    let server = Server::start();
    let redis = store(server.url());
    // T = 10 ms, burst 5 (τ = 40 ms).
    let limit = Limit::from(Gcra::new(Rate::per_second(100).unwrap(), 5).unwrap());
    assert_eq!(redis.take(&limit, "g", T0, 3).await.unwrap().0, 3);
    // TAT = T0 + 30 ms: n = floor((40 − 30) / 10) + 1 = 2.
    let (granted, decision) = redis.take(&limit, "g", T0, 10).await.unwrap();
    assert_eq!((granted, decision.remaining), (2, 0));
    // Empty: nothing granted, and the store says when one unit fits.
    let (granted, decision) = redis.take(&limit, "g", T0, 10).await.unwrap();
    assert_eq!(granted, 0);
    assert_eq!(decision.retry_after_ns(), Some(10_000_000));
    // 25 ms on, TAT − now = 25 ms: n = floor((40 − 25) / 10) + 1 = 2.
    let (granted, _) = redis.take(&limit, "g", T0 + 25_000_000, 10).await.unwrap();
    assert_eq!(granted, 2);
    // Giving two back moves the arrival time back two intervals: two fit again.
    redis
        .settle(&limit, "g", T0 + 25_000_000, -2)
        .await
        .unwrap();
    assert_eq!(
        redis
            .take(&limit, "g", T0 + 25_000_000, 10)
            .await
            .unwrap()
            .0,
        2
    );
}
