//! Body framing: how a received answer's body is delimited (RFC 9112 §6.3, as hyper's
//! client reads it), how the body is framed anew when sent on (as hyper's server frames
//! the body it is handed), and the two halves that turn reads into data and data into
//! bytes to send.

use http::StatusCode;

use super::chunked::{Chunked, ChunkedError};
use super::head::{is_named, Line};
use super::request::decimal;

/// How a received answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (an answer to `HEAD`, a 204, a 304).
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Until the sender closes.
    Close,
}

/// How a body is framed when sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encode {
    /// No body.
    None,
    /// This many bytes: what comes past them is not sent.
    Length(u64),
    /// Chunked: each piece of data one chunk, no extension, no trailer.
    Chunked,
}

/// How the body of an answer with `lines` is delimited, as hyper's client reads it: `head_only`
/// for the answer to a `HEAD`, `http10` for an HTTP/1.0 answer.
///
/// # Errors
///
/// Framing hyper's client refuses: `Transfer-Encoding` in HTTP/1.0, a `Content-Length`
/// that is not a number, two that differ.
pub(crate) fn framing(
    lines: &[Line<'_>],
    status: StatusCode,
    head_only: bool,
    http10: bool,
) -> Result<Framing, &'static str> {
    if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::None);
    }
    let mut codings = lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding"))
        .peekable();
    if codings.peek().is_some() {
        if http10 {
            return Err("`transfer-encoding` in an HTTP/1.0 answer");
        }
        // `Transfer-Encoding` wins over any `Content-Length`; chunked when the last line's
        // last coding is.
        let last = codings.last().map_or(&b""[..], |(_, v)| v);
        let coding = last.rsplit(|&b| b == b',').next().unwrap_or(b"");
        return Ok(if coding.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    let mut length = None;
    for (_, value) in lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
    {
        for part in value.split(|&b| b == b',') {
            let n = decimal(part.trim_ascii()).ok_or("an invalid `content-length`")?;
            if length.is_some_and(|l| l != n) {
                return Err("two different `content-length` values");
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// How hyper's server frames the body it is handed, for an answer read as `framing` whose
/// first `Content-Length` line left (hop-by-hop lines dropped) is `lines[first_length]`:
/// that length when one is left, chunked otherwise. `None` when it cannot write the head
/// (`Content-Length` lines, beside a `Transfer-Encoding` that framed the body, that are
/// not one number each, all the same).
pub(crate) fn encode_as(
    lines: &[Line<'_>],
    first_length: Option<usize>,
    framing: Framing,
) -> Option<Encode> {
    match framing {
        Framing::None => Some(Encode::None),
        // The body's length is known: the first line is written as it is, or the length
        // when none is left.
        Framing::Length(n) => Some(Encode::Length(n)),
        Framing::Chunked | Framing::Close => {
            let Some(first) = first_length else {
                return Some(Encode::Chunked);
            };
            let mut length = None;
            for (_, value) in lines[first..]
                .iter()
                .filter(|(n, _)| is_named(n, b"content-length"))
            {
                let n = decimal(value)?;
                if length.is_some_and(|l| l != n) {
                    return None;
                }
                length = Some(n);
            }
            length.map(Encode::Length)
        }
    }
}

/// A received body's data, read by read.
#[derive(Debug)]
pub(crate) struct Decoder {
    framing: Framing,
    /// Bytes of a `Content-Length` body still to come.
    left: u64,
    chunked: Chunked,
    /// The sender closed.
    closed: bool,
}

/// What one read of a body holds.
#[derive(Debug)]
pub(crate) struct Decoded<'a> {
    /// The body's data in it.
    pub(crate) data: &'a [u8],
    /// Where in the read the body ended, once it has.
    pub(crate) ended: Option<usize>,
    /// The framing broke after `data`.
    pub(crate) malformed: Option<ChunkedError>,
}

impl Decoder {
    /// A body delimited by `framing`.
    pub(crate) fn new(framing: Framing) -> Self {
        Self {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunked: Chunked::default(),
            closed: false,
        }
    }

    /// The body's part of `read`, the next bytes received; a chunked body's data is decoded
    /// into `scratch` (cleared first).
    pub(crate) fn decode<'a>(&mut self, read: &'a [u8], scratch: &'a mut Vec<u8>) -> Decoded<'a> {
        let whole = |data, ended| Decoded {
            data,
            ended,
            malformed: None,
        };
        match self.framing {
            _ if self.closed => whole(&[], Some(0)),
            Framing::None => whole(&[], Some(0)),
            Framing::Length(_) => {
                let take = read
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                self.left -= take as u64;
                whole(&read[..take], (self.left == 0).then_some(take))
            }
            Framing::Chunked => {
                scratch.clear();
                match self.chunked.feed(read, scratch) {
                    Ok(end) => whole(&scratch[..], end),
                    // The data before the fault is the body's, as hyper's client hands it
                    // on before the error.
                    Err(error) => Decoded {
                        data: &scratch[..],
                        ended: None,
                        malformed: Some(error),
                    },
                }
            }
            Framing::Close => whole(read, None),
        }
    }

    /// The sender closed: whether that ends the body (one delimited by the close) rather
    /// than cutting it short. The next [`Decoder::decode`] says it ended.
    pub(crate) fn close(&mut self) -> bool {
        self.closed = matches!(self.framing, Framing::Close);
        self.closed
    }

    /// Whether the sender closed to end the body.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }
}

/// A body's data framed for sending, piece by piece.
#[derive(Debug)]
pub(crate) struct Encoder(Encode);

impl Encoder {
    /// Data framed as `encode`.
    pub(crate) fn new(encode: Encode) -> Self {
        Self(encode)
    }

    /// Appends `data` to `out` as framed: for a length, no more than is still owed.
    /// Whether the body is whole: all of a length sent.
    pub(crate) fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) -> bool {
        match &mut self.0 {
            Encode::None => true,
            Encode::Length(owed) => {
                let take = data.len().min(usize::try_from(*owed).unwrap_or(usize::MAX));
                out.extend_from_slice(&data[..take]);
                *owed -= take as u64;
                *owed == 0
            }
            Encode::Chunked => {
                if !data.is_empty() {
                    chunk(out, data);
                }
                false
            }
        }
    }

    /// Whether the body is framed by a length.
    pub(crate) fn is_length(&self) -> bool {
        matches!(self.0, Encode::Length(_))
    }

    /// Appends the end of the body: the last chunk of a chunked one.
    pub(crate) fn finish(&self, out: &mut Vec<u8>) {
        if self.0 == Encode::Chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
}

/// Appends `data` as one chunk.
pub(crate) fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut size = [0u8; 16];
    let mut at = size.len();
    let mut n = data.len();
    loop {
        at -= 1;
        size[at] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.reserve(size.len() - at + data.len() + 4);
    out.extend_from_slice(&size[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(lines: &[Line<'_>]) -> Result<Framing, &'static str> {
        framing(lines, StatusCode::OK, false, false)
    }

    #[test]
    fn a_body_is_delimited_as_hyper_s_client_reads_it() {
        assert_eq!(framed(&[(b"Content-Length", b"5")]), Ok(Framing::Length(5)));
        assert_eq!(
            framed(&[(b"content-length", b"5, 5")]),
            Ok(Framing::Length(5))
        );
        assert_eq!(framed(&[]), Ok(Framing::Close));
        // `Transfer-Encoding` wins over `Content-Length`; chunked only when last.
        let both: &[Line<'_>] = &[
            (b"content-length", b"5"),
            (b"Transfer-Encoding", b"chunked"),
        ];
        assert_eq!(framed(both), Ok(Framing::Chunked));
        assert_eq!(
            framed(&[(b"transfer-encoding", b"chunked, gzip")]),
            Ok(Framing::Close)
        );
        assert_eq!(
            framed(&[(b"transfer-encoding", b"gzip, CHUNKED ")]),
            Ok(Framing::Chunked)
        );
        for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
            assert_eq!(
                framing(&[(b"content-length", b"5")], status, false, false),
                Ok(Framing::None)
            );
        }
        assert_eq!(
            framing(&[(b"content-length", b"5")], StatusCode::OK, true, false),
            Ok(Framing::None)
        );
        for bad in [
            &[
                (&b"content-length"[..], &b"5"[..]),
                (b"content-length", b"6"),
            ][..],
            &[(b"content-length", b"5, 6")],
            &[(b"content-length", b"+5")],
            &[(b"content-length", b"")],
        ] {
            assert!(framed(bad).is_err(), "{bad:?}");
        }
        let old = framing(
            &[(b"transfer-encoding", b"chunked")],
            StatusCode::OK,
            false,
            true,
        );
        assert!(old.is_err(), "no transfer coding in HTTP/1.0");
    }

    #[test]
    fn a_body_is_sent_with_its_length_when_one_is_left_else_chunked() {
        let lines: &[Line<'_>] = &[(b"content-length", b"3"), (b"content-length", b"3")];
        assert_eq!(
            encode_as(lines, None, Framing::Length(7)),
            Some(Encode::Length(7))
        );
        assert_eq!(
            encode_as(lines, None, Framing::Chunked),
            Some(Encode::Chunked)
        );
        assert_eq!(
            encode_as(lines, Some(0), Framing::Close),
            Some(Encode::Length(3))
        );
        let differ: &[Line<'_>] = &[(b"content-length", b"3"), (b"content-length", b"4")];
        assert_eq!(encode_as(differ, Some(0), Framing::Chunked), None);
        assert_eq!(encode_as(lines, None, Framing::None), Some(Encode::None));
    }

    proptest! {
        /// Data framed by a length or as chunks, however the reads cut it, decodes to the
        /// same data, its end found exactly where it is.
        #[test]
        fn encoded_data_decodes_to_itself_wherever_the_reads_cut(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 0..6),
            cuts in proptest::collection::vec(0usize..400, 0..8),
            chunked in any::<bool>(),
        ) {
            let data = chunks.concat();
            let (encode, framing) = if chunked {
                (Encode::Chunked, Framing::Chunked)
            } else {
                (Encode::Length(data.len() as u64), Framing::Length(data.len() as u64))
            };
            let mut wire = Vec::new();
            let mut encoder = Encoder::new(encode);
            for chunk in &chunks {
                encoder.encode(chunk, &mut wire);
            }
            encoder.finish(&mut wire);
            let body = wire.len();
            wire.extend_from_slice(b"NEXT");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(wire.len())).collect();
            cuts.push(wire.len());
            cuts.sort_unstable();
            let mut decoder = Decoder::new(framing);
            let (mut read, mut scratch, mut at, mut end) = (Vec::new(), Vec::new(), 0, None);
            for cut in cuts {
                let decoded = decoder.decode(&wire[at..cut], &mut scratch);
                prop_assert!(decoded.malformed.is_none());
                read.extend_from_slice(decoded.data);
                if let Some(n) = decoded.ended {
                    end = Some(at + n);
                    break;
                }
                at = cut;
            }
            prop_assert_eq!(end, Some(body));
            prop_assert_eq!(read, data);
        }
    }
}
