//! Response heads in: where an upstream's answer head ends in the bytes read so far (its
//! interim `1xx` answers skipped, as hyper's client skips them), and the head parsed once.

use std::mem::MaybeUninit;

use http::StatusCode;

pub(crate) use httparse::Header;

/// The longest response head read: hyper's client buffer (8 KiB plus 100 lines of 4 KiB).
pub(crate) const MAX_RESPONSE_HEAD: usize = 8192 + 4096 * 100;

/// The most header lines a response may have, as hyper's client.
pub(crate) const MAX_RESPONSE_HEADERS: usize = 100;

/// Storage for a response head's lines, on the caller's stack.
pub(crate) type Lines<'b> = [MaybeUninit<Header<'b>>; MAX_RESPONSE_HEADERS];

/// Empty storage for [`parse`].
pub(crate) fn lines<'b>() -> Lines<'b> {
    [const { MaybeUninit::uninit() }; MAX_RESPONSE_HEADERS]
}

/// What is wrong with a response head.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    /// Not a response head httparse reads.
    #[error("a malformed response head: {0}")]
    Malformed(String),
    /// A status the lean path does not relay: `101` (nothing it forwards asks to switch
    /// protocols) or no status at all.
    #[error("a status the gateway does not relay: {0}")]
    Status(u16),
}

/// A final response head, borrowing the buffer it was read from.
#[derive(Debug)]
pub(crate) struct ResponseHead<'h, 'b> {
    /// The head's length in bytes: the body starts there.
    pub(crate) len: usize,
    pub(crate) status: StatusCode,
    /// The reason phrase, as sent.
    pub(crate) reason: &'b str,
    /// An HTTP/1.0 answer.
    pub(crate) http10: bool,
    /// The header lines, in order.
    pub(crate) headers: &'h [Header<'b>],
}

/// Parses the final response head at the start of `buf` (found whole by [`Scan`]).
pub(crate) fn parse<'h, 'b>(
    buf: &'b [u8],
    lines: &'h mut Lines<'b>,
) -> Result<ResponseHead<'h, 'b>, HeadError> {
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        lines,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err(HeadError::Malformed("not whole".into())),
        Err(error) => return Err(HeadError::Malformed(error.to_string())),
    };
    let code = response.code.unwrap_or(0);
    let status = match StatusCode::from_u16(code) {
        Ok(status) if code != 101 => status,
        _ => return Err(HeadError::Status(code)),
    };
    Ok(ResponseHead {
        len,
        status,
        reason: response.reason.unwrap_or(""),
        http10: response.version != Some(1),
        headers: response.headers,
    })
}

/// A search for the final response head in the bytes read so far: interim answers and
/// the empty lines before a status line are skipped, and the search resumes where the
/// last read left it.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Where the head being looked for starts.
    start: usize,
    /// Where the search for its end resumes.
    scanned: usize,
}

impl Scan {
    /// Whether the final head, starting at [`Scan::start`], is whole in `buf` (the bytes
    /// read so far); `false` when more is to be read.
    ///
    /// # Errors
    ///
    /// An interim answer that is not a head.
    pub(crate) fn found(&mut self, buf: &[u8]) -> Result<bool, HeadError> {
        loop {
            // Empty lines before a status line are skipped, as httparse skips them for
            // hyper's client: else one before an interim answer hid it, and it was relayed
            // as the answer.
            loop {
                match &buf[self.start..] {
                    [b'\n', ..] => self.start += 1,
                    [b'\r', b'\n', ..] => self.start += 2,
                    _ => break,
                }
            }
            self.scanned = self.scanned.max(self.start);
            let Some(end) = head_end(buf, self.scanned) else {
                // An end cut between reads is found from two bytes back.
                self.scanned = buf.len().saturating_sub(2).max(self.start);
                return Ok(false);
            };
            if !interim(&buf[self.start..end]) {
                return Ok(true);
            }
            // An interim answer (`100 Continue`, `103 Early Hints`): not relayed, as hyper's
            // client does not.
            self.start += interim_len(&buf[self.start..])?;
            self.scanned = self.start;
        }
    }

    /// Where the head being looked for starts: the bytes before it are skipped answers.
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// The bytes before [`Scan::start`] were dropped from the buffer's front.
    pub(crate) fn dropped_skipped(&mut self) {
        self.scanned -= self.start;
        self.start = 0;
    }
}

