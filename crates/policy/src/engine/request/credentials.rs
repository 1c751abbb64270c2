//! The credentials of an `Authorization` value, read as RFC 9110 §11.6.2 writes them:
//! `auth-scheme [ 1*SP ( token68 / #auth-param ) ]`, the scheme in any case (§11.1).
//!
//! `BEARER t`, `bearer t` and `Bearer   t` are one credential to every server, so they are
//! one API key here. A value that servers could split differently (a tab for the space,
//! a second word after a bearer token, a list) is refused rather than read as no key: an
//! upstream may still take a piece of it as the client's credential.

use std::borrow::Cow;

/// What an `Authorization` value holds, as far as a rule's API key goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credentials<'a> {
    /// `Bearer` (any case) and its token, case kept (RFC 6750 §2.1).
    Bearer(&'a str),
    /// Another scheme and its one token (`Basic dXNlcjpwYXNz`, `Token abc`), as one key:
    /// the scheme lowercase, a space, the token.
    Other(Cow<'a, str>),
    /// A scheme alone, or with parameters that change from request to request (Digest's
    /// nonce and response): nothing that names the client.
    Nameless,
}

/// Why an `Authorization` value was refused.
pub(crate) type Unreadable = &'static str;

/// Reads `value` (an `Authorization` line, trimmed).
///
/// # Errors
///
/// A scheme that is not a token or is followed by anything but spaces, and a `Bearer`
/// credential that is not one token.
pub(crate) fn parse(value: &str) -> Result<Credentials<'_>, Unreadable> {
    // The spelling RFC 6750 gives, which nearly every client sends, without a scan.
    let end = match value.strip_prefix("Bearer ") {
        Some(_) => "Bearer".len(),
        None => value
            .bytes()
            .position(|b| !is_tchar(b))
            .unwrap_or(value.len()),
    };
    let (scheme, rest) = value.split_at(end);
    if scheme.is_empty() {
        return Err("does not start with a scheme such as `Bearer`");
    }
    if rest.is_empty() {
        return Ok(Credentials::Nameless);
    }
    // RFC 9110: one or more spaces (SP), nothing else, between scheme and credentials.
    let Some(after) = rest.strip_prefix(' ') else {
        return Err("has something other than a space after its scheme");
    };
    let token = after.trim_start_matches(' ');
    let one_token = !token.is_empty() && token.bytes().all(is_token_byte);
    if scheme.eq_ignore_ascii_case("bearer") {
        return match one_token {
            true => Ok(Credentials::Bearer(token)),
            false => Err("holds more than one bearer token, or characters no token has"),
        };
    }
    if !one_token {
        return Ok(Credentials::Nameless);
    }
    let mut key = String::with_capacity(scheme.len() + 1 + token.len());
    key.push_str(scheme);
    key.make_ascii_lowercase();
    key.push(' ');
    key.push_str(token);
    Ok(Credentials::Other(Cow::Owned(key)))
}

/// RFC 9110 §5.6.2's `tchar`.
fn is_tchar(b: u8) -> bool {
    // `!#$%&'*+-.^_`|~`, digits and letters, as ranges: a scheme is read on every request.
    matches!(
        b,
        b'!' | b'#'..=b'\'' | b'*' | b'+' | b'-' | b'.' | b'0'..=b'9' | b'A'..=b'Z' | b'^'..=b'z' | b'|' | b'~'
    )
}

/// A byte of a credential every server reads as one token: visible ASCII but the list and
/// quoting characters of `#auth-param` (`,`, `"`, `\`). A `token68` (RFC 9110) and a
/// `b64token` (RFC 6750) are such runs; so are the looser tokens real APIs issue.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b',' | b'"' | b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchar_is_rfc_9110_s() {
        for b in 0..=255u8 {
            let listed = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_tchar(b), listed, "{b:#x}");
        }
    }

    #[test]
    fn the_scheme_is_read_in_any_case_and_after_any_spaces() {
        for value in ["Bearer t", "BEARER t", "bearer t", "bEaReR   t"] {
            assert_eq!(parse(value), Ok(Credentials::Bearer("t")), "{value}");
        }
        assert_eq!(parse("Bearer T"), Ok(Credentials::Bearer("T")));
        assert_eq!(
            parse("Bearer a.b-c_d~e+f/g=="),
            Ok(Credentials::Bearer("a.b-c_d~e+f/g=="))
        );
        assert_eq!(
            parse("BASIC dXNlcjpwYXNz"),
            Ok(Credentials::Other("basic dXNlcjpwYXNz".into()))
        );
        assert_eq!(parse("Bearer"), Ok(Credentials::Nameless));
        assert_eq!(
            parse("Digest username=\"a\", nonce=\"b\""),
            Ok(Credentials::Nameless)
        );
    }

    #[test]
    fn a_credential_servers_could_split_apart_is_refused() {
        for value in [
            "Bearer\tt",
            "Bearer t u",
            "Bearer t,u",
            "Bearer \"t\"",
            "Bearer=t",
            "Bearer t\\",
            " Bearer t",
            "Basic\tabc",
            "\"Bearer\" t",
        ] {
            assert!(parse(value).is_err(), "{value:?} read");
        }
    }
}
