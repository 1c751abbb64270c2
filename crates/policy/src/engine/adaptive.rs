//! Adaptive concurrency rules: decided in this process (the limit is learnt from this
//! process's own traffic), before the store is asked, and given back with how the request
//! went, which is what the limit learns from.
//!
//! One limiter per rule and key, created on first use. Keys come from clients (a tenant,
//! an address), so the limiters are capped in number as the memory store caps its keys:
//! past the cap, an idle limiter (nothing in flight) is dropped, oldest first, and a busy
//! one is never dropped (the permits ledger bounds how many can be busy).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ratewarden_core::adaptive::{AdaptiveLimiter, Completion, Criticality, Shed, Ticket};
use ratewarden_core::{AsyncStore, Decision, Outcome, NANOS_PER_SEC};

use super::charge::{Applying, Charged};
use super::counters::Counters;
use super::owner::{stranger, Owner};
use super::reservations::{Charge, Grant, GrantId};
use super::rules::RuleSet;
use super::{Engine, ReleaseError, Request, RuleOutcome};
use crate::config::Adaptive;
use crate::Rule;

/// The most limiters kept at once (idle ones past it are dropped, oldest first).
pub(super) const MAX_LIMITERS: usize = 10_000;

/// The header a request's criticality is read from: `critical`, `default` or
/// `sheddable`. A client may lower its own class; only a trusted proxy may raise it.
pub const CRITICALITY_HEADER: &str = "x-criticality";

/// How long a shed request is told to wait: the limit moves once per window, about a
/// second by default.
const SHED_RETRY_NS: u64 = NANOS_PER_SEC;

/// The limiters of adaptive rules, by key.
pub(super) struct Limiters {
    inner: Mutex<Inner>,
    cap: usize,
    /// Requests shed, by class (lowest first, as [`Criticality::ALL`]).
    shed: [AtomicU64; 3],
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, AdaptiveLimiter>,
    /// Keys in creation order, for eviction.
    order: VecDeque<String>,
}

/// One adaptive limiter's numbers, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveState {
    /// The key (`rule@fingerprint|value`).
    pub key: String,
    /// The current limit.
    pub limit: u64,
    /// Requests in flight.
    pub in_flight: u64,
}

impl Limiters {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            shed: Default::default(),
        }
    }

    fn acquire(
        &self,
        key: &str,
        config: &Adaptive,
        class: Criticality,
        now: u64,
    ) -> (u64, Result<Ticket, Shed>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !inner.map.contains_key(key) {
            inner.evict(self.cap);
            let controller = config.strategy.build(config.window, now, seed(key));
            let limiter =
                AdaptiveLimiter::new(controller, config.reserve_permille, config.lease_ns);
            inner.map.insert(key.to_owned(), limiter);
            inner.order.push_back(key.to_owned());
        }
        let Some(limiter) = inner.map.get_mut(key) else {
            unreachable!("inserted above")
        };
        let taken = limiter.acquire(class, now);
        (limiter.cap(class), taken)
    }

    fn release(&self, key: &str, ticket: Ticket, now: u64, completion: Option<Completion>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // An evicted limiter held nothing: there is nothing to give back.
        if let Some(limiter) = inner.map.get_mut(key) {
            match completion {
                Some(c) => limiter.release(ticket, now, c),
                None => limiter.forget(ticket, now),
            };
        }
    }

    /// What `acquire` would answer for `key` in `class`, taking nothing: `(cap, in
    /// flight)`, a key without a limiter yet answered as a new one would be.
    pub(super) fn peek(
        &self,
        key: &str,
        config: &Adaptive,
        class: Criticality,
        now: u64,
    ) -> (u64, u64) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match inner.map.get(key) {
            Some(limiter) => (limiter.cap(class), limiter.in_flight()),
            None => {
                let controller = config.strategy.build(config.window, now, seed(key));
                let limiter =
                    AdaptiveLimiter::new(controller, config.reserve_permille, config.lease_ns);
                (limiter.cap(class), 0)
            }
        }
    }

    /// What an adaptive rule would decide for `key`, taking nothing (for `explain`).
    pub(super) fn peek_decision(
        &self,
        key: &str,
        config: &Adaptive,
        class: Criticality,
        now: u64,
    ) -> Decision {
        let (cap, in_flight) = self.peek(key, config, class, now);
        if in_flight < cap {
            Decision::new(Outcome::Allowed, cap, cap - in_flight - 1, 0)
        } else {
            let outcome = Outcome::Limited {
                retry_after_ns: SHED_RETRY_NS,
            };
            Decision::new(outcome, cap, 0, SHED_RETRY_NS)
        }
    }

    fn states(&self, max: usize) -> Vec<AdaptiveState> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut states: Vec<AdaptiveState> = inner
            .map
            .iter()
            .map(|(key, l)| AdaptiveState {
                key: key.clone(),
                limit: l.limit(),
                in_flight: l.in_flight(),
            })
            .collect();
        // The busiest first, then by key: a stable, bounded set for a metrics page.
        states.sort_by(|a, b| b.in_flight.cmp(&a.in_flight).then(a.key.cmp(&b.key)));
        states.truncate(max);
        states
    }
}

