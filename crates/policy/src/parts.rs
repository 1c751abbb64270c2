//! An `http` request as the engine reads it: what the gateway, forward-auth and the tower
//! layer all take from `http::request::Parts`, written once.

use http::header::{self, HeaderMap};
use http::request::Parts;

/// The header lines the engine reads: each name with its value, skipping values that are
/// not visible ASCII (no rule could match or key on them as text).
pub fn header_pairs(headers: &HeaderMap) -> Vec<(&str, &str)> {
    headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect()
}

/// The host a request is for: the target's authority when it has one (RFC 9112 §3.2.2: an
/// absolute-form target wins over `Host`), else `Host`. The engine compares hosts as DNS
/// does and refuses what is no host.
pub fn host(parts: &Parts) -> Option<&str> {
    match parts.uri.authority() {
        Some(authority) => Some(authority.as_str()),
        None => parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_authority_wins_over_host_and_unreadable_values_are_skipped() {
        let (parts, ()) = http::Request::get("http://a.example/x")
            .header("host", "b.example")
            .header("x-key", "k1")
            .header("x-bin", &b"\xff"[..])
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(host(&parts), Some("a.example"));
        assert_eq!(
            header_pairs(&parts.headers),
            [("host", "b.example"), ("x-key", "k1")]
        );
        let (parts, ()) = http::Request::get("/x")
            .header("host", "b.example")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(host(&parts), Some("b.example"));
    }
}
