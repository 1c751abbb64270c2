//! One shard: a vector of slots and a hash index into it, behind the store's per-shard lock.

use std::sync::atomic::{AtomicU64, Ordering};

use compact_str::CompactString;

use crate::cell::{HeapBytes, WordExpiry};
use crate::index::Index;
use crate::trace::Trace;

/// The "word" bit, at the bottom of a slot's meta: the state's own word is (also) its expiry
/// in nanoseconds (GCRA at one tick per nanosecond, see [`WordExpiry`]), so a decision that
/// only moves that word need not write the meta as well.
const WORD: u64 = 1;
/// The CLOCK "referenced" bit.
const REFERENCED: u64 = 1 << 1;
/// The "limited" bit: the slot's last decision left it refusing a request of cost 1 (spent,
/// or in debt). Highest of the three, so that of two metas for one expiry the larger keeps
/// it (see [`Slot::touch_shared`]).
const LIMITED: u64 = 1 << 2;
/// The expiry's place: above the three bits, so that comparing two metas compares their
/// expiries first.
const EXPIRY_SHIFT: u32 = 3;
/// Expiries are kept in grains of 4 ns, rounded up (a state kept a few nanoseconds longer
/// decides nothing differently), so that Unix nanoseconds fit beside the bits until 2262.
const GRAIN_BITS: u32 = 2;
/// The largest expiry a meta holds, in grains.
const EXPIRES: u64 = u64::MAX >> EXPIRY_SHIFT;

/// Slots a full shard's eviction looks at, at most, for one not limited: bounds the cost of
/// a new key in a shard that holds (nearly) nothing but limited keys.
const EVICT_SCAN: usize = 64;

/// One key's state. With a 24-byte inline key and a 32-byte state this is one cache line.
pub(crate) struct Slot<St> {
    pub(crate) key: CompactString,
    /// When the state turns fresh (dropping it then changes no decision), above the
    /// referenced and limited bits. Atomic so that decisions under the shard's read lock can
    /// record themselves; with the shard to itself the store reads and writes it plainly.
    meta: AtomicU64,
    pub(crate) state: St,
}

impl<St: WordExpiry> Slot<St> {
    fn meta(&self) -> u64 {
        self.meta.load(Ordering::Relaxed)
    }

    /// When the state turns fresh: the meta's expiry, or the state's own word when that is
    /// later and the meta says it counts.
    fn expires(&self) -> u64 {
        let meta = self.meta();
        let recorded = (meta >> EXPIRY_SHIFT) << GRAIN_BITS;
        match self.state.word() {
            Some(word) if meta & WORD != 0 => recorded.max(word),
            _ => recorded,
        }
    }

    /// Whether the state is fresh at `now`: a sweep may drop the slot.
    pub(crate) fn sweepable(&self, now: u64) -> bool {
        self.expires() <= now
    }

    fn encode(expires: u64, limited: bool, word: bool) -> u64 {
        let grains = expires.div_ceil(1 << GRAIN_BITS).min(EXPIRES);
        grains << EXPIRY_SHIFT
            | REFERENCED
            | if limited { LIMITED } else { 0 }
            | if word { WORD } else { 0 }
    }

    /// Records a use, the time the state will be fresh again, and whether it now refuses a
    /// request of cost 1.
    pub(crate) fn touch(&mut self, expires: u64, limited: bool) {
        let word = self.state.word() == Some(expires);
        let meta = Self::encode(expires, limited, word);
        // A rejection usually changes nothing: leave the line clean then.
        if *self.meta.get_mut() != meta {
            *self.meta.get_mut() = meta;
        }
    }

    /// [`touch`](Self::touch) for a decision made under the shard's read lock, racing
    /// others on the same key, that published `word` as the state's new word. The states are
    /// published in order, and a later one is fresh no sooner (a GCRA arrival time only moves
    /// forward there), so the meta of the latest state is the largest: keeping the maximum
    /// keeps it whatever order the threads record in. Two states fresh at the same grain keep
    /// the limited bit if either has it, which errs on the side of keeping the key.
    ///
    /// Writes nothing when the meta already covers the decision: when the word is the
    /// expiry and the meta says so (the word only grows until the shard is written), and
    /// the bits are set. That is every decision of a GCRA key at one tick per nanosecond
    /// once it is limited or used, so a hot key costs one compare-and-swap, not two.
    #[inline]
    pub(crate) fn touch_shared(&self, expires: u64, limited: bool, word: Option<u64>) {
        let meta = self.meta();
        let word = word == Some(expires);
        let bits = REFERENCED | if limited { LIMITED } else { 0 };
        if word && meta & WORD != 0 && meta & bits == bits {
            return;
        }
        let new = Self::encode(expires, limited, word);
        if meta < new {
            self.meta.fetch_max(new, Ordering::Relaxed);
        }
    }

