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
            self.correct(charge, actual, now).await;
        }
        Ok(())
    }

    /// Settles reservation `id`, held by `owner`, with each rule's real cost as the answer
    /// said it (`actuals`: rule name and cost; a rule not named keeps its estimate). The
    /// answer is the upstream's, not the client's claim: a cost past what one request may
    /// take is charged all the same, into debt.
    pub(crate) async fn settle_answered(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        actuals: &[(&str, u64)],
        now: u64,
    ) -> Result<(), SettleError> {
        let reservation = self.reservations.take(
            id,
            now,
            |grant| match stranger(grant, grant.issuer.as_ref(), id, owner) {
                Some(rule) => Err(SettleError::NotOwner {
                    rule: rule.to_owned(),
                }),
                None => Ok(()),
            },
            SettleError::Unknown,
        )?;
        for charge in &reservation.charges {
            let Some(&(_, actual)) = actuals.iter().find(|(rule, _)| *rule == charge.rule) else {
                continue;
            };
            self.correct(charge, actual, now).await;
        }
        Ok(())
    }

    /// Charges (or refunds) the difference between `charge`'s estimate and `actual`.
    async fn correct(&self, charge: &super::ledger::Charge, actual: u64, now: u64) {
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
