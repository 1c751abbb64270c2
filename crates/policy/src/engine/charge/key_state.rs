//! One stored key read or forgotten, for the operator: in the store and in this process's
//! buckets alike.

use ratewarden_core::{AsyncStore, Decision, Limit};

use super::Charger;
use crate::engine::rules::KeyStateError;

impl<S: AsyncStore> Charger<S> {
    /// What a request of cost 1 would be told under `limit` for `stored_key` at `now`,
    /// charging nothing.
    pub(crate) async fn peek_key(
        &self,
        limit: &Limit,
        stored_key: &str,
        now: u64,
    ) -> Result<Decision, KeyStateError> {
        self.store
            .peek(limit, stored_key, now, 1)
            .await
            .map_err(|e| KeyStateError::Store(e.to_string()))
    }

    /// Forgets `stored_key`'s state in the store and in this process's buckets. Returns
    /// whether the store had a state to forget.
    pub(crate) async fn forget_key(&self, stored_key: &str) -> Result<bool, KeyStateError> {
        let cleared = self
            .store
            .clear(stored_key)
            .await
            .map_err(|e| KeyStateError::Store(e.to_string()))?;
        // A hybrid rule's bucket would go on refusing the key without asking the store.
        self.hybrid.clear(stored_key);
        self.local.clear(stored_key);
        Ok(cleared)
    }
}