/// Where the head in `buf` ends (after its empty line, CRLF or LF as httparse takes them),
/// looking from `from`; `None` while not whole.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    memchr::memchr_iter(b'\n', &buf[from..]).find_map(|found| {
        let lf = from + found;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => Some(lf + 2),
            Some([b'\r', b'\n', ..]) => Some(lf + 3),
            _ => None,
        }
    })
}

/// Whether the head starting `buf` is an interim (1xx) answer other than a 101 (which is
/// the caller's to refuse).
fn interim(buf: &[u8]) -> bool {
    matches!(buf, [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', b'1', tens, ones, ..]
        if (*tens, *ones) != (b'0', b'1'))
}

/// The length of the interim answer at the start of `buf`, parsed whole.
fn interim_len(buf: &[u8]) -> Result<usize, HeadError> {
    let mut headers = lines();
    let mut response = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => Ok(len),
        Ok(httparse::Status::Partial) => Err(HeadError::Malformed("an interim answer".into())),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_head_ends_at_its_first_empty_line_crlf_or_lf() {
        let head = b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\nbody";
        assert_eq!(head_end(head, 0), Some(head.len() - 4));
        assert_eq!(head_end(&head[..head.len() - 6], 0), None);
        let bare = b"HTTP/1.1 200 OK\nA: 1\n\nbody";
        assert_eq!(head_end(bare, 0), Some(bare.len() - 4));
        // Resumed two bytes back, an end cut between reads is found.
        assert_eq!(head_end(head, head.len() - 8), Some(head.len() - 4));
    }

    #[test]
    fn interim_answers_are_1xx_but_101() {
        assert!(interim(b"HTTP/1.1 100 Continue\r\n\r\n"));
        assert!(interim(b"HTTP/1.1 103 Early Hints\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 101 Switching Protocols\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 1"));
    }

    #[test]
    fn a_final_head_is_parsed_and_a_switch_or_garbage_refused() {
        let buf = b"HTTP/1.0 404 Not Here\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n";
        let mut storage = lines();
        let head = parse(buf, &mut storage).expect("a head");
        assert_eq!(
            (
                head.len,
                head.status,
                head.reason,
                head.http10,
                head.headers.len()
            ),
            (buf.len(), StatusCode::NOT_FOUND, "Not Here", true, 2)
        );
        let mut storage = lines();
        let switch = parse(b"HTTP/1.1 101 Switching\r\n\r\n", &mut storage);
        assert_eq!(switch.err(), Some(HeadError::Status(101)));
        let mut storage = lines();
        assert!(matches!(
            parse(b"HTTP/1.1 2xx OK\r\n\r\n", &mut storage),
            Err(HeadError::Malformed(_))
        ));
    }

    proptest! {
        /// However the reads cut a stream of interim answers (and empty lines) before a final
        /// head, the scan finds that head, and only once it is whole.
        #[test]
        fn the_final_head_is_found_wherever_the_reads_cut(
            interims in proptest::collection::vec((0usize..3, proptest::sample::select(vec![100u16, 102, 103])), 0..4),
            cuts in proptest::collection::vec(0usize..300, 0..8),
        ) {
            let mut stream = Vec::new();
            for (empty, code) in &interims {
                stream.extend_from_slice(&b"\r\n".repeat(*empty));
                stream.extend_from_slice(format!("HTTP/1.1 {code} Interim\r\nLink: </a>\r\n\r\n").as_bytes());
            }
            let at = stream.len();
            let last = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
            stream.extend_from_slice(last);
            stream.extend_from_slice(b"ok");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut scan = Scan::default();
            let mut found = None;
            for cut in cuts {
                if scan.found(&stream[..cut]).expect("well formed") {
                    found = Some(cut);
                    break;
                }
            }
            let cut = found.expect("found at the latest at the end");
            prop_assert!(cut >= at + last.len());
            prop_assert_eq!(scan.start(), at);
            let mut storage = lines();
            let head = parse(&stream[scan.start()..cut], &mut storage).expect("the final head");
            prop_assert_eq!(head.status, StatusCode::OK);
            prop_assert_eq!(head.len, last.len());
        }
    }
}
