//! The rules a caller names with keys it built itself: a service keying by the user an
//! earlier layer authenticated, or by a document id (`ratewarden-tower`'s limits written in
//! code). The rules are the set's; only the key's value comes from the caller.

use super::{Applying, RuleSet};
use crate::engine::request::{bounded_part, enforces};

impl RuleSet {
    /// Each of `keyed` (a rule's index, the key's value, the cost) as a rule that applies:
    /// the key the rule's own (`name@fingerprint|value`, the value bounded as every key
    /// part is). An index past the rules is skipped.
    pub(crate) fn keyed<K: AsRef<str>>(&self, keyed: &[(usize, K, u64)]) -> Vec<Applying> {
        keyed
            .iter()
            .filter_map(|(i, value, cost)| {
                let (i, cost) = (*i, *cost);
                let rule = self.rules.get(i)?;
                let value = bounded_part(value.as_ref());
                let prefix = &self.prefixes[i];
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
            .collect()
    }
}
