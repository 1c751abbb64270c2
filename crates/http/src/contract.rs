//! The headers and bodies of the rate limiting contract.

pub use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue};
use ratewarden_core::{Decision, NANOS_PER_SEC};

/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers): each policy's remaining quota.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`: each policy's quota, window and unit.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The legacy `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// The legacy `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// The legacy `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The problem type of a caller over its quota (429).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem type of a server short of capacity for everyone (503).
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// One policy's place in a response: its name, its numbers, and this request's decision.
#[derive(Debug, Clone, Copy)]
pub struct PolicyState<'a> {
    /// The policy's name (the rule name), as clients will see it.
    pub name: &'a str,
    /// Its limit, from the decision.
    pub decision: &'a Decision,
    /// Its window in seconds, when it has a fixed one (see [`window_secs`](ratewarden_core::window_secs)).
    pub window_secs: Option<u64>,
    /// The quota unit, when not requests (`concurrent-requests` for in-flight limits).
    pub unit: Option<&'a str>,
    /// This policy's `RateLimit-Policy` value rendered in advance, for these very numbers
    /// ([`RenderedPolicy::value`](crate::RenderedPolicy::value)): sent as it is when this
    /// policy is the only one an allowed response shows. `None` renders it.
    pub policy: Option<&'a HeaderValue>,
}

impl<'a> PolicyState<'a> {
    /// The place of policy `name`, limited by `limit`, that decided `decision`: its window
    /// from the limit, and `concurrent-requests` as the unit of a concurrency limit.
    pub fn of(name: &'a str, limit: &ratewarden_core::Limit, decision: &'a Decision) -> Self {
        Self {
            name,
            decision,
            window_secs: crate::window_secs(limit),
            unit: matches!(limit, ratewarden_core::Limit::Concurrency(_))
                .then_some("concurrent-requests"),
            policy: None,
        }
    }

    /// The same, with its `RateLimit-Policy` value taken from `rendered` when it was
    /// rendered for these numbers (see [`RenderedPolicy`](crate::RenderedPolicy)).
    pub fn rendered(self, rendered: &'a crate::RenderedPolicy) -> Self {
        Self {
            policy: rendered.value(&self),
            ..self
        }
    }
}

/// A response to send instead of serving the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// 429 or 503.
    pub status: u16,
    /// Header lines, in order.
    pub headers: Vec<(HeaderName, String)>,
    /// The body (empty for a bare 429).
    pub body: String,
}

/// Whole seconds to tell a client to wait: rounded up, so it never comes back early, and at
/// least 1 (`Retry-After: 0` invites an immediate retry).
///
/// # Examples
///
/// ```
/// use ratewarden_http::retry_after_secs;
///
/// assert_eq!(retry_after_secs(200_000_000), 1); // a token due in 200 ms
/// assert_eq!(retry_after_secs(1_000_000_000), 1);
/// assert_eq!(retry_after_secs(1_000_000_001), 2);
/// assert_eq!(retry_after_secs(0), 1);
/// ```
pub fn retry_after_secs(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_SEC).max(1)
}

/// `n` in decimal, in a string exactly as long as its digits (see [`crate::fields`]).
fn int_string(n: u64) -> String {
    itoa::Buffer::new().format(n).to_owned()
}

