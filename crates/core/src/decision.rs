//! What a limiter says about one request.

use std::time::Duration;

/// The verdict on one request.
///
/// Being limited is an outcome, not an error: every variant carries what a caller needs to
/// answer the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The request may proceed now, and has been charged.
    Allowed,
    /// The request has been charged and may proceed after `delay_ns` (a leaky-bucket queue
    /// holds it until its turn). A zero delay is reported as [`Outcome::Allowed`].
    Delayed {
        /// How long to hold the request before letting it through, in nanoseconds.
        delay_ns: u64,
    },
    /// Over the limit: nothing was charged. The same request will be allowed after
    /// `retry_after_ns` if nothing else is charged meanwhile, and not a nanosecond earlier.
    Limited {
        /// The exact wait until the request would conform, in nanoseconds.
        retry_after_ns: u64,
    },
    /// The request costs more than the limit could ever allow at once (a cost above the
    /// burst, the window limit or the queue's capacity). Waiting will not help.
    CostTooHigh,
}

/// A limiter's answer for one request, with the numbers to report to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Decision {
    /// Allowed, delayed, limited, or impossible.
    pub outcome: Outcome,
    /// The limit the request was checked against: the burst of a bucket, the count of a
    /// window, the capacity of a queue.
    pub limit: u64,
    /// Units that could still be spent right now, after this decision.
    pub remaining: u64,
    /// Nanoseconds until the limit is fully available again if nothing else is charged (the
    /// state has returned to that of an unseen key).
    pub reset_after_ns: u64,
}

impl Decision {
    /// A decision, as an algorithm or a store reports it. A zero delay is reported as
    /// allowed, and `remaining` is capped at `limit`.
    pub fn new(outcome: Outcome, limit: u64, remaining: u64, reset_after_ns: u64) -> Self {
        let outcome = match outcome {
            Outcome::Delayed { delay_ns: 0 } => Outcome::Allowed,
            other => other,
        };
        Self {
            outcome,
            limit,
            remaining: remaining.min(limit),
            reset_after_ns,
        }
    }

    /// Whether the request may proceed (now, or after a delay).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{Algorithm, FixedWindow};
    /// use std::time::Duration;
    ///
    /// let fw = FixedWindow::new(1, Duration::from_secs(1))?;
    /// let mut state = Default::default();
    /// assert!(fw.decide(&mut state, 0, 1).is_allowed());
    /// assert!(!fw.decide(&mut state, 0, 1).is_allowed());
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    // Inlined across crates (as the accessors below): read on every decision, and a call
    // for a comparison costs more than the comparison.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed | Outcome::Delayed { .. })
    }

    /// Nanoseconds to wait before retrying, when limited.
    #[inline]
    pub fn retry_after_ns(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Limited { retry_after_ns } => Some(retry_after_ns),
            _ => None,
        }
    }

    /// How long to wait before retrying, when limited.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match self.outcome {
            Outcome::Limited { retry_after_ns } => Some(Duration::from_nanos(retry_after_ns)),
            _ => None,
        }
    }

    /// Time until the limit is fully available again (see [`reset_after_ns`](Self::reset_after_ns)).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// How long to hold an allowed request (zero unless a queue delays it).
    #[inline]
    pub fn delay(&self) -> Duration {
        match self.outcome {
            Outcome::Delayed { delay_ns } => Duration::from_nanos(delay_ns),
            _ => Duration::ZERO,
        }
    }
}
