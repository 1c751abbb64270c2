//! A controller with its in-flight count, and the criticality classes that share its limit.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::{Controller, Sample};

/// How much a request matters when the limit is reached: sheddable ones are refused first,
/// then default ones; critical ones may also take a reserve the others may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Criticality {
    /// Prefetch, batch, retries of background work.
    Sheddable,
    /// Everything not classed otherwise.
    #[default]
    Default,
    /// What users wait on and must not lose (log-in, checkout).
    Critical,
}

impl Criticality {
    /// Every class, lowest first.
    pub const ALL: [Criticality; 3] = [
        Criticality::Sheddable,
        Criticality::Default,
        Criticality::Critical,
    ];

    /// The class's name, as headers and config files spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Sheddable => "sheddable",
            Criticality::Default => "default",
            Criticality::Critical => "critical",
        }
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Criticality {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Criticality::ALL
            .into_iter()
            .find(|c| text.trim().eq_ignore_ascii_case(c.as_str()))
            .ok_or_else(|| {
                format!("a criticality is `critical`, `default` or `sheddable`, not `{text}`")
            })
    }
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    /// The limit at the time.
    pub limit: u64,
    /// How many were in flight.
    pub in_flight: u64,
    /// The most this request's class may have in flight.
    pub cap: u64,
}

/// A request let in: what its release needs to give back its place and measure it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// Tells it from the other requests in flight.
    pub token: u64,
    /// When it was let in, in nanoseconds.
    pub started: u64,
    /// How many were in flight when it started, itself included.
    pub in_flight: u64,
    /// When its place lapses if it is never released.
    pub expires: u64,
}

/// How a request let in ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// Its round trip in nanoseconds, when the caller measured it (a gateway: until the
    /// upstream's response head); otherwise the time from its start to its release.
    pub rtt_ns: Option<u64>,
    /// It failed in a way that says the upstream is overloaded (a timeout, a 5xx).
    pub dropped: bool,
}

/// A controller and the requests in flight under it.
///
/// A request's class sets how much of the limit `L` it may fill: with the reserve
/// `r = ⌈L · reserve⌉`, critical requests may fill all of `L`, default ones `L − r`, and
/// sheddable ones `L − 2r`. So as load grows, sheddable requests are refused first, then
/// default ones, and critical ones still find room. A place never released (its holder
/// crashed) lapses after the lease, as a static concurrency permit does.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{AdaptiveLimiter, AimdConfig, Completion, Criticality, Strategy, WindowConfig};
///
/// let strategy = Strategy::Aimd(AimdConfig { initial: 10, min: 10, ..AimdConfig::default() });
/// let controller = strategy.build(WindowConfig::default(), 0, 1);
/// let mut limiter = AdaptiveLimiter::new(controller, 100, 60_000_000_000);
/// for _ in 0..8 {
///     limiter.acquire(Criticality::Sheddable, 0).unwrap();
/// }
/// assert!(limiter.acquire(Criticality::Sheddable, 0).is_err()); // 10 − 2·1
/// let ticket = limiter.acquire(Criticality::Default, 0).unwrap();
/// assert!(limiter.acquire(Criticality::Default, 0).is_err());
/// limiter.acquire(Criticality::Critical, 0).unwrap();
/// assert!(limiter.release(ticket, 5_000_000, Completion::default()));
/// assert_eq!(limiter.in_flight(), 9);
/// ```
#[derive(Debug)]
pub struct AdaptiveLimiter {
    controller: Box<dyn Controller>,
    /// The places held, by when they lapse.
    held: BTreeSet<(u64, u64)>,
    next_token: u64,
    reserve_permille: u64,
    lease_ns: u64,
}

