//! Whose a reservation or a permit is: an id alone settles or releases nothing, the caller
//! must also be the client it was issued for.
//!
//! An id is a bearer secret, and secrets leak: into logs, a shared cache, another tenant's
//! hands. So a grant remembers the keys it charged (one per rule), and a settle or a
//! release must come with the client's attributes again; each key is built anew from them
//! with the rule and rule set that issued the grant and must come out the same. Tenant B
//! holding tenant A's id builds B's keys, not A's, and is refused; A's grant stays. The
//! check costs one key build per rule of the grant: O(1) in the number of live grants.

use std::sync::Arc;

use super::Grant;
use crate::engine::request::{build_key, client_of, Request};
use crate::engine::rules::RuleSet;
use crate::engine::verdict::{GrantId, Verdict};

/// Who asks to settle a reservation or release a permit: it must be the client the grant
/// was issued for.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use ratewarden_policy::{Owner, Request};
///
/// let headers = [("x-tenant-id", "acme")];
/// let request = Request {
///     peer: IpAddr::from([198, 51, 100, 1]),
///     method: "GET",
///     path: "/export",
///     host: None,
///     headers: &headers,
///     cost: None,
///     api_key: None,
///     tenant: None,
///     body: None,
///     client_cert: None,
/// };
/// // What the decision API's settle and release build from their body.
/// let owner = Owner::Request(&request);
/// # let _ = owner;
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// The client described again as it was for the decision (the attributes its rules key
    /// on: address, API key, tenant, headers, method and path): each of the grant's keys
    /// is built anew from it and must be the same. What callers a network away give.
    Request(&'a Request<'a>),
    /// The verdict that carried the id, kept in the process that asked (the gateway
    /// releasing a permit when its response ends): the grant's keys must be the verdict's.
    /// Never build one from what a client sent.
    Verdict(&'a Verdict),
}

/// The first rule of `grant` whose key `owner` does not hold, by name; `None` when `owner`
/// holds every one.
pub(crate) fn stranger<'g>(
    grant: &'g Grant,
    issuer: Option<&Arc<RuleSet>>,
    id: GrantId,
    owner: Owner<'_>,
) -> Option<&'g str> {
    match owner {
        Owner::Verdict(verdict) => {
            let carried = verdict.permit == Some(id) || verdict.reservation == Some(id);
            grant
                .charges
                .iter()
                .find(|c| !carried || !verdict.outcomes.iter().any(|o| o.key == c.key))
                .map(|c| c.rule.as_str())
        }
        Owner::Request(request) => {
            // A grant issued to no HTTP request (an Envoy descriptor call) has no key a
            // request could rebuild: nobody may claim it by attributes.
            let Some(set) = issuer else {
                return grant.charges.first().map(|c| c.rule.as_str());
            };
            // A request whose client cannot be known owns nothing.
            let Ok(client) = client_of(request, &set.config.trusted_proxies) else {
                return grant.charges.first().map(|c| c.rule.as_str());
            };
            grant
                .charges
                .iter()
                .find(|c| {
                    let rebuilt = build_key(
                        &set.prefixes[c.index],
                        &set.rules[c.index],
                        &set.config.keys,
                        request,
                        client,
                    );
                    !matches!(rebuilt, Ok(Some(key)) if key == c.key)
                })
                .map(|c| c.rule.as_str())
        }
    }
}
