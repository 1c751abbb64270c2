//! A request waiting in an adaptive rule's fair queue: its turn (what a release hands it),
//! the future that waits for it, and the timer a front door lends the engine to wait with.
//!
//! The engine has no runtime of its own: a front door that can hold a request (the
//! gateway, the tower layer) passes a [`Timer`]; one that cannot (the decision API,
//! forward-auth) decides without one, and a full limit refuses at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ratewarden_core::adaptive::{Criticality, Ticket};

use super::limiters::{Leaving, Limiters};
use super::reports::ShedReason;
use super::turn::Turn;

/// A clock and a timer on it, lent to the engine by a front door that can hold a request
/// while it waits in a queue.
///
/// # Examples
///
/// ```
/// use std::future::Future;
/// use std::pin::Pin;
/// use ratewarden_policy::Timer;
///
/// /// Never waits: every wait ends at once (a queue's waiter is then refused).
/// struct Impatient;
///
/// impl Timer for Impatient {
///     fn now(&self) -> u64 {
///         0
///     }
///     fn sleep(&self, _ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
///         Box::pin(std::future::ready(()))
///     }
/// }
/// ```
pub trait Timer: Send + Sync {
    /// The time now, in nanoseconds, on the clock the engine decides with.
    fn now(&self) -> u64;

    /// A future ready `ns` nanoseconds from now.
    fn sleep(&self, ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Waits for a turn until the deadline. Dropped before it ends (the client went away),
/// it leaves the queue, or gives back the place it was just granted.
pub(crate) struct Wait<'a> {
    pub(crate) limiters: &'a Limiters,
    pub(crate) key: &'a str,
    pub(crate) class: Criticality,
    pub(crate) turn: Arc<Turn>,
    pub(crate) timer: &'a dyn Timer,
    pub(crate) deadline: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// When the deadline falls, on the timer's clock.
    pub(crate) deadline_at: u64,
    /// A sleep until the next place held under the key lapses (its holder gone, no
    /// release to come), when that falls before the deadline.
    pub(crate) lapse: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    pub(crate) done: bool,
}

/// How many lapses one poll hands on before it yields (each takes the places lapsed by
/// then out, so the next is later; the bound only keeps one poll short).
const LAPSES_PER_POLL: usize = 4;

impl Future for Wait<'_> {
    type Output = Result<Ticket, ShedReason>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut lapses = 0;
        loop {
            if let Some(ticket) = self.turn.poll(cx.waker()) {
                self.done = true;
                return Poll::Ready(Ok(ticket));
            }
            if self.deadline.as_mut().poll(cx).is_ready() {
                break;
            }
            // A place whose holder is gone lapses at its lease's end, and no release comes
            // to hand it on: a waiter wakes then to do it (it waited out its whole
            // `max_wait` before, and was shed beside a free place).
            if self.lapse.is_none() {
                let now = self.timer.now();
                match self.limiters.next_lapse(self.key) {
                    Some(at) if at < self.deadline_at => {
                        self.lapse = Some(self.timer.sleep(at.saturating_sub(now)));
                    }
                    _ => return Poll::Pending,
                }
            }
            let Some(lapse) = self.lapse.as_mut() else {
                return Poll::Pending;
            };
            if lapse.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.lapse = None;
            let now = self.timer.now();
            self.limiters.lapse(self.key, now);
            lapses += 1;
            if lapses == LAPSES_PER_POLL {
                // Let the others run; this waiter is polled again at once.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        self.done = true;
        let now = self.timer.now();
        // Granted just as the deadline passed: it goes in rather than waste the place.
        let left = self
            .limiters
            .leave(self.key, self.class, &self.turn, now, Leaving::TimedOut);
        Poll::Ready(left.ok_or(ShedReason::WaitedTooLong))
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if !self.done {
            let now = self.timer.now();
            self.limiters
                .leave(self.key, self.class, &self.turn, now, Leaving::Gone);
        }
    }
}
