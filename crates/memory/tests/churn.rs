//! Key churn: ten times the cap in distinct keys passes through the store, and resident
//! memory stays at what the cap costs.
//!
//! `scripts/test` runs this in release mode with 10 million keys through a cap of 1 million;
//! a debug build uses a tenth of each so the ordinary test run stays quick. It is the only
//! test in its binary, so the process's resident memory is its own.

use std::fmt::Write;
use std::time::Duration;

use ratewarden_core::{Gcra, Limit, Rate};
use ratewarden_memory::{MemoryStore, StoreConfig};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[test]
fn resident_memory_stays_flat_while_ten_times_the_cap_passes_through() {
    let cap: usize = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let before = resident_bytes();
    let store: MemoryStore = MemoryStore::new(StoreConfig {
        max_keys: cap,
        ..StoreConfig::default()
    });
    // A slow limit, and time that does not move: every state stays live, so only eviction
    // keeps memory bounded.
    let limit =
        Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(3_600)).unwrap(), 10).unwrap());
    let now = 1_000_000_000;
    let mut key = String::with_capacity(48);
    let mut after_first_fill = 0;
    for i in 0..10 * cap as u64 {
        key.clear();
        // One-off IPv6 /64 prefixes, as a flood of rotating clients sends them.
        write!(key, "ip|2001:db8:{:x}:{:x}::/64", i >> 16, i & 0xffff).unwrap();
        assert!(store.decide(&limit, &key, now, 1).is_allowed());
        if i + 1 == cap as u64 {
            after_first_fill = resident_bytes();
        }
    }
    let after_churn = resident_bytes();
    let stats = store.stats();
    assert!(stats.keys <= cap, "{stats:?}");
    assert_eq!(stats.evicted_live as usize, 10 * cap - stats.keys);
    let per_key = (after_first_fill - before) / cap as u64;
    println!(
        "cap {cap}: resident {} MiB after the first fill, {} MiB after {} keys; \
         {per_key} B/key resident, {} B/key allocated",
        after_first_fill >> 20,
        after_churn >> 20,
        10 * cap,
        stats.allocated_bytes / stats.keys.max(1)
    );
    assert!(
        after_churn <= after_first_fill + after_first_fill / 5,
        "resident memory grew from {after_first_fill} to {after_churn} bytes under churn"
    );
    assert!(per_key <= 160, "{per_key} bytes per key held");
}
