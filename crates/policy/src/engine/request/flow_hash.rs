//! The hash that deals a tenant its hand of queue lanes, keyed with a secret.
//!
//! Shuffle sharding isolates a light tenant only if a heavy one cannot choose where it
//! lands. With an unkeyed hash (FNV-1a, say) anyone who knows a victim tenant's name can
//! compute its hand offline and make up tenant names whose hands cover it, then fill those
//! lanes: the victim's requests find every lane of its hand full and are shed. Keyed with
//! a secret drawn when the engine is made, the hands are different in every process and
//! cannot be computed from outside, so covering a victim's hand is back to chance (the
//! odds the fair queue's docs give).

use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher, RandomState};

/// The keyed flow hash.
pub(crate) enum FlowHash {
    /// SipHash-1-3 keyed from the system's random source (std's defence against hash
    /// flooding, the same threat): unpredictable, and different in every engine.
    Random(RandomState),
    /// A secret fixed by the caller, for tests and reproducible simulations: whoever knows
    /// it can predict every tenant's lanes.
    Fixed(u64),
}

impl FlowHash {
    /// A hash keyed with a fresh random secret.
    pub(crate) fn random() -> Self {
        FlowHash::Random(RandomState::new())
    }

    /// The hash of the flow `value` (a tenant, an API key...).
    pub(crate) fn hash(&self, value: &str) -> u64 {
        match self {
            FlowHash::Random(state) => state.hash_one(value),
            FlowHash::Fixed(secret) => {
                // SipHash with zero keys over the secret and then the value: reproducible
                // within a build, which is all a test or a simulation needs.
                let mut hasher = DefaultHasher::new();
                secret.hash(&mut hasher);
                value.hash(&mut hasher);
                hasher.finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_secret_replays_and_another_secret_differs() {
        let (a, b) = (FlowHash::Fixed(7), FlowHash::Fixed(8));
        assert_eq!(a.hash("tenant"), FlowHash::Fixed(7).hash("tenant"));
        assert_ne!(a.hash("tenant"), b.hash("tenant"));
        assert_ne!(a.hash("tenant"), a.hash("tenant2"));
    }

    #[test]
    fn random_secrets_differ_between_hashes() {
        let (a, b) = (FlowHash::random(), FlowHash::random());
        assert_eq!(
            a.hash("tenant"),
            a.hash("tenant"),
            "stable within one engine"
        );
        assert_ne!(a.hash("tenant"), b.hash("tenant"));
    }
}
