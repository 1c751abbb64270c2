//! The store: shards behind short locks, and the operations on them.

use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use compact_str::CompactString;
use ratewarden_core::{Algorithm, Check, Decision, Limit, Outcome, Store};

use crate::shard::{Evicted, Shard};
use crate::{StoreConfig, StoreStats, WhenFull};

/// Slots looked at by the incremental sweep each time a shard takes a new key.
const SWEEP_STEPS: usize = 2;
/// Slots a full shard sweeps for fresh state before it evicts live state.
const FULL_SWEEP_STEPS: usize = 32;
/// Attempts to take a busy shard's lock before sleeping on it.
const SPINS: usize = 64;

/// A shard behind its lock, on cache lines of its own (two, for the adjacent-line
/// prefetcher) so that locking one does not slow its neighbours. Its counters live with it:
/// store-wide counters would be one more line every core fights over.
#[repr(align(128))]
struct Locked<St> {
    shard: Mutex<Shard<St>>,
    /// Times a thread found this shard locked and had to wait.
    contention: AtomicU64,
}

/// A concurrent store of per-key limiter state for one process.
///
/// Keys are spread over shards by hash; each shard is a short critical section (a lookup and
/// one state transition), so threads deciding on different keys rarely meet, and a key
/// already present is found without allocating. States that have returned to fresh are
/// dropped a little with every new key, and `max_keys` bounds the rest (see [`WhenFull`]).
///
/// `A` is the algorithm: [`Limit`] (the default) holds any algorithm per key and supports
/// layered decisions across limits; a concrete algorithm such as
/// [`Gcra`](ratewarden_core::Gcra) keeps a smaller state per key.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Gcra, Limit, Rate};
/// use ratewarden_memory::{MemoryStore, StoreConfig};
///
/// let store: MemoryStore = MemoryStore::new(StoreConfig::default());
/// let per_key = Limit::from(Gcra::new(Rate::per_second(5)?, 5)?);
/// for _ in 0..5 {
///     assert!(store.decide(&per_key, "per-key|k_8f2a", 0, 1).is_allowed());
/// }
/// assert!(!store.decide(&per_key, "per-key|k_8f2a", 0, 1).is_allowed());
/// assert!(store.decide(&per_key, "per-key|k_other", 0, 1).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
pub struct MemoryStore<A: Algorithm = Limit, S = RandomState> {
    shards: Box<[Locked<A::State>]>,
    hasher: S,
    per_shard: usize,
    /// Each shard's share of `max_bytes`.
    per_shard_bytes: usize,
    config: StoreConfig,
    next_permit: AtomicU64,
    _algorithm: PhantomData<fn(&A)>,
}

impl<A: Algorithm> MemoryStore<A, RandomState> {
    /// A store with `config`, hashing keys with the standard library's randomly seeded
    /// SipHash (keys come from clients, so the hash must resist collision floods).
    pub fn new(config: StoreConfig) -> Self {
        Self::with_hasher(config, RandomState::new())
    }
}

