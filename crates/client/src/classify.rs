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

/// How a failure of the client underneath reads for retrying: a refused or unreachable
/// connection never reached the server ([`Attempt::ConnectError`]), an elapsed timer or a
/// timed-out socket is [`Attempt::Timeout`], anything else may have been processed
/// ([`Attempt::OtherError`]). The whole `source()` chain is searched, since clients wrap
/// the I/O error (hyper-util's connect error holds it).
///
/// # Examples
///
/// ```
/// use ratewarden_client::{classify_error, Attempt};
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert!(matches!(classify_error(&refused), Attempt::ConnectError));
/// ```
pub fn classify_error(error: &(dyn std::error::Error + 'static)) -> Attempt<'static> {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<tokio::time::error::Elapsed>() {
            return Attempt::Timeout;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable => {
                    return Attempt::ConnectError
                }
                TimedOut => return Attempt::Timeout,
                _ => {}
            }
        }
        next = e.source();
    }
    Attempt::OtherError
}
