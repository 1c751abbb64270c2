//! A shard's index: from a key's hash to its slot, in one cache line.
//!
//! At a million keys a decision's cost is its cache misses. A `hashbrown` table of slot
//! numbers takes three: its control bytes, then the bucket holding the slot number, then the
//! slot. Here each entry is one word, the hash's low 32 bits beside the slot number, in an
//! open-addressed table probed linearly from the hash: the entry is found in the line the
//! probe starts on (a wrong slot is read once in about 2^32 / capacity probes), and the next
//! miss is the slot itself. Eight bytes per bucket where `hashbrown` took five, but grown by a
//! quarter at a time (the bucket is the tag scaled to the table's length, so any length
//! works), not doubled: 1.14 to 1.43 buckets per key (9 to 11.4 bytes) where `hashbrown`
//! kept 1.14 to 2.3 (5.7 to 11.4 bytes).
//!
//! Entries hold the hash bits their position is taken from, so growing moves them without
//! hashing a key again, and removal shifts the entries behind back into place (no
//! tombstones, so probes stay short however many keys come and go).

/// An empty bucket (a full entry's slot number is stored plus one).
const EMPTY: u64 = 0;

/// Slot numbers by hash, for one shard.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Entries: the hash's low 32 bits above the slot number plus one.
    table: Vec<u64>,
    len: usize,
}

/// The part of a hash an entry keeps, and its bucket is chosen by.
fn tag(hash: u64) -> u64 {
    hash & 0xffff_ffff
}

impl Index {
    /// The bucket `entry` starts probing at: its tag (the top half) scaled to the length.
    #[inline]
    fn home(&self, entry: u64) -> usize {
        (((entry >> 32) * self.table.len() as u64) >> 32) as usize
    }

    /// The bucket after `at`, wrapping.
    #[inline]
    fn next(&self, at: usize) -> usize {
        if at + 1 == self.table.len() {
            0
        } else {
            at + 1
        }
    }

    /// How many buckets a probe walks from `from` to reach `to`, wrapping.
    fn distance(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.table.len() - from
        }
    }

    /// The slot of the first entry for `hash` that `is` accepts, probing from its bucket.
    // Always inlined: the probe is a handful of operations a step, and a call around it (which
    // the compiler chose once the key compare was inlined into it) costs as much again.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, mut is: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let tag = tag(hash);
        let mut at = self.home(tag << 32);
        loop {
            let entry = self.table[at];
            if entry == EMPTY {
                return None;
            }
            if entry >> 32 == tag {
                let slot = (entry & 0xffff_ffff) as usize - 1;
                if is(slot) {
                    return Some(slot);
                }
            }
            at = self.next(at);
        }
    }

    /// The slot the entry at `hash`'s own bucket names, if its tag is `hash`'s: a guess
    /// (the key is not compared, and the entry may have been pushed along), made to start
    /// the loads of a batch early.
    #[inline]
    pub(crate) fn hint(&self, hash: u64) -> Option<usize> {
        let tag = tag(hash);
        let entry = *self.table.get(self.home(tag << 32))?;
        (entry >> 32 == tag && entry != EMPTY).then(|| (entry & 0xffff_ffff) as usize - 1)
    }

    /// The bucket holding slot `slot` of hash `hash`.
    fn bucket_of(&self, hash: u64, slot: usize) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let want = tag(hash) << 32 | (slot as u64 + 1);
        let mut at = self.home(want);
        loop {
            match self.table[at] {
                EMPTY => return None,
                entry if entry == want => return Some(at),
                _ => at = self.next(at),
            }
        }
    }

    /// Adds slot `slot` for `hash` (not already present).
    pub(crate) fn insert(&mut self, hash: u64, slot: usize) {
        // At most 7/8 full: probes stay a line long.
        if (self.len + 1) * 8 > self.table.len() * 7 {
            self.grow();
        }
        self.place(tag(hash) << 32 | (slot as u64 + 1));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mut at = self.home(entry);
        while self.table[at] != EMPTY {
            at = self.next(at);
        }
        self.table[at] = entry;
    }

    /// Grows the table by a quarter (16 buckets at first), moving each entry by the tag it
    /// holds: 7/8 full before, 7/10 after.
    fn grow(&mut self) {
        let buckets = (self.table.len() + self.table.len() / 4).max(16);
        let mut table = Vec::new();
        table.reserve_exact(buckets);
        table.resize(buckets, EMPTY);
        let old = std::mem::replace(&mut self.table, table);
        for entry in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(entry);
        }
    }

    /// Removes slot `slot` of hash `hash`; false if it was not there.
    pub(crate) fn remove(&mut self, hash: u64, slot: usize) -> bool {
        let Some(mut hole) = self.bucket_of(hash, slot) else {
            return false;
        };
        // Shift back the entries after the hole that probed past it, so every entry stays
        // reachable from its home without a tombstone.
        let mut next = self.next(hole);
        loop {
            let entry = self.table[next];
            if entry == EMPTY {
                break;
            }
            // The entry may fill the hole if its home is not between the hole and it.
            if self.distance(self.home(entry), next) >= self.distance(hole, next) {
                self.table[hole] = entry;
                hole = next;
            }
            next = self.next(next);
        }
        self.table[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Points the entry of slot `from` (of hash `hash`) at slot `to` instead.
    pub(crate) fn renumber(&mut self, hash: u64, from: usize, to: usize) {
        if let Some(at) = self.bucket_of(hash, from) {
            self.table[at] = tag(hash) << 32 | (to as u64 + 1);
        }
    }

    /// Bytes the index has allocated.
    pub(crate) fn allocation_size(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a map from slot to hash: every slot is found by its hash, nothing else
        /// is, through inserts, removals, renumbering and growth, with hashes crowded into
        /// a few buckets (so probes wrap and shift) as often as spread out.
        #[test]
        fn the_index_finds_what_a_map_finds(
            ops in prop::collection::vec((0u8..4, 0usize..64, any::<u64>()), 1..400),
            crowd in any::<bool>(),
        ) {
            let mut index = Index::default();
            let mut model: HashMap<usize, u64> = HashMap::new();
            for (op, slot, hash) in ops {
                // Crowded: a few tags at the top of the range (their probes wrap), the same
                // tags far apart in the upper bits.
                let hash = if crowd { hash | 0xffff_fff8 } else { hash };
                match op {
                    0 | 1 => {
                        if let std::collections::hash_map::Entry::Vacant(e) = model.entry(slot) {
                            e.insert(hash);
                            index.insert(hash, slot);
                        }
                    }
                    2 => {
                        let had = model.remove(&slot);
                        let hash = had.unwrap_or(hash);
                        prop_assert_eq!(index.remove(hash, slot), had.is_some());
                    }
                    _ => {
                        let to = slot + 64;
                        if let Some(hash) = model.remove(&slot) {
                            model.insert(to, hash);
                            index.renumber(hash, slot, to);
                        }
                        // Renumber back down, so slots stay few.
                        if let Some(hash) = model.remove(&to) {
                            model.insert(slot, hash);
                            index.renumber(hash, to, slot);
                        }
                    }
                }
                prop_assert_eq!(index.len, model.len());
                for (&slot, &hash) in &model {
                    prop_assert_eq!(index.find(hash, |s| s == slot), Some(slot));
                }
                prop_assert_eq!(index.find(0xdead_beef, |s| s == 999), None);
            }
        }
    }
}
