//! Ratewarden's in-memory keyed store: per-key limiter state for millions of keys in one
//! process, at the speed of an in-process limiter.
//!
//! - **Concurrent**: keys are spread over shards, each a short critical section (one lookup,
//!   one state transition), so threads on different keys rarely meet; a GCRA key is decided
//!   with one compare-and-swap under the shard's read lock, so threads on one hot key do not
//!   queue ([`Stored`]). [`MemoryStore::decide_many`] decides a batch with its cache misses
//!   overlapped, and [`MemoryStore::check`] answers "go now" or a [`NotNow`] whose numbers
//!   are computed only when read (the cheap path of a flood of refusals).
//! - **Layered**: [`MemoryStore::decide_all`] decides one request against several limits
//!   (per IP, per key, per tenant, global) all or nothing.
//! - **Bounded**: state that has returned to fresh is dropped a little with every new key (it
//!   would decide exactly as a missing key does), and `max_keys` bounds the rest; a full
//!   store evicts the least recently used key that is not limited, or refuses new keys
//!   ([`WhenFull`]). Eviction never resets a limited key: one evicted anyway is answered as
//!   limited until its state would have been fresh.
//! - **Concurrency permits** with leases: [`MemoryStore::acquire`].
//!
//! It implements [`ratewarden_core::Store`], and passes the same conformance suite as every
//! other store.

mod cell;
mod config;
mod index;
mod shard;
mod store;
mod trace;

pub use cell::{HeapBytes, Plain, StateCell, Stored, TatWord, WordExpiry};
pub use config::{StoreConfig, WhenFull};
pub use store::{MemoryStore, NotNow, Permit};

/// The bytes `max_bytes` counts for each key of a store of any [`Limit`](ratewarden_core::Limit),
/// besides a long key's text and its state's heap: its slot.
pub const SLOT_BYTES: usize =
    std::mem::size_of::<shard::Slot<Plain<ratewarden_core::LimitState>>>();

/// What a store holds and has done, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Keys held.
    pub keys: usize,
    /// Heap bytes of the keys held (those longer than 24 bytes), counted by `max_bytes`.
    pub key_bytes: usize,
    /// Heap bytes of the states held (sliding logs' entries, concurrency permits), counted
    /// by `max_bytes`.
    pub state_bytes: usize,
    /// Bytes the store has allocated for its keys and states (not counting allocator
    /// overhead).
    pub allocated_bytes: usize,
    /// States dropped because they had returned to fresh (no decision changes).
    pub evicted_fresh: u64,
    /// Live states not limited evicted to make room in a full store (those keys start
    /// afresh: they had budget left).
    pub evicted_live: u64,
    /// Limited states evicted from a shard holding nothing else (those keys stay limited
    /// until their state would have been fresh: see [`WhenFull::EvictLeastRecentlyUsed`]).
    pub evicted_limited: u64,
    /// Requests of new keys refused by a full store set to keep its keys.
    pub rejected_new_keys: u64,
    /// Times a thread found a shard locked and had to wait.
    pub contention: u64,
}
