//! A verdict as the HTTP contract answers it: the one translation every HTTP front door
//! (the gateway, the decision API, the tower layer) uses, so that they cannot drift.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratewarden_core::NANOS_PER_SEC;
use ratewarden_http::PolicyState;

use super::Verdict;

/// What to do with a decided request, in the HTTP contract's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Serve it, after `delay` (a queueing rule), adding `headers` (the RateLimit fields)
    /// to the response.
    Go {
        /// The headers for the response, ready to append.
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        /// How long a queueing rule holds the request first.
        delay: Duration,
    },
    /// Answer this instead: the contract's 429 (over a limit; bare for a sensitive rule)
    /// or 503 (a `closed` rule's store is down).
    Stop(ratewarden_http::Response),
}

impl Verdict {
    /// The policies whose numbers the client is shown, for the RateLimit fields.
    pub fn shown_policies(&self) -> Vec<PolicyState<'_>> {
        self.shown()
            .map(|o| {
                let rule = &self.rules[o.rule];
                PolicyState::of(&rule.name, &rule.limit, &o.decision).rendered(&rule.rendered)
            })
            .collect()
    }

    /// How long a refused client should wait: the longest retry among the rules that said
    /// no, or a second when none can say (a store failure).
    pub fn retry_ns(&self) -> u64 {
        self.retry_after_ns.unwrap_or(NANOS_PER_SEC)
    }

    /// The contract's answer to this verdict, `retry_after_ns` being what a refusal's
    /// `Retry-After` says ([`Verdict::retry_ns`], maybe [`Jitter`]ed) and `legacy` whether
    /// the `X-RateLimit-*` trio is added.
    pub fn answer(&self, legacy: bool, retry_after_ns: u64) -> Answer {
        if self.unavailable {
            return Answer::Stop(ratewarden_http::unavailable(
                retry_after_ns,
                "a rate limit this request needs cannot be checked right now",
            ));
        }
        if self.shed() {
            // An adaptive concurrency rule: the upstream is at what it can take. Shed as
            // the in-flight cap sheds, a 503 the client is not at fault for.
            return Answer::Stop(ratewarden_http::unavailable(
                retry_after_ns,
                "the upstream is at its concurrency limit",
            ));
        }
        let shown = self.shown_policies();
        if !self.allowed {
            let violated: Vec<&str> = self
                .violated()
                .map(|o| self.rules[o.rule].name.as_str())
                .collect();
            let sensitive = self.sensitive();
            let mut response =
                ratewarden_http::limited(&shown, &violated, retry_after_ns, sensitive, legacy);
            if !sensitive {
                response.headers.extend(self.openai_headers());
            }
            return Answer::Stop(response);
        }
        let mut headers = ratewarden_http::allowed_headers(&shown, legacy);
        headers
            .extend(self.openai_headers().filter_map(|(name, value)| {
                Some((name, http::HeaderValue::try_from(value).ok()?))
            }));
        Answer::Go {
            headers,
            delay: Duration::from_nanos(self.delay_ns()),
        }
    }

    /// OpenAI's `x-ratelimit-*` headers of the shown rules that ask for them: each family
    /// once, from the first rule that fills it.
    fn openai_headers(&self) -> impl Iterator<Item = (http::HeaderName, String)> + '_ {
        let mut filled = [false; 2];
        self.shown()
            .filter_map(move |o| {
                let family = self.rules[o.rule].openai_headers?;
                let slot = &mut filled[family as usize];
                (!std::mem::replace(slot, true))
                    .then(|| ratewarden_http::openai_headers(family, &o.decision))
            })
            .flatten()
    }
}

/// Spreads `Retry-After` so that clients throttled together do not all come back
/// together (`[server] retry_after_jitter`): adds up to a bound at random, never less than
/// nothing, so no client is told to come back early.
#[derive(Debug, Default)]
pub struct Jitter {
    random: RandomState,
    seq: AtomicU64,
}

impl Jitter {
    /// A jitter with its own random seed.
    pub fn new() -> Self {
        Self::default()
    }

    /// `retry_ns` plus a random amount in `0..=up_to`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_policy::Jitter;
    /// use std::time::Duration;
    ///
    /// let jitter = Jitter::new();
    /// assert_eq!(jitter.apply(5, Duration::ZERO), 5);
    /// let spread = jitter.apply(1_000, Duration::from_nanos(10));
    /// assert!((1_000..=1_010).contains(&spread));
    /// ```
    pub fn apply(&self, retry_ns: u64, up_to: Duration) -> u64 {
        let up_to = u64::try_from(up_to.as_nanos()).unwrap_or(u64::MAX);
        if up_to == 0 {
            return retry_ns;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let random = self.random.hash_one(seq);
        retry_ns.saturating_add(random % up_to.saturating_add(1))
    }
}
