//! Prefetched allowances: units of a key taken from the store ahead of demand and spent in
//! this process, so a hot key costs the store one call per allowance, not per request.
//!
//! An allowance is charged in the store before any of it is spent (the store's atomic
//! partial grant, [`AsyncStore::take`]), so a fleet never admits more than the store would
//! have admitted one by one: at any instant, what the fleet admitted is at most what the
//! store charged. The price is *stranded* units: units held here while another process is
//! refused, at most the sum of what the processes hold. What is left when an allowance
//! lapses, or when the process stops, goes back (`settle` of the unspent units), exactly
//! for buckets and GCRA, and for windows only while the window is still current.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ratewarden_core::{Algorithm, AsyncStore, Decision, Limit, Outcome};

use crate::config::Rule;

/// The most keys allowances are kept for; past it a new key is decided by the store per
/// request (keys come from clients, so this map must be bounded).
pub(crate) const MAX_KEYS: usize = 100_000;

/// Why an allowance could not be spent from: the store's error, or, for a background
/// allowance whose last call to its store failed, that the store is out of reach (the next
/// call is the background's to make, and no request waits for it).
#[derive(Debug)]
pub(crate) enum SpendError<E> {
    Store(E),
    CutOff,
}

impl<E: std::fmt::Display> std::fmt::Display for SpendError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpendError::Store(error) => error.fmt(f),
            SpendError::CutOff => f.write_str(
                "the home store is out of reach: its last call failed, and the next is the background's to make",
            ),
        }
    }
}

/// The allowances of every prefetching rule's keys, and what they did.
#[derive(Default)]
pub(crate) struct Allowances {
    keys: Mutex<HashMap<String, Arc<Allowance>>>,
    stats: Counts,
    /// Seeds the jitter of the wait before asking a contested store again (random per
    /// process, so that processes do not lock into one order of asking).
    jitter: RandomState,
    /// Top-ups are left to [`top_up`](Allowances::top_up), called off the request path
    /// (a `global` rule's store is a WAN away): a request that finds units running low
    /// marks its key due instead of waiting for the next allowance.
    background: bool,
}

#[derive(Default)]
struct Counts {
    fetches: AtomicU64,
    fetched: AtomicU64,
    returned: AtomicU64,
    local: AtomicU64,
    remote: AtomicU64,
}

/// What prefetched allowances did since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Store calls that took an allowance (each a partial grant of up to the units asked).
    pub fetches: u64,
    /// Units those calls granted.
    pub units_fetched: u64,
    /// Unspent units given back to the store (lapsed allowances, a stopping process).
    pub units_returned: u64,
    /// Decisions made from an allowance in hand, with no store call.
    pub local_decisions: u64,
    /// Decisions that waited on a store call (a fetch, or a key past the map's bound).
    pub remote_decisions: u64,
    /// Keys holding an allowance now.
    pub keys: u64,
}

/// One key's allowance.
struct Allowance {
    limit: Limit,
    /// How far ahead its units are taken, in nanoseconds.
    horizon: u64,
    held: Mutex<Held>,
    /// Held while a fetch for this key is on its way: requests that find the allowance
    /// empty wait for it rather than each asking the store.
    fetch: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Held {
    /// Units charged in the store and not yet spent.
    units: u64,
    /// When the units lapse (unspent ones go back, or with a window's end, are dropped).
    lapses: u64,
    /// The end of the window the units were charged in (`u64::MAX` for buckets): they
    /// lapse by then at the latest.
    ends: u64,
    /// Until when unspent units may still be given back (a window's end less a horizon;
    /// `u64::MAX` for buckets, whose refunds are exact at any time).
    returnable_until: u64,
    /// No fetch before this: the store granted less than asked, so the budget is
    /// contested (or spent) and asking again at once would only cost a call.
    quiet_until: u64,
    /// When the store said one more unit would fit, at the last fetch it had too few.
    retry_at: u64,
    /// Whether the last fetch was granted less than asked.
    contested: bool,
    /// A top-up is wanted and left to [`Allowances::top_up`] (background allowances).
    due: bool,
    /// Lapsed units the next sweep gives back (background allowances: a request does not
    /// wait for the give-back's round trip).
    to_return: u64,
    /// A fetch has succeeded for this key since it was made.
    leased: bool,
    /// The last fetch failed: the store is down or cut off (a request that finds nothing in
    /// hand is answered by its rule's `on_store_failure`: a background allowance's without
    /// a call, another's after asking the store itself).
    failing: bool,
    /// Demand (units asked, allowed or not) in the current horizon-long period and the one
    /// before, for sizing the next fetch.
    period: u64,
    asked_now: u64,
    asked_before: u64,
}

impl Held {
    /// How long a request refused here at `now` should wait: until the store said a unit
    /// fits, or until this process asks it again, whichever is later.
    fn wait(&self, now: u64) -> u64 {
        self.quiet_until.max(self.retry_at).saturating_sub(now)
    }

