//! The Redis store passes the same conformance suite as the in-memory store, unchanged, on
//! one Redis and on a Redis Cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratewarden_core::{conformance, AsyncStore, Check, Decision, Limit, Store};
use ratewarden_redis::testing::{Cluster, Server};
use ratewarden_redis::{RedisConfig, RedisError, RedisStore, Target, TimeSource};

/// The async store driven synchronously, as the suite drives every store.
struct Blocking {
    store: RedisStore,
    runtime: tokio::runtime::Runtime,
    next_permit: AtomicU64,
    /// The latest time any call gave: `Store::release` takes none, the script needs one.
    latest: AtomicU64,
}

impl Blocking {
    fn new(target: Target, prefix: String) -> Self {
        let store = RedisStore::new(RedisConfig {
            target,
            deadline: Duration::from_secs(5),
            time: TimeSource::Caller,
            key_prefix: prefix,
            ..RedisConfig::default()
        })
        .unwrap();
        Self {
            store,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            next_permit: AtomicU64::new(1),
            latest: AtomicU64::new(0),
        }
    }

    fn at(&self, now: u64) -> u64 {
        self.latest.fetch_max(now, Ordering::Relaxed);
        now
    }
}

impl Store for Blocking {
    type Error = RedisError;

    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, RedisError> {
        let now = self.at(now);
        self.runtime
            .block_on(AsyncStore::decide(&self.store, limit, key, now, cost))
    }

    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, RedisError> {
        let now = self.at(now);
        self.runtime.block_on(self.store.decide_all(checks, now))
    }

    fn peek(&self, limit: &Limit, key: &str, now: u64, cost: u64) -> Result<Decision, RedisError> {
        let now = self.at(now);
        self.runtime
            .block_on(self.store.peek(limit, key, now, cost))
    }

    fn settle(&self, limit: &Limit, key: &str, now: u64, delta: i64) -> Result<(), RedisError> {
        let now = self.at(now);
        self.runtime
            .block_on(self.store.settle(limit, key, now, delta))
    }

    fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Result<u64, Decision>, RedisError> {
        let now = self.at(now);
        let id = self.next_permit.fetch_add(1, Ordering::Relaxed);
        let got = self
            .runtime
            .block_on(self.store.acquire(limit, key, now, cost, id))?;
        Ok(got.map(|()| id))
    }

    fn release(&self, limit: &Limit, key: &str, id: u64) -> Result<bool, RedisError> {
        let now = self.latest.load(Ordering::Relaxed);
        self.runtime
            .block_on(self.store.release(limit, key, now, id))
    }

    fn clear(&self, key: &str) -> Result<bool, RedisError> {
        self.runtime.block_on(AsyncStore::clear(&self.store, key))
    }
}

#[test]
fn one_redis_conforms() {
    let server = Server::start();
    let n = AtomicU64::new(0);
    conformance::run_all(|| {
        // A key space of its own per scenario, as a fresh store would have.
        let prefix = format!("c{}:", n.fetch_add(1, Ordering::Relaxed));
        Blocking::new(Target::Single(server.url()), prefix)
    });
}

#[test]
fn a_redis_cluster_conforms() {
    let cluster = Cluster::start();
    let n = AtomicU64::new(0);
    conformance::run_all(|| {
        let prefix = format!("c{}:", n.fetch_add(1, Ordering::Relaxed));
        Blocking::new(Target::Cluster(cluster.urls()), prefix)
    });
}
