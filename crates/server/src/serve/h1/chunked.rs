//! A chunked body (RFC 9112 §7.1) decoded as its bytes come: the gateway's lean path
//! (`lean_gateway.rs`) relays an upstream's chunked answer as hyper's gateway does, its data
//! framed anew and its chunk extensions and trailers dropped, and must know when it is whole
//! to reuse the connection, and when it is malformed to stop.

/// The most bytes of chunk extensions in a body, as hyper's client.
const MAX_EXTENSIONS: u64 = 16 * 1024;

/// The most bytes of trailer lines after the last chunk.
const MAX_TRAILERS: usize = 16 * 1024;

/// What is wrong with a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChunkedError {
    /// A size that is not hex, or past a `u64`.
    #[error("a chunk size that is not a hex number of at most 64 bits")]
    Size,
    /// Chunk extensions past their bound.
    #[error("chunk extensions past 16 KiB")]
    Extensions,
    /// A line not ended by CRLF where one must end.
    #[error("a chunk not followed by CRLF")]
    LineEnd,
    /// Trailer lines past their bound.
    #[error("trailer lines past 16 KiB")]
    Trailers,
}

/// Where in a chunked body the bytes read so far end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a size line's hex digits: the size so far, and whether a digit came.
    Size(u64, bool),
    /// Whitespace after the size: more of it, an extension or CR.
    SizeLws(u64),
    /// In an extension, up to CR.
    Extension(u64),
    /// The size line's LF.
    SizeLf(u64),
    /// In a chunk's data: bytes left.
    Data(u64),
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    TrailerStart,
    /// In a trailer line, up to CR.
    Trailer,
    /// A trailer line's LF.
    TrailerLf,
    /// The final LF.
    EndLf,
    /// Whole.
    Done,
}

/// Follows a chunked body's framing.
#[derive(Debug, Clone)]
pub(crate) struct Chunked {
    state: State,
    extensions: u64,
    trailers: usize,
}

impl Default for Chunked {
    fn default() -> Self {
        Self {
            state: State::Size(0, false),
            extensions: 0,
            trailers: 0,
        }
    }
}

