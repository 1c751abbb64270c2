//! Where "now" comes from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time, in nanoseconds.
///
/// Algorithms never call a clock themselves; the code that owns a limiter reads the clock once
/// per decision and passes the value in. Readings are nanoseconds since the Unix epoch, so that
/// calendar quotas can find the start of the month; they never go backwards.
pub trait Clock: Send + Sync {
    /// The current time in nanoseconds since the Unix epoch.
    fn now(&self) -> u64;
}

/// The real clock: monotonic, anchored to the wall clock once at creation.
///
/// Readings advance with [`Instant`] (so NTP steps never move them backwards) and start from
/// the system time at construction (so calendar quotas see the real date).
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Clock, RealClock};
///
/// let clock = RealClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RealClock {
    origin: Instant,
    origin_unix_ns: u64,
}

impl RealClock {
    /// Anchors a new real clock at the current system time.
    // The one place in the workspace allowed to read ambient time (see clippy.toml).
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Self {
        let origin = Instant::now();
        let origin_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Self {
            origin,
            origin_unix_ns,
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    #[inline]
    fn now(&self) -> u64 {
        self.origin_unix_ns
            .saturating_add(nanos(self.origin.elapsed()))
    }
}

/// A clock that only moves when told to; for tests, simulations and benchmarks.
///
/// Clones share the same time, so a test can hand one clone to a limiter and advance another.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(0);
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(200));
/// assert_eq!(shared.now(), 200_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock reading `now` nanoseconds.
    pub fn new(now: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(now)),
        }
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    #[inline]
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        let before = self.now.fetch_add(by, Ordering::Relaxed);
        if before.checked_add(by).is_none() {
            // Saturate rather than wrap around to the distant past.
            self.now.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Sets the clock to `now` nanoseconds. Unlike a real clock it may go backwards, so tests
    /// can check that algorithms survive a clock that does.
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

/// A duration in whole nanoseconds, saturating; in 64 bits, since `as_nanos` goes through u128.
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// A clock that reads tokio's time: under a test's paused time
/// (`tokio::time::pause`) it moves only when tokio's does, so refills and queue delays line
/// up with `tokio::time::advance` and no test sleeps for them. Services keep [`RealClock`].
/// With the `tokio` feature; the server and the tower layer re-export it.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new(1_000);
/// tokio::time::advance(std::time::Duration::from_millis(1)).await;
/// assert_eq!(clock.now(), 1_000 + 1_000_000);
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct TokioClock {
    base_ns: u64,
    start: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock reading `base_ns` now (nanoseconds since the Unix epoch, as every clock).
    pub fn new(base_ns: u64) -> Self {
        Self {
            base_ns,
            start: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> u64 {
        self.base_ns.saturating_add(nanos(self.start.elapsed()))
    }
}
