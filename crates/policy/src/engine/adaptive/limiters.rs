//! The limiters of adaptive concurrency rules, one per rule and key, and the requests
//! waiting for a place under them.
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
use ratewarden_core::{Decision, Outcome, NANOS_PER_SEC};

use super::reports::{AdaptiveState, QueueState, ShedReason, WaitStats, WAIT_BUCKETS_NS};
use super::turn::Turn;
use crate::config::Adaptive;
use crate::engine::request::FlowHash;

/// The most limiters kept at once (idle ones past it are dropped, oldest first).
pub(crate) const MAX_LIMITERS: usize = 10_000;

/// How long a shed request is told to wait: the limit moves once per window, about a
/// second by default.
pub(crate) const SHED_RETRY_NS: u64 = NANOS_PER_SEC;

/// The limiters of adaptive rules, by key.
pub(crate) struct Limiters {
    inner: Mutex<Inner>,
    cap: usize,
    /// Requests shed, by class (lowest first, as [`Criticality::ALL`]) and reason (as
    /// [`ShedReason::ALL`]).
    pub(crate) shed: [[AtomicU64; 3]; 3],
    /// How long dispatched waiters waited, by rule name and class. Rule names come from
    /// the config, not from clients: the map is as small as the rules.
    waits: Mutex<BTreeMap<(String, Criticality), WaitStats>>,
    /// Deals tenants their lanes, keyed so that clients cannot predict them.
    pub(crate) flow: FlowHash,
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

/// What became of a request at an adaptive rule.
pub(crate) enum Entered {
    /// It holds a place.
    Let(Ticket),
    /// It waits for its turn.
    Wait(Arc<Turn>),
    /// It is refused.
    Shed(ShedReason),
}

/// Why a waiter leaves before its turn came through `Wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaving {
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
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            shed: Default::default(),
            waits: Mutex::new(BTreeMap::new()),
            flow: FlowHash::random(),
        }
    }

    pub(crate) fn shed(&self, class: Criticality, reason: ShedReason) {
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
    pub(crate) fn enter(
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

    pub(crate) fn release(
        &self,
        key: &str,
        ticket: Ticket,
        now: u64,
        completion: Option<Completion>,
    ) {
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
    pub(crate) fn lapse(&self, key: &str, now: u64) {
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
    pub(crate) fn next_lapse(&self, key: &str) -> Option<u64> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.map.get(key)?.limiter.next_lapse()
    }

    /// A waiter of `class` under `key` leaves its queue: the place granted meanwhile, if
    /// any, is kept (`TimedOut`: returned) or given back (`Gone`, and the next waiter
    /// dispatched).
    pub(crate) fn leave(
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
    pub(crate) fn peek(
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
    pub(crate) fn peek_decision(
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

    pub(crate) fn states(&self, max: usize) -> Vec<AdaptiveState> {
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

    pub(crate) fn queues(&self) -> Vec<QueueState> {
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
pub(crate) fn jitter_seed(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
