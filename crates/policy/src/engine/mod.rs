//! Deciding a request: match the rules, build their keys, and decide every layer at once.
//!
//! Every front door ends here: an HTTP request through [`Engine::decide`], an Envoy
//! `ShouldRateLimit` call through [`Engine::decide_descriptors`]. Both build a list of the
//! rules that apply, with their keys and costs, and take the one path in `charge.rs`: one
//! store call all or nothing, rollout and shadow, the failure policy with the engine's one
//! local store, `local_first`, per-rule counters.

mod charge;
mod counters;
mod decide;
mod descriptors;
mod error;
mod explain;
mod failure;
mod hash;
mod identity;
mod key_state;
mod keyed;
mod keys;
mod matching;
mod owner;
mod request;
mod reservations;
mod rules;
mod settle;
mod top;
mod verdict;

pub use counters::RuleStats;
pub use descriptors::{DescriptorStatus, DescriptorVerdict, RequestDescriptor};
pub use error::{ReleaseError, RequestError, SettleError};
pub use explain::{outcome_words, Explanation, Finding, RuleExplanation};
pub use hash::{api_key_digest, fingerprint, rollout_bucket};
pub use identity::Identity;
pub use key_state::{KeyState, KeyStateError};
pub use owner::Owner;
pub use request::Request;
pub use reservations::GrantId;
pub use top::{Offender, RuleTop, TopKeys, TopReport};
pub use verdict::{RuleOutcome, Verdict};

use std::sync::{Arc, PoisonError, RwLock};

use ratewarden_memory::{MemoryStore, StoreConfig};

use crate::envoy::EnvoyConfig;
use crate::Config;
use reservations::Ledger;
use rules::RuleSet;

/// The policy engine: rules over a store.
pub struct Engine<S> {
    rules: RwLock<Arc<RuleSet>>,
    store: S,
    /// Where rules decide while the store is down: `on_store_failure = "local"` at its
    /// share, `"open"` at the rule's own numbers (so a process stays exact on its own).
    local: MemoryStore,
    /// The in-process buckets of `local_first` rules, asked before the store.
    hybrid: MemoryStore,
    /// Estimated costs waiting for their settle.
    reservations: Ledger,
    /// Concurrency units held until their release.
    permits: Ledger,
}

impl<S> Engine<S> {
    /// An engine deciding `config`'s rules with `store` (and no Envoy configs).
    pub fn new(config: Config, store: S) -> Self {
        Self::with_envoy(config, EnvoyConfig::default(), store)
    }

    /// An engine deciding `config`'s rules and the envoyproxy/ratelimit configs `envoy`.
    pub fn with_envoy(config: Config, envoy: EnvoyConfig, store: S) -> Self {
        Self {
            rules: RwLock::new(Arc::new(RuleSet::new(config, envoy, 1))),
            store,
            local: MemoryStore::new(StoreConfig::default()),
            hybrid: MemoryStore::new(StoreConfig::default()),
            reservations: Ledger::new(reservations::MAX_LIVE),
            permits: Ledger::new(reservations::MAX_LIVE),
        }
    }

    /// The store the rules decide on.
    pub fn store(&self) -> &S {
        &self.store
    }

    fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.rules.read().unwrap_or_else(PoisonError::into_inner))
    }
}
