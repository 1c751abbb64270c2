//! Counts over a sliding window, in slots: what the retry budget and adaptive throttling
//! both remember.

/// Slots per window: the window slides a tenth at a time (Finagle's budget does the same).
const SLOTS: usize = 10;

/// Two counts (`a`, `b`) over the last `window` nanoseconds, forgotten a slot at a time.
#[derive(Debug, Clone)]
pub(crate) struct SlidingCounts {
    slot_ns: u64,
    /// Per slot: its index (time / slot), and the counts in it.
    slots: [(u64, u64, u64); SLOTS],
}

impl SlidingCounts {
    /// Counts over `window_ns` (at least `SLOTS` nanoseconds).
    pub(crate) fn new(window_ns: u64) -> Self {
        Self {
            slot_ns: (window_ns / SLOTS as u64).max(1),
            slots: [(u64::MAX, 0, 0); SLOTS],
        }
    }

    fn slot(&mut self, now: u64) -> &mut (u64, u64, u64) {
        let index = now / self.slot_ns;
        let slot = &mut self.slots[(index % SLOTS as u64) as usize];
        if slot.0 != index {
            *slot = (index, 0, 0);
        }
        slot
    }

    /// Adds to the counts at `now`.
    pub(crate) fn add(&mut self, now: u64, a: u64, b: u64) {
        let slot = self.slot(now);
        slot.1 += a;
        slot.2 += b;
    }

    /// The counts of the slots still inside the window at `now`.
    pub(crate) fn totals(&self, now: u64) -> (u64, u64) {
        let current = now / self.slot_ns;
        let oldest = current.saturating_sub(SLOTS as u64 - 1);
        self.slots
            .iter()
            .filter(|s| s.0 != u64::MAX && (oldest..=current).contains(&s.0))
            .fold((0, 0), |(a, b), s| (a + s.1, b + s.2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_leave_the_window_a_slot_at_a_time() {
        let mut w = SlidingCounts::new(10_000);
        w.add(0, 5, 1);
        w.add(4_500, 2, 0);
        assert_eq!(w.totals(9_999), (7, 1));
        assert_eq!(w.totals(10_000), (2, 0), "slot 0 has left");
        assert_eq!(w.totals(13_999), (2, 0));
        assert_eq!(w.totals(14_000), (0, 0), "slot 4 has left");
    }
}
