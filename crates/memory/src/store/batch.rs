//! Deciding a batch of keys at once, so that their cache misses overlap.
//!
//! At a million keys one decision waits on two misses in a row (the index entry, then the
//! slot), and the next decision's atomics keep the processor from starting its misses
//! early. A batch takes its shards' read locks first, then reads every key's index entry,
//! then every key's slot, each round a run of independent loads the processor overlaps,
//! and only then decides each key on lines already in cache.

use std::hash::BuildHasher;

use ratewarden_core::Decision;

use super::MemoryStore;
use crate::cell::{StateCell, Stored};

/// Keys decided together: enough to overlap a dozen misses, few enough to hold their shards'
/// read locks briefly.
const BATCH: usize = 16;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Decides a request of `cost` at `now` under `limit` for each of `keys`, charging those
    /// allowed, and appends the decisions to `out` in order: exactly what calling
    /// [`decide`](Self::decide) for each key in turn would answer, faster when the keys'
    /// states are not in cache (a large store) and the algorithm is decided in one word
    /// (GCRA); otherwise it is that loop.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{Gcra, Rate};
    /// use ratewarden_memory::{MemoryStore, StoreConfig};
    ///
    /// let store: MemoryStore<Gcra> = MemoryStore::new(StoreConfig::default());
    /// let gcra = Gcra::new(Rate::per_second(5)?, 1)?;
    /// let mut out = Vec::new();
    /// store.decide_many(&gcra, &["a", "b", "a"], 0, 1, &mut out);
    /// let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    /// assert_eq!(allowed, [true, true, false]);
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    pub fn decide_many(
        &self,
        limit: &A,
        keys: &[&str],
        now: u64,
        cost: u64,
        out: &mut Vec<Decision>,
    ) {
        out.reserve(keys.len());
        if !<A::Cell as StateCell<A>>::SHARED {
            out.extend(keys.iter().map(|key| self.decide(limit, key, now, cost)));
            return;
        }
        for chunk in keys.chunks(BATCH) {
            self.decide_chunk(limit, chunk, now, cost, out);
        }
    }

    fn decide_chunk(&self, limit: &A, keys: &[&str], now: u64, cost: u64, out: &mut Vec<Decision>) {
        let mut hashes = [0u64; BATCH];
        let mut shards = [0usize; BATCH];
        for (k, key) in keys.iter().enumerate() {
            hashes[k] = self.hash(key);
            shards[k] = self.shard_of(hashes[k]);
        }
        // Read locks in ascending shard order, as every holder of several locks takes them
        // (`decide_all` too), so no two callers can wait on each other.
        let mut order: [usize; BATCH] = shards;
        let order = &mut order[..keys.len()];
        order.sort_unstable();
        let mut distinct = 0;
        for k in 0..order.len() {
            if k == 0 || order[k] != order[distinct - 1] {
                order[distinct] = order[k];
                distinct += 1;
            }
        }
        let order = &order[..distinct];
        let guards: Vec<_> = order.iter().map(|&i| self.read(i)).collect();
        let guard = |k: usize| &guards[order.binary_search(&shards[k]).unwrap_or_default()];

        // Each key's index entry, then each key's slot: independent loads, in flight
        // together. What they read is only there to be read.
        let mut slots = [None; BATCH];
        for (k, slot) in slots.iter_mut().enumerate().take(keys.len()) {
            *slot = guard(k).hint(hashes[k]);
        }
        let mut warm = 0u64;
        for (k, slot) in slots.iter().enumerate().take(keys.len()) {
            if let Some(i) = *slot {
                warm = warm.wrapping_add(guard(k).warm(i));
            }
        }
        std::hint::black_box(warm);

        // Decide in order. A key that needs the write lock (new, or past the word) waits
        // until the read locks are released, and so does every later request for it.
        let start = out.len();
        let mut later: Vec<usize> = Vec::new();
        for (k, key) in keys.iter().enumerate() {
            let shard = guard(k);
            let deferred = later
                .iter()
                .any(|&j| hashes[j] == hashes[k] && keys[j] == *key);
            let decided = (!deferred)
                .then(|| shard.find(hashes[k], key))
                .flatten()
                .and_then(|i| self.decide_in_word(shard.slot(i), limit, now, cost));
            match decided {
                Some(decision) => out.push(decision),
                None => {
                    later.push(k);
                    // A placeholder, replaced below.
                    out.push(Decision::new(ratewarden_core::Outcome::Allowed, 0, 0, 0));
                }
            }
        }
        drop(guards);
        for k in later {
            out[start + k] = self.decide(limit, keys[k], now, cost);
        }
    }
}
