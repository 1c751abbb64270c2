//! What may be retried, and which failures are worth retrying.

use http::{HeaderMap, Method, StatusCode};

/// The field a caller sets to make a non-idempotent request safe to repeat.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Whether a request may be sent twice: an idempotent method (RFC 9110 section 9.2.2: GET,
/// HEAD, OPTIONS, TRACE, PUT, DELETE), or any request carrying an `Idempotency-Key`.
///
/// # Examples
///
/// ```
/// use http::{HeaderMap, Method};
/// use ratewarden_client::is_repeatable;
///
/// let mut headers = HeaderMap::new();
/// assert!(is_repeatable(&Method::GET, &headers));
/// assert!(!is_repeatable(&Method::POST, &headers));
/// headers.insert("idempotency-key", "8e03978e".parse()?);
/// assert!(is_repeatable(&Method::POST, &headers));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn is_repeatable(method: &Method, headers: &HeaderMap) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || headers.contains_key(IDEMPOTENCY_KEY)
}

/// How an attempt ended, as far as retrying goes.
#[derive(Debug, Clone, Copy)]
pub enum Attempt<'a> {
    /// An answer: its status and fields.
    Response {
        /// The status.
        status: StatusCode,
        /// The fields (for Retry-After and the rate limit fields).
        headers: &'a HeaderMap,
    },
    /// No connection was made: the request never reached the server.
    ConnectError,
    /// No answer in time.
    Timeout,
    /// Any other failure (not retried: it may have been processed).
    OtherError,
}

impl Attempt<'_> {
    /// Worth another attempt: 429, 503, a connect error or a timeout.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Response { status, .. } => {
                *status == StatusCode::TOO_MANY_REQUESTS
                    || *status == StatusCode::SERVICE_UNAVAILABLE
            }
            Self::ConnectError | Self::Timeout => true,
            Self::OtherError => false,
        }
    }
}
