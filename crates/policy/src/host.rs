//! One spelling per host: a request's `Host` compared as DNS and the web servers compare it.
//!
//! `api.example.com`, `API.example.com`, `api.example.com.` and `api.example.com:8080`
//! all reach the same virtual host on nginx, Caddy and HAProxy: DNS names are
//! case-insensitive (RFC 4343), a trailing dot only says the name is fully qualified
//! (RFC 1034 §3.1), and virtual hosts are chosen by name, not by port. So a rule's
//! `match.host` takes every one of them: [`names`] compares without ASCII case, one
//! trailing dot and the port, and IPv6 literals by address (`[::1]` is `[0:0::1]`).
//!
//! A `Host` that is not a host at all (an empty label as in `a..b`, a space, userinfo
//! `user@`, a percent-encoding, an unbracketed IPv6 address, a port that is not a number)
//! has no one meaning servers agree on, and RFC 9112 §3.2 has a server answer it 400:
//! [`name`] refuses it, so the limiter never skips a host rule for a spelling the upstream
//! might still route to the rule's host.

use std::borrow::Cow;
use std::net::Ipv6Addr;

/// Why a host was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a host ({reason})")]
pub struct HostError {
    /// The host as given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The longest DNS name, without its trailing dot (RFC 1035 §2.3.4).
const MAX_NAME: usize = 253;

/// The longest DNS label (RFC 1035 §2.3.4).
const MAX_LABEL: usize = 63;

/// The host of `authority` (`host` or `host:port`, as `Host` carries it) without its port
/// and one trailing dot, case kept; IPv6 literals keep their brackets.
///
/// # Errors
///
/// Anything that is not a DNS name, an IPv4 address or a bracketed IPv6 address, with an
/// optional numeric port: an empty host or label, a byte outside letters, digits, `-`, `_`
/// and `.`, a port that is not a number up to 65535.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::host;
///
/// assert_eq!(host::name("API.example.com.:8080").unwrap(), "API.example.com");
/// assert_eq!(host::name("[::1]:80").unwrap(), "[::1]");
/// assert!(host::name("api..example.com").is_err());
/// assert!(host::name("user@api.example.com").is_err());
/// ```
pub fn name(authority: &str) -> Result<&str, HostError> {
    let refuse = |reason| HostError {
        given: authority.to_owned(),
        reason,
    };
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return Err(refuse("an IPv6 address needs its closing `]`"));
        };
        let literal = &rest[..end];
        if literal.parse::<Ipv6Addr>().is_err() {
            return Err(refuse(
                "between `[` and `]` must be an IPv6 address, without a zone",
            ));
        }
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return Err(refuse("only `:` and a port may follow an IPv6 address")),
        };
        (&authority[..end + 2], port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        if port.is_some_and(|p| p.contains(':')) {
            return Err(refuse("an IPv6 address must be in brackets (`[::1]`)"));
        }
        (host, port)
    };
    if let Some(port) = port {
        let number =
            (!port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()))
                .then(|| port.parse::<u32>().ok())
                .flatten();
        if number.is_none_or(|n| n > 65_535) {
            return Err(refuse("the port after `:` must be a number up to 65535"));
        }
    }
    if host.starts_with('[') {
        return Ok(host);
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err(refuse("it is empty"));
    }
    if host.len() > MAX_NAME {
        return Err(refuse("longer than 253 characters"));
    }
    // One pass over the bytes (a host is read on every request): each a letter, a digit,
    // `-` or `_`, or a dot closing a label that is neither empty nor over 63 bytes.
    let mut label = 0usize;
    for &b in host.as_bytes() {
        if b == b'.' {
            if label == 0 {
                return Err(refuse("an empty label between dots"));
            }
            label = 0;
        } else if matches!(b, b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_') {
            label += 1;
            if label > MAX_LABEL {
                return Err(refuse("a label longer than 63 characters"));
            }
        } else {
            return Err(refuse(
                "a host holds only letters, digits, `-`, `_` and dots",
            ));
        }
    }
    if label == 0 {
        return Err(refuse("an empty label between dots"));
    }
    Ok(host)
}