    /// Notes `cost` units asked at `now`.
    fn ask(&mut self, now: u64, horizon: u64, cost: u64) {
        let period = now / horizon;
        if period != self.period {
            self.asked_before = if period == self.period + 1 {
                self.asked_now
            } else {
                0
            };
            self.asked_now = 0;
            self.period = period;
        }
        self.asked_now = self.asked_now.saturating_add(cost);
    }

    /// How many units to ask the store for: this key's recent demand over one horizon, at
    /// least `need`, at most `size`; with `halve`, halved while the budget is contested
    /// (shrink before growing, so a process that fetched early does not starve a newcomer).
    ///
    /// A background allowance does not halve: it is topped up only once what it holds falls
    /// under one ask, so it never takes faster than its demand, and one ask must cover the
    /// round trip to a home a WAN away. Halved, a far region could take only half a
    /// horizon's demand a round trip while a near one asked as often as it liked, and a
    /// contested window went to whoever was nearest the home.
    fn want(&self, need: u64, size: u64, halve: bool) -> u64 {
        let demand = self.asked_now.max(self.asked_before);
        let demand = if self.contested && halve {
            demand / 2
        } else {
            demand
        };
        demand.max(need).max(1).min(size.max(need))
    }

    /// Unspent units to hand back at `now` if the allowance has lapsed (zero otherwise, or
    /// when a window has moved on and they are simply gone).
    fn lapse(&mut self, now: u64) -> u64 {
        if self.units == 0 || now < self.lapses {
            return 0;
        }
        let units = std::mem::take(&mut self.units);
        if now < self.returnable_until {
            units
        } else {
            0
        }
    }
}

impl Allowances {
    /// Allowances whose top-ups are left to [`top_up`](Allowances::top_up), off the
    /// request path: for a store a WAN away.
    pub(crate) fn background() -> Self {
        Self {
            background: true,
            ..Self::default()
        }
    }