impl AdaptiveLimiter {
    /// `controller`'s limit, with `reserve_permille` thousandths of it kept for critical
    /// requests (and twice that out of reach of sheddable ones), each place lapsing after
    /// `lease_ns` if never released.
    pub fn new(controller: Box<dyn Controller>, reserve_permille: u64, lease_ns: u64) -> Self {
        Self {
            controller,
            held: BTreeSet::new(),
            next_token: 0,
            reserve_permille: reserve_permille.min(1000),
            lease_ns: lease_ns.max(1),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> u64 {
        self.controller.limit()
    }

    /// Requests in flight (lapsed places are counted out at the next acquire or release).
    pub fn in_flight(&self) -> u64 {
        self.held.len() as u64
    }

    /// When the first place held lapses (its lease runs out unreleased), if any is held:
    /// the time to look again for those waiting, since no release will come for it.
    pub fn next_lapse(&self) -> Option<u64> {
        self.held.first().map(|&(expires, _)| expires)
    }

    /// Whether nothing is in flight (then the limiter may be dropped and built again with
    /// little lost but what it learnt).
    pub fn is_idle(&self) -> bool {
        self.held.is_empty()
    }

    /// The most `class` may have in flight.
    pub fn cap(&self, class: Criticality) -> u64 {
        let limit = self.limit();
        let reserve = (limit.saturating_mul(self.reserve_permille)).div_ceil(1000);
        match class {
            Criticality::Critical => limit,
            Criticality::Default => limit.saturating_sub(reserve),
            Criticality::Sheddable => limit.saturating_sub(2 * reserve),
        }
    }

    /// Whether a request of `class` would be let in at `now` (places that lapsed by then
    /// are counted out first).
    pub fn has_room(&mut self, class: Criticality, now: u64) -> bool {
        self.expire(now);
        self.in_flight() < self.cap(class)
    }

    /// Lets a request of `class` in at `now` if its class has room.
    ///
    /// # Errors
    ///
    /// [`Shed`] when its class's share of the limit is full.
    pub fn acquire(&mut self, class: Criticality, now: u64) -> Result<Ticket, Shed> {
        self.expire(now);
        let cap = self.cap(class);
        let in_flight = self.in_flight();
        if in_flight >= cap {
            return Err(Shed {
                limit: self.limit(),
                in_flight,
                cap,
            });
        }
        self.next_token = self.next_token.wrapping_add(1);
        let ticket = Ticket {
            token: self.next_token,
            started: now,
            in_flight: in_flight + 1,
            expires: now.saturating_add(self.lease_ns),
        };
        self.held.insert((ticket.expires, ticket.token));
        Ok(ticket)
    }

    /// Gives back `ticket`'s place at `now` and feeds the controller how it ended; false
    /// (and nothing fed) when the place had lapsed already.
    pub fn release(&mut self, ticket: Ticket, now: u64, completion: Completion) -> bool {
        let held = self.held.remove(&(ticket.expires, ticket.token));
        self.expire(now);
        if held {
            let sample = Sample {
                rtt_ns: completion
                    .rtt_ns
                    .unwrap_or(now.saturating_sub(ticket.started)),
                in_flight: ticket.in_flight,
                dropped: completion.dropped,
            };
            self.controller.sample(now, sample);
        }
        held
    }

    /// Gives back `ticket`'s place without a measurement (the request was refused by
    /// another rule, or its client went away before any answer).
    pub fn forget(&mut self, ticket: Ticket, now: u64) -> bool {
        let held = self.held.remove(&(ticket.expires, ticket.token));
        self.expire(now);
        held
    }

    fn expire(&mut self, now: u64) {
        while let Some(&(expires, token)) = self.held.first() {
            if expires > now {
                break;
            }
            self.held.remove(&(expires, token));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AimdConfig, Strategy, WindowConfig};
    use super::*;

    fn limiter(limit: u64) -> AdaptiveLimiter {
        let strategy = Strategy::Aimd(AimdConfig {
            initial: limit,
            min: limit,
            max: limit,
            ..AimdConfig::default()
        });
        AdaptiveLimiter::new(strategy.build(WindowConfig::default(), 0, 1), 100, 1_000)
    }

    #[test]
    fn a_place_never_released_lapses_after_the_lease() {
        let mut l = limiter(1);
        let crashed = l.acquire(Criticality::Critical, 0).unwrap();
        assert!(l.acquire(Criticality::Critical, 999).is_err());
        let next = l.acquire(Criticality::Critical, 1_000).unwrap();
        // Released late: it had lapsed, and the one that took its place stays counted.
        assert!(!l.release(crashed, 1_001, Completion::default()));
        assert_eq!(l.in_flight(), 1);
        assert!(l.forget(next, 1_002));
        assert!(l.is_idle());
    }

    #[test]
    fn classes_fill_their_shares_lowest_first() {
        let mut l = limiter(20);
        // Reserve ⌈20 · 0.1⌉ = 2: sheddable up to 16, default up to 18, critical 20.
        assert_eq!(l.cap(Criticality::Sheddable), 16);
        assert_eq!(l.cap(Criticality::Default), 18);
        assert_eq!(l.cap(Criticality::Critical), 20);
        for _ in 0..16 {
            l.acquire(Criticality::Sheddable, 0).unwrap();
        }
        let shed = l.acquire(Criticality::Sheddable, 0).unwrap_err();
        assert_eq!((shed.limit, shed.in_flight, shed.cap), (20, 16, 16));
        for _ in 0..2 {
            l.acquire(Criticality::Default, 0).unwrap();
        }
        assert!(l.acquire(Criticality::Default, 0).is_err());
        for _ in 0..2 {
            l.acquire(Criticality::Critical, 0).unwrap();
        }
        assert!(l.acquire(Criticality::Critical, 0).is_err());
    }
}