/// The one spelling of `authority`'s host: [`name`], lowercase, IPv6 literals in their
/// shortest form (RFC 5952).
///
/// # Errors
///
/// As [`name`].
///
/// # Examples
///
/// ```
/// use ratewarden_policy::host;
///
/// assert_eq!(host::normalize("API.example.com.:8080").unwrap(), "api.example.com");
/// assert_eq!(host::normalize("[0:0::1]").unwrap(), "[::1]");
/// ```
pub fn normalize(authority: &str) -> Result<Cow<'_, str>, HostError> {
    let host = name(authority)?;
    if let Some(literal) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // `name` parsed it already.
        let address: Ipv6Addr = literal.parse().map_err(|_| HostError {
            given: authority.to_owned(),
            reason: "between `[` and `]` must be an IPv6 address, without a zone",
        })?;
        let canonical = format!("[{address}]");
        return Ok(if canonical == host {
            Cow::Borrowed(host)
        } else {
            Cow::Owned(canonical)
        });
    }
    Ok(if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    })
}

/// Whether `authority` (a request's `Host`) names `host`, a host in its one spelling
/// ([`normalize`]d, without a port); false for an authority that is not a host.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::host;
///
/// assert!(host::names("API.Example.com.:443", "api.example.com"));
/// assert!(!host::names("api.example.com.evil", "api.example.com"));
/// ```
pub fn names(authority: &str, host: &str) -> bool {
    match name(authority) {
        Ok(given) if given.starts_with('[') => {
            normalize(authority).is_ok_and(|given| given == host)
        }
        Ok(given) => given.eq_ignore_ascii_case(host),
        Err(_) => false,
    }
}

/// A rule's `match.host` in its one spelling, or why it can never match a request.
pub(crate) fn rule_host(text: &str) -> Result<String, String> {
    let given = text.trim();
    let normal = normalize(given).map_err(|e| format!("`match.host`: {e}"))?;
    let port = match given.strip_prefix('[') {
        Some(rest) => rest
            .split_once(']')
            .is_some_and(|(_, after)| !after.is_empty()),
        None => given.contains(':'),
    };
    if port {
        return Err(format!(
            "`match.host = {given:?}` names a port: hosts are matched without their port, write `{normal}`"
        ));
    }
    Ok(normal.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_host_are_one_host() {
        for given in [
            "api.example.com",
            "API.EXAMPLE.COM",
            "api.example.com.",
            "api.example.com:80",
            "Api.Example.Com.:8080",
        ] {
            assert_eq!(normalize(given).unwrap(), "api.example.com", "{given}");
            assert!(names(given, "api.example.com"), "{given}");
        }
        assert_eq!(normalize("[0:0:0::1]:8080").unwrap(), "[::1]");
        assert_eq!(normalize("[::FFFF:1.2.3.4]").unwrap(), "[::ffff:1.2.3.4]");
        assert!(names("[0::1]", "[::1]"));
        assert_eq!(normalize("127.0.0.1:80").unwrap(), "127.0.0.1");
    }

    #[test]
    fn what_is_not_a_host_is_refused() {
        for given in [
            "",
            ".",
            ":80",
            "a..b",
            "a.b..",
            ".a.b",
            "a b",
            "a@b",
            "a/b",
            "a%62",
            "a:b",
            "a:",
            "a:99999",
            "a:1:2",
            "::1",
            "[::1",
            "[::1]x",
            "[fe80::1%25eth0]",
            "[v1.x]",
            "a\tb",
            "a\u{e9}b",
        ] {
            assert!(name(given).is_err(), "{given:?} taken");
            assert!(!names(given, "a"), "{given:?} named a host");
        }
        assert!(name(&"a.".repeat(128)).is_err());
        assert!(name(&"a".repeat(64)).is_err());
    }

    #[test]
    fn a_rule_host_with_a_port_or_no_host_is_refused() {
        assert_eq!(rule_host(" API.example.com. ").unwrap(), "api.example.com");
        assert_eq!(rule_host("[0::1]").unwrap(), "[::1]");
        assert!(rule_host("api.example.com:443")
            .unwrap_err()
            .contains("port"));
        assert!(rule_host("[::1]:443").unwrap_err().contains("port"));
        assert!(rule_host("a..b").is_err());
    }
}
