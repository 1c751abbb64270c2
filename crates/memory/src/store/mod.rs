//! The store: shards behind short locks. The operations on them are in the files below,
//! one concept each: deciding (`decide`), the cheap check whose refusal computes its numbers
//! when asked (`check`), making room in a full shard (`room`), the idle
//! sweep and the figures (`upkeep`), concurrency permits (`permit`) and the `Store` trait
//! (`as_store`).

mod as_store;
mod batch;
mod check;
mod decide;
mod lease;
mod permit;
mod room;
mod upkeep;

pub use check::NotNow;
pub use permit::Permit;

use std::hash::{BuildHasher, Hasher, RandomState};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

use ratewarden_core::Limit;

use crate::cell::Stored;
use crate::shard::Shard;
use crate::StoreConfig;

/// The shard of an algorithm's store.
type ShardOf<A> = Shard<<A as Stored>::Cell>;

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
    /// Written to insert, evict and (for states not decided in one word) decide; read to
    /// find a key and decide in one word (see [`crate::cell`]).
    shard: RwLock<Shard<St>>,
    /// Times a thread found this shard locked and had to wait.
    contention: AtomicU64,
}

/// A concurrent store of per-key limiter state for one process.
///
/// Keys are spread over shards by hash; each shard is a short critical section (a lookup and
/// one state transition), so threads deciding on different keys rarely meet, and a key
/// already present is found without allocating. States that have returned to fresh are
/// dropped a little with every new key, and `max_keys` bounds the rest (see
/// [`WhenFull`](crate::WhenFull)).
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
pub struct MemoryStore<A: Stored = Limit, S = RandomState> {
    shards: Box<[Locked<A::Cell>]>,
    hasher: S,
    per_shard: usize,
    /// Each shard's share of `max_bytes`.
    per_shard_bytes: usize,
    config: StoreConfig,
    next_permit: AtomicU64,
    /// The fleet budgets' leases (see `lease.rs`).
    shares: Mutex<lease::Shares>,
    _algorithm: PhantomData<fn(&A)>,
}

impl<A: Stored> MemoryStore<A, RandomState> {
    /// A store with `config`, hashing keys with the standard library's randomly seeded
    /// SipHash (keys come from clients, so the hash must resist collision floods).
    pub fn new(config: StoreConfig) -> Self {
        Self::with_hasher(config, RandomState::new())
    }
}

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// A store with `config` and a hasher of your choosing.
    pub fn with_hasher(config: StoreConfig, hasher: S) -> Self {
        let shards = config.shard_count();
        // Rounded down, so the store never holds more than `max_keys`.
        let per_shard = (config.max_keys / shards).max(1);
        let per_shard_bytes = config.shard_bytes();
        Self {
            shards: (0..shards)
                .map(|_| Locked {
                    shard: RwLock::new(Shard::default()),
                    contention: AtomicU64::new(0),
                })
                .collect(),
            hasher,
            per_shard,
            per_shard_bytes,
            config,
            next_permit: AtomicU64::new(1),
            shares: Mutex::default(),
            _algorithm: PhantomData,
        }
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The key's bytes through the store's hasher, and nothing else: `hash_one(key)` would
    /// write a terminator byte after them (what keeps one string's hash apart from two
    /// strings' written in a row), a second call into SipHash on every decision for a hash
    /// that only ever covers one string. SipHash's last block holds the length, so keys of
    /// different lengths still hash apart.
    #[inline]
    fn hash(&self, key: &str) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(key.as_bytes());
        hasher.finish()
    }

    /// The shard of a hash: middle bits, since the shard's table uses the low bits for the
    /// bucket and the top seven for its control bytes.
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    /// The shard to itself: to insert or evict, or to decide a state held as it is.
    fn lock(&self, shard: usize) -> RwLockWriteGuard<'_, ShardOf<A>> {
        let locked = &self.shards[shard];
        // The critical section is tens of nanoseconds: spin a little before sleeping, as a
        // thread put to sleep costs a system call on both sides.
        for _ in 0..SPINS {
            match locked.shard.try_write() {
                Ok(guard) => return guard,
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
                // A panic elsewhere cannot leave a state half-written: transitions are
                // computed first and stored in one assignment.
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            }
        }
        locked.contention.fetch_add(1, Ordering::Relaxed);
        locked.shard.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard shared with other readers: to find a key, peek, or decide in one word.
    #[inline]
    fn read(&self, shard: usize) -> RwLockReadGuard<'_, ShardOf<A>> {
        let locked = &self.shards[shard];
        for _ in 0..SPINS {
            match locked.shard.try_read() {
                Ok(guard) => return guard,
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            }
        }
        locked.contention.fetch_add(1, Ordering::Relaxed);
        locked.shard.read().unwrap_or_else(PoisonError::into_inner)
    }
}
