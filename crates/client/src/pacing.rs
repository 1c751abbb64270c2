//! Proactive pacing: spend what a server says is left evenly over the time it has left.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderMap;

use crate::fields::{
    each_quota, each_stated_quota, AnswerFields, PolicyTable, RawFields, Reported,
};
use crate::Quota;

/// What one origin last said, and when this client may next send to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct OriginPace {
    /// When the quotas were last reported (nanoseconds since the Unix epoch): their resets
    /// count from it.
    seen_at: u64,
    /// Units taken by [`Pacer::reserve_units`] from each policy since it was last reported
    /// (a few policies at most).
    taken: Vec<(String, u64)>,
    /// The earliest time the next request may go (nanoseconds since the Unix epoch).
    next_at: u64,
    /// The spacing between requests the last answer asked for, in nanoseconds.
    gap: u64,
    /// Each policy's last reported quota (`policy` `None`: the legacy fields). A few at
    /// most, updated in place: an answer's quotas cost no allocation once seen.
    quotas: Vec<Quota>,
    /// The last answer's `RateLimit` fields, raw, while `quotas` holds what they said: an
    /// answer with the same bytes is not parsed again.
    last_fields: RawFields,
    /// What those fields asked for.
    last_sighting: Sighting,
    /// The last answer's `RateLimit-Policy`, raw, while `policies` holds it read: it
    /// changes with the server's configuration, `RateLimit` with every answer, so a changed
    /// answer mostly costs one parse.
    last_policy: RawFields,
    policies: Option<PolicyTable>,
}

impl OriginPace {
    /// Keeps `q` as its policy's last reported quota.
    fn remember(quotas: &mut Vec<Quota>, q: &Reported<'_>) {
        let name = q.policy.as_deref();
        match quotas.iter_mut().find(|k| k.policy.as_deref() == name) {
            Some(kept) => {
                kept.remaining = q.remaining;
                kept.reset = q.reset;
                kept.limit = q.limit;
                kept.window = q.window;
            }
            None => quotas.push(q.to_quota()),
        }
    }

    /// Reserves the next slot for a request at `now`: how long to hold it.
    pub(crate) fn reserve(&mut self, now: u64) -> Duration {
        let at = self.next_at.max(now);
        self.next_at = at.saturating_add(self.gap);
        Duration::from_nanos(at - now)
    }

    /// Takes in `quotas` and any `Retry-After` answered at `now`.
    fn observe(&mut self, quotas: &[Quota], retry_after: Option<Duration>, now: u64) {
        // The kept quotas change other than by the fields kept: the next answer is parsed.
        self.last_fields.forget();
        self.seen(now);
        let mut sighting = Sighting::default();
        for q in quotas {
            sighting.quota(&mut self.quotas, &Reported::from(q));
        }
        sighting.apply(self, retry_after, now);
    }

    /// [`observe`](Self::observe), reading the quotas straight from an answer's `headers`
    /// (a malformed field is ignored: the answer still reaches the caller), whose fields the
    /// policy reads are `fields` (found in one walk over a small map).
    ///
    /// `RateLimit` and `RateLimit-Policy` the same, byte for byte, as the last answer's
    /// are not parsed again: they say what they said then, and `quotas` already holds it
    /// (they hold no time of day; the legacy fields can, and are read every time, which
    /// costs little: three integers).
    pub(crate) fn observe_fields(
        &mut self,
        headers: &HeaderMap,
        fields: &AnswerFields<'_>,
        retry_after: Option<Duration>,
        now: u64,
    ) {
        if fields.state.any() || fields.legacy {
            self.seen(now);
        }
        if fields.state.any() {
            let (state, policy) = (&fields.state, &fields.policy);
            if !self.last_fields.matches(&[state, policy]) {
                let mut sighting = Sighting::default();
                let mut policies_read = true;
                if !self.last_policy.matches(&[policy]) {
                    match PolicyTable::read(headers) {
                        Ok(table) => {
                            self.policies = table;
                            self.last_policy.keep(&[policy]);
                        }
                        Err(_) => {
                            self.last_policy.forget();
                            policies_read = false;
                        }
                    }
                }
                // All or none: a malformed field hands over no quota.
                if policies_read {
                    let quotas = &mut self.quotas;
                    let _ = each_stated_quota(headers, self.policies.as_ref(), |q| {
                        sighting.quota(quotas, &q)
                    });
                }
                self.last_fields.keep(&[state, policy]);
                self.last_sighting = sighting;
            }
            let sighting = self.last_sighting;
            sighting.apply(self, retry_after, now);
            return;
        }
        if !fields.legacy && retry_after.is_none() {
            return;
        }
        self.last_fields.forget();
        let mut sighting = Sighting::default();
        let quotas = &mut self.quotas;
        let _ = each_quota(headers, now, |q| sighting.quota(quotas, &q));
        sighting.apply(self, retry_after, now);
    }

