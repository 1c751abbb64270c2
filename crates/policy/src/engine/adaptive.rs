//! Adaptive concurrency rules: decided in this process (the limit is learnt from this
//! process's own traffic), before the store is asked, and given back with how the request
//! went, which is what the limit learns from.
//!
//! One limiter per rule and key, created on first use. Keys come from clients (a tenant,
//! an address), so the limiters are capped in number as the memory store caps its keys:
//! past the cap, an idle limiter (nothing in flight) is dropped, oldest first, and a busy
//! one is never dropped (the permits ledger bounds how many can be busy).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

use ratewarden_core::adaptive::{
    AdaptiveLimiter, Completion, Criticality, FairQueue, FairQueueConfig, Ticket,
};
use ratewarden_core::{AsyncStore, Decision, Outcome, NANOS_PER_SEC};

use super::charge::{Applying, Charged};
use super::counters::Counters;
use super::flow_hash::FlowHash;
use super::owner::{stranger, Owner};
use super::reservations::{Charge, Grant, GrantId};
use super::rules::RuleSet;
use super::waiting::{Timer, Turn, Wait};
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
    /// Requests shed, by class (lowest first, as [`Criticality::ALL`]) and reason (as
    /// [`ShedReason::ALL`]).
    shed: [[AtomicU64; 3]; 3],
    /// How long dispatched waiters waited, by rule name and class. Rule names come from
    /// the config, not from clients: the map is as small as the rules.
    waits: Mutex<BTreeMap<(String, Criticality), WaitStats>>,
    /// Deals tenants their lanes, keyed so that clients cannot predict them.
    flow: FlowHash,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Keys in creation order, for eviction.
    order: VecDeque<String>,
}

/// One rule key's limiter and the requests waiting for a place under it.
struct Entry {
    limiter: AdaptiveLimiter,
    /// Waiters by class (lowest first): made on first use, dropped once empty, so a key
    /// nobody waits on holds no lanes.
    waiting: [Option<FairQueue<Arc<Turn>>>; 3],
}

impl Entry {
    fn waiters(&self) -> usize {
        self.waiting.iter().flatten().map(FairQueue::len).sum()
    }

    fn is_idle(&self) -> bool {
        self.limiter.is_idle() && self.waiters() == 0
    }

    /// Lets waiters in while their class has room, critical ones first, each class's
    /// waiters in their fair order; the wakers of those let in, to wake once the lock is
    /// let go, and how long each waited.
    fn dispatch(&mut self, now: u64) -> (Vec<Waker>, Vec<(Criticality, u64)>) {
        let mut wakers = Vec::new();
        let mut waited = Vec::new();
        for class in Criticality::ALL.into_iter().rev() {
            let slot = &mut self.waiting[class as usize];
            if let Some(queue) = slot.as_mut() {
                // Those past `max_wait` are answered 503 by their own deadline; until their
                // future runs they would still be first in line, and take a place from one
                // still within its wait.
                queue.expire(now);
            }
            while let Some(queue) = slot.as_mut() {
                if queue.is_empty() {
                    *slot = None;
                    break;
                }
                if !self.limiter.has_room(class, now) {
                    break;
                }
                let Some((turn, wait_ns)) = queue.pop(now) else {
                    break;
                };
                // `has_room` just said yes at the same `now`.
                if let Ok(ticket) = self.limiter.acquire(class, now) {
                    wakers.extend(turn.grant(ticket));
                    waited.push((class, wait_ns));
                }
            }
        }
        (wakers, waited)
    }
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
    /// Requests waiting in its queue.
    pub waiting: u64,
}

/// Why an adaptive rule shed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// The limit was reached and the request could not wait: the rule has no queue, the
    /// front door cannot hold a request, or a sheddable one found the queue past its share.
    Limit,
    /// Every lane of its flow's hand was full.
    QueueFull,
    /// It waited `max_wait` without a place.
    WaitedTooLong,
}

impl ShedReason {
    /// Every reason, in the order counters keep them.
    pub const ALL: [ShedReason; 3] = [
        ShedReason::Limit,
        ShedReason::QueueFull,
        ShedReason::WaitedTooLong,
    ];

    /// The reason as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::Limit => "limit",
            ShedReason::QueueFull => "queue_full",
            ShedReason::WaitedTooLong => "waited_too_long",
        }
    }
}

/// The upper bounds of the wait-time buckets, in nanoseconds (1 ms to 10 s).
pub const WAIT_BUCKETS_NS: [u64; 10] = [
    1_000_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// How long dispatched waiters waited: a histogram over [`WAIT_BUCKETS_NS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Waiters dispatched.
    pub count: u64,
    /// Their waits added up, in nanoseconds.
    pub sum_ns: u64,
    /// Waiters whose wait was at most each bound of [`WAIT_BUCKETS_NS`] (not cumulative).
    pub buckets: [u64; 10],
}

