//! The store a server decides on: in this process's memory, or shared in Redis.

use std::time::Duration;

use anyhow::Context;
use ratewarden_core::lease::Ask;
use ratewarden_core::{AsyncStore, Check, Decision, Limit, Store};
use ratewarden_memory::{MemoryStore, StoreStats, WhenFull};
use ratewarden_policy::{StoreKind, StoreSettings};
use ratewarden_redis::{
    BreakerState, RedisConfig, RedisError, RedisStore, SentinelTarget, Target, TimeSource,
};

/// The Redis client config of a shared store's section (`None` for the in-memory store),
/// its CA file read: the one place that turns `[store]` or `[regions.home]` (`section`,
/// which its errors name) into a [`RedisConfig`].
///
/// # Errors
///
/// A `tls_ca_file` that cannot be read.
pub(crate) fn redis_config(
    settings: &StoreSettings,
    section: &str,
) -> anyhow::Result<Option<RedisConfig>> {
    let target = match &settings.kind {
        StoreKind::Memory => return Ok(None),
        StoreKind::Redis { url } => Target::Single(url.clone()),
        StoreKind::RedisCluster { nodes } => Target::Cluster(nodes.clone()),
        StoreKind::RedisSentinel {
            sentinels,
            master_name,
            username,
            password,
            tls,
        } => Target::Sentinel(SentinelTarget {
            sentinels: sentinels.clone(),
            master_name: master_name.clone(),
            username: username.clone(),
            password: password.clone(),
            tls: *tls,
        }),
    };
    let tls_ca = match &settings.tls_ca_file {
        Some(path) => Some(std::fs::read(path).with_context(|| {
            format!("{section}: `tls_ca_file`: cannot read {}", path.display())
        })?),
        None => None,
    };
    Ok(Some(RedisConfig {
        tls_ca,
        target,
        deadline: settings.deadline,
        breaker_failures: settings.breaker_failures,
        breaker_cool_down: settings.breaker_cool_down,
        time: TimeSource::Redis,
        key_prefix: settings.key_prefix.clone(),
        wait_for_replicas: settings.wait_for_replicas,
        batch_calls: settings.batch_calls,
        batch_bytes: settings.batch_bytes,
        batch_in_flight: settings.batch_in_flight,
        ..RedisConfig::default()
    }))
}

/// The shared store of `settings` as `serve` starts it (`None` for the in-memory store): it
/// connects on first use, so building it checks the URLs and the CA file and nothing else.
///
/// # Errors
///
/// What [`redis_config`] refuses, and a URL the Redis client cannot use.
pub(crate) fn shared_store(settings: &StoreSettings) -> anyhow::Result<Option<RedisStore>> {
    let Some(config) = redis_config(settings, "`[store]`")? else {
        return Ok(None);
    };
    RedisStore::new(config).map(Some).context("`[store]`")
}

/// How long a server waits as it starts for its store's handshake before it serves.
pub(crate) const CONNECT_AT_START: Duration = Duration::from_secs(1);

/// The configured store, chosen at start from `[store] kind`.
pub(crate) enum AnyStore {
    Memory(MemoryStore),
    /// Boxed: a store is made once, and the Redis one is large.
    Redis(Box<RedisStore>),
}

/// Why the store failed (only a shared store can).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error(transparent)]
    Redis(#[from] RedisError),
}

impl AnyStore {
    /// The store `[store]` configures. The shared one is built by [`shared_store`], which
    /// `check-config` calls too, so it refuses exactly what this refuses.
    pub(crate) fn from_settings(settings: &StoreSettings) -> anyhow::Result<Self> {
        Ok(match shared_store(settings)? {
            Some(redis) => AnyStore::Redis(Box::new(redis)),
            None => AnyStore::Memory(MemoryStore::new(settings.memory_config(
                if settings.evict_when_full {
                    WhenFull::EvictLeastRecentlyUsed
                } else {
                    WhenFull::RejectNewKeys
                },
            ))),
        })
    }

    /// The home store of `[regions.home]` (a shared store: the file's validation refuses
    /// `memory` there), where `scope = "global"` rules are counted for every region.
    pub(crate) fn home(settings: &StoreSettings) -> anyhow::Result<Self> {
        let config = redis_config(settings, "`[regions.home]`")?
            .context("`[regions.home]`: the home store is a Redis, not `memory`")?;
        let redis = RedisStore::new(config).context("`[regions.home]`")?;
        Ok(AnyStore::Redis(Box::new(redis)))
    }

    /// Connects a shared store now (see [`RedisStore::connect`]); nothing for the
    /// in-memory one.
    pub(crate) async fn connect(&self) {
        if let AnyStore::Redis(redis) = self {
            if let Err(error) = redis.connect().await {
                tracing::warn!(%error, "could not connect to the store yet; the first calls will try again");
            }
        }
    }

    /// What the in-memory store holds and had to do (keys, bytes, evictions); one pass
    /// over its shards, for a scrape.
    pub(crate) fn memory_stats(&self) -> Option<StoreStats> {
        match self {
            AnyStore::Memory(m) => Some(m.stats()),
            AnyStore::Redis(_) => None,
        }
    }

