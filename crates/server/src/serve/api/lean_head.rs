//! Which request heads the lean path (`lean.rs`) serves itself: a plain HTTP/1.1
//! `POST /v1/check` with a `Content-Length`, and nothing else.
//!
//! Everything this does not recognise exactly goes to hyper, which then serves the rest of
//! the connection as it serves every other listener: so a head this reads wrongly can only
//! be sent to hyper, never answered differently.

use std::mem::MaybeUninit;

/// The most header lines a head the lean path serves may have; more go to hyper (whose
/// own bound is 100).
const MAX_HEADERS: usize = 32;

/// What the bytes at the start of a connection's buffer are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head<'b> {
    /// A `/v1/check` the lean path serves.
    Check(Check<'b>),
    /// Not a whole head yet: read more (the caller bounds how much).
    Partial,
    /// Anything else (another request, a parse error): hyper's.
    Other,
}

/// A `/v1/check` head the lean path serves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Check<'b> {
    /// The head's length in bytes: the body starts there.
    pub(crate) len: usize,
    /// The body's length (`Content-Length`).
    pub(crate) body: u64,
    /// The first `Content-Type`'s value.
    pub(crate) kind: Option<&'b [u8]>,
    /// `Connection: close`: answer, then close.
    pub(crate) close: bool,
}

/// Reads the head at the start of `buf`.
pub(crate) fn read(buf: &[u8]) -> Head<'_> {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Head::Partial,
        // Too many headers, a byte out of place: hyper answers (400, 431) or serves it.
        Err(_) => return Head::Other,
    };
    if request.version != Some(1)
        || request.method != Some("POST")
        || request.path != Some("/v1/check")
    {
        return Head::Other;
    }
    let mut body = None;
    let mut kind = None;
    let mut close = None;
    for header in request.headers.iter() {
        let name = header.name.as_bytes();
        // By length first: most lines (Host, User-Agent...) are then one compare away from
        // being skipped (matching each name against each of six was 350 instructions).
        let is = |wanted: &[u8]| name.eq_ignore_ascii_case(wanted);
        match name.len() {
            14 if is(b"content-length") => {
                // Exactly one, digits only: anything else (a list, a sign, two of them) is
                // what request smuggling is made of, and hyper's to judge.
                if body.is_some() {
                    return Head::Other;
                }
                body = match decimal(header.value) {
                    Some(length) => Some(length),
                    None => return Head::Other,
                };
            }
            12 if is(b"content-type") => kind = kind.or(Some(header.value)),
            10 if is(b"connection") => {
                if close.is_some() {
                    return Head::Other;
                }
                close = if header.value.eq_ignore_ascii_case(b"close") {
                    Some(true)
                } else if header.value.eq_ignore_ascii_case(b"keep-alive") {
                    Some(false)
                } else {
                    return Head::Other;
                };
            }
            17 if is(b"transfer-encoding") => return Head::Other,
            6 if is(b"expect") => return Head::Other,
            7 if is(b"upgrade") => return Head::Other,
            _ => {}
        }
    }
    let Some(body) = body else {
        return Head::Other;
    };
    Head::Check(Check {
        len,
        body,
        kind,
        close: close.unwrap_or(false),
    })
}

/// A `Content-Length` value: decimal digits only, no sign, no spaces, no overflow.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(head: &[u8]) -> Option<Check<'_>> {
        match read(head) {
            Head::Check(check) => Some(check),
            _ => None,
        }
    }

    #[test]
    fn a_plain_check_is_served_here() {
        let head = b"POST /v1/check HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{}";
        let check = check(head).expect("a check");
        assert_eq!(check.len, head.len() - 2);
        assert_eq!(check.body, 12);
        assert_eq!(check.kind, Some(&b"application/json"[..]));
        assert!(!check.close);
        let close = b"POST /v1/check HTTP/1.1\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n";
        assert!(check_close(close));
    }

    fn check_close(head: &[u8]) -> bool {
        check(head).expect("a check").close
    }

    #[test]
    fn a_head_not_whole_yet_is_partial() {
        let head = b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
        for end in 0..head.len() {
            assert_eq!(read(&head[..end]), Head::Partial, "{end} bytes");
        }
    }

    #[test]
    fn anything_but_a_plain_check_goes_to_hyper() {
        for head in [
            &b"GET /v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n"[..],
            b"POST /v1/check HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/settle HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http://a/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"post /v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nUpgrade: h2c\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nConnection: upgrade\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\nConnection: close\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length : 2\r\n\r\n",
            b"\x00\x01garbage\r\n\r\n",
        ] {
            assert!(
                check(head).is_none(),
                "{:?} is hyper's",
                String::from_utf8_lossy(head)
            );
        }
        let many: Vec<u8> = [
            &b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\n"[..],
            &b"X-A: 1\r\n".repeat(MAX_HEADERS),
            b"\r\n",
        ]
        .concat();
        assert_eq!(read(&many), Head::Other, "more header lines than the array");
    }
}