/// Waiting requests of one rule and class, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// The rule's name.
    pub rule: String,
    /// The waiters' class.
    pub class: Criticality,
    /// How many wait now (over all the rule's keys).
    pub waiting: u64,
    /// How long those dispatched so far waited.
    pub waits: WaitStats,
}

/// What became of a request at an adaptive rule.
pub(super) enum Entered {
    /// It holds a place.
    Let(Ticket),
    /// It waits for its turn.
    Wait(Arc<Turn>),
    /// It is refused.
    Shed(ShedReason),
}

/// Why a waiter leaves before its turn came through `Wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaving {
    /// Its deadline passed: a place granted meanwhile is kept.
    TimedOut,
    /// Its client went away: a place granted meanwhile is given back.
    Gone,
}

/// The rule name of a key `rule@fingerprint|value`.
fn rule_of(key: &str) -> &str {
    let head = key.split_once('|').map_or(key, |(head, _)| head);
    head.rsplit_once('@').map_or(head, |(name, _)| name)
}

fn wake(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

impl Limiters {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            shed: Default::default(),
            waits: Mutex::new(BTreeMap::new()),
            flow: FlowHash::random(),
        }
    }

    pub(super) fn shed(&self, class: Criticality, reason: ShedReason) {
        let reason = ShedReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.shed[class as usize][reason].fetch_add(1, Ordering::Relaxed);
    }

    fn record_waits(&self, key: &str, waited: &[(Criticality, u64)]) {
        if waited.is_empty() {
            return;
        }
        let mut waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        for &(class, ns) in waited {
            let stats = waits.entry((rule_of(key).to_owned(), class)).or_default();
            stats.count += 1;
            stats.sum_ns = stats.sum_ns.saturating_add(ns);
            if let Some(i) = WAIT_BUCKETS_NS.iter().position(|&b| ns <= b) {
                stats.buckets[i] += 1;
            }
        }
    }

    /// Lets a request of `class` in under `key`, or queues it when the rule has a queue and
    /// `flow` (its flow's hash and weight) is given, or refuses it; with the class's cap.
    fn enter(
        &self,
        key: &str,
        config: &Adaptive,
        class: Criticality,
        now: u64,
        flow: Option<(u64, u64)>,
    ) -> (u64, Entered) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !inner.map.contains_key(key) {
            inner.evict(self.cap);
            let controller = config.strategy.build(config.window, now, jitter_seed(key));
            let limiter =
                AdaptiveLimiter::new(controller, config.reserve_permille, config.lease_ns);
            let entry = Entry {
                limiter,
                waiting: Default::default(),
            };
            inner.map.insert(key.to_owned(), entry);
            inner.order.push_back(key.to_owned());
        }
        let Some(entry) = inner.map.get_mut(key) else {
            unreachable!("inserted above")
        };
        // Places that lapsed go to those already waiting before a newcomer.
        let (wakers, waited) = entry.dispatch(now);
        let cap = entry.limiter.cap(class);
        let entered = match (entry.limiter.acquire(class, now), &config.queue, flow) {
            (Ok(ticket), _, _) => Entered::Let(ticket),
            (Err(_), Some(queue), Some((hash, weight))) => {
                join(entry, queue.shape, class, hash, weight, now)
            }
            (Err(_), _, _) => Entered::Shed(ShedReason::Limit),
        };
        drop(inner);
        self.record_waits(key, &waited);
        wake(wakers);
        (cap, entered)
    }

    fn release(&self, key: &str, ticket: Ticket, now: u64, completion: Option<Completion>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // An evicted limiter held nothing: there is nothing to give back.
        let Some(entry) = inner.map.get_mut(key) else {
            return;
        };
        match completion {
            Some(c) => entry.limiter.release(ticket, now, c),
            None => entry.limiter.forget(ticket, now),
        };
        let (wakers, waited) = entry.dispatch(now);
        drop(inner);
        self.record_waits(key, &waited);
        wake(wakers);
    }

    /// Lets waiters under `key` into the places that lapsed by `now` (held past their
    /// lease, never released: no release will come to dispatch them).
    pub(super) fn lapse(&self, key: &str, now: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = inner.map.get_mut(key) else {
            return;
        };
        let (wakers, waited) = entry.dispatch(now);
        drop(inner);
        self.record_waits(key, &waited);
        wake(wakers);
    }

    /// When the next place held under `key` lapses, if one is held.
    pub(super) fn next_lapse(&self, key: &str) -> Option<u64> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.map.get(key)?.limiter.next_lapse()
    }

    /// A waiter of `class` under `key` leaves its queue: the place granted meanwhile, if
    /// any, is kept (`TimedOut`: returned) or given back (`Gone`, and the next waiter
    /// dispatched).
    pub(super) fn leave(
        &self,
        key: &str,
        class: Criticality,
        turn: &Arc<Turn>,
        now: u64,
        leaving: Leaving,
    ) -> Option<Ticket> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Under the lock no dispatch can grant it between these two steps.
        let granted = turn.end();
        let entry = inner.map.get_mut(key)?;
        match (granted, leaving) {
            (Some(ticket), Leaving::TimedOut) => Some(ticket),
            (Some(ticket), Leaving::Gone) => {
                entry.limiter.forget(ticket, now);
                let (wakers, waited) = entry.dispatch(now);
                drop(inner);
                self.record_waits(key, &waited);
                wake(wakers);
                None
            }
            (None, _) => {
                let slot = &mut entry.waiting[class as usize];
                if let Some(queue) = slot.as_mut() {
                    queue.remove_where(|t| Arc::ptr_eq(t, turn));
                    if queue.is_empty() {
                        *slot = None;
                    }
                }
                if leaving == Leaving::TimedOut {
                    drop(inner);
                    self.shed(class, ShedReason::WaitedTooLong);
                }
                None
            }
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
            Some(entry) => (entry.limiter.cap(class), entry.limiter.in_flight()),
            None => {
                let controller = config.strategy.build(config.window, now, jitter_seed(key));
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
            .map(|(key, e)| AdaptiveState {
                key: key.clone(),
                limit: e.limiter.limit(),
                in_flight: e.limiter.in_flight(),
                waiting: e.waiters() as u64,
            })
            .collect();
        // The busiest first, then by key: a stable, bounded set for a metrics page.
        states.sort_by(|a, b| b.in_flight.cmp(&a.in_flight).then(a.key.cmp(&b.key)));
        states.truncate(max);
        states
    }

    fn queues(&self) -> Vec<QueueState> {
        let mut waiting: BTreeMap<(String, Criticality), u64> = BTreeMap::new();
        {
            let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, entry) in &inner.map {
                for class in Criticality::ALL {
                    if let Some(queue) = &entry.waiting[class as usize] {
                        *waiting.entry((rule_of(key).to_owned(), class)).or_default() +=
                            queue.len() as u64;
                    }
                }
            }
        }
        let waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        for k in waits.keys() {
            waiting.entry(k.clone()).or_default();
        }
        waiting
            .into_iter()
            .map(|((rule, class), n)| QueueState {
                waits: waits
                    .get(&(rule.clone(), class))
                    .cloned()
                    .unwrap_or_default(),
                rule,
                class,
                waiting: n,
            })
            .collect()
    }
}

