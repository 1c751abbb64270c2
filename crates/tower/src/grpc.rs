//! Refusals of gRPC calls: a trailers-only response whose `grpc-status` a client reads
//! (`RESOURCE_EXHAUSTED` over a limit, `UNAVAILABLE` for a 503), never an HTTP 429 that a
//! gRPC client would report as a transport error.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode};
use ratewarden_http::grpc::{
    percent_encode, refusal_message, retry_pushback_ms, Code, GRPC_MESSAGE, GRPC_RETRY_PUSHBACK_MS,
    GRPC_STATUS,
};

use crate::answer::{add_headers, Rejection};

/// Whether `grpc-status` in `fields` (a response's headers, or its trailers) is a failure
/// of the server's (see [`ratewarden_http::grpc::is_server_failure`]).
pub(crate) fn is_server_failure(fields: &HeaderMap) -> bool {
    ratewarden_http::grpc::is_server_failure(fields.get(GRPC_STATUS).and_then(|v| v.to_str().ok()))
}

/// Whether the request is a gRPC call.
pub(crate) fn is_grpc(request: &Parts) -> bool {
    ratewarden_http::grpc::is_call(
        request
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )
}

/// A gRPC call refused over a limit (`RESOURCE_EXHAUSTED`) or for a store that is down
/// (`UNAVAILABLE`), with the delay in `retry-after` (whole seconds) and
/// `grpc-retry-pushback-ms`, and the RateLimit fields unless a sensitive limit refused it.
pub(crate) fn refused(rejection: &Rejection) -> http::Response<Bytes> {
    let code = if rejection.status == StatusCode::SERVICE_UNAVAILABLE {
        Code::Unavailable
    } else {
        Code::ResourceExhausted
    };
    let violated: Vec<&str> = rejection.violated.iter().map(String::as_str).collect();
    let message = refusal_message(code, rejection.sensitive, &violated);
    let mut response = status(code, &message);
    let ms = retry_pushback_ms(rejection.retry_after);
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
    status(Code::InvalidArgument, detail)
}

fn status(code: Code, message: &str) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code.as_str()));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}
