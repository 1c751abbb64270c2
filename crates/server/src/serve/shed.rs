//! Load shedding: a server-wide cap on requests in flight, with a share kept for critical
//! routes, and a bound on how long a request may wait for a place.
//!
//! This protects the server, not a budget of the caller's: whoever asks beyond it gets a 503.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

pub(crate) struct Shedder {
    in_flight: AtomicUsize,
    max: usize,
    reserve: usize,
    timeout: Duration,
    freed: Notify,
    /// Requests waiting for a place: a freed place wakes them only when there are some.
    waiting: AtomicUsize,
}

/// A place in flight, given back when dropped.
pub(crate) struct Slot {
    shedder: Arc<Shedder>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SeqCst on both sides (here, and a waiter's count then look): either the waiter
        // sees this place free, or this sees the waiter and wakes it.
        self.shedder.in_flight.fetch_sub(1, Ordering::SeqCst);
        // Waiters of both kinds look again: a critical one may fit where another may not.
        if self.shedder.waiting.load(Ordering::SeqCst) > 0 {
            self.shedder.freed.notify_waiters();
        }
    }
}

impl Shedder {
    pub(crate) fn new(max: usize, reserve: usize, timeout: Duration) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            max,
            reserve: reserve.min(max.saturating_sub(1)),
            timeout,
            freed: Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Takes a place, waiting up to the queue timeout for one; `None` means shed. Others
    /// may take the last `reserve` places only when `critical`.
    pub(crate) async fn enter(self: &Arc<Self>, critical: bool) -> Option<Slot> {
        let cap = if critical {
            self.max
        } else {
            self.max - self.reserve
        };
        if let Some(slot) = self.try_enter(cap) {
            return Some(slot);
        }
        if self.timeout.is_zero() {
            return None;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(self);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a place freed in between is not missed.
            freed.as_mut().enable();
            if let Some(slot) = self.try_enter(cap) {
                return Some(slot);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return self.try_enter(cap);
            }
        }
    }

    fn try_enter(self: &Arc<Self>, cap: usize) -> Option<Slot> {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                shedder: Arc::clone(self),
            })
    }
}

/// Counts a waiter out however its wait ends (a place, the deadline, or the client gone).
struct Waiting<'a>(&'a Shedder);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn critical_requests_use_the_reserve_and_others_wait_then_shed() {
        let shedder = Arc::new(Shedder::new(3, 1, Duration::from_millis(50)));
        let a = shedder.enter(false).await.unwrap();
        let _b = shedder.enter(false).await.unwrap();
        // Two of three taken: the last is kept for critical routes.
        let start = tokio::time::Instant::now();
        assert!(shedder.enter(false).await.is_none());
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        let c = shedder.enter(true).await.unwrap();
        assert!(shedder.enter(true).await.is_none());
        assert_eq!(shedder.in_flight(), 3);
        // A waiter gets the place freed while it waits.
        let waiter = {
            let shedder = Arc::clone(&shedder);
            tokio::spawn(async move { shedder.enter(false).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(c);
        drop(a);
        assert!(waiter.await.unwrap());
    }
}
