//! The fixed window: one counter per key per window.

use std::num::NonZeroU64;
use std::time::Duration;

use super::Algorithm;
use crate::divisor::Divisor;
use crate::units::nonzero_duration_ns;
use crate::{Decision, Error, Outcome};

/// At most `limit` units per window, windows aligned to multiples of `window` since time zero.
///
/// One integer and one increment per key, but a burst straddling a window edge can pass
/// twice the limit in one window's length, and everyone throttled retries at the same reset.
/// A [`settle`](Algorithm::settle) beyond the limit blocks the key until the window ends; the
/// next window starts clean.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, FixedWindow};
/// use std::time::Duration;
///
/// let fw = FixedWindow::new(2, Duration::from_secs(1))?;
/// let mut state = Default::default();
/// assert!(fw.decide(&mut state, 900_000_000, 2).is_allowed());
/// let d = fw.decide(&mut state, 950_000_000, 1);
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(50)));
/// assert!(fw.decide(&mut state, 1_000_000_000, 2).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: NonZeroU64,
    window: Divisor,
}

/// A fixed window's state. The count only applies while `window` is the current window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    /// The index of the window the count belongs to (`now / window`).
    pub window: u64,
    /// Units charged in that window.
    pub count: u64,
}

impl FixedWindow {
    /// At most `limit` units per `window`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `limit` or `window` is zero; [`Error::TooLarge`] for a window over
    /// 2^64 ns.
    pub fn new(limit: u64, window: Duration) -> Result<Self, Error> {
        Ok(Self {
            limit: NonZeroU64::new(limit).ok_or(Error::Zero { field: "limit" })?,
            window: Divisor::new(nonzero_duration_ns(window, "window")?),
        })
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window.get())
    }

    /// The index of the window holding `now`, its count, and nanoseconds until it ends.
    fn current(&self, state: &FixedWindowState, now: u64) -> (u64, u64, u64) {
        let (index, into) = self.window.div_rem(now);
        let count = if state.window == index {
            state.count
        } else {
            0
        };
        (index, count, self.window.get() - into)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn decide(&self, state: &mut FixedWindowState, now: u64, cost: u64) -> Decision {
        let limit = self.limit.get();
        let (window, count, ends_in) = self.current(state, now);
        let (outcome, count) = if cost > limit {
            (Outcome::CostTooHigh, count)
        } else if count.saturating_add(cost) <= limit {
            let count = count.saturating_add(cost);
            *state = FixedWindowState { window, count };
            (Outcome::Allowed, count)
        } else {
            (
                Outcome::Limited {
                    retry_after_ns: ends_in,
                },
                count,
            )
        };
        let reset = if count == 0 { 0 } else { ends_in };
        Decision::new(outcome, limit, limit.saturating_sub(count), reset)
    }

    fn settle(&self, state: &mut FixedWindowState, now: u64, delta: i64) {
        let (window, count, _) = self.current(state, now);
        *state = FixedWindowState {
            window,
            count: count.saturating_add_signed(delta),
        };
    }

    fn is_fresh(&self, state: &FixedWindowState, now: u64) -> bool {
        self.current(state, now).1 == 0
    }

    fn limit(&self) -> u64 {
        self.limit.get()
    }
}
