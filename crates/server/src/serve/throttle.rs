//! A log line that may repeat for every request (a refused proxy), written at most once per
//! period with the count of those left out, so a misconfiguration is seen without flooding.

use std::sync::atomic::{AtomicU64, Ordering};

/// One kind of repeating log line: its next allowed time and what it left out since.
pub(crate) struct Throttle {
    every_ns: u64,
    /// The clock's time from which the next line may be written (0: the first may).
    next_ns: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// At most one line per `every_ns` nanoseconds.
    pub(crate) const fn new(every_ns: u64) -> Self {
        Self {
            every_ns,
            next_ns: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written at `now`: then `Some` of the lines left out since the
    /// last one, else `None` (and this one is counted as left out).
    pub(crate) fn admit(&self, now: u64) -> Option<u64> {
        let next = self.next_ns.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ns
                .compare_exchange(
                    next,
                    now.saturating_add(self.every_ns),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_counting_the_rest() {
        let t = Throttle::new(10);
        assert_eq!(t.admit(100), Some(0));
        assert_eq!(t.admit(105), None);
        assert_eq!(t.admit(109), None);
        assert_eq!(t.admit(110), Some(2));
        assert_eq!(t.admit(111), None);
    }
}
