//! The in-memory store passes the conformance suite every store must pass.

use ratewarden_core::conformance;
use ratewarden_memory::{MemoryStore, StoreConfig};

#[test]
fn the_memory_store_conforms() {
    conformance::run_all(|| MemoryStore::new(StoreConfig::default()));
}

#[test]
fn a_store_of_one_shard_conforms() {
    conformance::run_all(|| {
        MemoryStore::new(StoreConfig {
            shards: 1,
            ..StoreConfig::default()
        })
    });
}
