//! The estimate of an allowed request, for its handler to settle at the real cost.

use std::fmt;
use std::sync::Arc;

use ratewarden_core::Clock;
use ratewarden_policy::{GrantId, SettleError, Verdict};

use crate::limits::Limits;

/// The reservation of an allowed request whose cost was an estimate
/// ([`KeyedLimit::settle_within`](crate::KeyedLimit::settle_within), or a config rule's
/// `settle`): found in the request's extensions, settled by the handler at the real cost
/// (tokens used, rows scanned) before it answers. Unsettled, the estimate stands.
///
/// # Examples
///
/// An axum handler settling its real cost:
///
/// ```ignore
/// async fn search(Extension(reservation): Extension<Reservation>) -> &'static str {
///     let rows = 3; // what the search really scanned
///     reservation.settle(rows).await.ok();
///     "found"
/// }
/// ```
#[derive(Clone)]
pub struct Reservation {
    pub(crate) limits: Arc<dyn Limits>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) id: GrantId,
    /// The verdict that carried the id: what proves the settle is the holder's.
    pub(crate) owner: Arc<Verdict>,
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation").field("id", &self.id).finish()
    }
}

impl Reservation {
    /// The reservation's id (as the decision API's `/v1/settle` takes it).
    pub fn id(&self) -> GrantId {
        self.id
    }

    /// Settles at the `actual` cost: the difference from the estimate is charged (the
    /// balance may go past the limit, and later requests wait the debt out) or refunded.
    ///
    /// # Errors
    ///
    /// [`SettleError::Unknown`] when settled already or past its time (the estimate
    /// stood); [`SettleError::TooCostly`] for a cost over what one request may take under
    /// the limit (its burst): nothing is charged and the reservation stands.
    pub async fn settle(&self, actual: u64) -> Result<(), SettleError> {
        self.limits
            .settle(self.id, &self.owner, actual, self.clock.now())
            .await
    }
}
