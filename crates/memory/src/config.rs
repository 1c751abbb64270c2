//! How big a store may grow, and what it does when full.

use std::time::Duration;

/// What a full store does with a key it has never seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Evict a key to make room: first states that have returned to fresh (no decision
    /// changes), then a key not used recently (CLOCK, the second-chance approximation of
    /// least recently used) that is not limited; such a key starts afresh if it comes back,
    /// having had budget left anyway.
    ///
    /// A limited key (one whose last decision left it refusing a request of cost 1, until
    /// its state is fresh again) is evicted only from a
    /// shard where every key looked at is limited, and never gets a fresh budget by it: its
    /// key's hash goes into a small fixed-size trace, and until its state would have been
    /// fresh the key is answered as limited (retry after that time). So flooding the store
    /// with junk keys cannot reset a limited key; a key evicted so may be refused for longer
    /// than its state would have refused it, never admitted more. When the trace has no room
    /// either, the new key is refused as with [`WhenFull::RejectNewKeys`].
    #[default]
    EvictLeastRecentlyUsed,
    /// Reject the request of a new key (limited, retry after [`StoreConfig::full_retry_after`])
    /// and keep every tracked key. Limits stay exact for known keys; new callers wait.
    RejectNewKeys,
}

/// The in-memory store's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// The most keys held at once (spread over the shards, so each holds its share).
    pub max_keys: usize,
    /// The most bytes the keys may take (spread over the shards likewise): a slot each (64
    /// bytes under `Limit`), the heap bytes of keys longer than 24 bytes, and the heap of
    /// states that grow with what they admit (a sliding log's entries, a concurrency
    /// limit's permits). `max_keys` bounds the count; this bounds the memory when keys are
    /// long or logs are. A full store makes room or refuses as
    /// [`when_full`](Self::when_full) says, and a key that alone is larger than a shard's
    /// share ([`shard_bytes`](Self::shard_bytes)) is refused. A state that grows past its
    /// shard's share makes room as a new key does (evicting, possibly itself), or, when the
    /// store keeps its keys, has the shard refuse new keys until it shrinks. Not counted:
    /// the hash index (a few bytes a key).
    pub max_bytes: usize,
    /// What to do when a shard is full of live state.
    pub when_full: WhenFull,
    /// How many shards (rounded up to a power of two): more shards, less contention.
    pub shards: usize,
    /// The retry time given to new keys rejected by a full store.
    pub full_retry_after: Duration,
}

impl Default for StoreConfig {
    /// A million keys and 256 MiB over 64 shards, evicting the least recently used.
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            max_bytes: 256 << 20,
            when_full: WhenFull::default(),
            shards: 64,
            full_retry_after: Duration::from_secs(1),
        }
    }
}

impl StoreConfig {
    /// How many shards the store has: [`shards`](Self::shards) rounded up to a power of two.
    pub fn shard_count(&self) -> usize {
        self.shards.clamp(1, 1 << 16).next_power_of_two()
    }

    /// The bytes one shard may hold, its share of [`max_bytes`](Self::max_bytes): the most
    /// one key, its slot and its state can take.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_memory::StoreConfig;
    ///
    /// let config = StoreConfig { max_bytes: 64 * 1024, ..StoreConfig::default() };
    /// assert_eq!(config.shard_bytes(), 1024);
    /// ```
    pub fn shard_bytes(&self) -> usize {
        (self.max_bytes / self.shard_count()).max(1)
    }
}
