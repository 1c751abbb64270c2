//! What a verdict means for the response: go on with the RateLimit fields (and a queueing
//! rule's delay), or refuse with the contract's 429 or 503, or the user's own rendering.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use ratewarden_policy::{GrantId, Verdict};

/// A refused request: what the contract answers, and why, for a [`RejectHook`] to render
/// its own way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 429 (over a limit) or 503 (a `closed` rule's store is down).
    pub status: StatusCode,
    /// When to come back (exact; the `Retry-After` header rounds it up to whole seconds).
    pub retry_after: Duration,
    /// The names of the limits that said no.
    pub violated: Vec<String>,
    /// A sensitive limit said no: reveal nothing of its capacity.
    pub sensitive: bool,
    /// The contract's answer: status, headers (`Retry-After`, RateLimit fields,
    /// `Cache-Control: no-store`) and problem+json body.
    pub contract: ratewarden_http::Response,
}

impl Rejection {
    /// The contract's answer as an `http::Response`: what the layer sends without a hook,
    /// and a start for a hook that only changes the body.
    ///
    /// # Examples
    ///
    /// A hook that keeps the headers and writes its own body:
    ///
    /// ```
    /// use ratewarden_tower::Rejection;
    ///
    /// let hook = |rejection: &Rejection| {
    ///     let mut response = rejection.response();
    ///     response.headers_mut().remove(http::header::CONTENT_TYPE);
    ///     *response.body_mut() = format!("slow down; try again in {:?}", rejection.retry_after).into();
    ///     response
    /// };
    /// # let _ = hook;
    /// ```
    pub fn response(&self) -> http::Response<Bytes> {
        let mut response = http::Response::new(Bytes::from(self.contract.body.clone()));
        *response.status_mut() = self.status;
        add_headers(response.headers_mut(), &self.contract.headers);
        response
    }
}

/// Renders a rejection as the user wants it (HTTP requests only: gRPC calls are refused
/// with a gRPC status).
pub type RejectHook = Arc<dyn Fn(&Rejection) -> http::Response<Bytes> + Send + Sync>;

/// What to do with a decided request: the engine's [`Answer`](ratewarden_policy::Answer) with
/// the grants the layer hands on.
pub(crate) enum Handling {
    /// Serve it, after `delay` (a queueing rule), adding `headers` to the response.
    Go {
        headers: Vec<(HeaderName, HeaderValue)>,
        delay: Duration,
        reservation: Option<GrantId>,
        permit: Option<GrantId>,
    },
    /// Refuse it.
    Stop(Rejection),
}

/// The answer to `verdict`, as the server's gateway gives it (the same translation,
/// [`Verdict::answer`]), a refusal telling the client to come back in `retry_ns`.
pub(crate) fn answer(verdict: &Verdict, legacy: bool, retry_ns: u64) -> Handling {
    match verdict.answer(legacy, retry_ns) {
        ratewarden_policy::Answer::Go { headers, delay } => Handling::Go {
            headers,
            delay,
            reservation: verdict.reservation,
            permit: verdict.permit,
        },
        ratewarden_policy::Answer::Stop(contract) => Handling::Stop(Rejection {
            status: StatusCode::from_u16(contract.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            retry_after: Duration::from_nanos(retry_ns),
            violated: verdict
                .violated()
                .map(|o| verdict.rules[o.rule].name.clone())
                .collect(),
            sensitive: !verdict.unavailable && verdict.sensitive(),
            contract,
        }),
    }
}

/// Adds header lines, skipping any value that cannot be a header (none of ours).
pub(crate) fn add_headers(headers: &mut http::HeaderMap, lines: &[(HeaderName, String)]) {
    for (name, value) in lines {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.append(name.clone(), value);
        }
    }
}

/// A problem+json answer (RFC 9457) for a request the rules cannot read: `detail` says what
/// was wrong with it.
pub(crate) fn problem(status: StatusCode, detail: &str) -> http::Response<Bytes> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = http::Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    response
}
