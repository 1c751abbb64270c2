//! Settling a reservation at its real cost, releasing a permit's units: only by the client
//! they were issued for (see `owner.rs`).

use ratewarden_core::adaptive::Ticket;
use ratewarden_core::AsyncStore;

use super::owner::{stranger, Owner};
use super::Charger;
use crate::engine::error::{ReleaseError, SettleError};
use crate::engine::verdict::GrantId;

impl<S: AsyncStore> Charger<S> {
    /// Settles reservation `id`, held by `owner`, with the request's `actual` cost: the
    /// difference from the estimate is charged or refunded.
    pub(crate) async fn settle(
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

    /// Takes permit `id`, held by `owner`, and gives its units back to the store. Returns
    /// the places it held in adaptive rules' limiters (key and ticket), for the caller to
    /// give back there with how the request went.
    pub(crate) async fn release(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        now: u64,
    ) -> Result<Vec<(String, Ticket)>, ReleaseError> {
        let held = self.permits.take(
            id,
            now,
            |grant| match stranger(grant, grant.issuer.as_ref(), id, owner) {
                Some(rule) => Err(ReleaseError::NotOwner {
                    rule: rule.to_owned(),
                }),
                None => Ok(()),
            },
            ReleaseError::Unknown,
        )?;
        let mut places = Vec::new();
        for charge in held.charges {
            if let Some(ticket) = charge.ticket {
                places.push((charge.key, ticket));
                continue;
            }
            let delta = i64::try_from(charge.cost).unwrap_or(i64::MAX);
            // A failing store loses the release; the lease lets the units go in the end.
            let _ = self
                .store
                .settle(&charge.limit, &charge.key, now, -delta)
                .await;
        }
        Ok(places)
    }
}
