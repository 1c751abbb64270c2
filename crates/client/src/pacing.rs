//! Proactive pacing: spend what a server says is left evenly over the time it has left.

use std::collections::HashMap;
use std::time::Duration;

use crate::Quota;

/// What one origin last said, and when this client may next send to it.
#[derive(Debug, Clone, Default)]
pub struct OriginPace {
    /// The earliest time the next request may go (nanoseconds since the Unix epoch).
    next_at: u64,
    /// The spacing between requests the last answer asked for, in nanoseconds.
    gap: u64,
    /// Each policy's last reported quota, by name (`None`: the legacy fields).
    quotas: HashMap<Option<String>, Quota>,
}

/// Per-origin pacing.
///
/// With `r` requests remaining over `t` seconds, requests leave `t / r` apart instead of all
/// at once; with none remaining, the next one waits the whole `t`; a `Retry-After` holds
/// every request to that origin until it passes. The tightest policy sets the pace.
///
/// # Examples
///
/// ```
/// use ratewarden_client::{Pacer, Quota};
/// use std::time::Duration;
///
/// let mut pacer = Pacer::default();
/// let quota = Quota { policy: Some("p".into()), remaining: 4, reset: Duration::from_secs(1), limit: Some(5), window: Some(Duration::from_secs(1)) };
/// assert_eq!(pacer.reserve("http://api", 0), Duration::ZERO);
/// pacer.observe("http://api", &[quota], None, 0);
/// // 4 left over 1 s: one every 250 ms.
/// assert_eq!(pacer.reserve("http://api", 0), Duration::from_millis(250));
/// assert_eq!(pacer.reserve("http://api", 0), Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    origins: HashMap<String, OriginPace>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Pacer {
    /// Reserves the next slot to `origin` for a request at `now`: how long to hold it.
    pub fn reserve(&mut self, origin: &str, now: u64) -> Duration {
        let Some(pace) = self.origins.get_mut(origin) else {
            return Duration::ZERO;
        };
        let at = pace.next_at.max(now);
        pace.next_at = at.saturating_add(pace.gap);
        Duration::from_nanos(at - now)
    }

    /// Takes in what `origin` answered at `now`: its quotas and any `Retry-After`.
    pub fn observe(
        &mut self,
        origin: &str,
        quotas: &[Quota],
        retry_after: Option<Duration>,
        now: u64,
    ) {
        if quotas.is_empty() && retry_after.is_none() {
            return;
        }
        let pace = self.origins.entry(origin.to_owned()).or_default();
        let mut gap = 0;
        let mut hold_until = now;
        for q in quotas {
            let reset = ns(q.reset);
            match q.remaining {
                0 => hold_until = hold_until.max(now.saturating_add(reset)),
                r => gap = gap.max(reset / r),
            }
            pace.quotas.insert(q.policy.clone(), q.clone());
        }
        if let Some(wait) = retry_after {
            hold_until = hold_until.max(now.saturating_add(ns(wait)));
        }
        if !quotas.is_empty() {
            pace.gap = gap;
        }
        pace.next_at = pace.next_at.max(hold_until).max(now.saturating_add(gap));
    }

    /// The last quota `origin` reported for `policy` (`None`: the legacy fields).
    pub fn quota(&self, origin: &str, policy: Option<&str>) -> Option<&Quota> {
        let pace = self.origins.get(origin)?;
        pace.quotas.get(&policy.map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn quota(name: &str, remaining: u64, reset_ms: u64) -> Quota {
        Quota {
            policy: Some(name.to_owned()),
            remaining,
            reset: Duration::from_millis(reset_ms),
            limit: None,
            window: None,
        }
    }

    #[test]
    fn none_remaining_waits_for_the_reset_and_the_tightest_policy_wins() {
        let mut p = Pacer::default();
        p.observe("o", &[quota("a", 10, 1000), quota("b", 2, 1000)], None, 0);
        assert_eq!(
            p.reserve("o", 0),
            Duration::from_millis(500),
            "b: 2 over 1 s"
        );
        p.observe(
            "o",
            &[quota("a", 9, 1000), quota("b", 0, 700)],
            None,
            500 * MS,
        );
        assert_eq!(p.reserve("o", 500 * MS), Duration::from_millis(700));
        assert_eq!(p.quota("o", Some("b")).unwrap().remaining, 0);
    }

    #[test]
    fn retry_after_holds_the_origin_and_no_other() {
        let mut p = Pacer::default();
        p.observe("o", &[], Some(Duration::from_secs(3)), 0);
        assert_eq!(p.reserve("o", MS), Duration::from_millis(2999));
        assert_eq!(p.reserve("other", MS), Duration::ZERO);
    }
}
