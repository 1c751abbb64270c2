//! Concurrency permits: taken by a decision, given back by id or when the guard drops.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::Ordering;

use compact_str::CompactString;
use ratewarden_core::{Decision, Limit};

use super::MemoryStore;
use crate::cell::StateCell;

impl<S: BuildHasher> MemoryStore<Limit, S> {
    /// Takes a concurrency permit of `cost` units for `key` under `limit` (a
    /// [`Concurrency`](ratewarden_core::Concurrency) limit). The permit is given back when the
    /// guard drops; one never given back lapses after the limit's lease.
    ///
    /// # Errors
    ///
    /// The decision, when no permit is free.
    pub fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Permit<'_, S>, Decision> {
        let id = self.acquire_id(limit, key, now, cost)?;
        Ok(Permit {
            store: self,
            limit: limit.clone(),
            key: CompactString::from(key),
            id,
        })
    }

    /// Like [`acquire`](Self::acquire), but returns the permit's id for an explicit
    /// [`release`](Self::release) (for a caller that crosses threads or processes).
    ///
    /// # Errors
    ///
    /// The decision, when no permit is free.
    pub fn acquire_id(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<u64, Decision> {
        let id = self.next_permit.fetch_add(1, Ordering::Relaxed);
        let hash = self.hash(key);
        let mut shard = self.lock(self.shard_of(hash));
        // A refused acquire may still have dropped lapsed permits: it is not a plain decision
        // of its cost, so the store asks the algorithm whether the key is limited (cost 0).
        let decision = self.update(&mut shard, limit, key, hash, now, true, 0, |state| {
            limit.acquire(state, now, cost, id)
        });
        if decision.is_allowed() {
            Ok(id)
        } else {
            Err(decision)
        }
    }

    /// Gives back permit `id` of `key`; false if it was not held (already released, or
    /// lapsed after its lease).
    pub fn release(&self, limit: &Limit, key: &str, id: u64) -> bool {
        let hash = self.hash(key);
        let mut shard = self.lock(self.shard_of(hash));
        match shard.find(hash, key) {
            Some(i) => StateCell::<Limit>::with_mut(&mut shard.slot_mut(i).state, |state| {
                limit.release(state, id)
            }),
            None => false,
        }
    }
}

/// A concurrency permit, given back when dropped.
#[must_use = "dropping the permit gives it back at once"]
pub struct Permit<'a, S: BuildHasher = RandomState> {
    store: &'a MemoryStore<Limit, S>,
    limit: Limit,
    key: CompactString,
    id: u64,
}

impl<S: BuildHasher> Permit<'_, S> {
    /// The permit's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Keeps the permit past this guard: it is then held until released by id or until its
    /// lease runs out.
    pub fn into_id(self) -> u64 {
        let id = self.id;
        std::mem::forget(self);
        id
    }
}

impl<S: BuildHasher> Drop for Permit<'_, S> {
    fn drop(&mut self) {
        self.store.release(&self.limit, &self.key, self.id);
    }
}