    /// The last quota reported for `policy` (`None`: the legacy fields).
    pub(crate) fn quota(&self, policy: Option<&str>) -> Option<&Quota> {
        self.quotas.iter().find(|q| q.policy.as_deref() == policy)
    }

    /// A new report at `now`: what was taken since the last one is in its numbers.
    fn seen(&mut self, now: u64) {
        self.seen_at = now;
        self.taken.clear();
    }

    /// See [`Pacer::reserve_units`].
    fn reserve_units(&mut self, policy: &str, units: u64, now: u64) -> Duration {
        let Some(quota) = self
            .quotas
            .iter()
            .find(|q| q.policy.as_deref() == Some(policy))
        else {
            return Duration::ZERO;
        };
        let reset_at = self.seen_at.saturating_add(ns(quota.reset));
        if now >= reset_at {
            // The quota is whole again (as far as this client knows) until the next report.
            return Duration::ZERO;
        }
        let taken = match self.taken.iter_mut().find(|(p, _)| p == policy) {
            Some((_, taken)) => taken,
            None => {
                self.taken.push((policy.to_owned(), 0));
                &mut self.taken.last_mut().expect("pushed").1
            }
        };
        let left = quota.remaining.saturating_sub(*taken);
        if units <= left {
            *taken += units;
            return Duration::ZERO;
        }
        Duration::from_nanos(reset_at - now)
    }
}

/// One answer's quotas folded into the pace they ask for; it holds no time of day, so the
/// same fields fold into the same sighting whenever they come.
#[derive(Debug, Clone, Copy, Default)]
struct Sighting {
    /// The widest spacing a quota asks for.
    gap: u64,
    /// The longest reset among quotas with nothing remaining: no request before it passes.
    hold: Option<u64>,
    /// Whether any quota was reported.
    any: bool,
}

impl Sighting {
    fn quota(&mut self, quotas: &mut Vec<Quota>, q: &Reported<'_>) {
        let reset = ns(q.reset);
        match q.remaining {
            0 => self.hold = Some(self.hold.map_or(reset, |h| h.max(reset))),
            r => self.gap = self.gap.max(reset / r),
        }
        self.any = true;
        OriginPace::remember(quotas, q);
    }

    fn apply(self, pace: &mut OriginPace, retry_after: Option<Duration>, now: u64) {
        let mut hold_until = now;
        if let Some(reset) = self.hold {
            hold_until = hold_until.max(now.saturating_add(reset));
        }
        if let Some(wait) = retry_after {
            hold_until = hold_until.max(now.saturating_add(ns(wait)));
        }
        if self.any {
            pace.gap = self.gap;
        }
        pace.next_at = pace
            .next_at
            .max(hold_until)
            .max(now.saturating_add(self.gap));
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
        match self.origins.get_mut(origin) {
            Some(pace) => pace.reserve(now),
            None => Duration::ZERO,
        }
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
        self.pace(origin).observe(quotas, retry_after, now);
    }

    /// `origin`'s pace, made on its first answer.
    fn pace(&mut self, origin: &str) -> &mut OriginPace {
        self.origins.entry(origin.to_owned()).or_default()
    }

    /// How long a request costing `units` of `origin`'s quota `policy` (such as `tokens`:
    /// OpenAI's `x-ratelimit-*-tokens`, or a `RateLimit` policy of that name) should wait
    /// at `now`: nothing while what the last answer said remains, less what earlier calls
    /// took since, covers it (and it is taken); otherwise until that quota's reset. A
    /// caller that knows its prompt's size waits for tokens, not only for a request's turn
    /// ([`reserve`](Self::reserve)). Nothing is known of a policy never reported: no wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_client::{Pacer, Quota};
    /// use std::time::Duration;
    ///
    /// let mut pacer = Pacer::default();
    /// let tokens = Quota { policy: Some("tokens".into()), remaining: 1_000, reset: Duration::from_secs(30), limit: None, window: None };
    /// pacer.observe("http://llm", &[tokens], None, 0);
    /// assert_eq!(pacer.reserve_units("http://llm", "tokens", 800, 0), Duration::ZERO);
    /// // 200 left: a prompt of 500 waits for the reset, 30 s after the answer.
    /// assert_eq!(pacer.reserve_units("http://llm", "tokens", 500, 10_000_000_000), Duration::from_secs(20));
    /// ```
    pub fn reserve_units(&mut self, origin: &str, policy: &str, units: u64, now: u64) -> Duration {
        match self.origins.get_mut(origin) {
            Some(pace) => pace.reserve_units(policy, units, now),
            None => Duration::ZERO,
        }
    }