/// The legacy trio's numbers, when `legacy`: they describe one limit, the one closest to
/// exhaustion.
fn legacy_trio(policies: &[PolicyState<'_>], legacy: bool) -> Option<[(HeaderName, u64); 3]> {
    let p = legacy
        .then(|| policies.iter().min_by_key(|p| p.decision.remaining))
        .flatten()?;
    Some([
        (X_RATELIMIT_LIMIT, p.decision.limit),
        (X_RATELIMIT_REMAINING, p.decision.remaining),
        (
            X_RATELIMIT_RESET,
            p.decision.reset_after_ns.div_ceil(NANOS_PER_SEC),
        ),
    ])
}

fn rate_limit_headers(policies: &[PolicyState<'_>], legacy: bool) -> Vec<(HeaderName, String)> {
    let mut headers = Vec::with_capacity(if legacy { 6 } else { 3 });
    if let Some(v) = crate::fields::policy_field(policies) {
        headers.push((RATELIMIT_POLICY, v));
    }
    if let Some(v) = crate::fields::state_field(policies) {
        headers.push((RATELIMIT, v));
    }
    for (name, n) in legacy_trio(policies, legacy).into_iter().flatten() {
        headers.push((name, int_string(n)));
    }
    headers
}

/// The headers to add to an allowed response: each policy's `RateLimit-Policy` and
/// `RateLimit`, and the legacy trio when `legacy`. Per-client values must not be replayed
/// to other clients by a shared cache, hence `Cache-Control: private`.
///
/// As header values, ready to append: a policy's pre-rendered `RateLimit-Policy`
/// ([`PolicyState::policy`]) is shared, not copied, and the rest are made from their
/// strings without a copy.
pub fn allowed_headers(
    policies: &[PolicyState<'_>],
    legacy: bool,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = Vec::with_capacity(if legacy { 6 } else { 3 });
    let policy = match policies {
        [PolicyState {
            policy: Some(value),
            ..
        }] => Some((*value).clone()),
        _ => crate::fields::policy_field(policies).and_then(|v| HeaderValue::try_from(v).ok()),
    };
    if let Some(v) = policy {
        headers.push((RATELIMIT_POLICY, v));
    }
    if let Some(v) =
        crate::fields::state_field(policies).and_then(|v| HeaderValue::try_from(v).ok())
    {
        headers.push((RATELIMIT, v));
    }
    for (name, n) in legacy_trio(policies, legacy).into_iter().flatten() {
        headers.push((name, HeaderValue::from(n)));
    }
    if !headers.is_empty() {
        headers.push((CACHE_CONTROL, HeaderValue::from_static("private")));
    }
    headers
}

/// The 429 for a request over its limits.
///
/// `policies` are every matching policy (for the headers), `violated` the names of those
/// that said no (for the body). When `sensitive` (a login or OTP rule said no) the answer is
/// a bare 429 with `Retry-After` and nothing that reveals capacity.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, Gcra, Rate};
/// use ratewarden_http::{limited, PolicyState};
///
/// let gcra = Gcra::new(Rate::per_second(5)?, 5)?;
/// let mut state = Default::default();
/// for _ in 0..5 { gcra.decide(&mut state, 0, 1); }
/// let no = gcra.decide(&mut state, 0, 1);
/// let policy = PolicyState { name: "per-key", decision: &no, window_secs: Some(1), unit: None, policy: None };
/// let retry = no.retry_after_ns().unwrap_or(0);
/// let response = limited(&[policy], &["per-key"], retry, false, false);
/// assert_eq!(response.status, 429);
/// assert!(response.headers.contains(&(ratewarden_http::RETRY_AFTER, "1".to_owned())));
/// assert!(response.headers.contains(&(ratewarden_http::RATELIMIT_POLICY, r#""per-key";q=5;w=1"#.to_owned())));
/// assert!(response.body.contains("quota-exceeded"));
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
pub fn limited(
    policies: &[PolicyState<'_>],
    violated: &[&str],
    retry_after_ns: u64,
    sensitive: bool,
    legacy: bool,
) -> Response {
    let mut headers = vec![
        (RETRY_AFTER, int_string(retry_after_secs(retry_after_ns))),
        (CACHE_CONTROL, "no-store".to_owned()),
    ];
    if sensitive {
        return Response {
            status: 429,
            headers,
            body: String::new(),
        };
    }
    headers.extend(rate_limit_headers(policies, legacy));
    headers.push((CONTENT_TYPE, "application/problem+json".to_owned()));
    let body = serde_json::json!({
        "type": QUOTA_EXCEEDED,
        "title": "Quota Exceeded",
        "status": 429,
        "violated-policies": violated,
    });
    Response {
        status: 429,
        headers,
        body: body.to_string(),
    }
}

/// The 503 for a server that cannot serve anyone right now (load shedding, or a `closed`
/// rule whose store is down): the server is at fault, not the caller.
pub fn unavailable(retry_after_ns: u64, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": TEMPORARY_REDUCED_CAPACITY,
        "title": "Temporary Reduced Capacity",
        "status": 503,
        "detail": detail,
    });
    Response {
        status: 503,
        headers: vec![
            (RETRY_AFTER, int_string(retry_after_secs(retry_after_ns))),
            (CACHE_CONTROL, "no-store".to_owned()),
            (CONTENT_TYPE, "application/problem+json".to_owned()),
        ],
        body: body.to_string(),
    }
}