    /// The shared store's calls that timed out because this process was late to see the
    /// answer, not because Redis was ([`RedisStore::late_timeouts`]).
    pub(crate) fn late_timeouts(&self) -> Option<u64> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(r) => Some(r.late_timeouts()),
        }
    }

    /// Drops a bounded batch of idle keys (Redis expires its own).
    pub(crate) fn sweep(&self, now: u64) {
        if let AnyStore::Memory(m) = self {
            m.sweep(now, 4096);
        }
    }

    /// The shared store's circuit breaker.
    pub(crate) fn breaker(&self) -> Option<BreakerState> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(r) => Some(r.breaker()),
        }
    }
}

// The Redis store's futures are boxed: each is many times the size of a decision in memory,
// and every decision's future (and every front door's) would otherwise carry and move that
// much, whichever store it is on. A network round trip dwarfs the allocation.
impl AsyncStore for AnyStore {
    type Error = StoreError;

    fn is_shared(&self) -> bool {
        match self {
            AnyStore::Memory(_) => false,
            AnyStore::Redis(r) => r.is_shared(),
        }
    }

    async fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(m) => Ok(m.decide(limit, key, now, cost)),
            AnyStore::Redis(r) => Ok(Box::pin(r.decide(limit, key, now, cost)).await?),
        }
    }

    async fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: u64,
    ) -> Result<Vec<Decision>, StoreError> {
        match self {
            AnyStore::Memory(m) => {
                Ok(Store::decide_all(m, checks, now).unwrap_or_else(|never| match never {}))
            }
            AnyStore::Redis(r) => Ok(Box::pin(r.decide_all(checks, now)).await?),
        }
    }

    async fn decide_replicated(
        &self,
        checks: &[Check<'_>],
        now: u64,
        replicas: u32,
    ) -> Result<Vec<Decision>, StoreError> {
        match self {
            // Nothing in memory to replicate.
            AnyStore::Memory(_) => self.decide_all(checks, now).await,
            AnyStore::Redis(r) => Ok(Box::pin(r.decide_replicated(checks, now, replicas)).await?),
        }
    }

    async fn peek(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(m) => Ok(m.peek(limit, key, now, cost)),
            AnyStore::Redis(r) => Ok(Box::pin(r.peek(limit, key, now, cost)).await?),
        }
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        delta: i64,
    ) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(m) => {
                m.settle(limit, key, now, delta);
                Ok(())
            }
            AnyStore::Redis(r) => Ok(Box::pin(r.settle(limit, key, now, delta)).await?),
        }
    }

    async fn take(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        want: u64,
    ) -> Result<(u64, Decision), StoreError> {
        match self {
            AnyStore::Memory(m) => Ok(AsyncStore::take(m, limit, key, now, want)
                .await
                .unwrap_or_else(|never| match never {})),
            AnyStore::Redis(r) => Ok(Box::pin(r.take(limit, key, now, want)).await?),
        }
    }

    async fn lease(&self, key: &str, ask: Ask<'_>, now: u64) -> Result<u64, StoreError> {
        match self {
            AnyStore::Memory(m) => Ok(m.lease(key, ask, now)),
            AnyStore::Redis(r) => Ok(Box::pin(r.lease(key, ask, now)).await?),
        }
    }

    async fn clear(&self, key: &str) -> Result<bool, StoreError> {
        match self {
            AnyStore::Memory(m) => Ok(m.clear(key)),
            AnyStore::Redis(r) => Ok(Box::pin(r.clear(key)).await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sections_settings_reach_its_redis_config_and_its_errors_name_it() {
        let text = "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\nbatch_calls = 7\nbatch_bytes = 2048\nbatch_in_flight = 3\n[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:2\"\n";
        let config = ratewarden_policy::config::parse("b.toml", text).unwrap();
        let store = redis_config(&config.store, "`[store]`").unwrap().unwrap();
        assert_eq!(
            (store.batch_calls, store.batch_bytes, store.batch_in_flight),
            (7, 2048, 3)
        );
        let home = redis_config(&config.regions.unwrap().home, "`[regions.home]`")
            .unwrap()
            .unwrap();
        assert_eq!(
            (home.batch_calls, home.batch_bytes, home.batch_in_flight),
            (128, 65_536, ratewarden_policy::HOME_IN_FLIGHT)
        );
        // A CA file that cannot be read is named with its section.
        let text = "[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\nurl = \"rediss://127.0.0.1:2\"\ntls_ca_file = \"/nonexistent/ca.pem\"\n";
        let config = ratewarden_policy::config::parse("b.toml", text).unwrap();
        let error = match AnyStore::home(&config.regions.unwrap().home) {
            Ok(_) => panic!("an unreadable CA file was accepted"),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            error.starts_with("`[regions.home]`: `tls_ca_file`: cannot read /nonexistent/ca.pem"),
            "{error}"
        );
    }
}
