//! The deadline on a Redis call, and whom to blame when it passes.
//!
//! Under overload the calling process itself can be the slow part: its timer fires late,
//! and a reply Redis sent in time sits unread in the socket because the task that reads it
//! has not been run. Counting such a miss against Redis opens the breaker on a healthy
//! Redis, and every rule fails open just when the process is busiest: an attacker could
//! switch limiting off by overloading it.
//!
//! So a timer that fires well past its deadline is taken as evidence that the caller was
//! not running, not that Redis was slow: the call keeps waiting for the reply it already
//! asked for, for another deadline, a bounded number of times. A miss is blamed on Redis
//! only when the caller woke on time to see it. (The client does not report when a command
//! was actually written, so the time Redis took cannot be measured directly; the lateness
//! of the caller's own timer can.)

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How many more deadlines a call gets after timers that fired late. Bounds the wait of a
/// saturated caller on a Redis that is also down: at most this many deadlines more (plus
/// however late each timer fires), after which the call fails without blaming Redis.
const LATE_REARMS: u32 = 4;

/// The longest a call waits on its reply before [`within`] gives up, timers on time: the
/// deadline, then one more for each rearm, and one to spare. The Redis client's own
/// timeouts are set no shorter (see `store.rs`), so they never end a call our deadline
/// would have let wait: their error would blame Redis for what may be a saturated caller,
/// and with a deadline over 100 ms their 500 ms default cut calls short of it.
pub(crate) fn longest_wait(deadline: Duration) -> Duration {
    deadline.saturating_mul(LATE_REARMS + 2)
}

/// Who missed the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blame {
    /// The caller woke on time and Redis had not answered: Redis is slow or unreachable.
    Redis,
    /// Every timer fired late: the calling process was saturated, and whether Redis would
    /// have answered in time is unknown.
    Caller,
}

/// How late a timer may fire and still count as on time: half the deadline, and at least
/// 2 ms (tokio's timers tick in milliseconds, and a busy but healthy process runs a little
/// behind).
pub(crate) fn lateness_allowed(deadline: Duration) -> Duration {
    (deadline / 2).max(Duration::from_millis(2))
}

/// Runs `call` within `deadline`, rearming the deadline while its timer fires late.
pub(crate) async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = T>,
) -> Result<T, Blame> {
    let mut call = std::pin::pin!(call);
    let slack = lateness_allowed(deadline);
    let mut due = Instant::now() + deadline;
    for _ in 0..=LATE_REARMS {
        // `timeout_at` polls the call before its timer, so a reply that arrived while the
        // caller was not running is taken, however late the timer fires.
        match tokio::time::timeout_at(due, call.as_mut()).await {
            Ok(value) => return Ok(value),
            Err(_) => {
                let fired = Instant::now();
                if fired.saturating_duration_since(due) <= slack {
                    return Err(Blame::Redis);
                }
                tracing::debug!(
                    late = %ratewarden_core::ReadableDuration(fired.saturating_duration_since(due)),
                    deadline = %ratewarden_core::DisplayDuration(deadline),
                    "the deadline timer fired late: the process is saturated; waiting on for the reply"
                );
                due = fired + deadline;
            }
        }
    }
    Err(Blame::Caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_millis(10);

    #[tokio::test(start_paused = true)]
    async fn a_timer_on_time_blames_redis() {
        let never = std::future::pending::<()>();
        assert_eq!(within(DEADLINE, never).await, Err(Blame::Redis));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_that_arrives_while_the_caller_was_stalled_is_taken() {
        // The reply comes at 55 ms; the caller's clock jumps 50 ms past a 10 ms deadline
        // at once, as a runtime blocked by other tasks sees it.
        let reply = tokio::time::sleep(Duration::from_millis(55));
        let (answer, ()) = tokio::join!(within(DEADLINE, reply), async {
            tokio::time::advance(Duration::from_millis(50)).await;
        });
        assert_eq!(answer, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_caller_that_then_waits_on_time_blames_redis() {
        // Late once, then a full deadline on time without a reply: Redis is the slow one.
        let never = std::future::pending::<()>();
        let (answer, ()) = tokio::join!(within(DEADLINE, never), async {
            tokio::time::advance(Duration::from_millis(50)).await;
        });
        assert_eq!(answer, Err(Blame::Redis));
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_stalled_at_every_timer_gives_up_without_blaming_redis() {
        let never = std::future::pending::<()>();
        let (answer, ()) = tokio::join!(within(DEADLINE, never), async {
            for _ in 0..=LATE_REARMS {
                tokio::time::advance(Duration::from_millis(50)).await;
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(answer, Err(Blame::Caller));
    }
}
