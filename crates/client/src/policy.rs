//! The policy core both middlewares share: one decision per attempt, no I/O, no sleeping.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::{HeaderMap, Method, Uri};
use ratewarden_core::{Clock, RealClock};

use crate::fields::AnswerFields;
use crate::pacing::OriginPace;
use crate::stats::Counters;
pub(crate) use crate::watchdog::Cut;
use crate::watchdog::Watchdog;
use crate::{
    is_repeatable, retry_after, AdaptiveRate, AdaptiveThrottle, Attempt, Backoff, Error, Quota,
    RetryBudget, SplitMix64, Stats,
};

/// How a client retries and paces.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Attempts per request, the first included (1: never retry).
    pub max_attempts: u32,
    /// The wait between attempts (waits are `max(Retry-After, backoff)`).
    pub backoff: Backoff,
    /// The most a request may take over all its attempts and waits.
    pub deadline: Option<Duration>,
    /// The retry budget shared by every request of the client (`None`: unlimited retries,
    /// up to `max_attempts` each).
    pub budget: Option<RetryBudget>,
    /// Adaptive throttling per origin (`None`: off).
    pub throttle: Option<AdaptiveThrottle>,
    /// AWS-style adaptive rate per origin.
    pub adaptive_rate: bool,
    /// Spread what the rate limit fields say is left over the time left.
    pub pacing: bool,
    /// The seed of the jitter (and throttling) draws.
    pub seed: u64,
}

impl Default for Settings {
    /// 4 attempts, 100 ms to 20 s full jitter, a 30 s deadline, the 20% + 10/s budget,
    /// pacing on, no throttling, no adaptive rate.
    fn default() -> Self {
        Self {
            max_attempts: 4,
            backoff: Backoff::default(),
            deadline: Some(Duration::from_secs(30)),
            budget: Some(RetryBudget::default()),
            throttle: None,
            adaptive_rate: false,
            pacing: true,
            seed: 0x5EED,
        }
    }
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Hand the caller this attempt's outcome.
    Done,
    /// Wait this long, then try again.
    Retry(Duration),
}

/// One request's progress through its attempts.
#[derive(Debug, Clone)]
pub struct Call {
    /// The name the policy keeps the origin's state under (shared: no copy per request).
    origin: Arc<str>,
    /// Where that state is in the policy's list: found once, when the call starts.
    slot: usize,
    /// The list `slot` is in: when the policy forgets its origins, a call found in the
    /// list before finds its origin again.
    generation: u64,
    started: u64,
    /// When the attempt last begun is sent: [`Policy::before_attempt`]'s reading of the
    /// clock plus the hold it asked for.
    attempt_at: u64,
    attempts: u32,
    repeatable: bool,
}

impl Call {
    /// The origin (`scheme://host:port`) the request goes to.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Attempts begun so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the request may be sent again: an idempotent method or an
    /// `Idempotency-Key`, and not marked [`cannot_repeat`](Self::cannot_repeat).
    pub fn is_repeatable(&self) -> bool {
        self.repeatable
    }

    /// Marks the request as one that cannot be sent again (its body is a stream that
    /// cannot be copied): a retryable answer then ends it as a non-idempotent one does,
    /// taking nothing from the retry budget.
    pub fn cannot_repeat(&mut self) {
        self.repeatable = false;
    }
}

/// Everything kept per origin, in one place: a call finds it once, by name, when it starts,
/// and then by its slot (hashing the name on every attempt cost more than the rest).
#[derive(Debug, Default)]
struct PerOrigin {
    pace: OriginPace,
    throttle: Option<AdaptiveThrottle>,
    rate: AdaptiveRate,
}

#[derive(Debug)]
struct State {
    rng: SplitMix64,
    budget: Option<RetryBudget>,
    /// Each origin's slot in `per_origin`, for this `generation` of the list.
    slots: HashMap<Arc<str>, usize>,
    per_origin: Vec<PerOrigin>,
    /// Bumped each time the list is forgotten (see [`MAX_ORIGINS`]).
    generation: u64,
    /// The origin the last call went to, and its slot: a client mostly calls one, and
    /// comparing its name costs less than hashing it.
    last: Option<(Arc<str>, usize)>,
}