/// Queues a request its class has no room for, unless its flow's lanes are full or it is
/// sheddable and the queue is past its share.
fn join(
    entry: &mut Entry,
    shape: FairQueueConfig,
    class: Criticality,
    hash: u64,
    weight: u64,
    now: u64,
) -> Entered {
    // Sheddable requests may wait only while fewer than one lane's worth wait in all: past
    // that the queue is for the others, and a sheddable request is refused at once.
    if class == Criticality::Sheddable && entry.waiters() >= shape.queue_length as usize {
        return Entered::Shed(ShedReason::Limit);
    }
    let slot = &mut entry.waiting[class as usize];
    if slot.is_none() {
        // The shape was validated with the config; a bad one refuses rather than panics.
        let Ok(queue) = FairQueue::new(shape) else {
            return Entered::Shed(ShedReason::Limit);
        };
        *slot = Some(queue);
    }
    let Some(queue) = slot.as_mut() else {
        return Entered::Shed(ShedReason::Limit);
    };
    let turn = Arc::new(Turn::default());
    match queue.push(hash, weight, Arc::clone(&turn), now) {
        Ok(()) => Entered::Wait(turn),
        Err(_) => Entered::Shed(ShedReason::QueueFull),
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
                Some(e) if !e.is_idle() => self.order.push_back(oldest),
                _ => {
                    self.map.remove(&oldest);
                }
            }
        }
    }
}

