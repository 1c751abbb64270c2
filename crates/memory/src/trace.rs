//! The keys a full shard had to evict while they were limited, so that eviction never
//! hands a limited key a fresh budget.
//!
//! A shard full of nothing but limited keys must still make room for a new key (or refuse
//! it). Forgetting a limited key would let it start afresh: an attacker flooding junk keys
//! would reset its own budget. So before a limited key is evicted, the hash of its key and
//! the time its state would have been fresh again are written here; until then, the key is
//! answered as limited. The table is fixed in size (a few kilobytes a shard, allocated the
//! first time it is needed) and set-associative: when the entry's set holds nothing but live
//! entries, the limited key is not evicted and the new key is refused instead.

/// Sets in a shard's trace.
const SETS: usize = 64;
/// Entries per set.
const WAYS: usize = 4;

/// One evicted key: the hash of its key, and when its state would have been fresh.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    hash: u64,
    /// 0 for an empty entry (no key is limited until the epoch).
    until: u64,
}

/// A shard's trace of keys evicted while limited.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    entries: Option<Box<[Entry; SETS * WAYS]>>,
}

impl Trace {
    /// The entries of `hash`'s set. The set comes from bits of the hash that neither the
    /// shard choice (bits 32 and up) nor the shard's table (low bits and the top seven)
    /// depend on much: keys of one shard spread over the sets.
    fn set(hash: u64) -> std::ops::Range<usize> {
        let set = (hash >> 20) as usize % SETS;
        set * WAYS..(set + 1) * WAYS
    }

    /// Until when the key of `hash` stays limited, if it was evicted while limited and that
    /// time is after `now`.
    pub(crate) fn until(&self, hash: u64, now: u64) -> Option<u64> {
        let entries = self.entries.as_ref()?;
        entries[Self::set(hash)]
            .iter()
            .find(|e| e.hash == hash && e.until > now)
            .map(|e| e.until)
    }

    /// Whether [`remember`](Self::remember) would take the key of `hash` at `now`.
    pub(crate) fn has_room(&self, hash: u64, now: u64) -> bool {
        self.entries.as_ref().is_none_or(|entries| {
            entries[Self::set(hash)]
                .iter()
                .any(|e| e.hash == hash || e.until <= now)
        })
    }

    /// Remembers that the key of `hash` stays limited until `until`; false when its set is
    /// full of entries still live at `now` (then the key must not be evicted).
    pub(crate) fn remember(&mut self, hash: u64, until: u64, now: u64) -> bool {
        let entries = self
            .entries
            .get_or_insert_with(|| Box::new([Entry::default(); SETS * WAYS]));
        let set = &mut entries[Self::set(hash)];
        let free = set
            .iter()
            .position(|e| e.hash == hash)
            .or_else(|| set.iter().position(|e| e.until <= now));
        match free {
            Some(i) => {
                // The same key again keeps the later of its two times.
                let kept = if set[i].hash == hash { set[i].until } else { 0 };
                set[i] = Entry {
                    hash,
                    until: until.max(kept),
                };
                true
            }
            None => false,
        }
    }

    /// Bytes allocated, for memory accounting.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.entries
            .as_ref()
            .map_or(0, |e| std::mem::size_of_val(&**e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_key_is_limited_until_its_time_only() {
        let mut trace = Trace::default();
        assert_eq!(trace.until(7, 0), None);
        assert!(trace.remember(7, 100, 10));
        assert_eq!(trace.until(7, 99), Some(100));
        assert_eq!(trace.until(7, 100), None);
        assert_eq!(trace.until(8, 50), None);
    }

    #[test]
    fn a_full_set_refuses_until_an_entry_lapses() {
        let mut trace = Trace::default();
        // Hashes that share a set: the same bits 20 and up, modulo the set count.
        let same_set = |i: u64| i | (5 << 20);
        for i in 0..WAYS as u64 {
            assert!(trace.remember(same_set(i), 100 + i, 0));
        }
        assert!(!trace.remember(same_set(99), 500, 0), "every way is live");
        assert!(
            trace.remember(same_set(99), 500, 100),
            "the first lapsed at 100"
        );
        assert_eq!(trace.until(same_set(99), 100), Some(500));
        assert_eq!(trace.until(same_set(1), 100), Some(101));
    }
}
