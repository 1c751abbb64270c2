//! `max_bytes` holds for states that grow with what they admit: a sliding log keeps an
//! entry per admitted request, and the store counts them in its bytes, evicting (or, keeping
//! its keys, refusing) to stay within the bound. The logs' real size is read back through
//! the store's own answers (each admitted request is an entry of 16 bytes, at its own
//! nanosecond), not through the store's figure of it.

use std::time::Duration;

use ratewarden_core::{Limit, SlidingLog};
use ratewarden_memory::{MemoryStore, StoreConfig, WhenFull};

const SEC: u64 = 1_000_000_000;

/// A log entry: its time and its cost.
const ENTRY: usize = 16;

#[test]
fn sliding_log_entries_count_in_max_bytes_and_stay_within_it() {
    for when_full in [WhenFull::EvictLeastRecentlyUsed, WhenFull::RejectNewKeys] {
        let config = StoreConfig {
            max_keys: 1_000,
            max_bytes: 64 * 1024,
            when_full,
            ..StoreConfig::default()
        };
        let store: MemoryStore = MemoryStore::new(config);
        // 50 entries a key fit a shard's share (1 KiB) with the slot.
        let log = Limit::from(SlidingLog::new(50, Duration::from_secs(3_600)).unwrap());
        let keys: Vec<String> = (0..1_000).map(|k| format!("k{k}")).collect();
        let mut now = 1_000 * SEC;
        for round in 0..50 {
            for key in &keys {
                now += 1;
                store.decide(&log, key, now, 1);
            }
            // What the logs hold: each key's admitted requests still in the window.
            let entries: u64 = keys
                .iter()
                .map(|key| 50 - store.peek(&log, key, now, 0).remaining)
                .sum();
            let held = usize::try_from(entries).unwrap() * ENTRY;
            let stats = store.stats();
            assert!(
                held <= config.max_bytes,
                "{when_full:?}, round {round}: the logs hold {held} bytes, past max_bytes {}: {stats:?}",
                config.max_bytes
            );
            assert!(
                stats.allocated_bytes >= held,
                "{when_full:?}, round {round}: the store counts {} bytes, its logs hold {held}",
                stats.allocated_bytes
            );
        }
    }
}

#[test]
fn one_log_admitting_on_and_on_stays_within_its_shards_share() {
    // One key of a log too large for the store, admitting on and on: its shard drops it
    // when it outgrows its share (a server refuses such a rule at load: `[store] max_bytes`
    // is too small for it), or, keeping its keys, refuses what would grow it.
    for when_full in [WhenFull::EvictLeastRecentlyUsed, WhenFull::RejectNewKeys] {
        let config = StoreConfig {
            max_keys: 1_000,
            max_bytes: 64 * 1024,
            when_full,
            ..StoreConfig::default()
        };
        let store: MemoryStore = MemoryStore::new(config);
        let limit = 10_000_000;
        let log = Limit::from(SlidingLog::new(limit, Duration::from_secs(3_600)).unwrap());
        let mut now = 1_000 * SEC;
        for _ in 0..200_000 {
            now += 1;
            store.decide(&log, "one", now, 1);
        }
        let entries = limit - store.peek(&log, "one", now, 0).remaining;
        let held = usize::try_from(entries).unwrap() * ENTRY;
        // The share of each of the 64 shards.
        let share = config.max_bytes / 64;
        assert!(
            held <= share,
            "{when_full:?}: one key's log holds {held} bytes, past its shard's share {share}"
        );
    }
}
