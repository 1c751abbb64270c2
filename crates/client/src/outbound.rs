//! The outbound limiter: calls to a partner queued to the partner's rate, in process or
//! across a fleet.

use std::sync::Arc;
use std::time::Duration;

use ratewarden_core::{AsyncStore, Clock, LeakyQueue, Limit, Outcome, Rate, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig};

use crate::Error;

/// A shared queue for calls to a partner with its own limit (an SMS gateway, a payment
/// provider): [`acquire`](Self::acquire) hands each caller its slot and holds it until then,
/// so calls leave at the partner's rate; a caller whose slot is further away than `max_wait`
/// gets [`Error::MaxWait`] at once instead of waiting.
///
/// The queue is the leaky-queue algorithm (`AlgorithmKind::LeakyQueue`, nginx's
/// `limit_req burst=N` without `nodelay`) with room for `max_wait x rate` waiting callers, so
/// an admitted caller never waits longer than `max_wait`. On the in-process store it paces
/// one process's tasks; on a `RedisStore` every process of a fleet takes its slot from one
/// queue (the decision is one atomic script on Redis's clock), so the fleet together sends
/// at the partner's rate.
///
/// # Examples
///
/// ```
/// use ratewarden_client::Outbound;
/// use ratewarden_core::{ManualClock, Rate};
/// use ratewarden_memory::MemoryStore;
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 5 a second, waiting at most 1 s: one goes, five queue, the next is told at once.
/// let clock = Arc::new(ManualClock::new(0));
/// let store = MemoryStore::new(Default::default());
/// let sms = Outbound::new("sms", Rate::per_second(5)?, Duration::from_secs(1), store, clock)?;
/// let mut waits = Vec::new();
/// for _ in 0..6 {
///     waits.push(sms.reserve().await?); // `acquire` would also wait
/// }
/// assert_eq!(waits[1], Duration::from_millis(200));
/// assert_eq!(waits[5], Duration::from_secs(1));
/// assert!(sms.reserve().await.is_err());
/// # Ok(()) }
/// ```
pub struct Outbound<S> {
    partner: String,
    limit: Limit,
    max_wait: Duration,
    store: Arc<S>,
    clock: Arc<dyn Clock>,
}

// By hand: clones share the store whether or not it is `Clone`, and the clock has no
// `Debug`.
impl<S> Clone for Outbound<S> {
    fn clone(&self) -> Self {
        Self {
            partner: self.partner.clone(),
            limit: self.limit.clone(),
            max_wait: self.max_wait,
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
        }
    }
}

impl<S> std::fmt::Debug for Outbound<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("partner", &self.partner)
            .field("limit", &self.limit)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

impl Outbound<MemoryStore> {
    /// A queue for `partner` in this process, on the real clock.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `max_wait x rate` is out of range.
    pub fn local(partner: &str, rate: Rate, max_wait: Duration) -> Result<Self, Error> {
        Self::new(
            partner,
            rate,
            max_wait,
            MemoryStore::new(StoreConfig::default()),
            Arc::new(RealClock::new()),
        )
    }
}

impl<S: AsyncStore> Outbound<S> {
    /// A queue for `partner` sending at `rate`, holding callers at most `max_wait`, kept
    /// in `store` (a `RedisStore` for a fleet), reading time from `clock` (a Redis store
    /// reads Redis's instead, unless told otherwise).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `max_wait x rate` is out of range.
    pub fn new(
        partner: &str,
        rate: Rate,
        max_wait: Duration,
        store: S,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Error> {
        // Callers queued behind the one going now: the last of them leaves `waiting` rate
        // intervals from now, which must not be past `max_wait`.
        let interval = rate.period_ns() as u128;
        let waiting = max_wait.as_nanos() * u128::from(rate.count()) / interval.max(1);
        let waiting = u64::try_from(waiting).map_err(|_| Error::Config {
            what: "outbound max_wait",
            reason: format!(
                "{max_wait:?} at {} a {:?} is too many callers",
                rate.count(),
                rate.period()
            ),
        })?;
        let queue = LeakyQueue::new(rate, waiting).map_err(|e| Error::Config {
            what: "outbound rate",
            reason: e.to_string(),
        })?;
        Ok(Self {
            partner: partner.to_owned(),
            limit: Limit::from(queue),
            max_wait,
            store: Arc::new(store),
            clock,
        })
    }

    /// The partner's name (the key of its queue in the store).
    pub fn partner(&self) -> &str {
        &self.partner
    }

    /// Takes the next slot: how long from now the caller must hold its call, at most
    /// `max_wait`. Does not wait (see [`acquire`](Self::acquire)).
    ///
    /// # Errors
    ///
    /// [`Error::MaxWait`] when the queue is full, [`Error::Store`] when the store fails.
    pub async fn reserve(&self) -> Result<Duration, Error> {
        let now = self.clock.now();
        let decision = self
            .store
            .decide(&self.limit, &self.partner, now, 1)
            .await
            .map_err(|e| Error::Store {
                partner: self.partner.clone(),
                source: Box::new(e),
            })?;
        match decision.outcome {
            Outcome::Allowed => Ok(Duration::ZERO),
            Outcome::Delayed { delay_ns } => Ok(Duration::from_nanos(delay_ns)),
            Outcome::Limited { retry_after_ns } => Err(Error::MaxWait {
                partner: self.partner.clone(),
                wait: Duration::from_nanos(retry_after_ns).saturating_add(self.max_wait),
                max_wait: self.max_wait,
            }),
            Outcome::CostTooHigh => Err(Error::MaxWait {
                partner: self.partner.clone(),
                wait: Duration::MAX,
                max_wait: self.max_wait,
            }),
        }
    }

    /// Takes the next slot and waits for it: returns when the call may go, with how long it
    /// waited.
    ///
    /// # Errors
    ///
    /// As [`reserve`](Self::reserve): at once, without waiting.
    pub async fn acquire(&self) -> Result<Duration, Error> {
        let wait = self.reserve().await?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(wait)
    }
}
