//! Room for a new key in a full shard: sweep, evict by CLOCK, or refuse.

use std::hash::BuildHasher;

use ratewarden_core::{Decision, Outcome};

use super::{MemoryStore, ShardOf, FULL_SWEEP_STEPS};
use crate::cell::Stored;
use crate::shard::Evicted;
use crate::WhenFull;

/// What a new key in a full shard asks of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// Make room, or refuse the key.
    Make,
    /// Only see whether room could be made (the first phase of a layered decision), for
    /// a key after this many new keys (and bytes) of the same call in the shard.
    Check((usize, usize)),
    /// Make room if possible, else hold one key more for a while: the charge of a layered
    /// decision that every layer has allowed must not fail halfway.
    MakeAnyway,
}

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Makes room for a new key in a full shard (or, for [`Room::Check`], sees whether it
    /// could); the decision to answer instead when the store keeps its keys rather than
    /// evicting, or can evict none (see [`Evicted`]).
    pub(super) fn refuse_new_key(
        &self,
        shard: &mut ShardOf<A>,
        limit: &A,
        key: &str,
        state_bytes: usize,
        now: u64,
        room: Room,
    ) -> Option<Decision> {
        let incoming = ShardOf::<A>::cost_of(key) + state_bytes;
        let (keys_before, bytes_before) = match room {
            Room::Check(pending) => pending,
            _ => (0, 0),
        };
        let full = |shard: &ShardOf<A>| {
            shard.len() + keys_before >= self.per_shard
                || shard.bytes() + bytes_before + incoming > self.per_shard_bytes
        };
        if !full(shard) {
            return None;
        }
        let rehash = |k: &str| self.hash(k);
        // Dropping fresh state changes no decision, so even a check may do it.
        let dropped = shard.sweep(now, FULL_SWEEP_STEPS, &rehash);
        shard.counts.evicted_fresh += dropped;
        let refuse = if !full(shard) {
            false
        } else if bytes_before + incoming > self.per_shard_bytes {
            // No eviction can make room for a key larger than the shard's share of bytes.
            true
        } else {
            match (self.config.when_full, room) {
                (WhenFull::RejectNewKeys, _) => true,
                (WhenFull::EvictLeastRecentlyUsed, Room::Check(_)) => {
                    !shard.can_evict(now, &rehash)
                }
                (WhenFull::EvictLeastRecentlyUsed, _) => self.evict_for(shard, now, &full),
            }
        };
        if !refuse || room == Room::MakeAnyway {
            return None;
        }
        shard.counts.rejected_new_keys += 1;
        let retry_after_ns =
            u64::try_from(self.config.full_retry_after.as_nanos()).unwrap_or(u64::MAX);
        let outcome = Outcome::Limited { retry_after_ns };
        Some(Decision::new(outcome, limit.limit(), 0, retry_after_ns))
    }

    /// Brings a shard whose held state just grew (a sliding log's new entry) back within
    /// its share of `max_bytes`: fresh states first, then, when the store evicts, keys by
    /// CLOCK as for a new key. A store keeping its keys (`reject`) drops none that is live
    /// (its caller puts the state back and refuses the request). True when the shard is within its share.
    pub(super) fn trim(&self, shard: &mut ShardOf<A>, now: u64) -> bool {
        let over = |shard: &ShardOf<A>| shard.bytes() > self.per_shard_bytes;
        if !over(shard) {
            return true;
        }
        let rehash = |k: &str| self.hash(k);
        let dropped = shard.sweep(now, FULL_SWEEP_STEPS, &rehash);
        shard.counts.evicted_fresh += dropped;
        if self.config.when_full == WhenFull::EvictLeastRecentlyUsed {
            self.evict_for(shard, now, &over);
        }
        !over(shard)
    }

    /// Evicts until the shard is no longer `full`; true when it could not (it refuses then).
    fn evict_for(
        &self,
        shard: &mut ShardOf<A>,
        now: u64,
        full: &impl Fn(&ShardOf<A>) -> bool,
    ) -> bool {
        let rehash = |k: &str| self.hash(k);
        // A long key may need several slots' room; each eviction frees at least one slot.
        while full(shard) {
            match shard.evict_one(now, &rehash) {
                Evicted::Live => shard.counts.evicted_live += 1,
                Evicted::Limited => shard.counts.evicted_limited += 1,
                Evicted::Nothing => return true,
            }
        }
        false
    }
}
