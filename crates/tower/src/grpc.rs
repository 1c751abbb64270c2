//! Refusals of gRPC calls: a trailers-only response whose `grpc-status` a client reads
//! (`RESOURCE_EXHAUSTED` over a limit, `UNAVAILABLE` for a 503), never an HTTP 429 that a
//! gRPC client would report as a transport error.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::answer::{add_headers, Rejection};

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// gRPC's retry pushback (the A6 retry design): a client that retries waits this long.
const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// `grpc-status` codes.
const INVALID_ARGUMENT: &str = "3";
const RESOURCE_EXHAUSTED: &str = "8";
const UNAVAILABLE: &str = "14";

/// Whether `grpc-status` in `fields` (a response's headers, or its trailers) is a failure
/// of the server's, the codes gRPC maps to a 5xx (`UNKNOWN`, `DEADLINE_EXCEEDED`,
/// `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`): a gRPC service answers its
/// errors inside an HTTP 200, and these are what an adaptive limit must back off from, as
/// from a 5xx. A caller's mistake (`INVALID_ARGUMENT`, `NOT_FOUND`...) is no more a drop
/// than a 4xx is.
pub(crate) fn is_server_failure(fields: &HeaderMap) -> bool {
    fields
        .get(GRPC_STATUS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|code| matches!(code, 2 | 4 | 12 | 13 | 14 | 15))
}

/// Whether the request is a gRPC call.
pub(crate) fn is_grpc(request: &Parts) -> bool {
    request
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// A gRPC call refused over a limit (`RESOURCE_EXHAUSTED`) or for a store that is down
/// (`UNAVAILABLE`), with the delay in `retry-after` (whole seconds) and
/// `grpc-retry-pushback-ms`, and the RateLimit fields unless a sensitive limit refused it.
pub(crate) fn refused(rejection: &Rejection) -> http::Response<Bytes> {
    let code = if rejection.status == StatusCode::SERVICE_UNAVAILABLE {
        UNAVAILABLE
    } else {
        RESOURCE_EXHAUSTED
    };
    let message = if code == UNAVAILABLE {
        "a rate limit this call needs cannot be checked right now".to_owned()
    } else if rejection.sensitive {
        "rate limited".to_owned()
    } else {
        format!("rate limited by {}", rejection.violated.join(", "))
    };
    let mut response = status(code, &message);
    let ms = u64::try_from(rejection.retry_after.as_millis()).unwrap_or(u64::MAX);
    // Rounded up, as Retry-After: a client must not come back early.
    let ms = ms + u64::from(rejection.retry_after.subsec_nanos() % 1_000_000 != 0);
    response.headers_mut().insert(
        GRPC_RETRY_PUSHBACK_MS,
        HeaderValue::from_str(&ms.to_string()).unwrap_or(HeaderValue::from_static("1000")),
    );
    let metadata: Vec<_> = rejection
        .contract
        .headers
        .iter()
        .filter(|(name, _)| *name != CONTENT_TYPE)
        .cloned()
        .collect();
    add_headers(response.headers_mut(), &metadata);
    response
}

/// A gRPC call the limits cannot read: `INVALID_ARGUMENT` with what was wrong.
pub(crate) fn invalid(detail: &str) -> http::Response<Bytes> {
    status(INVALID_ARGUMENT, detail)
}

fn status(code: &'static str, message: &str) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}

/// `grpc-message` is percent-encoded: bytes outside printable ASCII, and `%` itself.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::percent_encode;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("limit `a`"), "limit `a`");
        assert_eq!(percent_encode("50% ü"), "50%25 %C3%BC");
    }
}