/// A seed for a key's jitter (when Vegas re-probes, when Envoy's gradient measures): FNV-1a,
/// so the same key replays the same. Not for a flow's lanes, which clients must not predict
/// (see [`FlowHash`]): knowing when a probe falls gains a client nothing it could not see.
pub(super) fn jitter_seed(key: &str) -> u64 {
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
    /// store is asked (or, with a `timer` and a rule with a queue, waits its turn); one let
    /// in holds a place that its permit gives back.
    // `charge`'s arguments, the request's class and the timer: a struct would only rename
    // them.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn charge_adaptive<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: Vec<Applying>,
        class: Criticality,
        version: u64,
        mut now: u64,
        timer: Option<&dyn Timer>,
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
            // Only an enforced rule, at a front door that can hold the request, queues it.
            // Once another rule has shed the request, waiting here would be in vain.
            let flow = match (timer, &config.queue, &a.flow) {
                (Some(_), Some(queue), Some(flow)) if a.enforced && !shed => {
                    Some((self.adaptive.flow.hash(flow), queue.weight(flow)))
                }
                _ => None,
            };
            let (cap, entered) = self.adaptive.enter(&a.key, config, class, now, flow);
            let result = match (entered, timer, &config.queue) {
                (Entered::Let(ticket), _, _) => Ok(ticket),
                (Entered::Wait(turn), Some(timer), Some(queue)) => {
                    let waited = Wait {
                        limiters: &self.adaptive,
                        key: &a.key,
                        class,
                        turn,
                        timer,
                        deadline: timer.sleep(queue.shape.max_wait_ns),
                        deadline_at: now.saturating_add(queue.shape.max_wait_ns),
                        lapse: None,
                        done: false,
                    }
                    .await;
                    // The store's rules are decided when the wait is over.
                    now = timer.now();
                    waited.map_err(|_| ())
                }
                // A queue without a timer cannot happen: `flow` needs one.
                (Entered::Wait(_), _, _) => Err(()),
                (Entered::Shed(reason), _, _) => {
                    if a.enforced {
                        self.adaptive.shed(class, reason);
                    }
                    Err(())
                }
            };
            let decision = match result {
                Ok(ticket) => {
                    taken.push((a, ticket));
                    let remaining = cap.saturating_sub(ticket.in_flight);
                    Decision::new(Outcome::Allowed, cap, remaining, 0)
                }
                Err(()) => {
                    if a.enforced {
                        shed = true;
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
                (false, false) => &c.shadow_allowed,
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
    /// The engine with the secret that deals tenants their queue lanes fixed to `secret`,
    /// so that the lanes are the same in every run: for tests and reproducible
    /// simulations only.
    ///
    /// By default the secret is random, drawn when the engine is made, so that no client
    /// can work out which lanes a tenant falls in and choose names whose lanes cover
    /// another tenant's (see `docs/adaptive.md`). Anyone who knows a fixed secret can.
    #[must_use]
    pub fn with_flow_secret(mut self, secret: u64) -> Self {
        self.adaptive.flow = FlowHash::Fixed(secret);
        self
    }

    /// The lanes of rule `rule`'s queue that the flow `value` (its value of the queue's
    /// key: a tenant, an API key...) is dealt; `None` when no rule of that name has a
    /// queue. The lanes are the same for the engine's life, and differ from one engine to
    /// the next unless the secret is fixed ([`with_flow_secret`](Engine::with_flow_secret)).
    pub fn queue_hand(&self, rule: &str, value: &str) -> Option<Vec<usize>> {
        let set = self.current();
        let queue = set
            .rules
            .iter()
            .filter(|r| r.name == rule)
            .find_map(|r| r.adaptive.as_ref()?.queue.as_ref())?;
        Some(queue.shape.hand(self.adaptive.flow.hash(value)))
    }

    /// The adaptive limiters' current limits and in-flight counts, the busiest first, at
    /// most `max` of them (keys come from clients: a metrics page shows a bounded set).
    pub fn adaptive_states(&self, max: usize) -> Vec<AdaptiveState> {
        self.adaptive.states(max)
    }

    /// Requests adaptive rules shed since the start, per class, lowest class first.
    pub fn adaptive_shed(&self) -> [(Criticality, u64); 3] {
        Criticality::ALL.map(|c| {
            let by_reason = &self.adaptive.shed[c as usize];
            (c, by_reason.iter().map(|n| n.load(Ordering::Relaxed)).sum())
        })
    }

    /// Requests adaptive rules shed since the start, per class and reason.
    pub fn adaptive_shed_reasons(&self) -> Vec<(Criticality, ShedReason, u64)> {
        Criticality::ALL
            .into_iter()
            .flat_map(|c| {
                ShedReason::ALL.into_iter().enumerate().map(move |(i, r)| {
                    (
                        c,
                        r,
                        self.adaptive.shed[c as usize][i].load(Ordering::Relaxed),
                    )
                })
            })
            .collect()
    }

    /// The requests waiting in adaptive rules' queues and how long those let in waited,
    /// per rule and class (rules that never queued are left out).
    pub fn adaptive_queues(&self) -> Vec<QueueState> {
        self.adaptive.queues()
    }

    /// The class the engine gives `request` under the rules in force (see
    /// [`CRITICALITY_HEADER`]).
    pub fn criticality(&self, request: &Request<'_>) -> Criticality {
        let set = self.current();
        criticality(&set, request)
    }
}
