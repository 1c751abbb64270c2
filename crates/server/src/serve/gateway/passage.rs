//! What the gateway makes of a request before the upstream sees it, whichever HTTP/1.1
//! path read it: the admission pipeline's ruling, rendered as a refusal to answer or as the
//! fields, permit and place in flight to forward with.

use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use ratewarden_policy::{Answer, Owner, PermitGuard, ServerSettings};

use super::settling::Settlement;
use crate::serve::admission::{self, Ask, Decided, Ruling};
use crate::serve::app::App;
use crate::serve::reply::{Plain, Problem};
use crate::serve::shed::Slot;

/// A request's passage through the gateway (`proxy::handle`, `lean::decide`).
pub(crate) enum Passage {
    /// Answered without the upstream: at capacity (503), a request the rules cannot read
    /// one way (problem+json), or the contract's 429 or 503.
    Refused(Plain),
    /// To forward, with the RateLimit fields to add to the answer, and what stays held
    /// until the answer has been relayed: the rule's permit (when one was taken) and the
    /// place in flight.
    Admitted {
        fields: Vec<(HeaderName, HeaderValue)>,
        permit: Option<PermitGuard>,
        slot: Slot,
        /// When a rule settles its estimate from the answer (hyper's path only: the lean
        /// path serves no such rule).
        settlement: Option<Settlement>,
    },
}

/// The admission pipeline as the gateway renders it: a refusal to answer, or the fields,
/// permit and place to forward with, after a queueing rule's delay (as nginx's
/// `limit_req burst=N` holds a request). A client that goes away meanwhile drops this
/// future, and with it the place and the permit.
pub(crate) async fn pass(
    app: &Arc<App>,
    request: &ratewarden_policy::Request<'_>,
    settings: &ServerSettings,
) -> Passage {
    let decided =
        match admission::admit(app, admission::GATEWAY, Ask::Request(request), settings).await {
            Ruling::Decided(decided) => decided,
            Ruling::Shed(response) => return Passage::Refused(Plain::contract(response)),
            Ruling::Undecided(undecided) => {
                return Passage::Refused(Problem::new(undecided.status, undecided.detail).plain())
            }
        };
    let Decided {
        verdict,
        answer,
        slot,
    } = decided;
    let (fields, delay) = match answer {
        Answer::Stop(response) => return Passage::Refused(Plain::contract(response)),
        Answer::Go { headers, delay } => (headers, delay),
    };
    let verdict = Arc::new(verdict);
    let settlement = Settlement::of(&verdict);
    // Released when the answer has been relayed (or the client went away), to the
    // verdict that carried it: the engine releases a permit only to its owner.
    let permit = verdict.permit.map(|id| {
        let app = Arc::clone(app);
        let verdict = Arc::clone(&verdict);
        PermitGuard::new(Box::new(move |completion| {
            Box::pin(async move {
                let owner = Owner::Verdict(&verdict);
                let now = app.clock.now();
                let _ = match completion {
                    Some(c) => app.engine.release_with(id, owner, c, now).await,
                    None => app.engine.release(id, owner, now).await,
                };
            })
        }))
    });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Passage::Admitted {
        fields,
        permit,
        slot,
        settlement,
    }
}
