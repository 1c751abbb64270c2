//! A controller with its in-flight count, and the criticality classes that share its limit.

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

/// A controller and the requests in flight under it.
///
/// A request's class sets how much of the limit `L` it may fill: with the reserve
/// `r = ⌈L · reserve⌉`, critical requests may fill all of `L`, default ones `L − r`, and
/// sheddable ones `L − 2r`. So as load grows, sheddable requests are refused first, then
/// default ones, and critical ones still find room.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{AdaptiveLimiter, AimdConfig, Criticality, Strategy, WindowConfig};
///
/// let strategy = Strategy::Aimd(AimdConfig { initial: 10, min: 10, ..AimdConfig::default() });
/// let mut limiter = AdaptiveLimiter::new(strategy.build(WindowConfig::default(), 0, 1), 100);
/// for _ in 0..8 {
///     limiter.acquire(Criticality::Sheddable).unwrap();
/// }
/// assert!(limiter.acquire(Criticality::Sheddable).is_err()); // 10 − 2·1
/// limiter.acquire(Criticality::Default).unwrap();
/// assert!(limiter.acquire(Criticality::Default).is_err());
/// limiter.acquire(Criticality::Critical).unwrap();
/// ```
#[derive(Debug)]
pub struct AdaptiveLimiter {
    controller: Box<dyn Controller>,
    in_flight: u64,
    reserve_permille: u64,
}

impl AdaptiveLimiter {
    /// `controller`'s limit, with `reserve_permille` thousandths of it kept for critical
    /// requests (and twice that out of reach of sheddable ones).
    pub fn new(controller: Box<dyn Controller>, reserve_permille: u64) -> Self {
        Self {
            controller,
            in_flight: 0,
            reserve_permille: reserve_permille.min(1000),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> u64 {
        self.controller.limit()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Whether nothing is in flight (then the limiter may be dropped and built again with
    /// little lost but what it learnt).
    pub fn is_idle(&self) -> bool {
        self.in_flight == 0
    }

    /// The most `class` may have in flight.
    pub fn cap(&self, class: Criticality) -> u64 {
        let limit = self.limit();
        let reserve = (limit * self.reserve_permille).div_ceil(1000);
        match class {
            Criticality::Critical => limit,
            Criticality::Default => limit.saturating_sub(reserve),
            Criticality::Sheddable => limit.saturating_sub(2 * reserve),
        }
    }

    /// Lets a request of `class` in if its class has room: the in-flight count at its start
    /// (itself included), to give back with its [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// [`Shed`] when its class's share of the limit is full.
    pub fn acquire(&mut self, class: Criticality) -> Result<u64, Shed> {
        let cap = self.cap(class);
        if self.in_flight >= cap {
            return Err(Shed {
                limit: self.limit(),
                in_flight: self.in_flight,
                cap,
            });
        }
        self.in_flight += 1;
        Ok(self.in_flight)
    }

    /// A request let in is done at `now`; `sample` is what it measured, or `None` when it
    /// measured nothing (a client gone before the answer, a request refused elsewhere).
    pub fn release(&mut self, now: u64, sample: Option<Sample>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(sample) = sample {
            self.controller.sample(now, sample);
        }
    }
}