    /// Whether the slot counts as limited at `now`: its last decision left it refusing, and
    /// its state has not returned to fresh since. (It may have regained some budget in
    /// between; a full shard then keeps it a little longer than it needs to, which costs
    /// nothing but a slot, where a precise time would cost eight bytes in every slot.)
    fn is_limited(&self, now: u64) -> bool {
        self.meta() & LIMITED != 0 && self.expires() > now
    }
}

/// What a full shard's eviction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evicted {
    /// A slot that was not limited.
    Live,
    /// A limited slot (every slot looked at was), remembered in the trace until its state
    /// would have been fresh.
    Limited,
    /// Nothing: the only candidates were limited and the trace had no room for them.
    Nothing,
}

/// Counts of what a shard did, kept under its lock.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) evicted_fresh: u64,
    pub(crate) evicted_live: u64,
    pub(crate) evicted_limited: u64,
    pub(crate) rejected_new_keys: u64,
}

/// A shard's keys: slots in a vector (so a clock hand can walk them) indexed by hash.
pub(crate) struct Shard<St> {
    slots: Vec<Slot<St>>,
    index: Index,
    /// What this shard has dropped and refused, for the store's stats.
    pub(crate) counts: Counts,
    /// Keys evicted while limited, answered as limited until their time.
    pub(crate) trace: Trace,
    /// Heap bytes of the keys held (those too long to live inline in their slot).
    key_bytes: usize,
    /// Heap bytes of the states held (see [`HeapBytes`]).
    state_bytes: usize,
    /// Where the incremental sweep (on each new key) and the CLOCK eviction look next.
    hand: usize,
}

impl<St> Default for Shard<St> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            index: Index::default(),
            counts: Counts::default(),
            trace: Trace::default(),
            key_bytes: 0,
            state_bytes: 0,
            hand: 0,
        }
    }
}

