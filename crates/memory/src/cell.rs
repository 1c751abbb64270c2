//! How a slot holds one key's state: as it is, behind the shard's write lock, or (GCRA) as
//! one atomic word that threads decide on together under the shard's read lock.
//!
//! A hot key shared by several cores is the reason: with the state behind the shard's lock,
//! every decision passes that lock from core to core and the others wait. GCRA's whole state
//! is one number (the theoretical arrival time), so a decision can be computed from a copy
//! and published with one compare-and-swap, as governor does; only inserting and evicting
//! keys need the shard to themselves.

use std::sync::atomic::{AtomicU64, Ordering};

use ratewarden_core::algorithm::{
    Concurrency, Conformance, FixedWindow, GcraState, HeapSize, LeakyBucket, LeakyQueue, Quota,
    SlidingLog, SlidingWindow, TokenBucket,
};
use ratewarden_core::{Algorithm, Decision, Gcra, Limit, Ticks};

/// An algorithm the store can hold: it names the cell that holds one key's state.
///
/// Implemented for every algorithm of `ratewarden-core`. GCRA's cell is one atomic word
/// (decided without the shard's write lock); the others hold their state as it is.
pub trait Stored: Algorithm + Sized {
    /// The holder of one key's state in a slot.
    type Cell: StateCell<Self>;
}

/// A cell's own word, when it is the state's expiry in nanoseconds at one tick per
/// nanosecond (GCRA's arrival time): the store then reads the expiry from the state, and a
/// decision that moves only the word writes nothing else.
pub trait WordExpiry {
    /// The state's word, if it has one (a GCRA arrival time that fits in 64 bits).
    fn word(&self) -> Option<u64>;
}

/// The heap a cell's state holds beyond its slot (a sliding log's entries, a concurrency
/// limit's permits): counted in the store's bytes, so that `max_bytes` bounds it too.
pub trait HeapBytes {
    /// Bytes the state has allocated on the heap.
    fn heap_bytes(&self) -> usize;
}

impl<St: HeapSize> HeapBytes for Plain<St> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes()
    }
}

impl HeapBytes for TatWord {
    #[inline]
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// The holder of one key's state in a slot (see [`Stored`]).
pub trait StateCell<A: Algorithm>: WordExpiry + HeapBytes + Send + Sync {
    /// Whether [`decide_shared`](Self::decide_shared) can ever decide: when false, the
    /// store takes the shard's write lock for every decision without trying it.
    const SHARED: bool;

    /// A cell holding `state`.
    fn new(state: A::State) -> Self;

    /// Runs `f` on the state, with the shard to itself.
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut A::State) -> R) -> R;

    /// Runs `f` on (a copy of) the state, under the shard's read lock.
    fn with<R>(&self, f: impl FnOnce(&A::State) -> R) -> R;

    /// Decides a request of `cost` at `now` under the shard's read lock, with other threads
    /// deciding on the same key at once, charging it if allowed: the decision and the state
    /// it left. `None` when this cell cannot (the caller then takes the write lock).
    fn decide_shared(&self, limit: &A, now: u64, cost: u64) -> Option<(Decision, A::State)>;

    /// The word [`decide_shared`](Self::decide_shared) published for `state`, if any.
    fn word_of(state: &A::State) -> Option<u64>;

    /// [`decide_shared`](Self::decide_shared) without the decision's numbers: whether the
    /// request conforms (charged if so), and the state it left (for a refusal, the state it
    /// was refused on, from which `peek` gives the refusal's numbers). `None` when this cell
    /// cannot (the caller decides in full).
    fn check_shared(&self, limit: &A, now: u64, cost: u64) -> Option<(Conformance, A::State)> {
        let _ = (limit, now, cost);
        None
    }
}

/// A state held as it is: only read and written with the shard's lock held.
#[derive(Debug, Default)]
pub struct Plain<St>(pub(crate) St);

impl<St> WordExpiry for Plain<St> {
    fn word(&self) -> Option<u64> {
        None
    }
}

impl<A: Algorithm> StateCell<A> for Plain<A::State> {
    const SHARED: bool = false;

    fn new(state: A::State) -> Self {
        Self(state)
    }