    /// The last quota `origin` reported for `policy` (`None`: the legacy fields).
    pub fn quota(&self, origin: &str, policy: Option<&str>) -> Option<&Quota> {
        self.origins.get(origin)?.quota(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::answer_with;

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

    /// What pacing goes by (the cache aside).
    fn seen(p: &OriginPace) -> (u64, u64, Vec<Quota>) {
        (p.next_at, p.gap, p.quotas.clone())
    }

    /// `pace` takes in `h` at `now`, its fields found as the policy finds them.
    fn observe(pace: &mut OriginPace, h: &HeaderMap, now: u64) {
        pace.observe_fields(h, &AnswerFields::of(h), None, now);
    }

    /// `answers` in turn, 100 ms apart, to a pace that keeps the last fields and to one
    /// that forgets them before each answer (a fresh parse every time): the same state
    /// after each, and the cached one parsed only when the bytes changed. A third keeps the
    /// fields too but finds them by lookups, never by the walk: the same again.
    fn cached_and_fresh_agree(answers: &[HeaderMap]) -> OriginPace {
        let (mut cached, mut fresh) = (OriginPace::default(), OriginPace::default());
        let mut looked_up = OriginPace::default();
        for (i, h) in answers.iter().enumerate() {
            let now = 1_000 * MS + i as u64 * 100 * MS;
            fresh.last_fields.forget();
            fresh.last_policy.forget();
            observe(&mut cached, h, now);
            observe(&mut fresh, h, now);
            looked_up.observe_fields(h, &AnswerFields::looked_up(h), None, now);
            assert_eq!(seen(&cached), seen(&fresh), "after answer {i}: {h:?}");
            assert_eq!(seen(&cached), seen(&looked_up), "after answer {i}: {h:?}");
            let hold = fresh.reserve(now);
            assert_eq!(cached.reserve(now), hold, "answer {i}");
            assert_eq!(looked_up.reserve(now), hold, "answer {i}");
        }
        cached
    }

    #[test]
    fn the_same_field_bytes_give_the_same_pace_as_a_fresh_parse() {
        let same = answer_with(
            &[r#""a";r=4;t=1, "b";r=0;t=2"#],
            &[r#""a";q=5;w=1, "b";q=9;w=2"#],
        );
        let pace = cached_and_fresh_agree(&[same.clone(), same.clone(), same]);
        assert_eq!(pace.quota(Some("b")).unwrap().limit, Some(9));
    }

    #[test]
    fn a_changed_field_is_parsed_again() {
        let first = answer_with(&[r#""a";r=4;t=1"#], &[r#""a";q=5;w=1"#]);
        let state_changed = answer_with(&[r#""a";r=3;t=1"#], &[r#""a";q=5;w=1"#]);
        let policy_changed = answer_with(&[r#""a";r=3;t=1"#], &[r#""a";q=6;w=1"#]);
        let split = answer_with(&[r#""a";r=3;t=1"#, r#""b";r=0;t=5"#], &[r#""a";q=6;w=1"#]);
        let pace = cached_and_fresh_agree(&[
            first.clone(),
            state_changed,
            policy_changed.clone(),
            policy_changed,
            split,
            first,
        ]);
        let a = pace.quota(Some("a")).unwrap();
        assert_eq!((a.remaining, a.limit), (4, Some(5)), "the last answer's");
        assert_eq!(pace.quota(Some("b")).unwrap().remaining, 0);
    }

    #[test]
    fn a_malformed_field_seen_again_is_still_ignored() {
        let good = answer_with(&[r#""a";r=4;t=1"#], &[]);
        let bad = answer_with(&[r#""a";t=1"#], &[]);
        let bad_policy = answer_with(&[r#""a";r=3;t=1"#], &["(a b)"]);
        let bad_policy_again = answer_with(&[r#""a";r=2;t=1"#], &["(a b)"]);
        let pace = cached_and_fresh_agree(&[good, bad.clone(), bad, bad_policy, bad_policy_again]);
        assert_eq!(pace.quota(Some("a")).unwrap().remaining, 4);
    }

    #[test]
    fn quotas_observed_by_hand_make_the_next_same_fields_count_again() {
        // The fields say 4 remain; a hand-fed quota says none do; the same fields again must
        // put back 4 and their pace, not keep the hand-fed state as if nothing had come.
        let fields = answer_with(&[r#""a";r=4;t=1"#], &[]);
        let mut pace = OriginPace::default();
        observe(&mut pace, &fields, 0);
        pace.observe(&[quota("a", 0, 5_000)], None, 0);
        assert_eq!(pace.quota(Some("a")).unwrap().remaining, 0);
        observe(&mut pace, &fields, 6_000 * MS);
        assert_eq!(pace.quota(Some("a")).unwrap().remaining, 4);
        assert_eq!(pace.gap, 250 * MS);
    }

    #[test]
    fn legacy_fields_are_read_every_time_an_epoch_reset_counts_down() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "1700000060".parse().unwrap());
        let mut pace = OriginPace::default();
        let now = 1_700_000_000 * 1_000 * MS;
        observe(&mut pace, &h, now);
        assert_eq!(pace.quota(None).unwrap().reset, Duration::from_secs(60));
        observe(&mut pace, &h, now + 20_000 * MS);
        assert_eq!(pace.quota(None).unwrap().reset, Duration::from_secs(40));
    }
}