/// Whether two keys are the same bytes. Keys of 8 to 24 bytes (most keys: an API key, an
/// address, a user id) are compared as two or three overlapping words, without the call into
/// `memcmp` that slice equality makes: that call and its dispatch cost more than hashing a
/// short key's last block.
#[inline]
fn same_key(held: &[u8], key: &[u8]) -> bool {
    let n = key.len();
    if held.len() != n {
        return false;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    match n {
        8..=16 => word(held, 0) == word(key, 0) && word(held, n - 8) == word(key, n - 8),
        17..=24 => {
            word(held, 0) == word(key, 0)
                && word(held, 8) == word(key, 8)
                && word(held, n - 8) == word(key, n - 8)
        }
        _ => held == key,
    }
}

/// Heap bytes of a key: none when it lives inline in its slot.
fn heap_bytes(key: &CompactString) -> usize {
    if key.is_heap_allocated() {
        key.capacity()
    } else {
        0
    }
}

impl<St: WordExpiry + HeapBytes> Shard<St> {
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes the shard's keys take, as `max_bytes` counts them: a slot each, plus the heap
    /// bytes of keys too long to live inline and of states that grow (a sliding log's
    /// entries).
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<St>>() + self.key_bytes + self.state_bytes
    }

    /// Heap bytes of the states held.
    pub(crate) fn state_bytes(&self) -> usize {
        self.state_bytes
    }

    /// Records that a state held went from `before` to `after` heap bytes.
    pub(crate) fn restate(&mut self, before: usize, after: usize) {
        self.state_bytes = self.state_bytes.saturating_sub(before) + after;
    }

    /// What holding `key` would add to [`bytes`](Self::bytes).
    pub(crate) fn cost_of(key: &str) -> usize {
        let heap = if key.len() > std::mem::size_of::<CompactString>() {
            key.len()
        } else {
            0
        };
        std::mem::size_of::<Slot<St>>() + heap
    }

    /// Heap bytes of the keys held.
    pub(crate) fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    #[inline]
    pub(crate) fn find(&self, hash: u64, key: &str) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(hash, |i| same_key(slots[i].key.as_bytes(), key.as_bytes()))
    }

    /// A guess at `hash`'s slot, from its index entry alone (see [`Index::hint`]).
    #[inline]
    pub(crate) fn hint(&self, hash: u64) -> Option<usize> {
        self.index.hint(hash)
    }

    /// Reads slot `i`'s meta and word (if there is such a slot), so that its line is in
    /// cache when it is decided on.
    #[inline]
    pub(crate) fn warm(&self, i: usize) -> u64 {
        self.slots
            .get(i)
            .map_or(0, |slot| slot.meta() ^ slot.state.word().unwrap_or(0))
    }

    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut Slot<St> {
        &mut self.slots[i]
    }

    pub(crate) fn slot(&self, i: usize) -> &Slot<St> {
        &self.slots[i]
    }

    /// Adds a key that [`find`](Self::find) did not find, untouched (the caller
    /// [`touch`](Slot::touch)es it); the shard holds at most `most`.
    pub(crate) fn insert(&mut self, hash: u64, key: &str, state: St, most: usize) -> usize {
        let i = self.slots.len();
        if i == self.slots.capacity() {
            // Grow by a quarter rather than doubling, and never past the shard's share of
            // `max_keys`: a full store then wastes no slot.
            let grow = (i / 4).max(16).min(most.saturating_sub(i)).max(1);
            self.slots.reserve_exact(grow);
        }
        let slot = Slot {
            key: CompactString::from(key),
            meta: AtomicU64::new(0),
            state,
        };
        self.key_bytes += heap_bytes(&slot.key);
        self.state_bytes += slot.state.heap_bytes();
        self.slots.push(slot);
        self.index.insert(hash, i);
        i
    }

    /// Removes the state of `key` (of hash `hash`); false when it held none.
    pub(crate) fn remove_key(
        &mut self,
        hash: u64,
        key: &str,
        rehash: &impl Fn(&str) -> u64,
    ) -> bool {
        match self.find(hash, key) {
            Some(i) => {
                self.remove(i, rehash);
                true
            }
            None => false,
        }
    }

    /// Removes slot `i`, moving the last slot into its place.
    fn remove(&mut self, i: usize, rehash: &impl Fn(&str) -> u64) {
        let hash = rehash(self.slots[i].key.as_str());
        self.index.remove(hash, i);
        let last = self.slots.len() - 1;
        if i != last {
            let moved = rehash(self.slots[last].key.as_str());
            self.index.renumber(moved, last, i);
        }
        self.key_bytes -= heap_bytes(&self.slots[i].key);
        self.state_bytes = self
            .state_bytes
            .saturating_sub(self.slots[i].state.heap_bytes());
        self.slots.swap_remove(i);
    }

    /// Looks at up to `steps` slots at the hand and drops those whose state is fresh at
    /// `now`. Returns how many it dropped. This is the whole of expiry: a little with every
    /// new key, never a stop-the-world sweep.
    pub(crate) fn sweep(&mut self, now: u64, steps: usize, rehash: &impl Fn(&str) -> u64) -> u64 {
        let mut dropped = 0;
        // Each slot at most once per call: a removal brings another slot to the hand.
        for _ in 0..steps.min(self.slots.len()) {
            if self.slots.is_empty() {
                break;
            }
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            if self.slots[self.hand].expires() <= now {
                // The last slot moves here; look at it next.
                self.remove(self.hand, rehash);
                dropped += 1;
            } else {
                self.hand += 1;
            }
        }
        dropped
    }

    /// Evicts one slot to make room at `now`: the first not limited and not referenced since
    /// the hand last passed it (CLOCK), else the first not limited, else (every slot looked
    /// at is limited) the limited one fresh soonest, once the trace has taken it. Looks at
    /// most at [`EVICT_SCAN`] slots (two turns of a smaller shard).
    pub(crate) fn evict_one(&mut self, now: u64, rehash: &impl Fn(&str) -> u64) -> Evicted {
        let len = self.slots.len();
        let mut unreferenced = None;
        let mut not_limited = None;
        let mut limited: Option<usize> = None;
        for _ in 0..(2 * len).min(EVICT_SCAN) {
            if self.hand >= len {
                self.hand = 0;
            }
            let at = self.hand;
            self.hand += 1;
            if self.slots[at].is_limited(now) {
                let expires = self.slots[at].expires();
                if limited.is_none_or(|j| self.slots[j].expires() > expires) {
                    limited = Some(at);
                }
                continue;
            }
            let meta = self.slots[at].meta.get_mut();
            if *meta & REFERENCED != 0 {
                *meta &= !REFERENCED;
                not_limited.get_or_insert(at);
            } else {
                unreferenced = Some(at);
                break;
            }
        }
        if let Some(i) = unreferenced {
            self.remove(i, rehash);
            // The last slot moved here: the hand looks at it next.
            self.hand = i;
            return Evicted::Live;
        }
        if let Some(i) = not_limited {
            self.remove(i, rehash);
            return Evicted::Live;
        }
        let Some(i) = limited else {
            return Evicted::Nothing;
        };
        let hash = rehash(self.slots[i].key.as_str());
        if !self.trace.remember(hash, self.slots[i].expires(), now) {
            return Evicted::Nothing;
        }
        self.remove(i, rehash);
        Evicted::Limited
    }

    /// Whether [`evict_one`](Self::evict_one) would evict something, without evicting:
    /// it looks at the same slots and changes nothing.
    pub(crate) fn can_evict(&self, now: u64, rehash: &impl Fn(&str) -> u64) -> bool {
        let len = self.slots.len();
        let mut limited: Option<usize> = None;
        for k in 0..(2 * len).min(EVICT_SCAN) {
            let at = (self.hand + k) % len;
            if !self.slots[at].is_limited(now) {
                return true;
            }
            if limited.is_none_or(|j| self.slots[j].expires() > self.slots[at].expires()) {
                limited = Some(at);
            }
        }
        limited.is_some_and(|i| self.trace.has_room(rehash(self.slots[i].key.as_str()), now))
    }

    /// Until when a key evicted while limited stays limited, if still after `now`.
    pub(crate) fn traced(&self, hash: u64, now: u64) -> Option<u64> {
        self.trace.until(hash, now)
    }

    /// Bytes this shard has allocated, for memory accounting.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<St>>()
            + self.index.allocation_size()
            + self.key_bytes
            + self.state_bytes
            + self.trace.allocated_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Plain, TatWord};
    use ratewarden_core::LimitState;

    #[test]
    fn keys_compare_equal_only_when_every_byte_is() {
        // Every length around the word sizes, differing at every position in turn.
        for n in 0..40 {
            let key: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_key(&key, &key.clone()), "length {n}");
            for at in 0..n {
                let mut other = key.clone();
                other[at] ^= 0x20;
                assert!(!same_key(&key, &other), "length {n}, byte {at}");
            }
            let mut longer = key.clone();
            longer.push(b'z');
            assert!(
                !same_key(&key, &longer) && !same_key(&longer, &key),
                "length {n}"
            );
        }
    }

    #[test]
    fn a_slot_is_one_cache_line_under_limit() {
        // Key, expiry with its three bits, state: nothing else, so a key costs no more than
        // docs/benchmarks.md promises.
        assert_eq!(std::mem::size_of::<Slot<Plain<LimitState>>>(), 64);
        assert_eq!(std::mem::size_of::<Slot<TatWord>>(), 48);
    }

    #[test]
    fn a_limited_slot_stops_counting_as_limited_once_fresh() {
        let mut slot = Slot {
            key: CompactString::from("k"),
            meta: AtomicU64::new(0),
            state: Plain(()),
        };
        slot.touch(100, true);
        assert!(slot.is_limited(99));
        assert!(!slot.is_limited(100));
        assert_eq!(slot.expires(), 100);
        slot.touch(u64::MAX, false);
        assert!(!slot.is_limited(0));
        assert_eq!(
            slot.expires(),
            EXPIRES << GRAIN_BITS,
            "saturated below the bits"
        );
    }

    #[test]
    fn expiries_round_up_to_their_grain_and_last_past_2200() {
        let mut slot = Slot {
            key: CompactString::from("k"),
            meta: AtomicU64::new(0),
            state: Plain(()),
        };
        // 2255-03-01 in Unix nanoseconds, and one past a grain.
        slot.touch(9_000_000_000_000_000_001, false);
        assert_eq!(slot.expires(), 9_000_000_000_000_000_004);
        assert!(slot.expires() > 9_000_000_000_000_000_001, "never sooner");
    }

    #[test]
    fn a_word_that_is_its_expiry_is_followed_without_writing_the_meta() {
        use crate::cell::StateCell;
        use ratewarden_core::algorithm::GcraState;
        use ratewarden_core::{Gcra, Ticks};
        let state = |tat: u64| GcraState {
            tat: Ticks::new(u128::from(tat)),
        };
        let mut slot = Slot {
            key: CompactString::from("k"),
            meta: AtomicU64::new(0),
            state: <TatWord as StateCell<Gcra>>::new(state(1_000)),
        };
        slot.touch(1_000, false);
        let meta = slot.meta();
        assert_ne!(meta & WORD, 0);
        // Another thread moved the word: the expiry follows it, the meta stays as it was.
        slot.state = <TatWord as StateCell<Gcra>>::new(state(5_000));
        slot.touch_shared(5_000, false, Some(5_000));
        assert_eq!(slot.meta(), meta);
        assert_eq!(slot.expires(), 5_000);
        // Now limited: the bit is recorded, with the expiry.
        slot.touch_shared(5_000, true, Some(5_000));
        assert!(slot.is_limited(4_999));
        // A decision published earlier but recorded later cannot pull the expiry back, nor
        // drop the limited bit.
        slot.touch_shared(3_000, false, Some(3_000));
        assert!(slot.is_limited(4_999));
        assert_eq!(slot.expires(), 5_000);
        // A word in other ticks than nanoseconds is not the expiry: the meta holds it.
        slot.touch(7_000, false);
        slot.state = <TatWord as StateCell<Gcra>>::new(state(21_000));
        assert_eq!(slot.expires(), 7_000);
    }
}