    #[inline]
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut A::State) -> R) -> R {
        f(&mut self.0)
    }

    #[inline]
    fn with<R>(&self, f: impl FnOnce(&A::State) -> R) -> R {
        f(&self.0)
    }

    fn decide_shared(&self, _: &A, _: u64, _: u64) -> Option<(Decision, A::State)> {
        None
    }

    fn word_of(_: &A::State) -> Option<u64> {
        None
    }
}

/// GCRA's theoretical arrival time, its low word atomic: while the high word is zero (any
/// rate whose ticks per nanosecond times today's time fits in 64 bits: `count / gcd(count,
/// period)` up to 10), decisions are one compare-and-swap. The high word only changes with
/// the shard to itself, so a reader under the read lock sees it still.
#[derive(Debug, Default)]
pub struct TatWord {
    lo: AtomicU64,
    hi: u64,
}

impl TatWord {
    fn load(&self) -> GcraState {
        let lo = self.lo.load(Ordering::Acquire);
        GcraState {
            tat: Ticks::new(u128::from(self.hi) << 64 | u128::from(lo)),
        }
    }
}

impl WordExpiry for TatWord {
    #[inline]
    fn word(&self) -> Option<u64> {
        (self.hi == 0).then(|| self.lo.load(Ordering::Acquire))
    }
}

impl StateCell<Gcra> for TatWord {
    const SHARED: bool = true;

    fn new(state: GcraState) -> Self {
        let tat = state.tat.get();
        Self {
            lo: AtomicU64::new(tat as u64),
            hi: (tat >> 64) as u64,
        }
    }

    #[inline]
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut GcraState) -> R) -> R {
        let mut state = self.load();
        let result = f(&mut state);
        *self = Self::new(state);
        result
    }

    #[inline]
    fn with<R>(&self, f: impl FnOnce(&GcraState) -> R) -> R {
        f(&self.load())
    }

    #[inline]
    fn decide_shared(&self, limit: &Gcra, now: u64, cost: u64) -> Option<(Decision, GcraState)> {
        if self.hi != 0 {
            return None;
        }
        let mut current = self.lo.load(Ordering::Acquire);
        loop {
            let mut state = GcraState {
                tat: Ticks::new(u128::from(current)),
            };
            let decision = limit.decide(&mut state, now, cost);
            let Ok(next) = u64::try_from(state.tat.get()) else {
                // Past 64 bits: the high word changes, which needs the shard to itself.
                return None;
            };
            // A rejection (or a decision that moved nothing) publishes nothing: it is
            // decided on the value just read, as if it had come at that instant.
            if next == current {
                return Some((decision, state));
            }
            match self
                .lo
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((decision, state)),
                // Another thread decided first: decide again on what it left.
                Err(actual) => current = actual,
            }
        }
    }

    fn word_of(state: &GcraState) -> Option<u64> {
        u64::try_from(state.tat.get()).ok()
    }

    #[inline]
    fn check_shared(&self, limit: &Gcra, now: u64, cost: u64) -> Option<(Conformance, GcraState)> {
        if self.hi != 0 {
            return None;
        }
        let mut current = self.lo.load(Ordering::Acquire);
        loop {
            let conformance = limit.conform_ns(current, now, cost)?;
            let state = GcraState {
                tat: Ticks::new(u128::from(conformance.tat)),
            };
            // As in `decide_shared`: a refusal (or a charge that moved nothing) publishes
            // nothing.
            if conformance.tat == current {
                return Some((conformance, state));
            }
            match self.lo.compare_exchange_weak(
                current,
                conformance.tat,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((conformance, state)),
                Err(actual) => current = actual,
            }
        }
    }
}

impl Stored for Gcra {
    type Cell = TatWord;
}

/// The algorithms whose state is held as it is.
macro_rules! plain {
    ($($algorithm:ty),* $(,)?) => {
        $(impl Stored for $algorithm {
            type Cell = Plain<<$algorithm as Algorithm>::State>;
        })*
    };
}

plain!(
    Limit,
    Concurrency,
    FixedWindow,
    LeakyBucket,
    LeakyQueue,
    Quota,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
);
