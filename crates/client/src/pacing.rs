//! Proactive pacing: spend what a server says is left evenly over the time it has left.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderMap;

use crate::fields::{each_quota, has_quotas, Reported};
use crate::Quota;

/// What one origin last said, and when this client may next send to it.
#[derive(Debug, Clone, Default)]
pub struct OriginPace {
    /// The earliest time the next request may go (nanoseconds since the Unix epoch).
    next_at: u64,
    /// The spacing between requests the last answer asked for, in nanoseconds.
    gap: u64,
    /// Each policy's last reported quota (`policy` `None`: the legacy fields). A few at
    /// most, updated in place: an answer's quotas cost no allocation once seen.
    quotas: Vec<Quota>,
}

impl OriginPace {
    /// Keeps `q` as its policy's last reported quota.
    fn remember(&mut self, q: &Reported<'_>) {
        let name = q.policy.as_deref();
        match self.quotas.iter_mut().find(|k| k.policy.as_deref() == name) {
            Some(kept) => {
                kept.remaining = q.remaining;
                kept.reset = q.reset;
                kept.limit = q.limit;
                kept.window = q.window;
            }
            None => self.quotas.push(q.to_quota()),
        }
    }
}

/// One answer's quotas folded into the pace they ask for.
struct Sighting {
    now: u64,
    gap: u64,
    hold_until: u64,
    any: bool,
}

impl Sighting {
    fn new(now: u64) -> Self {
        Self {
            now,
            gap: 0,
            hold_until: now,
            any: false,
        }
    }

    fn quota(&mut self, pace: &mut OriginPace, q: &Reported<'_>) {
        let reset = ns(q.reset);
        match q.remaining {
            0 => self.hold_until = self.hold_until.max(self.now.saturating_add(reset)),
            r => self.gap = self.gap.max(reset / r),
        }
        self.any = true;
        pace.remember(q);
    }

    fn finish(mut self, pace: &mut OriginPace, retry_after: Option<Duration>) {
        if let Some(wait) = retry_after {
            self.hold_until = self.hold_until.max(self.now.saturating_add(ns(wait)));
        }
        if self.any {
            pace.gap = self.gap;
        }
        pace.next_at = pace
            .next_at
            .max(self.hold_until)
            .max(self.now.saturating_add(self.gap));
    }
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
        let Some(pace) = self.pace(origin) else {
            return;
        };
        let mut sighting = Sighting::new(now);
        for q in quotas {
            sighting.quota(pace, &Reported::from(q));
        }
        sighting.finish(pace, retry_after);
    }

    /// [`observe`](Self::observe), reading the quotas straight from an answer's `headers`
    /// (a malformed field is ignored: the answer still reaches the caller). Allocates
    /// nothing once the origin and its policies have been seen.
    pub(crate) fn observe_fields(
        &mut self,
        origin: &str,
        headers: &HeaderMap,
        retry_after: Option<Duration>,
        now: u64,
    ) {
        if !has_quotas(headers) && retry_after.is_none() {
            return;
        }
        let Some(pace) = self.pace(origin) else {
            return;
        };
        let mut sighting = Sighting::new(now);
        // All or none: a malformed field hands over no quota.
        let _ = each_quota(headers, now, |q| sighting.quota(pace, &q));
        sighting.finish(pace, retry_after);
    }

    /// `origin`'s pace, made on its first answer (the name is copied then only; `entry`
    /// would copy it on every answer).
    fn pace(&mut self, origin: &str) -> Option<&mut OriginPace> {
        if !self.origins.contains_key(origin) {
            self.origins
                .insert(origin.to_owned(), OriginPace::default());
        }
        self.origins.get_mut(origin)
    }

    /// The last quota `origin` reported for `policy` (`None`: the legacy fields).
    pub fn quota(&self, origin: &str, policy: Option<&str>) -> Option<&Quota> {
        let pace = self.origins.get(origin)?;
        pace.quotas.iter().find(|q| q.policy.as_deref() == policy)
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
