//! The rules an HTTP request comes to: those it matches, each with its key, cost and
//! whether it enforces, and the class it is shed by.

use ratewarden_core::adaptive::Criticality;

use super::RuleSet;
use crate::engine::error::RequestError;
use crate::engine::request::{
    build_key, client_of, cost_of, enforces, push_part, Request, CRITICALITY_HEADER,
};

/// A rule that applies to a request.
#[derive(Debug)]
pub(crate) struct Applying {
    /// Its index in the rules the verdict carries.
    pub(crate) rule: usize,
    /// The key its state is kept under.
    pub(crate) key: String,
    /// What the request costs under it.
    pub(crate) cost: u64,
    /// Whether it may reject (not shadow, and the key inside a rollout's share).
    pub(crate) enforced: bool,
    /// For an adaptive rule with a queue: the value of the queue's key part (`tenant`),
    /// whose flow the request waits in ("" without it).
    pub(crate) flow: Option<String>,
}

impl RuleSet {
    /// The rules `request` matches, with their keys and costs. With `queued` (a front door
    /// that can hold the request), an adaptive rule with a queue also gets the flow the
    /// request would wait in.
    ///
    /// # Errors
    ///
    /// As [`Engine::decide`](crate::engine::Engine::decide).
    pub(crate) fn applying(
        &self,
        request: &Request<'_>,
        queued: bool,
    ) -> Result<Vec<Applying>, RequestError> {
        let set = self;
        // A host no rule can read one way refuses the request, whatever the rules: a rule
        // on the host would otherwise be skipped for a spelling the upstream may route to it.
        if let Some(host) = request.host {
            crate::host::name(host).map_err(RequestError::Host)?;
        }
        let client = client_of(request, &set.config.trusted_proxies)?;
        let mut applying = Vec::new();
        for (i, rule) in set.rules.iter().enumerate() {
            if !rule.matches.matches(request) {
                continue;
            }
            let Some(key) = build_key(&set.prefixes[i], rule, &set.config.keys, request, client)?
            else {
                continue;
            };
            let cost = match request.cost {
                Some(cost) => cost,
                None => cost_of(rule, request)?,
            };
            let enforced = enforces(rule, &key);
            // Only a front door that can hold the request needs whose turn it would be.
            let flow = match (
                queued,
                rule.adaptive.as_ref().and_then(|a| a.queue.as_ref()),
            ) {
                (true, Some(queue)) => {
                    let mut flow = String::new();
                    let sources = &set.config.keys;
                    if !push_part(&mut flow, &queue.key, rule, sources, request, client)? {
                        // Without the part, the request waits in the flow of those without.
                        flow.clear();
                    }
                    Some(flow)
                }
                _ => None,
            };
            applying.push(Applying {
                rule: i,
                key,
                cost,
                enforced,
                flow,
            });
        }
        Ok(applying)
    }

    /// The class of `request`: its `x-criticality` header when it lowers the class or comes
    /// from a trusted proxy; else critical for a `[server] critical` route, sheddable for a
    /// `[server] sheddable` one; else default.
    pub(crate) fn criticality(&self, request: &Request<'_>) -> Criticality {
        let set = self;
        let server = &set.config.server;
        let by_route = if server.critical.iter().any(|m| m.matches(request)) {
            Criticality::Critical
        } else if server.sheddable.iter().any(|m| m.matches(request)) {
            Criticality::Sheddable
        } else {
            Criticality::Default
        };
        let claimed = request
            .single_header(CRITICALITY_HEADER)
            .ok()
            .flatten()
            .and_then(|v| v.parse::<Criticality>().ok());
        match claimed {
            Some(c) if c <= by_route => c,
            Some(c) if set.config.trusted_proxies.contains(request.peer) => c,
            _ => by_route,
        }
    }
}
