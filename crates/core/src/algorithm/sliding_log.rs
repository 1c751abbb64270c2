//! The sliding window log: the time of every allowed request within the last window.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use super::{Algorithm, HeapSize};
use crate::divisor::Divisor;
use crate::units::nonzero_duration_ns;
use crate::{Decision, Error, Outcome};

/// Exactly at most `limit` units in any window of length `window`.
///
/// Keeps the time and cost of each allowed request, drops those older than a window, and counts
/// the rest: no rolling window ever holds more than `limit`. The state holds at most `limit`
/// entries (requests at the same nanosecond share one), so use it for small limits where a
/// mistake is costly: "5 OTP sends per phone per 15 minutes" is five timestamps.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, SlidingLog};
/// use std::time::Duration;
///
/// let log = SlidingLog::new(2, Duration::from_secs(1))?;
/// let mut state = Default::default();
/// assert!(log.decide(&mut state, 0, 1).is_allowed());
/// assert!(log.decide(&mut state, 500_000_000, 1).is_allowed());
/// // The first request ages out at exactly 1 s.
/// let d = log.decide(&mut state, 600_000_000, 1);
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(400)));
/// assert!(log.decide(&mut state, 1_000_000_000, 1).is_allowed());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: NonZeroU64,
    window: Divisor,
}

/// One logged charge: `cost` units at time `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// When, in nanoseconds.
    pub at: u64,
    /// How many units.
    pub cost: u64,
}

/// A sliding log's state: the charges of the last window, oldest first.
///
/// Boxed, so that the state of a key never seen is one null pointer and every algorithm's
/// state stays small enough for a store's slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    log: Option<Box<Log>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Log {
    entries: VecDeque<Entry>,
    /// The sum of `entries`' costs, kept so a decision need not add them up.
    total: u64,
}

/// The fewest entries a log makes room for at once.
const MIN_ENTRIES: usize = 4;

impl HeapSize for SlidingLogState {
    fn heap_bytes(&self) -> usize {
        self.log.as_deref().map_or(0, |log| {
            std::mem::size_of::<Log>() + log.entries.capacity() * std::mem::size_of::<Entry>()
        })
    }
}

static EMPTY: Log = Log {
    entries: VecDeque::new(),
    total: 0,
};

impl SlidingLogState {
    /// A state holding `entries` (oldest first), as a store would restore it.
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let entries: VecDeque<Entry> = entries.into_iter().collect();
        let total = entries.iter().fold(0u64, |t, e| t.saturating_add(e.cost));
        Self {
            log: Some(Box::new(Log { entries, total })),
        }
    }

    /// The logged charges, oldest first (some may have aged out since the last decision).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &Entry> {
        self.log().entries.iter()
    }

    fn log(&self) -> &Log {
        self.log.as_deref().unwrap_or(&EMPTY)
    }
}

impl SlidingLog {
    /// At most `limit` units in any `window`.
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

    /// Whether an entry still counts at `now`: the window is `(now - window, now]`.
    fn live(&self, entry: &Entry, now: u64) -> bool {
        entry.at.saturating_add(self.window.get()) > now
    }

    /// How many entries at the front have aged out at `now`, and what they cost.
    fn expired(&self, state: &SlidingLogState, now: u64) -> (usize, u64) {
        let mut cost = 0u64;
        let count = state
            .log()
            .entries
            .iter()
            .take_while(|e| !self.live(e, now))
            .inspect(|e| cost = cost.saturating_add(e.cost))
            .count();
        (count, cost)
    }

    fn evaluate(&self, state: &SlidingLogState, now: u64, cost: u64) -> (Outcome, u64) {
        let limit = self.limit.get();
        let (expired, expired_cost) = self.expired(state, now);
        let total = state.log().total.saturating_sub(expired_cost);
        if cost > limit {
            return (Outcome::CostTooHigh, total);
        }
        if total.saturating_add(cost) <= limit {
            return (Outcome::Allowed, total);
        }
        // Walk from the oldest live entry until enough has aged out.
        let mut left = total;
        for entry in state.log().entries.range(expired..) {
            left = left.saturating_sub(entry.cost);
            if left.saturating_add(cost) <= limit {
                let at = entry.at.saturating_add(self.window.get()) - now;
                return (Outcome::Limited { retry_after_ns: at }, total);
            }
        }
        unreachable!("with every entry aged out, a cost within the limit fits")
    }

