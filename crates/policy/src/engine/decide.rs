//! Deciding an HTTP request: the rules it matches, their keys and costs, then the one path.

use std::sync::Arc;

use ratewarden_core::AsyncStore;

use super::adaptive::criticality;
use super::charge::Applying;
use super::keys::{build_key, cost_of, enforces, push_part};
use super::request::client_of;
use super::waiting::Timer;
use super::{Engine, Request, RequestError, Verdict};

impl<S: AsyncStore> Engine<S> {
    /// Decides `request` at `now` against every matching rule.
    ///
    /// Enforced rules are decided all or nothing: a request rejected by one is charged on
    /// none. Shadow rules (and keys outside a rollout's share) are charged only when the
    /// request goes through, and never reject. A rule whose key lacks a part (its header is
    /// missing, say) does what its `when_key_missing` says: counts the request under the
    /// client's address in the part's place, refuses it, or does not apply.
    ///
    /// # Errors
    ///
    /// A cost header that is not a whole number, or claims more than the rule's `max_cost`;
    /// a header a matching rule keys on (or reads its cost from) sent more than once; a
    /// bearer token and the configured API-key header that disagree; an `Authorization`
    /// that cannot be read one way; a host that is not a host; a missing key part under a
    /// rule with `when_key_missing = "refuse"`.
    pub async fn decide(&self, request: &Request<'_>, now: u64) -> Result<Verdict, RequestError> {
        self.decide_at(request, now, None).await
    }

    /// Decides `request` as [`decide`](Engine::decide) does, except that a request an
    /// adaptive rule with a queue (`[limit.queue]`) has no place for waits its turn, fairly
    /// across the queue's key, for up to the queue's `max_wait`, on `timer`'s clock; past
    /// it, or with its lanes full, it is shed as without a queue. For front doors that can
    /// hold a request (the gateway, the tower layer). Dropping the future while it waits
    /// takes the request out of the queue.
    ///
    /// # Errors
    ///
    /// As [`decide`](Engine::decide).
    pub async fn decide_waiting(
        &self,
        request: &Request<'_>,
        timer: &dyn Timer,
    ) -> Result<Verdict, RequestError> {
        self.decide_waiting_at(request, timer.now(), timer).await
    }

    /// Decides `request` as [`decide_waiting`](Engine::decide_waiting) does, at `now` on
    /// `timer`'s clock: for a caller that has just read that clock for its own use (the
    /// gateway times the decision), where a second reading would be the same instant
    /// bar a few nanoseconds.
    ///
    /// # Errors
    ///
    /// As [`decide`](Engine::decide).
    pub async fn decide_waiting_at(
        &self,
        request: &Request<'_>,
        now: u64,
        timer: &dyn Timer,
    ) -> Result<Verdict, RequestError> {
        self.decide_at(request, now, Some(timer)).await
    }

    async fn decide_at(
        &self,
        request: &Request<'_>,
        now: u64,
        timer: Option<&dyn Timer>,
    ) -> Result<Verdict, RequestError> {
        // A host no rule can read one way refuses the request, whatever the rules: a rule
        // on the host would otherwise be skipped for a spelling the upstream may route to it.
        if let Some(host) = request.host {
            crate::host::name(host).map_err(RequestError::Host)?;
        }
        let set = self.current();
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
            let flow = match (timer, rule.adaptive.as_ref().and_then(|a| a.queue.as_ref())) {
                (Some(_), Some(queue)) => {
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
        let class = criticality(&set, request);
        let charged = self
            .charge_adaptive(
                Some(&set),
                &set.rules,
                |i| Some(&*set.counters[i]),
                applying,
                class,
                set.version,
                now,
                timer,
            )
            .await;
        Ok(Verdict {
            allowed: charged.allowed,
            unavailable: charged.unavailable,
            outcomes: charged.outcomes,
            retry_after_ns: charged.retry_after_ns,
            reservation: charged.reservation,
            permit: charged.permit,
            version: set.version,
            rules: Arc::clone(&set.rules),
            descriptors: Vec::new(),
        })
    }
}
