//! Deciding limits whose keys the caller builds itself: a service keying by the user an
//! earlier layer authenticated, or by a document id (`ratewarden-tower`'s limits written in
//! code). The rules are the engine's; only the key's value comes from the caller.

use std::sync::Arc;

use ratewarden_core::AsyncStore;

use super::charge::Applying;
use super::hash::bounded_part;
use super::keys::enforces;
use super::{Engine, Verdict};

impl<S: AsyncStore> Engine<S> {
    /// Decides `keyed` at `now`: for each, the index of a rule in force (as in
    /// [`Engine::rule_list`]), the key's value (a `&str` or a `String`), and the cost. Each key is the rule's own
    /// (`name@fingerprint|value`, the value bounded as every key part is), and the lot is
    /// decided as [`Engine::decide`] decides a request's rules: all or nothing, with
    /// reservations, permits, the failure policy and the counters.
    ///
    /// It skips the matching and key building of an HTTP request and the descriptor
    /// resolution of Envoy's protocol: for a caller that knows its rules (an engine it
    /// built and never reloads) and its keys. An index past the rules is skipped.
    pub async fn decide_keyed<K: AsRef<str> + Sync>(
        &self,
        keyed: &[(usize, K, u64)],
        now: u64,
    ) -> Verdict {
        let set = self.current();
        let applying: Vec<Applying> = keyed
            .iter()
            .filter_map(|(i, value, cost)| {
                let (i, cost) = (*i, *cost);
                let rule = set.rules.get(i)?;
                let value = bounded_part(value.as_ref());
                let prefix = &set.prefixes[i];
                let mut key = String::with_capacity(prefix.len() + 1 + value.len());
                key.push_str(prefix);
                key.push('|');
                key.push_str(&value);
                Some(Applying {
                    rule: i,
                    enforced: enforces(rule, &key),
                    key,
                    cost,
                    flow: None,
                })
            })
            .collect();
        let charged = self
            .charge_adaptive(
                None,
                &set.rules,
                |i| Some(&*set.counters[i]),
                applying,
                ratewarden_core::adaptive::Criticality::Default,
                set.version,
                now,
                None,
            )
            .await;
        Verdict {
            allowed: charged.allowed,
            unavailable: charged.unavailable,
            outcomes: charged.outcomes,
            retry_after_ns: charged.retry_after_ns,
            reservation: charged.reservation,
            permit: charged.permit,
            version: set.version,
            rules: Arc::clone(&set.rules),
            descriptors: Vec::new(),
        }
    }
}