impl Inner {
    /// Makes room for one more, dropping idle limiters oldest first; a few busy ones are
    /// passed over (moved to the back), and if all looked at are busy the map grows.
    fn evict(&mut self, cap: usize) {
        let mut looked = 0;
        while self.map.len() >= cap && looked < 16 {
            looked += 1;
            let Some(oldest) = self.order.pop_front() else {
                return;
            };
            match self.map.get(&oldest) {
                Some(l) if !l.is_idle() => self.order.push_back(oldest),
                _ => {
                    self.map.remove(&oldest);
                }
            }
        }
    }
}

/// A seed for a key's jitter: FNV-1a, so the same key replays the same.
fn seed(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The class of `request`: its `x-criticality` header when it lowers the class or comes
/// from a trusted proxy; else critical for a `[server] critical` route, sheddable for a
/// `[server] sheddable` one; else default.
pub(super) fn criticality(set: &RuleSet, request: &Request<'_>) -> Criticality {
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

impl<S: AsyncStore> Engine<S> {
    /// Decides `applying` as [`charge`](Engine::charge) does, with its adaptive rules
    /// first: in this process, a request its class may not fit into is shed before the
    /// store is asked; one let in holds a place that its permit gives back.
    // `charge`'s arguments and the request's class: a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn charge_adaptive<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: Vec<Applying>,
        class: Criticality,
        version: u64,
        now: u64,
    ) -> Charged {
        if !applying.iter().any(|a| rules[a.rule].adaptive.is_some()) {
            return self
                .charge(issuer, rules, counters, &applying, version, now)
                .await;
        }
        let (adaptive, rest): (Vec<Applying>, Vec<Applying>) = applying
            .into_iter()
            .partition(|a| rules[a.rule].adaptive.is_some());
        let mut outcomes = Vec::with_capacity(adaptive.len());
        let mut taken: Vec<(&Applying, Ticket)> = Vec::new();
        let mut shed = false;
        for a in &adaptive {
            let Some(config) = &rules[a.rule].adaptive else {
                continue;
            };
            let (cap, result) = self.adaptive.acquire(&a.key, config, class, now);
            let decision = match result {
                Ok(ticket) => {
                    taken.push((a, ticket));
                    let remaining = cap.saturating_sub(ticket.in_flight);
                    Decision::new(Outcome::Allowed, cap, remaining, 0)
                }
                Err(_) => {
                    if a.enforced {
                        shed = true;
                        self.adaptive.shed[class as usize].fetch_add(1, Ordering::Relaxed);
                    }
                    let outcome = Outcome::Limited {
                        retry_after_ns: SHED_RETRY_NS,
                    };
                    Decision::new(outcome, cap, 0, SHED_RETRY_NS)
                }
            };
            outcomes.push(RuleOutcome {
                rule: a.rule,
                key: a.key.clone(),
                decision,
                enforced: a.enforced,
                store_failed: false,
            });
        }
        let mut charged = if shed {
            Charged {
                allowed: false,
                unavailable: false,
                outcomes: Vec::new(),
                retry_after_ns: Some(SHED_RETRY_NS),
                reservation: None,
                permit: None,
            }
        } else {
            self.charge(issuer, rules, &counters, &rest, version, now)
                .await
        };
        for o in &outcomes {
            let Some(c) = counters(o.rule) else { continue };
            let counter = match (o.enforced, o.said_no()) {
                (true, true) => &c.rejected,
                (true, false) if charged.allowed => &c.allowed,
                (true, false) => &c.skipped,
                (false, true) => &c.would_have_rejected,
                (false, false) => continue,
            };
            Counters::bump(counter);
        }
        if !charged.allowed {
            for (a, ticket) in taken {
                self.adaptive.release(&a.key, ticket, now, None);
            }
        } else if !taken.is_empty() {
            let mut lease = u64::MAX;
            let charges: Vec<Charge> = taken
                .iter()
                .map(|(a, ticket)| {
                    lease = lease.min(ticket.expires);
                    Charge {
                        rule: rules[a.rule].name.clone(),
                        index: a.rule,
                        limit: rules[a.rule].limit.clone(),
                        key: a.key.clone(),
                        cost: 1,
                        max_cost: 1,
                        ticket: Some(*ticket),
                    }
                })
                .collect();
            let attached = match charged.permit {
                Some(id) => self.permits.attach(id, charges, lease, now),
                None => self
                    .permits
                    .insert(
                        Grant {
                            charges,
                            expires: lease,
                            issuer: issuer.cloned(),
                        },
                        now,
                    )
                    .map(|id| {
                        charged.permit = Some(id);
                    })
                    .ok_or(()),
            };
            if attached.is_err() {
                // No id to release them by: give the places back now rather than hold
                // them until their lease.
                for (a, ticket) in taken {
                    self.adaptive.release(&a.key, ticket, now, None);
                }
            }
        }
        charged.outcomes.extend(outcomes);
        charged.outcomes.sort_by_key(|o| o.rule);
        charged
    }

    /// Releases permit `id`, held by `owner`, as [`release`](Engine::release) does, and
    /// tells its adaptive rules how the request went: its round trip and whether it was
    /// dropped (a timeout, a 5xx), which is what their limits learn from.
    ///
    /// # Errors
    ///
    /// As [`release`](Engine::release).
    pub async fn release_with(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        completion: Completion,
        now: u64,
    ) -> Result<(), ReleaseError> {
        self.give_back(id, owner, Some(completion), now).await
    }

    /// The permit's holder checked, its units given back: to the store, or to the adaptive
    /// limiters with `completion`.
    pub(super) async fn give_back(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        completion: Option<Completion>,
        now: u64,
    ) -> Result<(), ReleaseError> {
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
        for charge in &held.charges {
            if let Some(ticket) = charge.ticket {
                self.adaptive.release(&charge.key, ticket, now, completion);
                continue;
            }
            let delta = i64::try_from(charge.cost).unwrap_or(i64::MAX);
            // A failing store loses the release; the lease lets the units go in the end.
            let _ = self
                .store
                .settle(&charge.limit, &charge.key, now, -delta)
                .await;
        }
        Ok(())
    }
}

impl<S> Engine<S> {
    /// The adaptive limiters' current limits and in-flight counts, the busiest first, at
    /// most `max` of them (keys come from clients: a metrics page shows a bounded set).
    pub fn adaptive_states(&self, max: usize) -> Vec<AdaptiveState> {
        self.adaptive.states(max)
    }

    /// Requests adaptive rules shed since the start, per class, lowest class first.
    pub fn adaptive_shed(&self) -> [(Criticality, u64); 3] {
        Criticality::ALL.map(|c| (c, self.adaptive.shed[c as usize].load(Ordering::Relaxed)))
    }

    /// The class the engine gives `request` under the rules in force (see
    /// [`CRITICALITY_HEADER`]).
    pub fn criticality(&self, request: &Request<'_>) -> Criticality {
        let set = self.current();
        criticality(&set, request)
    }
}