/// The most origins whose state a policy keeps. The caller chooses the origins, but a
/// crawler, a webhook sender or a proxy may call as many as it is handed: past this many,
/// every origin's state is forgotten and learnt again from the next answers (its pacing,
/// throttling and adaptive rate start over, as for a new origin), so memory stays bounded.
pub const MAX_ORIGINS: usize = 4096;

impl State {
    /// `origin`'s name and slot, made on its first request.
    fn slot(&mut self, origin: &str) -> (Arc<str>, usize) {
        if let Some((name, slot)) = &self.last {
            if **name == *origin {
                return (name.clone(), *slot);
            }
        }
        let (name, slot) = match self.slots.get_key_value(origin) {
            Some((name, &slot)) => (name.clone(), slot),
            None => {
                if self.per_origin.len() >= MAX_ORIGINS {
                    self.slots.clear();
                    self.per_origin.clear();
                    self.last = None;
                    self.generation += 1;
                }
                let name: Arc<str> = Arc::from(origin);
                let slot = self.per_origin.len();
                self.per_origin.push(PerOrigin::default());
                self.slots.insert(name.clone(), slot);
                (name, slot)
            }
        };
        self.last = Some((name.clone(), slot));
        (name, slot)
    }

    /// `call`'s origin state, found again if the list was forgotten since it was found.
    fn origin_of(&mut self, call: &mut Call) -> &mut PerOrigin {
        if call.generation != self.generation {
            let origin = Arc::clone(&call.origin);
            call.slot = self.slot(&origin).1;
            call.generation = self.generation;
        }
        &mut self.per_origin[call.slot]
    }
}

struct Inner {
    settings: Settings,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    counters: Counters,
    watchdog: Watchdog,
}

/// The retry and pacing policy of one client: its budget, per-origin pacing, throttling and
/// adaptive rate, and counters. Clones share all of it (one budget per client, however many
/// handles).
///
/// The middlewares call [`start`](Self::start), then per attempt
/// [`before_attempt`](Self::before_attempt) (hold the request that long) and
/// [`after_attempt`](Self::after_attempt) (done, or wait and retry). The same calls drive
/// `ratewarden simulate retries` on a simulated clock.
///
/// # Examples
///
/// ```
/// use http::{HeaderMap, Method, StatusCode};
/// use ratewarden_client::{Attempt, Next, Policy, Settings};
/// use ratewarden_core::ManualClock;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = ManualClock::new(0);
/// let policy = Policy::new(Settings::default(), Arc::new(clock.clone()));
/// let mut call = policy.start("http://api.test", &Method::GET, &HeaderMap::new())?;
/// assert_eq!(policy.before_attempt(&mut call)?, Duration::ZERO);
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "2".parse()?);
/// let next = policy.after_attempt(&mut call, Attempt::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers });
/// assert!(matches!(next, Next::Retry(wait) if wait >= Duration::from_secs(2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("settings", &self.inner.settings)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for Policy {
    /// The default settings on the real clock.
    fn default() -> Self {
        Self::new(Settings::default(), Arc::new(RealClock::new()))
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `scheme://authority` of `uri`: what pacing and throttling are kept per.
pub fn origin_of(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str())
    )
}