    fn report(&self, outcome: Outcome, state: &SlidingLogState, now: u64, total: u64) -> Decision {
        let reset = state
            .log()
            .entries
            .back()
            .filter(|e| self.live(e, now))
            .map_or(0, |e| e.at.saturating_add(self.window.get()) - now);
        let limit = self.limit.get();
        Decision::new(outcome, limit, limit.saturating_sub(total), reset)
    }

    /// The most heap one key's log takes (see [`HeapSize`]): `limit` entries (each admitted
    /// unit is at most one) and the log's header. A store bounding its bytes needs room
    /// for this much per key.
    pub fn largest_heap_bytes(&self) -> usize {
        let entries = usize::try_from(self.limit.get())
            .unwrap_or(usize::MAX)
            .max(MIN_ENTRIES);
        entries
            .saturating_mul(std::mem::size_of::<Entry>())
            .saturating_add(std::mem::size_of::<Log>())
    }

    /// Drops what has aged out and logs `cost` at `now`, keeping the log ordered even if the
    /// clock stepped back.
    fn record(&self, state: &mut SlidingLogState, now: u64, cost: u64) {
        if state.log.is_none() && cost == 0 {
            return;
        }
        let log = state.log.get_or_insert_with(Box::default);
        while let Some(first) = log.entries.front().filter(|e| !self.live(e, now)) {
            log.total = log.total.saturating_sub(first.cost);
            log.entries.pop_front();
        }
        // A log that has emptied out gives back what it no longer needs, so that what the
        // store counts for it follows what the window holds.
        let (len, capacity) = (log.entries.len(), log.entries.capacity());
        if capacity > MIN_ENTRIES && len < capacity / 4 {
            log.entries.shrink_to((len * 2).max(MIN_ENTRIES));
        }
        if cost == 0 {
            return;
        }
        log.total = log.total.saturating_add(cost);
        match log.entries.back_mut() {
            Some(last) if last.at >= now => last.cost = last.cost.saturating_add(cost),
            _ => {
                if log.entries.len() == log.entries.capacity() {
                    // Doubling, but never past `limit` entries: the log's heap stays within
                    // `largest_heap_bytes`, what a store's bound is checked against.
                    let len = log.entries.len();
                    let room = usize::try_from(self.limit.get())
                        .unwrap_or(usize::MAX)
                        .saturating_sub(len);
                    log.entries
                        .reserve_exact(len.max(MIN_ENTRIES).min(room).max(1));
                }
                log.entries.push_back(Entry { at: now, cost });
            }
        }
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn decide(&self, state: &mut SlidingLogState, now: u64, cost: u64) -> Decision {
        let (outcome, mut total) = self.evaluate(state, now, cost);
        if outcome == Outcome::Allowed {
            self.record(state, now, cost);
            total = total.saturating_add(cost);
        }
        self.report(outcome, state, now, total)
    }

    fn peek(&self, state: &SlidingLogState, now: u64, cost: u64) -> Decision {
        let (outcome, total) = self.evaluate(state, now, cost);
        let total = if outcome == Outcome::Allowed {
            total.saturating_add(cost)
        } else {
            total
        };
        let mut decision = self.report(outcome, state, now, total);
        if outcome == Outcome::Allowed && cost > 0 {
            decision.reset_after_ns = self.window.get();
        }
        decision
    }

    fn settle(&self, state: &mut SlidingLogState, now: u64, delta: i64) {
        if delta >= 0 {
            self.record(state, now, delta.unsigned_abs());
            return;
        }
        self.record(state, now, 0);
        // A refund takes back the newest charges first.
        let Some(log) = state.log.as_deref_mut() else {
            return;
        };
        let mut refund = delta.unsigned_abs();
        while refund > 0 {
            let Some(last) = log.entries.back_mut() else {
                break;
            };
            let take = refund.min(last.cost);
            last.cost -= take;
            refund -= take;
            log.total = log.total.saturating_sub(take);
            if last.cost == 0 {
                log.entries.pop_back();
            }
        }
    }

    fn is_fresh(&self, state: &SlidingLogState, now: u64) -> bool {
        state
            .log()
            .entries
            .back()
            .is_none_or(|e| !self.live(e, now))
    }

    fn limit(&self) -> u64 {
        self.limit.get()
    }
}
