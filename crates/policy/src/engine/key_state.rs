//! One key's state, and its reset: the support engineer's "why is this customer limited"
//! and "unblock this customer", by rule name and key parts (as the top offenders show them).

use ratewarden_core::{AsyncStore, Decision};

use super::keys::STOOD_IN;
use super::Engine;

/// Why a key's state could not be read or reset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyStateError {
    /// No rule in force has that name.
    #[error("no rule named `{rule}` is in force; the rules are: {known}")]
    UnknownRule {
        /// The name asked for.
        rule: String,
        /// The rules in force, comma-separated.
        known: String,
    },
    /// The key parts are empty.
    #[error("`key` is empty: give the key parts as the top offenders show them (`203.0.113.7/32`, `key:0123…`)")]
    EmptyKey,
    /// The store failed.
    #[error("the store failed: {0}")]
    Store(String),
}

/// A key's state under a rule, as the store's `peek` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// The key the state is kept under (`name@fingerprint|parts`).
    pub stored_key: String,
    /// What a request of cost 1 would be told now (the key's remaining units, its reset,
    /// and whether it would be limited), charging nothing.
    pub decision: Decision,
}

impl<S: AsyncStore> Engine<S> {
    /// The stored key of the rule named `rule` for key `parts` (what follows the first `|`
    /// of a stored key: `203.0.113.7/32`, `key:0123…`, `acme|key:0123…`; and
    /// `~client|203.0.113.7/32` where the client's address stood in for a missing part).
    fn stored_key(&self, rule: &str, parts: &str) -> Result<(usize, String), KeyStateError> {
        let set = self.current();
        let parts = parts.trim();
        if parts.is_empty() {
            return Err(KeyStateError::EmptyKey);
        }
        let Some(i) = set.rules.iter().position(|r| r.name == rule) else {
            return Err(KeyStateError::UnknownRule {
                rule: rule.to_owned(),
                known: set
                    .rules
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        // `~client|…`, as the top offenders show a key where the client's address stood
        // in for a missing part.
        let stored = match parts
            .strip_prefix(STOOD_IN)
            .and_then(|p| p.strip_prefix('|'))
        {
            Some(rest) => format!("{}{STOOD_IN}|{rest}", set.prefixes[i]),
            None => format!("{}|{parts}", set.prefixes[i]),
        };
        Ok((i, stored))
    }

    /// The state of key `parts` under the rule named `rule` at `now`, charging nothing.
    ///
    /// # Errors
    ///
    /// No such rule, empty parts, or the store failed.
    pub async fn key_state(
        &self,
        rule: &str,
        parts: &str,
        now: u64,
    ) -> Result<KeyState, KeyStateError> {
        let (i, stored_key) = self.stored_key(rule, parts)?;
        let limit = self.current().rules[i].limit.clone();
        let decision = self
            .store
            .peek(&limit, &stored_key, now, 1)
            .await
            .map_err(|e| KeyStateError::Store(e.to_string()))?;
        Ok(KeyState {
            stored_key,
            decision,
        })
    }

    /// Forgets the state of key `parts` under the rule named `rule`: its next request is
    /// decided as a new key's. Returns whether there was a state to forget. Not logged here:
    /// the caller logs it once, with who asked (the admin listener names the peer).
    /// The key's in-process buckets (a `local_first` rule's, the store-failure fallback's)
    /// are cleared with it.
    ///
    /// # Errors
    ///
    /// No such rule, empty parts, or the store failed.
    pub async fn reset_key(&self, rule: &str, parts: &str) -> Result<bool, KeyStateError> {
        let (_, stored_key) = self.stored_key(rule, parts)?;
        let cleared = self
            .store
            .clear(&stored_key)
            .await
            .map_err(|e| KeyStateError::Store(e.to_string()))?;
        // A hybrid rule's bucket would go on refusing the key without asking the store.
        self.hybrid.clear(&stored_key);
        self.local.clear(&stored_key);
        Ok(cleared)
    }
}
