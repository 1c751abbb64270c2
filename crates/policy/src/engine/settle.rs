//! Settling a reservation at its real cost, releasing a permit's units: only by the client
//! they were issued for (see `owner.rs`).

use ratewarden_core::AsyncStore;

use super::owner::{stranger, Owner};
use super::{Engine, GrantId, ReleaseError, SettleError};

impl<S: AsyncStore> Engine<S> {
    /// Settles reservation `id`, held by `owner`, with the request's `actual` cost: the
    /// difference from the estimate is charged (the balance may go past the limit, and later
    /// requests wait the debt out) or refunded.
    ///
    /// # Errors
    ///
    /// [`SettleError::Unknown`] for a reservation never made, settled or expired: one not
    /// settled in time settles at its estimate, which was charged up front.
    /// [`SettleError::NotOwner`] when `owner` is not the client the reservation was issued
    /// for (its key under one of the rules differs): nothing is charged, and the
    /// reservation stands for its owner. [`SettleError::TooCostly`] for a cost over what one
    /// request may take under one of its rules, as a request's own cost would be refused:
    /// nothing is charged, and the reservation stands.
    pub async fn settle(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        actual: u64,
        now: u64,
    ) -> Result<(), SettleError> {
        let reservation = self.reservations.take(
            id,
            now,
            |grant| {
                // Ownership first: a stranger learns nothing of the rules' bounds.
                if let Some(rule) = stranger(grant, grant.issuer.as_ref(), id, owner) {
                    return Err(SettleError::NotOwner {
                        rule: rule.to_owned(),
                    });
                }
                match grant.charges.iter().find(|c| actual > c.max_cost) {
                    Some(c) => Err(SettleError::TooCostly {
                        rule: c.rule.clone(),
                        actual,
                        max: c.max_cost,
                    }),
                    None => Ok(()),
                }
            },
            SettleError::Unknown,
        )?;
        for charge in &reservation.charges {
            let delta = i128::from(actual) - i128::from(charge.cost);
            let delta = i64::try_from(delta).unwrap_or(if delta < 0 { i64::MIN } else { i64::MAX });
            if delta != 0 {
                // A failing store loses the correction, as it would have lost the charge.
                let _ = self
                    .store
                    .settle(&charge.limit, &charge.key, now, delta)
                    .await;
            }
        }
        Ok(())
    }

    /// Releases permit `id`, held by `owner`: the concurrency units an allowed request held
    /// go back.
    ///
    /// # Errors
    ///
    /// [`ReleaseError::Unknown`] for a permit never granted, released, or lapsed: a permit
    /// not released within its lease was let go by the store already.
    /// [`ReleaseError::NotOwner`] when `owner` is not the client the permit was granted to:
    /// nothing goes back, and the permit stays its owner's.
    pub async fn release(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        now: u64,
    ) -> Result<(), ReleaseError> {
        self.give_back(id, owner, None, now).await
    }
}
