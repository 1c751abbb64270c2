//! One key's state, and its reset: the support engineer's "why is this customer limited"
//! and "unblock this customer", by rule name and key parts (as the top offenders show them).

use ratewarden_core::Decision;

use super::RuleSet;
use crate::engine::request::STOOD_IN;

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

impl RuleSet {
    /// The stored key of the rule named `rule` for key `parts` (what follows the first `|`
    /// of a stored key: `203.0.113.7/32`, `key:0123…`, `acme|key:0123…`; and
    /// `~client|203.0.113.7/32` where the client's address stood in for a missing part).
    pub(crate) fn stored_key(
        &self,
        rule: &str,
        parts: &str,
    ) -> Result<(usize, String), KeyStateError> {
        let set = self;
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
}
