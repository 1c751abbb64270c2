//! gRPC calls through the gateway: a call is an HTTP/2 `POST` to `/package.Service/Method`
//! with `content-type: application/grpc`, decided as any request, and forwarded to an
//! HTTP/2 upstream (`[server] upstream = "h2c://…"`) with its trailers relayed.
//!
//! A call the gateway answers itself (refused, shed, the upstream unreachable) is answered
//! as gRPC clients read an answer, as the tower layer answers them
//! (`ratewarden_http::grpc`): HTTP 200 with the status in `grpc-status` and
//! `grpc-message`, in one HEADERS frame that ends the stream (a trailers-only response),
//! keeping `retry-after` and the RateLimit fields beside them, with the wait in
//! `grpc-retry-pushback-ms`. A client library reads the HTTP status of a non-gRPC answer
//! as `UNAVAILABLE` or `UNKNOWN`, and loses the rest.

use std::time::Duration;

use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use ratewarden_http::grpc::{
    percent_encode, refusal_message, retry_pushback_ms, Code, GRPC_MESSAGE, GRPC_RETRY_PUSHBACK_MS,
    GRPC_STATUS,
};

use crate::serve::reply::{Body, Plain};

/// Whether a request is a gRPC call, by its content type.
pub(super) fn is_call(headers: &HeaderMap) -> bool {
    ratewarden_http::grpc::is_call(headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()))
}

/// Whether an upstream's answer (its head, or its trailers) says the service failed: what
/// an adaptive limit backs off from, as from a 5xx.
pub(super) fn failed(fields: &HeaderMap) -> bool {
    ratewarden_http::grpc::is_server_failure(fields.get(GRPC_STATUS).and_then(|v| v.to_str().ok()))
}

/// A call the rules refused, or shed: the contract's 429 or 503 as a gRPC answer, its
/// message naming the limits that refused it (none, when a sensitive limit did), as the
/// tower layer's does.
pub(super) fn refusal(plain: Plain) -> Response<Body> {
    let code = Code::of_status(plain.status.as_u16());
    let problem: Option<serde_json::Value> = serde_json::from_slice(&plain.body).ok();
    let message = match (&problem, code) {
        // Shed, or a store that is down: the problem's own words.
        (Some(problem), Code::Unavailable) => problem["detail"]
            .as_str()
            .map_or_else(|| refusal_message(code, false, &[]), str::to_owned),
        _ => {
            let violated: Vec<&str> = problem
                .as_ref()
                .and_then(|p| p["violated-policies"].as_array())
                .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
                .unwrap_or_default();
            // A sensitive limit's bare 429 has no body, and names nothing.
            refusal_message(code, problem.is_none(), &violated)
        }
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &plain.headers {
        if *name != CONTENT_TYPE {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(name.clone(), value);
            }
        }
    }
    trailers_only(StatusCode::OK, headers, code, &message)
}

/// Another answer the gateway made itself (a problem, a 502 or 504) as a gRPC answer; an
/// answer that already carries a `grpc-status` (the upstream's) is left as it is.
pub(super) fn answer(response: Response<Body>) -> Response<Body> {
    if response.status() == StatusCode::OK || response.headers().contains_key(GRPC_STATUS) {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let code = Code::of_status(parts.status.as_u16());
    let message = parts
        .status
        .canonical_reason()
        .unwrap_or("refused")
        .to_ascii_lowercase();
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.remove(CONTENT_TYPE);
    trailers_only(StatusCode::OK, parts.headers, code, &message)
}

/// A trailers-only answer: `headers`, the gRPC content type and status, no body; the wait
/// of a `retry-after` also as `grpc-retry-pushback-ms`.
fn trailers_only(
    status: StatusCode,
    mut headers: HeaderMap,
    code: Code,
    message: &str,
) -> Response<Body> {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code.as_str()));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    let retry = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(seconds) = retry {
        let ms = retry_pushback_ms(Duration::from_secs(seconds));
        headers.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(ms));
    }
    let mut response = Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    fn header<'a>(response: &'a Response<Body>, name: &str) -> &'a str {
        response.headers()[name].to_str().unwrap()
    }

    #[test]
    fn a_refusal_is_a_trailers_only_answer_naming_its_limits_and_keeping_its_fields() {
        let contract = ratewarden_http::Response {
            status: 429,
            headers: vec![
                (RETRY_AFTER, "7".to_owned()),
                (
                    HeaderName::from_static("ratelimit"),
                    "\"per-method\";r=0;t=7".to_owned(),
                ),
                (CONTENT_TYPE, "application/problem+json".to_owned()),
            ],
            body: r#"{"status":429,"violated-policies":["per-method"]}"#.to_owned(),
        };
        let answered = refusal(Plain::contract(contract));
        assert_eq!(answered.status(), StatusCode::OK);
        assert_eq!(header(&answered, "content-type"), "application/grpc");
        assert_eq!(header(&answered, "grpc-status"), "8");
        assert_eq!(
            header(&answered, "grpc-message"),
            "rate limited by per-method"
        );
        assert_eq!(header(&answered, "grpc-retry-pushback-ms"), "7000");
        assert_eq!(header(&answered, "retry-after"), "7");
        assert_eq!(header(&answered, "ratelimit"), "\"per-method\";r=0;t=7");
        // A sensitive limit's bare 429 names nothing.
        let bare = ratewarden_http::Response {
            status: 429,
            headers: vec![(RETRY_AFTER, "3".to_owned())],
            body: String::new(),
        };
        let answered = refusal(Plain::contract(bare));
        assert_eq!(header(&answered, "grpc-message"), "rate limited");
        // Shed: UNAVAILABLE, in the problem's words.
        let shed = ratewarden_http::unavailable(2_000_000_000, "at capacity");
        let answered = refusal(Plain::contract(shed));
        assert_eq!(header(&answered, "grpc-status"), "14");
        assert_eq!(header(&answered, "grpc-message"), "at capacity");
    }

    #[test]
    fn a_problem_of_the_gateways_own_becomes_its_grpc_code() {
        let gateway = crate::serve::reply::problem(StatusCode::BAD_GATEWAY, "no upstream");
        let answered = answer(gateway);
        assert_eq!(header(&answered, "grpc-status"), "14");
        assert_eq!(header(&answered, "grpc-message"), "bad gateway");
        assert!(answered.headers().get(CONTENT_LENGTH).is_none());
    }
}