impl<A: Algorithm, S: BuildHasher> MemoryStore<A, S> {
    /// A store with `config` and a hasher of your choosing.
    pub fn with_hasher(config: StoreConfig, hasher: S) -> Self {
        let shards = config.shards.clamp(1, 1 << 16).next_power_of_two();
        // Rounded down, so the store never holds more than `max_keys`.
        let per_shard = (config.max_keys / shards).max(1);
        let per_shard_bytes = (config.max_bytes / shards).max(1);
        Self {
            shards: (0..shards)
                .map(|_| Locked {
                    shard: Mutex::new(Shard::default()),
                    contention: AtomicU64::new(0),
                })
                .collect(),
            hasher,
            per_shard,
            per_shard_bytes,
            config,
            next_permit: AtomicU64::new(1),
            _algorithm: PhantomData,
        }
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of a hash: middle bits, since the shard's table uses the low bits for the
    /// bucket and the top seven for its control bytes.
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard<A::State>> {
        let locked = &self.shards[shard];
        // The critical section is tens of nanoseconds: spin a little before sleeping, as a
        // thread put to sleep costs a system call on both sides.
        for _ in 0..SPINS {
            match locked.shard.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
                // A panic elsewhere cannot leave a state half-written: transitions are
                // computed first and stored in one assignment.
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            }
        }
        locked.contention.fetch_add(1, Ordering::Relaxed);
        locked.shard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides a request of `cost` for `key` at `now` under `limit`, charging it if allowed.
    pub fn decide(&self, limit: &A, key: &str, now: u64, cost: u64) -> Decision {
        let hash = self.hash(key);
        let mut shard = self.lock(self.shard_of(hash));
        self.update(&mut shard, limit, key, hash, now, true, |state| {
            limit.decide(state, now, cost)
        })
    }

    /// What [`decide`](Self::decide) would answer, without charging.
    pub fn peek(&self, limit: &A, key: &str, now: u64, cost: u64) -> Decision {
        let hash = self.hash(key);
        let shard = self.lock(self.shard_of(hash));
        match shard.find(hash, key) {
            Some(i) => limit.peek(&shard.slot(i).state, now, cost),
            None => match shard.traced(hash, now) {
                Some(until) => still_limited(limit, now, until),
                None => limit.peek(&A::State::default(), now, cost),
            },
        }
    }

    /// Charges `delta` units to `key` (a refund when negative) without a decision: settles
    /// a reservation once its real cost is known. The balance may go past the limit.
    pub fn settle(&self, limit: &A, key: &str, now: u64, delta: i64) {
        let hash = self.hash(key);
        let mut shard = self.lock(self.shard_of(hash));
        self.update(&mut shard, limit, key, hash, now, true, |state| {
            limit.settle(state, now, delta);
            limit.peek(state, now, 0)
        });
    }

    /// Decides one request against several limits at once, all or nothing: if any limit
    /// rejects, none is charged. Returns each limit's decision in order (for a rejected
    /// request, what each would have said), so callers can name the violated limits.
    ///
    /// The shards involved are locked in index order (so concurrent layered calls cannot
    /// deadlock), every limit is checked, and only then is each charged. Keys within one
    /// call should be distinct.
    pub fn decide_all(&self, layers: &[(&A, &str, u64)], now: u64) -> Vec<Decision> {
        let hashes: Vec<u64> = layers.iter().map(|(_, key, _)| self.hash(key)).collect();
        let mut order: Vec<usize> = hashes.iter().map(|&h| self.shard_of(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<_> = order.iter().map(|&i| self.lock(i)).collect();
        let guard_of = |hash: u64| {
            order
                .binary_search(&self.shard_of(hash))
                .unwrap_or_default()
        };

        let mut decisions = Vec::with_capacity(layers.len());
        let mut all = true;
        // New keys already checked per shard (count, bytes): two new keys of one call in a
        // shard with room for one must not both pass the check.
        let mut pending = vec![(0, 0); order.len()];
        for (&(limit, key, cost), &hash) in layers.iter().zip(&hashes) {
            let g = guard_of(hash);
            let shard = &mut guards[g];
            let decision = match shard.find(hash, key) {
                Some(i) => limit.peek(&shard.slot(i).state, now, cost),
                None => match shard.traced(hash, now) {
                    Some(until) => still_limited(limit, now, until),
                    None => {
                        let d = self.new_key_peek(shard, limit, key, now, cost, pending[g]);
                        pending[g].0 += 1;
                        pending[g].1 += Shard::<A::State>::cost_of(key);
                        d
                    }
                },
            };
            all &= decision.is_allowed();
            decisions.push(decision);
        }
        if all {
            for (k, (&(limit, key, cost), &hash)) in layers.iter().zip(&hashes).enumerate() {
                let shard = &mut guards[guard_of(hash)];
                // Room was made (or the request refused) above: charging cannot fail now.
                decisions[k] = self.update(shard, limit, key, hash, now, false, |state| {
                    limit.decide(state, now, cost)
                });
            }
        }
        decisions
    }

    /// A new key's answer in the first phase of a layered decision: refused if its full
    /// shard could make no room for it, so that charging cannot fail once every layer has
    /// allowed; but nothing is evicted yet, as another layer may still refuse.
    fn new_key_peek(
        &self,
        shard: &mut Shard<A::State>,
        limit: &A,
        key: &str,
        now: u64,
        cost: u64,
        pending: (usize, usize),
    ) -> Decision {
        let decision = limit.peek(&A::State::default(), now, cost);
        if !decision.is_allowed() {
            return decision;
        }
        self.refuse_new_key(shard, limit, key, now, Room::Check(pending))
            .unwrap_or(decision)
    }

    /// Runs `op` on `key`'s state and keeps the result, until the state is fresh again.
    ///
    /// A key not held starts from a fresh state and is stored only if `op` changed that
    /// (a rejected request of a new key stores nothing). A key evicted while limited is
    /// answered as limited until its time, and a full shard that can make no room refuses,
    /// unless `may_refuse` is false (the charge of a layered decision already checked).
    // Eight arguments, all of one decision: a struct for them would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        shard: &mut Shard<A::State>,
        limit: &A,
        key: &str,
        hash: u64,
        now: u64,
        may_refuse: bool,
        op: impl FnOnce(&mut A::State) -> Decision,
    ) -> Decision {
        if let Some(i) = shard.find(hash, key) {
            let slot = shard.slot_mut(i);
            let decision = op(&mut slot.state);
            let limited = refuses_one(limit, &slot.state, now, &decision);
            slot.touch(now.saturating_add(decision.reset_after_ns), limited);
            return decision;
        }
        if may_refuse {
            if let Some(until) = shard.traced(hash, now) {
                return still_limited(limit, now, until);
            }
        }
        let mut state = A::State::default();
        let decision = op(&mut state);
        if limit.is_fresh(&state, now) {
            return decision;
        }
        let room = if may_refuse {
            Room::Make
        } else {
            Room::MakeAnyway
        };
        if let Some(refused) = self.refuse_new_key(shard, limit, key, now, room) {
            return refused;
        }
        // Expiry keeps pace with insertion: each new key looks at a couple of slots and drops
        // the fresh ones. A known key's decision pays nothing for it; a store that stops
        // getting new keys stops growing, and `sweep` can empty it on a timer.
        let rehash = |k: &str| self.hash(k);
        let dropped = shard.sweep(now, SWEEP_STEPS, &rehash);
        shard.counts.evicted_fresh += dropped;
        let expires = now.saturating_add(decision.reset_after_ns);
        let limited = refuses_one(limit, &state, now, &decision);
        let i = shard.insert(hash, key, state, self.per_shard, rehash);
        shard.slot_mut(i).touch(expires, limited);
        decision
    }

    /// Makes room for a new key in a full shard (or, for [`Room::Check`], sees whether it
    /// could); the decision to answer instead when the store keeps its keys rather than
    /// evicting, or can evict none (see [`Evicted`]).
    fn refuse_new_key(
        &self,
        shard: &mut Shard<A::State>,
        limit: &A,
        key: &str,
        now: u64,
        room: Room,
    ) -> Option<Decision> {
        let incoming = Shard::<A::State>::cost_of(key);
        let (keys_before, bytes_before) = match room {
            Room::Check(pending) => pending,
            _ => (0, 0),
        };
        let full = |shard: &Shard<A::State>| {
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

    /// Evicts until the shard is no longer `full`; true when it could not (it refuses then).
    fn evict_for(
        &self,
        shard: &mut Shard<A::State>,
        now: u64,
        full: &impl Fn(&Shard<A::State>) -> bool,
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
            stats.allocated_bytes += shard.allocated_bytes();
            stats.evicted_fresh += shard.counts.evicted_fresh;
            stats.evicted_live += shard.counts.evicted_live;
            stats.evicted_limited += shard.counts.evicted_limited;
            stats.rejected_new_keys += shard.counts.rejected_new_keys;
        }
        stats
    }
}

/// What a new key in a full shard asks of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// Make room, or refuse the key.
    Make,
    /// Only see whether room could be made (the first phase of a layered decision), for
    /// a key after this many new keys (and bytes) of the same call in the shard.
    Check((usize, usize)),
    /// Make room if possible, else hold one key more for a while: the charge of a layered
    /// decision that every layer has allowed must not fail halfway.
    MakeAnyway,
}

/// Whether a request of cost 1 is refused after `decision` left `state` so at `now`. Costs a
/// peek only when the decision left nothing to spend, so the allowed path pays one
/// comparison.
fn refuses_one<A: Algorithm>(limit: &A, state: &A::State, now: u64, decision: &Decision) -> bool {
    if decision.is_allowed() && decision.remaining > 0 {
        return false;
    }
    // Allowed, delayed, or a limit no request fits (a fresh key fares no better): not limited.
    matches!(limit.peek(state, now, 1).outcome, Outcome::Limited { .. })
}

/// The answer to a key evicted while limited, until its state would have been fresh.
fn still_limited<A: Algorithm>(limit: &A, now: u64, until: u64) -> Decision {
    let wait = until.saturating_sub(now);
    Decision::new(
        Outcome::Limited {
            retry_after_ns: wait,
        },
        limit.limit(),
        0,
        wait,
    )
}

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
        let decision = self.update(&mut shard, limit, key, hash, now, true, |state| {
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
            Some(i) => limit.release(&mut shard.slot_mut(i).state, id),
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

impl<S: BuildHasher> Store for MemoryStore<Limit, S> {
    type Error = Infallible;

    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Infallible> {
        Ok(MemoryStore::decide(self, limit, key, now, cost))
    }

    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Infallible> {
        let layers: Vec<(&Limit, &str, u64)> =
            checks.iter().map(|c| (c.limit, c.key, c.cost)).collect();
        Ok(MemoryStore::decide_all(self, &layers, now))
    }

    fn peek(&self, limit: &Limit, key: &str, now: u64, cost: u64) -> Result<Decision, Infallible> {
        Ok(MemoryStore::peek(self, limit, key, now, cost))
    }

    fn settle(&self, limit: &Limit, key: &str, now: u64, delta: i64) -> Result<(), Infallible> {
        MemoryStore::settle(self, limit, key, now, delta);
        Ok(())
    }

    fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Result<u64, Decision>, Infallible> {
        Ok(self.acquire_id(limit, key, now, cost))
    }

    fn release(&self, limit: &Limit, key: &str, id: u64) -> Result<bool, Infallible> {
        Ok(MemoryStore::release(self, limit, key, id))
    }
}
