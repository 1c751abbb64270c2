//! A clock on tokio's time, for tests under `tokio::time::pause`.

use ratewarden_core::Clock;

/// A clock that reads tokio's time: under a test's paused time it moves only when tokio's
/// does, so refills and queue delays line up with `tokio::time::advance` and no test sleeps
/// for them. Production services keep the default, `RealClock`.
///
/// # Examples
///
/// ```
/// use ratewarden_core::Clock;
/// use ratewarden_tower::TokioClock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new(1_000);
/// tokio::time::advance(std::time::Duration::from_millis(1)).await;
/// assert_eq!(clock.now(), 1_000 + 1_000_000);
/// # }
/// ```
#[derive(Debug)]
pub struct TokioClock {
    base_ns: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `base_ns` now (nanoseconds since the Unix epoch, as every clock).
    pub fn new(base_ns: u64) -> Self {
        Self {
            base_ns,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.base_ns.saturating_add(elapsed)
    }
}
