//! Request heads in: the request line and header lines of a head read in place, with the
//! parser hyper's server uses (`httparse`), and the values both lean paths read the same way.

use std::mem::MaybeUninit;

pub(crate) use httparse::Header;

/// The most header lines a head read here may have; a head with more is [`Parsed::Invalid`]
/// (hyper's own bound is 100: the lean paths hand such a head to hyper).
pub(crate) const MAX_HEADERS: usize = 32;

/// Storage for a head's header lines, on the caller's stack.
pub(crate) type Lines<'b> = [MaybeUninit<Header<'b>>; MAX_HEADERS];

/// Empty storage for [`parse`].
pub(crate) fn lines<'b>() -> Lines<'b> {
    [const { MaybeUninit::uninit() }; MAX_HEADERS]
}

/// What the bytes at the start of a buffer are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed<T> {
    /// A whole head.
    Complete(T),
    /// Not a whole head yet: read more (the caller bounds how much).
    Partial,
    /// Not a head this reads: a byte out of place, or more than [`MAX_HEADERS`] lines.
    Invalid,
}

/// A request head read whole, borrowing the buffer it was read from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RequestHead<'h, 'b> {
    /// The head's length in bytes: the body, or the next request, starts there.
    pub(crate) len: usize,
    /// The method, as sent (case kept).
    pub(crate) method: &'b str,
    /// The request target, as sent.
    pub(crate) target: &'b str,
    /// The minor version: 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub(crate) minor: u8,
    /// The header lines, in order.
    pub(crate) headers: &'h [Header<'b>],
}

/// Reads the request head at the start of `buf`, its header lines into `lines`.
pub(crate) fn parse<'h, 'b>(
    buf: &'b [u8],
    lines: &'h mut Lines<'b>,
) -> Parsed<RequestHead<'h, 'b>> {
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, lines) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Invalid,
    };
    // A complete head has all three.
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Parsed::Invalid;
    };
    Parsed::Complete(RequestHead {
        len,
        method,
        target,
        minor,
        headers: request.headers,
    })
}

/// What a `Connection` line's value asks: `Some(true)` for `close`, `Some(false)` for
/// `keep-alive` (either in any case), `None` for anything else (a list, a header's name).
pub(crate) fn connection_close(value: &[u8]) -> Option<bool> {
    if value.eq_ignore_ascii_case(b"close") {
        Some(true)
    } else if value.eq_ignore_ascii_case(b"keep-alive") {
        Some(false)
    } else {
        None
    }
}

/// A `Content-Length` value (RFC 9110 §8.6): decimal digits only, no sign, no space, no
/// list, within a `u64`.
pub(crate) fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A head's method, target, minor version, lines and length, owned.
    type Owned = (String, String, u8, Vec<(String, Vec<u8>)>, usize);

    /// What `head` parses to.
    fn parsed(head: &[u8]) -> Parsed<Owned> {
        let mut lines = lines();
        match parse(head, &mut lines) {
            Parsed::Complete(h) => Parsed::Complete((
                h.method.to_owned(),
                h.target.to_owned(),
                h.minor,
                h.headers
                    .iter()
                    .map(|l| (l.name.to_owned(), l.value.to_vec()))
                    .collect(),
                h.len,
            )),
            Parsed::Partial => Parsed::Partial,
            Parsed::Invalid => Parsed::Invalid,
        }
    }

    #[test]
    fn a_head_is_read_in_place_and_its_length_is_where_the_body_starts() {
        let head = b"GET /a?b HTTP/1.1\r\nHost: x\r\nAccept:  */* \r\n\r\nBODY";
        let Parsed::Complete((method, target, minor, lines, len)) = parsed(head) else {
            panic!("a whole head");
        };
        assert_eq!(
            (method.as_str(), target.as_str(), minor),
            ("GET", "/a?b", 1)
        );
        assert_eq!(
            lines,
            [
                ("Host".to_owned(), b"x".to_vec()),
                ("Accept".to_owned(), b"*/*".to_vec())
            ]
        );
        assert_eq!(&head[len..], b"BODY");
        let old = b"HEAD / HTTP/1.0\r\n\r\n";
        assert!(matches!(parsed(old), Parsed::Complete((_, _, 0, _, 19))));
    }

    #[test]
    fn a_head_not_whole_is_partial_and_a_bad_one_invalid() {
        let head = b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
        for end in 0..head.len() {
            assert_eq!(parsed(&head[..end]), Parsed::Partial, "{end} bytes");
        }
        for bad in [
            &b"\x00\x01garbage\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
        ] {
            assert_eq!(
                parsed(bad),
                Parsed::Invalid,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let many = [
            &b"GET / HTTP/1.1\r\n"[..],
            &b"X-A: 1\r\n".repeat(MAX_HEADERS + 1),
            b"\r\n",
        ]
        .concat();
        assert_eq!(
            parsed(&many),
            Parsed::Invalid,
            "more lines than the storage"
        );
        let most = [
            &b"GET / HTTP/1.1\r\n"[..],
            &b"X-A: 1\r\n".repeat(MAX_HEADERS),
            b"\r\n",
        ]
        .concat();
        assert!(matches!(parsed(&most), Parsed::Complete(_)));
    }

    #[test]
    fn connection_and_content_length_values() {
        assert_eq!(connection_close(b"Close"), Some(true));
        assert_eq!(connection_close(b"KEEP-ALIVE"), Some(false));
        for other in [&b"upgrade"[..], b"close, te", b"", b" close"] {
            assert_eq!(connection_close(other), None);
        }
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"0012"), Some(12));
        assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 ",
            b" 1",
            b"1,1",
            b"0x1",
            b"18446744073709551616",
        ] {
            assert_eq!(decimal(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        /// A head written from its parts parses back to those parts, however they are
        /// spelled, and wherever the buffer is cut before its end it is partial.
        #[test]
        fn a_written_head_parses_back_to_its_parts(
            method in "[A-Z]{1,8}",
            target in "/[a-zA-Z0-9/._~%?=&-]{0,40}",
            minor in 0u8..2,
            lines in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,20}", "[ -~]{0,30}"), 0..MAX_HEADERS),
            cut in 0usize..1000,
        ) {
            let mut head = format!("{method} {target} HTTP/1.{minor}\r\n").into_bytes();
            for (name, value) in &lines {
                head.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            head.extend_from_slice(b"\r\n");
            let Parsed::Complete((m, t, v, parsed_lines, len)) = parsed(&head) else {
                panic!("a whole head: {}", String::from_utf8_lossy(&head));
            };
            prop_assert_eq!((m, t, v, len), (method, target, minor, head.len()));
            // Leading and trailing whitespace is not the value's (RFC 9112 §5).
            let wanted: Vec<(String, Vec<u8>)> = lines
                .iter()
                .map(|(n, v)| (n.clone(), v.trim_matches([' ', '\t']).as_bytes().to_vec()))
                .collect();
            prop_assert_eq!(parsed_lines, wanted);
            let cut = cut % head.len();
            prop_assert_eq!(parsed(&head[..cut]), Parsed::Partial);
        }
    }
}