    /// Decides `cost` units of `key` under `rule` from its allowance, fetching one from
    /// `store` when it runs low. A refusal charges nothing; its retry time is the store's
    /// (or, while this process waits before asking a contested store again, that wait).
    ///
    /// # Errors
    ///
    /// The store's, when an allowance was needed and could not be fetched (the rule's
    /// `on_store_failure` answers then); units in hand are spent first.
    pub(crate) async fn spend<S: AsyncStore>(
        &self,
        store: &S,
        rule: &Rule,
        key: &str,
        cost: u64,
        now: u64,
    ) -> Result<Decision, SpendError<S::Error>> {
        let size = rule.limit.limit();
        if cost > size {
            return Ok(Decision::new(Outcome::CostTooHigh, size, 0, 0));
        }
        let horizon = rule.prefetch.map_or(1, |h| {
            u64::try_from(h.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        let Some(allowance) = self.allowance(key, &rule.limit, horizon) else {
            Counts::bump(&self.stats.remote);
            return store
                .decide(&rule.limit, key, now, cost)
                .await
                .map_err(SpendError::Store);
        };
        let (taken, refill, lapsed) = {
            let mut held = lock(&allowance.held);
            held.ask(now, horizon, cost);
            let mut lapsed = held.lapse(now);
            if self.background {
                held.to_return += std::mem::take(&mut lapsed);
            }
            let taken = take(&mut held, cost, size);
            // Fetch the next allowance before this one is gone: at half the usual ask, or
            // in the background at a whole one (the top-up is a round trip away, a WAN's,
            // and the requests meanwhile spend what is left).
            let want = held.want(1, size, !self.background);
            let low = if self.background { want } else { want / 2 };
            let refill = taken.is_some() && now >= held.quiet_until && held.units < low;
            if refill && self.background {
                held.due = true;
            }
            (taken, refill && !self.background, lapsed)
        };
        self.give_back(store, &allowance.limit, key, lapsed, now)
            .await;
        if let Some(decision) = taken {
            Counts::bump(&self.stats.local);
            if refill {
                if let Ok(_turn) = allowance.fetch.try_lock() {
                    // A failed top-up changes nothing: the units in hand are still good,
                    // and the next request that finds them gone asks again.
                    let _ = self
                        .fetch(store, &allowance, key, 0, size, horizon, now)
                        .await;
                }
            }
            return Ok(decision);
        }
        {
            let mut held = lock(&allowance.held);
            if now < held.quiet_until {
                Counts::bump(&self.stats.local);
                return Ok(refused(size, held.wait(now)));
            }
            if self.background && (held.leased || held.failing) {
                // Past what this process holds: its next allowance is the background's to
                // take (a WAN round trip no request waits for). This request is refused
                // now, as a region past its lease is; or, when the background's last call
                // failed (the home is down or cut off), answered by the rule's
                // `on_store_failure` without a call of its own, which would wait out the
                // home's deadline whenever its breaker lets a probe through. Only a key's
                // first request waits (it has no lease yet, and no call for it has failed).
                held.due = true;
                if held.failing {
                    return Err(SpendError::CutOff);
                }
                Counts::bump(&self.stats.local);
                return Ok(refused(size, held.wait(now).max(1)));
            }
        }
        let _turn = match allowance.fetch.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                // A fetch is on its way. When the store was contested at the last one,
                // what it brings goes to whoever asks once it lands, and this request would
                // most likely only queue behind its round trip to be refused: refused now.
                {
                    let held = lock(&allowance.held);
                    if held.contested {
                        Counts::bump(&self.stats.local);
                        return Ok(refused(size, held.wait(now)));
                    }
                }
                allowance.fetch.lock().await
            }
        };
        Counts::bump(&self.stats.remote);
        // Another request may have fetched while this one waited.
        {
            let mut held = lock(&allowance.held);
            if let Some(decision) = take(&mut held, cost, size) {
                return Ok(decision);
            }
            if now < held.quiet_until {
                return Ok(refused(size, held.wait(now)));
            }
        }
        let retry_after_ns = self
            .fetch(store, &allowance, key, cost, size, horizon, now)
            .await
            .map_err(SpendError::Store)?;
        let mut held = lock(&allowance.held);
        Ok(take(&mut held, cost, size).unwrap_or_else(|| refused(size, retry_after_ns)))
    }

    /// The keys whose allowance a request found running low, for [`top_up`](Self::top_up)
    /// (background allowances only), at most `most` of them.
    pub(crate) fn due(&self, most: usize) -> Vec<String> {
        let keys = lock(&self.keys);
        keys.iter()
            .filter(|(_, a)| lock(&a.held).due)
            .take(most)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Takes `key`'s next allowance from `store` ahead of demand, unless a fetch for it is
    /// on its way; `clock` says when it is (read before the call, and when it lands: a
    /// horizon's units are spent for a horizon after they land, which over a WAN is a
    /// round trip after they were asked for, and never past their window's end). Returns
    /// whether one was taken.
    ///
    /// # Errors
    ///
    /// The store's: the units in hand are still good, and the key stays due.
    pub(crate) async fn top_up<S: AsyncStore>(
        &self,
        store: &S,
        key: &str,
        clock: impl Fn() -> u64,
    ) -> Result<bool, S::Error> {
        let now = clock();
        let Some(allowance) = lock(&self.keys).get(key).map(Arc::clone) else {
            return Ok(false);
        };
        let Ok(_turn) = allowance.fetch.try_lock() else {
            return Ok(false);
        };
        if now < lock(&allowance.held).quiet_until {
            return Ok(false);
        }
        let size = ratewarden_core::Algorithm::limit(&allowance.limit);
        self.fetch(store, &allowance, key, 0, size, allowance.horizon, now)
            .await?;
        let landed = clock();
        let mut held = lock(&allowance.held);
        held.due = false;
        if held.units > 0 {
            held.lapses = held
                .lapses
                .max(landed.saturating_add(allowance.horizon))
                .min(held.ends);
        }
        Ok(true)
    }

    /// Puts back `cost` units spent from `key`'s allowance by a request another rule
    /// refused (all or nothing: the request was charged nowhere).
    pub(crate) fn put_back(&self, key: &str, cost: u64) {
        let keys = lock(&self.keys);
        if let Some(allowance) = keys.get(key) {
            let mut held = lock(&allowance.held);
            held.units = held.units.saturating_add(cost);
        }
    }

    /// Gives back every lapsed allowance's unspent units and forgets idle keys; with
    /// `all`, gives back every allowance (a stopping process). Returns the units given.
    pub(crate) async fn sweep<S: AsyncStore>(&self, store: &S, now: u64, all: bool) -> u64 {
        let due: Vec<(String, Arc<Allowance>, u64)> = {
            let mut keys = lock(&self.keys);
            let mut due = Vec::new();
            keys.retain(|key, allowance| {
                let mut held = lock(&allowance.held);
                if all {
                    held.lapses = 0;
                }
                let units = held.lapse(now) + std::mem::take(&mut held.to_return);
                if units > 0 {
                    due.push((key.clone(), Arc::clone(allowance), units));
                }
                // Idle for a whole period and holding nothing: forgotten (a later request
                // starts it afresh, sized from scratch).
                held.units > 0 || now < held.lapses || held.asked_now > 0
            });
            due
        };
        let mut given = 0;
        for (key, allowance, units) in due {
            if self
                .give_back(store, &allowance.limit, &key, units, now)
                .await
            {
                given += units;
            }
        }
        given
    }

    /// What the allowances did so far.
    pub(crate) fn stats(&self) -> PrefetchStats {
        let s = &self.stats;
        PrefetchStats {
            fetches: s.fetches.load(Ordering::Relaxed),
            units_fetched: s.fetched.load(Ordering::Relaxed),
            units_returned: s.returned.load(Ordering::Relaxed),
            local_decisions: s.local.load(Ordering::Relaxed),
            remote_decisions: s.remote.load(Ordering::Relaxed),
            keys: lock(&self.keys).len() as u64,
        }
    }

    /// `key`'s allowance, made on first use; `None` when the map is full.
    fn allowance(&self, key: &str, limit: &Limit, horizon: u64) -> Option<Arc<Allowance>> {
        let mut keys = lock(&self.keys);
        if let Some(a) = keys.get(key) {
            // A reload changes a rule's numbers and so its keys' fingerprints: a key's
            // limit never changes under it.
            return Some(Arc::clone(a));
        }
        if keys.len() >= MAX_KEYS {
            return None;
        }
        let a = Arc::new(Allowance {
            limit: limit.clone(),
            horizon,
            held: Mutex::new(Held::default()),
            fetch: tokio::sync::Mutex::new(()),
        });
        keys.insert(key.to_owned(), Arc::clone(&a));
        Some(a)
    }

    /// Takes an allowance of at least `need` units for `key` from the store (while holding
    /// the key's fetch lock), adds what was granted, and returns the store's retry time
    /// for a request it would refuse now.
    #[allow(clippy::too_many_arguments)]
    async fn fetch<S: AsyncStore>(
        &self,
        store: &S,
        allowance: &Allowance,
        key: &str,
        need: u64,
        size: u64,
        horizon: u64,
        now: u64,
    ) -> Result<u64, S::Error> {
        let want = {
            let held = lock(&allowance.held);
            let short = need.saturating_sub(held.units);
            held.want(short, size, !self.background)
        };
        let (granted, decision) = match store.take(&allowance.limit, key, now, want).await {
            Ok(taken) => taken,
            Err(error) => {
                lock(&allowance.held).failing = true;
                return Err(error);
            }
        };
        Counts::bump(&self.stats.fetches);
        self.stats.fetched.fetch_add(granted, Ordering::Relaxed);
        let mut held = lock(&allowance.held);
        held.failing = false;
        held.leased = true;
        held.units = held.units.saturating_add(granted);
        if granted > 0 {
            // Units in hand from an earlier grant live as long as the new ones: for a
            // window, that is still no later than its end.
            held.ends = window_end(&allowance.limit, &decision, now);
            (held.lapses, held.returnable_until) = lifetime(held.ends, horizon, now);
        }
        held.contested = granted < want;
        let retry_after_ns = decision.retry_after_ns().unwrap_or(0);
        held.retry_at = now.saturating_add(retry_after_ns);
        if held.contested {
            // Ask again once the store has had time to accrue a useful allowance: half a
            // horizon, or less when the burst would fill first (units accrued past it are
            // lost), not before the store's own retry time, and within a horizon however
            // long that is (another process may give units back before then).
            let quiet = (horizon / 2)
                .min(accrual_ns(&allowance.limit))
                .max(retry_after_ns)
                .min(horizon);
            // Jittered between half and one and a half of it: processes that asked at
            // fixed intervals would lock into one order, the one right after another
            // always finding the units just taken, and never get its share.
            let spread = self.jitter.hash_one((key, now)) % quiet.max(1);
            held.quiet_until = now.saturating_add(quiet / 2).saturating_add(spread);
            if accrual_ns(&allowance.limit) == u64::MAX && retry_after_ns > 0 {
                // A spent window opens afresh at its end, all at once: asked no later
                // than then, or the processes that ask first take the new window's units
                // while this one still waits, window after window.
                held.quiet_until = held.quiet_until.min(now.saturating_add(retry_after_ns));
            }
        } else {
            held.quiet_until = now;
        }
        Ok(held.wait(now))
    }

    /// Settles `-units` for `key` (unspent units back to the store); whether it was done.
    async fn give_back<S: AsyncStore>(
        &self,
        store: &S,
        limit: &Limit,
        key: &str,
        units: u64,
        now: u64,
    ) -> bool {
        if units == 0 {
            return false;
        }
        let delta = -i64::try_from(units).unwrap_or(i64::MAX);
        match store.settle(limit, key, now, delta).await {
            Ok(()) => {
                self.stats.returned.fetch_add(units, Ordering::Relaxed);
                true
            }
            Err(error) => {
                // Units not given back are stranded until the store's state forgets them:
                // under-admission, never over.
                tracing::warn!(%key, units, %error, "could not give back an allowance");
                false
            }
        }
    }
}

impl Counts {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Spends `cost` units from `held` if it has them: the local decision.
fn take(held: &mut Held, cost: u64, size: u64) -> Option<Decision> {
    if held.units < cost {
        return None;
    }
    held.units -= cost;
    Some(Decision::new(Outcome::Allowed, size, held.units, 0))
}

fn refused(size: u64, retry_after_ns: u64) -> Decision {
    Decision::new(
        Outcome::Limited {
            retry_after_ns: retry_after_ns.max(1),
        },
        size,
        0,
        retry_after_ns,
    )
}

/// When an allowance granted at `now` lapses, and until when its units may be given back,
/// its window ending at `ends` ([`window_end`]). Units of a window must be spent in it (the
/// next window counts afresh) and can only be given back while it is current (a refund in
/// the next window would free units of that window). Bucket units keep a horizon.
fn lifetime(ends: u64, horizon: u64, now: u64) -> (u64, u64) {
    let lapses = now.saturating_add(horizon);
    if ends == u64::MAX {
        return (lapses, u64::MAX);
    }
    // Given back a horizon before the end at the latest, so that the store (on its own
    // clock, a round trip later) still sees the same window.
    (lapses.min(ends), ends.saturating_sub(horizon))
}

/// When the window of units granted at `now` ends (`u64::MAX` for a bucket): a fixed
/// window's or quota's `reset` after the store's answer, a sliding window's current window
/// one window before its reset.
fn window_end(limit: &Limit, decision: &Decision, now: u64) -> u64 {
    match limit {
        Limit::FixedWindow(_) | Limit::Quota(_) => now.saturating_add(decision.reset_after_ns),
        Limit::SlidingWindow(w) => {
            let w = u64::try_from(w.window().as_nanos()).unwrap_or(u64::MAX);
            now.saturating_add(decision.reset_after_ns.saturating_sub(w))
        }
        _ => u64::MAX,
    }
}

/// Nanoseconds a bucket takes to accrue half its burst (`u64::MAX` for windows, which do
/// not accrue: their retry time says when the next window opens).
fn accrual_ns(limit: &Limit) -> u64 {
    let (rate, burst) = match limit {
        Limit::Gcra(g) => (g.rate(), g.burst()),
        Limit::TokenBucket(t) => (t.rate(), t.burst()),
        Limit::LeakyBucket(l) => (l.rate(), l.burst()),
        _ => return u64::MAX,
    };
    let half = u128::from(burst.div_ceil(2));
    let ns = half * u128::from(rate.period_ns()) / u128::from(rate.count().max(1));
    u64::try_from(ns).unwrap_or(u64::MAX).max(1)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: AsyncStore> super::Charger<S> {
    /// Gives back the unspent units of the `prefetch` and `global` allowances that have
    /// lapsed at `now` (every one with `all`), forgetting idle keys. Returns the units
    /// given back.
    pub(crate) async fn sweep_allowances(&self, now: u64, all: bool) -> u64 {
        let regional = self.allowances.sweep(&self.store, now, all).await;
        regional + self.global.sweep(self.home(), now, all).await
    }

    /// Tops up `key`'s `global` allowance from the home store ahead of demand.
    pub(crate) async fn top_up_global(
        &self,
        key: &str,
        clock: impl Fn() -> u64,
    ) -> Result<bool, S::Error> {
        self.global.top_up(self.home(), key, clock).await
    }
}
