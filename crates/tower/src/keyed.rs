//! Limits written in code: an algorithm with its numbers, keyed by a closure over the
//! request, for what only the service can key (the user, the object, the cost).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use ratewarden_core::Limit;
use ratewarden_policy::{Cost, KeyPart, Match, Mode, OnStoreFailure, Rule, WhenKeyMissing};

/// The domain of the rules made from limits written in code: a rule with a domain never
/// matches an HTTP request by itself; the layer names its rules and keys to the engine
/// (`Engine::decide_keyed`), which decides, reserves and holds permits for them exactly as
/// for the rules of a file.
pub(crate) const DOMAIN: &str = "ratewarden-tower";

/// Builds a limit's key from the request; `None` when the limit does not apply to it.
pub(crate) type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// What a request costs under a limit; `Err` names what is wrong with the request (a 400).
pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> Result<u64, String> + Send + Sync>;

/// One limit written in code: a name, an algorithm with its numbers (any
/// [`Limit`](ratewarden_core::Limit)), a key extractor and a cost.
///
/// A limit without [`key`](Self::key) has one key for everyone; one without
/// [`cost`](Self::cost) charges 1 a request.
///
/// # Examples
///
/// Writes limited per user and document, by a sliding window of 2 a minute:
///
/// ```
/// use std::time::Duration;
/// use ratewarden_core::SlidingWindow;
/// use ratewarden_tower::{header, KeyedLimit};
///
/// # fn main() -> Result<(), ratewarden_core::Error> {
/// let writes = KeyedLimit::new("document-writes", SlidingWindow::new(2, Duration::from_secs(60))?)
///     .key(|request| {
///         let user = header(request, "x-user")?;
///         let document = request.uri.path().strip_prefix("/documents/")?;
///         Some(format!("{user}/{document}"))
///     });
/// # let _ = writes;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KeyedLimit {
    pub(crate) name: String,
    limit: Limit,
    pub(crate) key: Option<KeyFn>,
    pub(crate) cost: Option<CostFn>,
    settle_within: Option<Duration>,
    sensitive: bool,
    fail_closed: bool,
    wait_for_replicas: u32,
}

impl fmt::Debug for KeyedLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimit")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("keyed", &self.key.is_some())
            .field("costed", &self.cost.is_some())
            .field("settle_within", &self.settle_within)
            .field("sensitive", &self.sensitive)
            .field("fail_closed", &self.fail_closed)
            .field("wait_for_replicas", &self.wait_for_replicas)
            .finish()
    }
}

impl KeyedLimit {
    /// A limit named `name` (it names the policy in the RateLimit fields and keys its
    /// counters) deciding by `limit`: `Gcra`, `SlidingWindow`, `Concurrency`, or any other.
    pub fn new(name: impl Into<String>, limit: impl Into<Limit>) -> Self {
        Self {
            name: name.into(),
            limit: limit.into(),
            key: None,
            cost: None,
            settle_within: None,
            sensitive: false,
            fail_closed: false,
            wait_for_replicas: 0,
        }
    }

    /// Keys the limit by `key`, a closure over the request's method, URI, headers and
    /// extensions (where an earlier layer puts the authenticated user). A request it
    /// returns `None` for is not limited by this limit.
    pub fn key<F>(mut self, key: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.key = Some(Arc::new(key));
        self
    }

    /// Charges each request `cost`, a closure over the request: rows it will scan, tokens
    /// it may use. `Err(reason)` refuses the request with a 400 naming the limit and the
    /// reason, and charges nothing.
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts) -> Result<u64, String> + Send + Sync + 'static,
    {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Charges each request a fixed `cost`.
    pub fn fixed_cost(self, cost: u64) -> Self {
        self.cost(move |_| Ok(cost))
    }

    /// Makes the cost an estimate: an allowed request finds a [`Reservation`](crate::Reservation)
    /// in its extensions and settles the real cost with it within `within`, or the estimate
    /// stands.
    pub fn settle_within(mut self, within: Duration) -> Self {
        self.settle_within = Some(within);
        self
    }

    /// Refuses over the limit with a bare 429 that reveals nothing of the limit (a login, a
    /// one-time code).
    pub fn sensitive(mut self) -> Self {
        self.sensitive = true;
        self
    }

    /// Answers 503 while a shared store is down, instead of enforcing the limit in this
    /// process at its own numbers (the default, which never answers 503).
    pub fn fail_closed(mut self) -> Self {
        self.fail_closed = true;
        self
    }

    /// Counts a decision only once `replicas` of a Redis store's replicas hold it (Redis
    /// `WAIT`, for half the store's deadline), so a failover cannot forget what was
    /// admitted; one not held in time fails (503 with [`fail_closed`](Self::fail_closed)).
    /// The engine's `wait_for_replicas` rule field: for a Redis server or Sentinel only;
    /// nothing to wait for in memory.
    pub fn wait_for_replicas(mut self, replicas: u32) -> Self {
        self.wait_for_replicas = replicas;
        self
    }

    /// The limit as the engine's rule, keyed by the value its closure builds.
    pub(crate) fn rule(&self) -> Rule {
        Rule {
            name: self.name.clone(),
            matches: Match {
                domain: Some(DOMAIN.to_owned()),
                descriptor: vec![(self.name.clone(), None)],
                ..Match::default()
            },
            key: vec![KeyPart::Descriptor],
            // Its key comes from its closure, which says itself when no limit applies.
            when_key_missing: WhenKeyMissing::Skip,
            limit: self.limit.clone(),
            // The bound of a settle: one request may take at most the limit's burst.
            cost: Cost::Fixed(1),
            settle_within: self.settle_within,
            settle_from: None,
            local: None,
            mode: Mode::Enforce,
            on_store_failure: if self.fail_closed {
                OnStoreFailure::Closed
            } else {
                OnStoreFailure::Open
            },
            wait_for_replicas: self.wait_for_replicas,
            sensitive: self.sensitive,
            openai_headers: None,
            always_charge: false,
            local_first: false,
            prefetch: None,
            global: false,
            adaptive: None,
            rendered: Default::default(),
        }
    }
}

/// The one value of header `name`, as text: a helper for key extractors. `None` when the
/// header is missing, empty, not text, or sent more than once (a proxy and the service may
/// each read a different line, so a repeated header keys nothing).
///
/// # Examples
///
/// ```
/// let request = http::Request::builder().header("x-user", "ada").body(()).unwrap();
/// let (parts, ()) = request.into_parts();
/// assert_eq!(ratewarden_tower::header(&parts, "x-user").as_deref(), Some("ada"));
/// assert_eq!(ratewarden_tower::header(&parts, "x-other"), None);
/// ```
pub fn header(request: &Parts, name: &str) -> Option<String> {
    let mut values = request.headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = value.to_str().ok()?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ratewarden_core::FixedWindow;

    use super::KeyedLimit;

    #[test]
    fn the_rule_carries_what_the_builder_was_told() {
        let limit = || FixedWindow::new(5, Duration::from_secs(60)).unwrap();
        let plain = KeyedLimit::new("pay", limit()).rule();
        assert_eq!(plain.wait_for_replicas, 0, "no wait unless asked");
        let waited = KeyedLimit::new("pay", limit())
            .fail_closed()
            .wait_for_replicas(2)
            .rule();
        assert_eq!(waited.wait_for_replicas, 2);
        assert_eq!(
            waited.on_store_failure,
            ratewarden_policy::config::OnStoreFailure::Closed
        );
    }
}
