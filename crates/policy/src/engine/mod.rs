//! Deciding a request: match the rules, build their keys, and decide every layer at once.
//!
//! Every front door ends here: an HTTP request through [`Engine::decide`], an Envoy
//! `ShouldRateLimit` call through [`Engine::decide_descriptors`]. Both build a list of the
//! rules that apply, with their keys and costs, and take the one path in `charge.rs`: one
//! store call all or nothing, rollout and shadow, the failure policy with the engine's one
//! local store, `local_first`, per-rule counters.

mod adaptive;
mod answer;
mod charge;
mod counters;
mod credentials;
mod decide;
mod descriptors;
mod error;
mod explain;
mod failure;
mod flow_hash;
mod hash;
mod identity;
mod key_state;
mod keyed;
mod keys;
mod matching;
mod owner;
mod prefetch;
mod quota_budget;
mod request;
mod reservations;
mod rules;
mod settle;
mod top;
mod verdict;
mod waiting;

pub use adaptive::{
    AdaptiveState, QueueState, ShedReason, WaitStats, CRITICALITY_HEADER, WAIT_BUCKETS_NS,
};
pub use answer::{Answer, Jitter};
pub use counters::RuleStats;
pub use descriptors::{DescriptorStatus, DescriptorVerdict, RequestDescriptor};
pub use error::{ReleaseError, RequestError, SettleError};
pub use explain::{outcome_words, Explanation, Finding, RuleExplanation};
pub use hash::{api_key_digest, fingerprint, rollout_bucket};
pub use identity::Identity;
pub use key_state::{KeyState, KeyStateError};
pub use owner::Owner;
pub use prefetch::PrefetchStats;
pub use quota_budget::QuotaBucket;
pub use request::Request;
pub use reservations::GrantId;
pub use top::{Offender, RuleTop, TopKeys, TopReport};
pub use verdict::{RuleOutcome, Verdict};
pub use waiting::Timer;

use std::sync::{Arc, PoisonError, RwLock};

use ratewarden_memory::{MemoryStore, WhenFull};

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
    /// The limiters of adaptive concurrency rules, by key.
    adaptive: adaptive::Limiters,
    /// The allowances of `prefetch` rules, by key.
    allowances: prefetch::Allowances,
}

impl<S> Engine<S> {
    /// An engine deciding `config`'s rules with `store` (and no Envoy configs).
    pub fn new(config: Config, store: S) -> Self {
        Self::with_envoy(config, EnvoyConfig::default(), store)
    }

    /// An engine deciding `config`'s rules and the envoyproxy/ratelimit configs `envoy`.
    ///
    /// The in-process buckets (the local fallback and fail-open guard, the `local_first`
    /// buckets) are bounded by `[store] max_keys` and `max_bytes` as the store is, and
    /// evict the least recently used key when full: refusing a new key there would refuse
    /// requests the store allows.
    pub fn with_envoy(config: Config, envoy: EnvoyConfig, store: S) -> Self {
        let buckets = config.store.memory_config(WhenFull::EvictLeastRecentlyUsed);
        Self {
            rules: RwLock::new(Arc::new(RuleSet::new(config, envoy, 1))),
            store,
            local: MemoryStore::new(buckets),
            hybrid: MemoryStore::new(buckets),
            reservations: Ledger::new(reservations::MAX_LIVE),
            permits: Ledger::new(reservations::MAX_LIVE),
            adaptive: adaptive::Limiters::new(adaptive::MAX_LIMITERS),
            allowances: prefetch::Allowances::default(),
        }
    }

    /// The store the rules decide on.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// What the `prefetch` rules' allowances did since the engine started.
    pub fn prefetch_stats(&self) -> PrefetchStats {
        self.allowances.stats()
    }

    fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.rules.read().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewarden_memory::StoreConfig;

    /// Keys come from clients: `[store] max_keys` bounds the engine's in-process buckets
    /// too, not only the store.
    #[test]
    fn store_bounds_hold_for_the_in_process_buckets() {
        let config = crate::config::parse(
            "t.toml",
            r#"
[store]
max_keys = 256

[[limit]]
name = "per-key"
key = ["header:x-key"]
algorithm = "gcra"
rate = "1/s"
burst = 2
local_first = true
"#,
        )
        .expect("a valid config");
        let engine = Engine::new(config, MemoryStore::new(StoreConfig::default()));
        for i in 0..5_000 {
            let key = format!("k{i}");
            let headers = [("x-key", key.as_str())];
            let request = Request {
                peer: "192.0.2.1".parse().expect("an address"),
                method: "GET",
                path: "/",
                host: None,
                headers: &headers,
                cost: None,
                api_key: None,
                tenant: None,
            };
            let verdict = ratewarden_core::now_or_panic(engine.decide(&request, 1));
            assert!(verdict.expect("decided").allowed);
        }
        let held = engine.hybrid.stats().keys;
        assert!(held > 0 && held <= 256, "{held} keys held");
    }
}
