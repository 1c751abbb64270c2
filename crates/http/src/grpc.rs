//! The contract for gRPC calls: a refusal is a trailers-only answer (HTTP 200,
//! `content-type: application/grpc`, the status in `grpc-status` and `grpc-message`),
//! never an HTTP 429 that a gRPC client reports as a transport error. The tower layer and
//! the gateway both answer with these.

use std::time::Duration;

use http::HeaderName;

/// The call's status.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// The status's message, percent-encoded ([`percent_encode`]).
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// gRPC's retry pushback (the A6 retry design): a client that retries waits this long.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// The `grpc-status` codes a limiter answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 2: an answer no other code fits.
    Unknown,
    /// 3: a call the limits cannot read.
    InvalidArgument,
    /// 4: the upstream, or the call itself, too slow.
    DeadlineExceeded,
    /// 8: over a limit.
    ResourceExhausted,
    /// 13: a malformed call.
    Internal,
    /// 14: shed, a store that is down, an upstream that cannot be reached.
    Unavailable,
}

impl Code {
    /// The code as `grpc-status` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Unknown => "2",
            Code::InvalidArgument => "3",
            Code::DeadlineExceeded => "4",
            Code::ResourceExhausted => "8",
            Code::Internal => "13",
            Code::Unavailable => "14",
        }
    }

    /// The code for an HTTP answer of `status` the limiter made itself: a limit is
    /// `RESOURCE_EXHAUSTED` (as Envoy's `rate_limited_as_resource_exhausted` answers),
    /// shedding and an unreachable upstream `UNAVAILABLE`, and the rest as gRPC's own
    /// mapping of HTTP statuses has them.
    pub fn of_status(status: u16) -> Code {
        match status {
            429 => Code::ResourceExhausted,
            502 | 503 => Code::Unavailable,
            408 | 504 => Code::DeadlineExceeded,
            400 | 411 | 413 | 431 => Code::Internal,
            _ => Code::Unknown,
        }
    }
}

/// Whether a request whose `content-type` is `content_type` is a gRPC call:
/// `application/grpc`, alone or with a suffix (`+proto`, `+json`) or parameters, and
/// gRPC-Web's `application/grpc-web` (its clients read a trailers-only answer's
/// `grpc-status` from the headers as well).
pub fn is_call(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|v| {
        v.get(..16)
            .is_some_and(|t| t.eq_ignore_ascii_case("application/grpc"))
    })
}

/// Whether `grpc-status` (in a response's headers, or its trailers) is a failure of the
/// server's, the codes gRPC maps to a 5xx (`UNKNOWN`, `DEADLINE_EXCEEDED`,
/// `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`): a gRPC service answers its
/// errors inside an HTTP 200, and these are what an adaptive limit must back off from, as
/// from a 5xx. A caller's mistake (`INVALID_ARGUMENT`, `NOT_FOUND`...) is no more a drop
/// than a 4xx is.
pub fn is_server_failure(grpc_status: Option<&str>) -> bool {
    grpc_status
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|code| matches!(code, 2 | 4 | 12 | 13 | 14 | 15))
}

/// The message of a refused call: which limits refused it (none named when a sensitive
/// limit did), or that a limit cannot be checked.
pub fn refusal_message(code: Code, sensitive: bool, violated: &[&str]) -> String {
    match code {
        Code::Unavailable => "a rate limit this call needs cannot be checked right now".to_owned(),
        _ if sensitive || violated.is_empty() => "rate limited".to_owned(),
        _ => format!("rate limited by {}", violated.join(", ")),
    }
}

/// `grpc-retry-pushback-ms` for a wait of `retry`: rounded up, as `Retry-After` is, so a
/// client never comes back early.
pub fn retry_pushback_ms(retry: Duration) -> u64 {
    let ms = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX);
    ms.saturating_add(u64::from(retry.subsec_nanos() % 1_000_000 != 0))
}

/// `text` as `grpc-message` carries it: bytes outside printable ASCII, and `%` itself, as
/// `%XX`.
pub fn percent_encode(text: &str) -> String {
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
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("limit `a`"), "limit `a`");
        assert_eq!(percent_encode("50% ü"), "50%25 %C3%BC");
    }

    #[test]
    fn a_call_is_told_by_its_content_type() {
        for (value, call) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("Application/GRPC+json", true),
            ("application/grpc;charset=utf-8", true),
            ("application/grpc-web", true),
            ("application/grpc-web+proto", true),
            ("application/json", false),
            ("application/grp", false),
        ] {
            assert_eq!(is_call(Some(value)), call, "{value}");
        }
        assert!(!is_call(None));
    }

    #[test]
    fn http_statuses_map_to_codes_and_waits_round_up() {
        assert_eq!(Code::of_status(429), Code::ResourceExhausted);
        assert_eq!(Code::of_status(503), Code::Unavailable);
        assert_eq!(Code::of_status(502), Code::Unavailable);
        assert_eq!(Code::of_status(504), Code::DeadlineExceeded);
        assert_eq!(Code::of_status(400), Code::Internal);
        assert_eq!(Code::of_status(418), Code::Unknown);
        assert_eq!(retry_pushback_ms(Duration::from_micros(1_500)), 2);
        assert_eq!(retry_pushback_ms(Duration::from_secs(7)), 7_000);
        assert!(is_server_failure(Some("14")) && !is_server_failure(Some("5")));
        assert!(!is_server_failure(None));
    }
}