impl Chunked {
    /// Reads the body's next bytes, appending the chunks' data to `data`: `Some(n)` when it
    /// ends after `bytes[..n]` (what follows is not the body's), `None` when all of `bytes`
    /// is the body's and more is to come.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        data: &mut Vec<u8>,
    ) -> Result<Option<usize>, ChunkedError> {
        let mut at = 0;
        while at < bytes.len() {
            if let State::Data(left) = self.state {
                // The bulk of the body: skipped over, not looked at byte by byte.
                let take = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - at);
                data.extend_from_slice(&bytes[at..at + take]);
                at += take;
                let left = left - take as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data(left)
                };
                continue;
            }
            let b = bytes[at];
            at += 1;
            self.state = match self.state {
                // As hyper's client reads them: any number of digits within a `u64`, then
                // whitespace, an extension (bounded, no LF) or CR.
                State::Size(size, digits) => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = u64::from((b as char).to_digit(16).unwrap_or(0));
                        match size.checked_mul(16).and_then(|s| s.checked_add(digit)) {
                            Some(size) => State::Size(size, true),
                            None => return Err(ChunkedError::Size),
                        }
                    }
                    _ if !digits => return Err(ChunkedError::Size),
                    b' ' | b'\t' => State::SizeLws(size),
                    b';' => State::Extension(size),
                    b'\r' => State::SizeLf(size),
                    _ => return Err(ChunkedError::Size),
                },
                State::SizeLws(size) => match b {
                    b' ' | b'\t' => State::SizeLws(size),
                    b';' => State::Extension(size),
                    b'\r' => State::SizeLf(size),
                    _ => return Err(ChunkedError::Size),
                },
                State::Extension(size) => match b {
                    b'\r' => State::SizeLf(size),
                    b'\n' => return Err(ChunkedError::LineEnd),
                    _ => {
                        self.extensions += 1;
                        if self.extensions >= MAX_EXTENSIONS {
                            return Err(ChunkedError::Extensions);
                        }
                        State::Extension(size)
                    }
                },
                State::SizeLf(size) => match b {
                    b'\n' if size == 0 => State::TrailerStart,
                    b'\n' => State::Data(size),
                    _ => return Err(ChunkedError::LineEnd),
                },
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    _ => return Err(ChunkedError::LineEnd),
                },
                State::DataLf => match b {
                    b'\n' => State::Size(0, false),
                    _ => return Err(ChunkedError::LineEnd),
                },
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => return Err(ChunkedError::LineEnd),
                    _ => self.trailer()?,
                },
                State::Trailer => match b {
                    b'\r' => State::TrailerLf,
                    b'\n' => return Err(ChunkedError::LineEnd),
                    _ => self.trailer()?,
                },
                State::TrailerLf => match b {
                    b'\n' => State::TrailerStart,
                    _ => return Err(ChunkedError::LineEnd),
                },
                State::EndLf => match b {
                    b'\n' => State::Done,
                    _ => return Err(ChunkedError::LineEnd),
                },
                State::Data(_) | State::Done => unreachable!("handled above"),
            };
            if self.state == State::Done {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// One more trailer byte, within the bound.
    fn trailer(&mut self) -> Result<State, ChunkedError> {
        self.trailers += 1;
        if self.trailers > MAX_TRAILERS {
            return Err(ChunkedError::Trailers);
        }
        Ok(State::Trailer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(body: &[u8]) -> Result<Option<usize>, ChunkedError> {
        Chunked::default().feed(body, &mut Vec::new())
    }

    #[test]
    fn a_body_ends_after_its_last_chunk_and_trailers() {
        let body = b"5\r\nhello\r\nA;name=value\r\n0123456789\r\n0\r\n\r\nNEXT";
        // Leading zeros, as hyper reads them, and whitespace before an extension.
        let padded = b"00000000000000000003 \t;x\r\nabc\r\n0\r\n\r\n";
        assert_eq!(whole(padded), Ok(Some(padded.len())));
        assert_eq!(whole(body), Ok(Some(body.len() - 4)));
        let trailers = b"1\r\nx\r\n0\r\nX-Sum: 1\r\nX-B: 2\r\n\r\n";
        assert_eq!(whole(trailers), Ok(Some(trailers.len())));
        assert_eq!(whole(b"0\r\n\r\n"), Ok(Some(5)));
        assert_eq!(whole(b"5\r\nhel"), Ok(None));
        // The data alone: no size line, extension or trailer.
        let mut data = Vec::new();
        Chunked::default().feed(body, &mut data).unwrap();
        assert_eq!(data, b"hello0123456789");
    }

    #[test]
    fn malformed_framing_is_an_error() {
        assert_eq!(whole(b"x\r\n"), Err(ChunkedError::Size));
        assert_eq!(whole(b";x\r\n"), Err(ChunkedError::Size));
        assert_eq!(whole(b"12345678901234567\r\n"), Err(ChunkedError::Size));
        assert_eq!(whole(b"1 x\r\n"), Err(ChunkedError::Size));
        let ext = [&b"1;"[..], &vec![b'a'; MAX_EXTENSIONS as usize]].concat();
        assert_eq!(whole(&ext), Err(ChunkedError::Extensions));
        assert_eq!(whole(b"1\nx"), Err(ChunkedError::Size));
        assert_eq!(whole(b"1\r\nxy\r\n"), Err(ChunkedError::LineEnd));
        assert_eq!(whole(b"1\r\nx\r\r"), Err(ChunkedError::LineEnd));
        assert_eq!(whole(b"0\r\n\r\r"), Err(ChunkedError::LineEnd));
        let long = [&b"0\r\nX: "[..], &vec![b'a'; MAX_TRAILERS]].concat();
        assert_eq!(whole(&long), Err(ChunkedError::Trailers));
    }

    /// `chunks` encoded, with an extension on every other size line and a trailer.
    fn encode(chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, chunk) in chunks.iter().filter(|c| !c.is_empty()).enumerate() {
            out.extend_from_slice(format!("{:x}", chunk.len()).as_bytes());
            if n % 2 == 1 {
                out.extend_from_slice(b";ext=1");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nX-T: 1\r\n\r\n");
        out
    }

    proptest! {
        /// However a body is cut into reads, its end is found exactly where it is, nothing
        /// after it is taken, and its data is the chunks' data.
        #[test]
        fn the_end_is_found_wherever_the_reads_cut(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            cuts in proptest::collection::vec(0usize..400, 0..10),
        ) {
            let body = encode(&chunks);
            let stream = [&body[..], b"HTTP/1.1 200 OK\r\n"].concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut chunked = Chunked::default();
            let mut at = 0;
            let mut end = None;
            let mut data = Vec::new();
            for cut in cuts {
                if let Some(n) = chunked.feed(&stream[at..cut], &mut data).expect("well formed") {
                    end = Some(at + n);
                    break;
                }
                at = cut;
            }
            prop_assert_eq!(end, Some(body.len()));
            prop_assert_eq!(data, chunks.concat());
        }
    }
}
