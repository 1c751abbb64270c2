//! Upkeep and figures: the idle sweep, the key count and the stats.

use std::hash::BuildHasher;
use std::sync::atomic::Ordering;

use super::MemoryStore;
use crate::cell::Stored;
use crate::StoreStats;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Drops up to `budget` fresh states, for an idle store that gets no accesses to sweep
    /// on (call it from a timer). Returns how many it dropped.
    pub fn sweep(&self, now: u64, budget: usize) -> u64 {
        let rehash = |k: &str| self.hash(k);
        let per_shard = budget.div_ceil(self.shards.len());
        let mut dropped = 0;
        for i in 0..self.shards.len() {
            let mut shard = self.lock(i);
            let n = shard.sweep(now, per_shard, &rehash);
            shard.counts.evicted_fresh += n;
            dropped += n;
        }
        dropped
    }

    /// Forgets the state of `key` (the support engineer's "unblock this customer"): its
    /// next request is decided as a new key's. Permits it held are forgotten with it.
    /// Returns whether it held a state.
    pub fn clear(&self, key: &str) -> bool {
        let rehash = |k: &str| self.hash(k);
        let hash = self.hash(key);
        self.lock(self.shard_of(hash))
            .remove_key(hash, key, &rehash)
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store holds and has done: keys, evictions, refusals, contention.
    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            allocated_bytes: std::mem::size_of_val(&*self.shards),
            ..StoreStats::default()
        };
        for (i, locked) in self.shards.iter().enumerate() {
            stats.contention += locked.contention.load(Ordering::Relaxed);
            let shard = self.lock(i);
            stats.keys += shard.len();
            stats.key_bytes += shard.key_bytes();
            stats.state_bytes += shard.state_bytes();
            stats.allocated_bytes += shard.allocated_bytes();
            stats.evicted_fresh += shard.counts.evicted_fresh;
            stats.evicted_live += shard.counts.evicted_live;
            stats.evicted_limited += shard.counts.evicted_limited;
            stats.rejected_new_keys += shard.counts.rejected_new_keys;
        }
        stats
    }
}
