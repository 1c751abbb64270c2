//! `/v1/settle` and `/v1/release`: what a check's reservation and permit become, asked
//! for by the client the check named.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Response, StatusCode};
use ratewarden_policy::{GrantId, Owner, ReleaseError, SettleError};
use serde::Deserialize;
use serde_json::json;

use crate::serve::admission::{self};
use crate::serve::app::App;
use crate::serve::reply::{self, Body};

use crate::serve::bodies::subject::{subject, Subject};
use crate::serve::bodies::{too_costly, MAX_COST};

/// `/v1/settle`: the reservation, the real cost, and the client again as the check named it
/// (its attributes, as in [`CheckJson`]): only the client a reservation was issued for may
/// settle it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settle {
    reservation: String,
    cost: u64,
    ip: Option<String>,
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    api_key: Option<String>,
    tenant: Option<String>,
}

/// `/v1/release`: the permit, and the client again as the check named it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Release {
    permit: String,
    ip: Option<String>,
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    api_key: Option<String>,
    tenant: Option<String>,
}

pub(crate) async fn settle(app: &Arc<App>, peer: SocketAddr, settle: Settle) -> Response<Body> {
    let _slot = match admission::enter(app, false).await {
        Ok(slot) => slot,
        Err(shed) => return reply::contract(shed),
    };
    if settle.cost > MAX_COST {
        return too_costly(settle.cost).response();
    }
    let id = match settle.reservation.parse::<GrantId>() {
        Ok(id) => id,
        Err(e) => return reply::problem(StatusCode::BAD_REQUEST, format!("`reservation`: {e}")),
    };
    let owner = match subject!(settle).resolve(peer) {
        Ok(owner) => owner,
        Err(refused) => return refused.response(),
    };
    let owner = owner.request(None);
    let settled = app
        .engine
        .settle(id, Owner::Request(&owner), settle.cost, app.clock.now())
        .await;
    let status = match &settled {
        Ok(()) => {
            return reply::json(StatusCode::OK, &json!({ "settled": settle.reservation }));
        }
        Err(SettleError::Unknown) => StatusCode::NOT_FOUND,
        Err(SettleError::NotOwner { .. }) => StatusCode::FORBIDDEN,
        Err(SettleError::TooCostly { .. }) => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let error = settled.err().map(|e| e.to_string()).unwrap_or_default();
    reply::problem(
        status,
        format!("reservation {}: {error}", settle.reservation),
    )
}

pub(crate) async fn release(app: &Arc<App>, peer: SocketAddr, release: Release) -> Response<Body> {
    let _slot = match admission::enter(app, false).await {
        Ok(slot) => slot,
        Err(shed) => return reply::contract(shed),
    };
    let id = match release.permit.parse::<GrantId>() {
        Ok(id) => id,
        Err(e) => return reply::problem(StatusCode::BAD_REQUEST, format!("`permit`: {e}")),
    };
    let owner = match subject!(release).resolve(peer) {
        Ok(owner) => owner,
        Err(refused) => return refused.response(),
    };
    let owner = owner.request(None);
    match app
        .engine
        .release(id, Owner::Request(&owner), app.clock.now())
        .await
    {
        Ok(()) => reply::json(StatusCode::OK, &json!({ "released": release.permit })),
        Err(e) => {
            let status = match e {
                ReleaseError::Unknown => StatusCode::NOT_FOUND,
                ReleaseError::NotOwner { .. } => StatusCode::FORBIDDEN,
            };
            reply::problem(status, format!("permit {}: {e}", release.permit))
        }
    }
}