impl Policy {
    /// A policy with `settings`, reading time from `clock`.
    pub fn new(settings: Settings, clock: Arc<dyn Clock>) -> Self {
        let state = State {
            rng: SplitMix64::new(settings.seed),
            budget: settings.budget.clone(),
            slots: HashMap::new(),
            per_origin: Vec::new(),
            generation: 0,
            last: None,
        };
        Self {
            inner: Arc::new(Inner {
                settings,
                clock,
                state: Mutex::new(state),
                counters: Counters::default(),
                watchdog: Watchdog::default(),
            }),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The current time on the policy's clock.
    pub fn now(&self) -> u64 {
        self.inner.clock.now()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state holds counts and times only: a panic elsewhere cannot leave it unusable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Begins a request to `origin` (see [`origin_of`]): counts it, and lets adaptive
    /// throttling refuse it. The origin's name is copied on its first request only.
    ///
    /// # Errors
    ///
    /// [`Error::Throttled`] when throttling refuses it locally.
    pub fn start(
        &self,
        origin: impl AsRef<str>,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Call, Error> {
        let now = self.now();
        self.start_at(&mut self.state(), now, origin.as_ref(), method, headers)
    }

    /// [`start`](Self::start) and the first [`before_attempt`](Self::before_attempt) at
    /// once: one reading of the clock and one hold of the policy's lock where the two
    /// take two of each (what the middlewares do first for every request).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start) and [`before_attempt`](Self::before_attempt).
    ///
    /// # Examples
    ///
    /// ```
    /// use http::{HeaderMap, Method};
    /// use ratewarden_client::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::default();
    /// let (call, hold) = policy.begin("http://api.test", &Method::GET, &HeaderMap::new())?;
    /// assert_eq!((call.attempts(), hold), (1, Duration::ZERO));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin(
        &self,
        origin: impl AsRef<str>,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<(Call, Duration), Error> {
        let now = self.now();
        let mut state = self.state();
        let mut call = self.start_at(&mut state, now, origin.as_ref(), method, headers)?;
        let hold = self.hold_at(&mut state, now, &mut call);
        drop(state);
        let hold = self.attempt_at(now, hold, &mut call)?;
        Ok((call, hold))
    }

    fn start_at(
        &self,
        state: &mut State,
        now: u64,
        origin: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Call, Error> {
        let c = &self.inner.counters;
        Counters::bump(&c.requests, 1);
        let (origin, slot) = state.slot(origin);
        let generation = state.generation;
        let State {
            rng,
            budget,
            per_origin,
            ..
        } = state;
        if let Some(budget) = budget {
            budget.deposit(now);
        }
        if let Some(template) = &self.inner.settings.throttle {
            let throttle = per_origin[slot]
                .throttle
                .get_or_insert_with(|| template.clone());
            if !throttle.admit(now, rng) {
                Counters::bump(&c.throttled, 1);
                let accept_probability = 1.0 - throttle.reject_probability(now);
                return Err(Error::Throttled {
                    origin: origin.to_string(),
                    accept_probability,
                });
            }
        }
        Ok(Call {
            origin,
            slot,
            generation,
            started: now,
            attempt_at: now,
            attempts: 0,
            repeatable: is_repeatable(method, headers),
        })
    }

    /// Begins an attempt of `call`: how long to hold it first (pacing, a `Retry-After`, the
    /// adaptive rate).
    ///
    /// # Errors
    ///
    /// [`Error::Deadline`] when the hold would end past the call's deadline.
    pub fn before_attempt(&self, call: &mut Call) -> Result<Duration, Error> {
        let now = self.now();
        let hold = self.hold_at(&mut self.state(), now, call);
        self.attempt_at(now, hold, call)
    }

    /// How long pacing and the adaptive rate hold an attempt of `call` at `now`.
    fn hold_at(&self, state: &mut State, now: u64, call: &mut Call) -> Duration {
        let settings = &self.inner.settings;
        let origin = state.origin_of(call);
        let mut hold = Duration::ZERO;
        if settings.pacing {
            hold = origin.pace.reserve(now);
        }
        if settings.adaptive_rate {
            hold = hold.max(origin.rate.acquire(now));
        }
        hold
    }

    /// Begins an attempt of `call` held `hold` at `now`, unless that ends past the deadline.
    fn attempt_at(&self, now: u64, hold: Duration, call: &mut Call) -> Result<Duration, Error> {
        let settings = &self.inner.settings;
        if let Some(deadline) = settings.deadline {
            if now.saturating_add(ns(hold)) > call.started.saturating_add(ns(deadline)) {
                Counters::bump(&self.inner.counters.deadline_give_ups, 1);
                return Err(Error::Deadline {
                    origin: call.origin.to_string(),
                    deadline,
                    attempts: call.attempts,
                });
            }
        }
        let c = &self.inner.counters;
        if !hold.is_zero() {
            Counters::bump(&c.paced, 1);
            Counters::bump(&c.pacing_ns, ns(hold));
        }
        call.attempts += 1;
        call.attempt_at = now.saturating_add(ns(hold));
        Counters::bump(&c.attempts, 1);
        if call.attempts > 1 {
            Counters::bump(&c.retries, 1);
        }
        Ok(hold)
    }

    /// Whether another attempt could follow the one `call` has just begun (a repeatable
    /// request with attempts left): whether a middleware needs a copy of the request to
    /// send again. When it does not, sending the original saves copying it.
    pub fn may_retry(&self, call: &Call) -> bool {
        call.repeatable && call.attempts < self.inner.settings.max_attempts
    }

    /// The time `call` has left before its deadline (`None`: no deadline); an attempt in
    /// flight should be cut off after it.
    pub fn time_left(&self, call: &Call) -> Option<Duration> {
        self.time_left_at(call, self.now())
    }

    /// [`time_left`](Self::time_left) as the attempt just begun is sent, read without the
    /// clock: for a middleware that did not hold the attempt, so that no time has passed
    /// since [`before_attempt`](Self::before_attempt) read it (a held attempt has slept for
    /// at least its hold, maybe longer: read the clock with `time_left` then). Only the
    /// reqwest middleware reads it (the tower layer arms no per-attempt timer).
    #[cfg(feature = "reqwest")]
    pub(crate) fn time_left_unheld(&self, call: &Call) -> Option<Duration> {
        self.time_left_at(call, call.attempt_at)
    }

    fn time_left_at(&self, call: &Call, now: u64) -> Option<Duration> {
        let deadline = self.inner.settings.deadline?;
        let end = call.started.saturating_add(ns(deadline));
        Some(Duration::from_nanos(end.saturating_sub(now)))
    }

    /// Runs an attempt that has `left` before its call's deadline (see
    /// [`time_left`](Self::time_left)), cut off with [`Cut`] if it is not done by then
    /// (the middleware answers [`deadline_error`](Self::deadline_error)). The policy
    /// watches every attempt's deadline in one task per tokio runtime rather than arming a
    /// timer for each (see `watchdog.rs` for its precision: tokio's timer's, plus one task
    /// wakeup). Not an `async fn` of its own: a layer of future less to build and move.
    pub(crate) fn within<'a, F: std::future::Future + 'a>(
        &'a self,
        left: Duration,
        attempt: F,
    ) -> impl std::future::Future<Output = Result<F::Output, Cut>> + 'a {
        self.inner.watchdog.within(left, attempt)
    }

    /// Attempts in flight whose deadline the policy is watching (those not done on their
    /// first poll). For tests and diagnostics: it returns to 0 when every request has
    /// ended or been dropped.
    pub fn watched_attempts(&self) -> usize {
        self.inner.watchdog.watched()
    }

    /// The deadline error for `call` (an attempt outlived it).
    pub fn deadline_error(&self, call: &Call) -> Error {
        Counters::bump(&self.inner.counters.deadline_give_ups, 1);
        Error::Deadline {
            origin: call.origin.to_string(),
            deadline: self.inner.settings.deadline.unwrap_or_default(),
            attempts: call.attempts,
        }
    }

    /// Takes in how an attempt of `call` ended, and says whether to retry it and after how
    /// long.
    ///
    /// Rate limit fields and `Retry-After` feed pacing whatever the status (a malformed
    /// one is ignored: the response still reaches the caller). A retry needs a retryable
    /// outcome (429, 503, a connect error, a timeout), a repeatable request, an attempt
    /// left, time before the deadline and a retry in the budget.
    pub fn after_attempt(&self, call: &mut Call, attempt: Attempt<'_>) -> Next {
        let now = self.now();
        let settings = &self.inner.settings;
        let c = &self.inner.counters;
        let retryable = attempt.is_retryable();
        let mut state = self.state();
        let origin = state.origin_of(call);
        let mut server_wait = None;
        if let Attempt::Response { headers, .. } = attempt {
            if retryable {
                Counters::bump(&c.refused_answers, 1);
            }
            // Found in one walk over the answer's fields, where a lookup each cost more.
            let fields = AnswerFields::of(headers);
            server_wait = fields
                .retry_after
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after(v, now).ok());
            if settings.pacing {
                // Read in place: parsing into owned quotas cost every answer allocations.
                origin
                    .pace
                    .observe_fields(headers, &fields, server_wait, now);
            }
        }
        if settings.throttle.is_some() || settings.adaptive_rate {
            if let Some(throttle) = &mut origin.throttle {
                throttle.record(now, !retryable);
            }
            if settings.adaptive_rate {
                origin.rate.observe(now, retryable);
            }
        }
        if !retryable {
            return Next::Done;
        }
        if !call.repeatable {
            Counters::bump(&c.not_repeatable, 1);
            return Next::Done;
        }
        if call.attempts >= settings.max_attempts {
            return Next::Done;
        }
        let backoff = settings.backoff.wait(call.attempts, &mut state.rng);
        let wait = backoff.max(server_wait.unwrap_or_default());
        if let Some(deadline) = settings.deadline {
            if now.saturating_add(ns(wait)) >= call.started.saturating_add(ns(deadline)) {
                Counters::bump(&c.deadline_give_ups, 1);
                return Next::Done;
            }
        }
        if let Some(budget) = &mut state.budget {
            if !budget.withdraw(now) {
                Counters::bump(&c.budget_refusals, 1);
                return Next::Done;
            }
        }
        Next::Retry(wait)
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// The quota `origin` last reported for `policy` (`None`: the legacy fields).
    pub fn quota(&self, origin: &str, policy: Option<&str>) -> Option<Quota> {
        let state = self.state();
        let slot = *state.slots.get(origin)?;
        state.per_origin[slot].pace.quota(policy).cloned()
    }
}

#[cfg(all(test, feature = "reqwest"))]
mod tests {
    use super::*;
    use ratewarden_core::ManualClock;

    /// The middleware's reading without the clock is `time_left`'s while no time passes,
    /// on the first attempt and on a retry; a held attempt reads the clock instead.
    #[test]
    fn time_left_unheld_is_time_left_read_as_the_attempt_begins() {
        let clock = ManualClock::new(1_000_000_000);
        let policy = Policy::new(Settings::default(), Arc::new(clock.clone()));
        let (mut call, hold) = policy
            .begin("http://a.test", &Method::GET, &HeaderMap::new())
            .unwrap();
        assert!(hold.is_zero());
        assert_eq!(policy.time_left_unheld(&call), policy.time_left(&call));
        assert_eq!(policy.time_left(&call), Some(Duration::from_secs(30)));
        clock.advance(Duration::from_secs(7));
        policy.before_attempt(&mut call).unwrap();
        assert_eq!(policy.time_left_unheld(&call), policy.time_left(&call));
        assert_eq!(policy.time_left(&call), Some(Duration::from_secs(23)));
        let no_deadline = Policy::new(
            Settings {
                deadline: None,
                ..Settings::default()
            },
            Arc::new(clock),
        );
        let (call, _) = no_deadline
            .begin("http://a.test", &Method::GET, &HeaderMap::new())
            .unwrap();
        assert_eq!(no_deadline.time_left_unheld(&call), None);
    }
}
