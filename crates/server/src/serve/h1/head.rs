//! Heads out: request and status lines, and header lines written as hyper writes a
//! `HeaderMap` (names lowercase, each name's lines together in the order of its first
//! appearance), from lines borrowed from a head read in, without building a map.

/// A header line: its name and value, as read.
pub(crate) type Line<'a> = (&'a [u8], &'a [u8]);

/// The headers that describe one connection, not the message (RFC 9110 §7.6.1).
pub(crate) const HOP_BY_HOP: [&[u8]; 9] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether `name` is `lower` (lowercase), in any case: a length compare passes most.
pub(crate) fn is_named(name: &[u8], lower: &[u8]) -> bool {
    name.len() == lower.len() && name.eq_ignore_ascii_case(lower)
}

/// Appends `METHOD path[?query] HTTP/1.1`.
pub(crate) fn request_line(out: &mut Vec<u8>, method: &str, path: &str, query: Option<&str>) {
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    if let Some(query) = query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Appends `HTTP/1.1 code reason`: always our version, whatever the answer relayed came
/// in (RFC 9110 §6.2).
pub(crate) fn status_line(out: &mut Vec<u8>, status: http::StatusCode, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `name: value`, the name lowercase (lowered in place: byte by byte through an
/// iterator costs several times as much).
pub(crate) fn write_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    // One reservation, and the separators pushed: a copy call each cost more than them.
    out.reserve(name.len() + value.len() + 4);
    let at = out.len();
    out.extend_from_slice(name);
    lowercase(&mut out[at..]);
    out.push(b':');
    out.push(b' ');
    out.extend_from_slice(value);
    out.push(b'\r');
    out.push(b'\n');
}

/// Appends `name: n` for a length.
pub(crate) fn write_length(out: &mut Vec<u8>, name: &[u8], n: u64) {
    write_line(out, name, itoa::Buffer::new().format(n).as_bytes());
}

/// Writes each name's lines, in order of its first appearance, names lowercase (as
/// [`Groups::write`], when no name is removed); of the name `first_only`, only the first
/// line.
pub(crate) fn write_in_order<T>(
    out: &mut Vec<u8>,
    lines: &[T],
    line: impl Fn(&T) -> Line<'_>,
    first_only: Option<&[u8]>,
) {
    for (at, this) in lines.iter().enumerate() {
        let (name, value) = line(this);
        let same = |other: &T| is_named(line(other).0, name);
        if lines[..at].iter().any(same) {
            // Written with its name's first line.
            continue;
        }
        write_line(out, name, value);
        if first_only.is_some_and(|n| name.eq_ignore_ascii_case(n)) {
            continue;
        }
        for other in &lines[at + 1..] {
            if same(other) {
                write_line(out, name, line(other).1);
            }
        }
    }
}

/// A header map's names over a list of lines: the first line of each name, in order of
/// first appearance, as a `HeaderMap` iterates them.
#[derive(Debug, Default)]
pub(crate) struct Groups(Vec<usize>);

impl Groups {
    /// The names of `lines`.
    pub(crate) fn of(lines: &[Line<'_>]) -> Self {
        let mut groups = Vec::with_capacity(lines.len());
        for (at, (name, _)) in lines.iter().enumerate() {
            if !lines[..at]
                .iter()
                .any(|(seen, _)| seen.eq_ignore_ascii_case(name))
            {
                groups.push(at);
            }
        }
        Self(groups)
    }

    /// Where the name `name`'s first line is (in any case), if it is still here.
    pub(crate) fn find(&self, lines: &[Line<'_>], name: &[u8]) -> Option<usize> {
        self.0.iter().copied().find(|&g| is_named(lines[g].0, name))
    }

    /// Removes the name `lower` as `HeaderMap::remove` does: its place taken by the last
    /// name.
    pub(crate) fn remove(&mut self, lines: &[Line<'_>], lower: &[u8]) {
        if let Some(at) = self
            .0
            .iter()
            .position(|&g| lines[g].0.eq_ignore_ascii_case(lower))
        {
            self.0.swap_remove(at);
        }
    }

    /// Drops the name `lower` where it stands (the order of the others kept).
    pub(crate) fn skip(&mut self, lines: &[Line<'_>], lower: &[u8]) {
        self.0.retain(|&g| !is_named(lines[g].0, lower));
    }

    /// Adds the names of `lines[from..]` not here yet, after the others, as a map's
    /// `append` of each line does.
    pub(crate) fn append(&mut self, lines: &[Line<'_>], from: usize) {
        for (at, (name, _)) in lines.iter().enumerate().skip(from) {
            if self.find(lines, name).is_none() {
                self.0.push(at);
            }
        }
    }

    /// Removes what a proxy removes from a message it forwards: the names `Connection`
    /// lists, then the fixed hop-by-hop list, in that order.
    pub(crate) fn strip_hop_by_hop(&mut self, lines: &[Line<'_>]) {
        // Values hyper reads as text only: the rest it skips.
        let named: Vec<&[u8]> = lines
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .filter(|(_, v)| v.iter().all(|&b| (b' '..=b'~').contains(&b) || b == b'\t'))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|n| !n.is_empty())
            .collect();
        for name in named {
            self.remove(lines, name);
        }
        for name in HOP_BY_HOP {
            self.remove(lines, name);
        }
    }

    /// Writes each name's lines, names lowercase; of the name `first_only`, only the
    /// first line (as hyper writes `content-length`).
    pub(crate) fn write(&self, out: &mut Vec<u8>, lines: &[Line<'_>], first_only: Option<&[u8]>) {
        for &g in &self.0 {
            let name = lines[g].0;
            write_line(out, name, lines[g].1);
            if first_only.is_some_and(|n| name.eq_ignore_ascii_case(n)) {
                continue;
            }
            // Most names come once: a length compare passes the others.
            for (other, value) in &lines[g + 1..] {
                if is_named(other, name) {
                    write_line(out, name, value);
                }
            }
        }
    }
}

/// Whether a line of `name` lists `token`.
pub(crate) fn has_token(lines: &[Line<'_>], name: &[u8], token: &[u8]) -> bool {
    lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The bytes of `head` that hold its header lines (`lines[..upstream]`), when they are
/// exactly what [`write_in_order`] would write of all `lines`: every name lowercase and
/// distinct (so one line each, in order), none of the later lines named as one of them,
/// and each line `name: value` CRLF, one after the other. Most upstreams write their heads
/// so; copying the block is far cheaper than writing it line by line.
pub(crate) fn verbatim<'a>(
    head: &'a [u8],
    lines: &[Line<'_>],
    upstream: usize,
) -> Option<&'a [u8]> {
    let (first, _) = lines.first().filter(|_| upstream > 0)?;
    // Where each line lies in `head`: the lines were parsed from it.
    let base = head.as_ptr() as usize;
    let offset = |bytes: &[u8]| (bytes.as_ptr() as usize).checked_sub(base);
    let start = offset(first)?;
    let mut at = start;
    for (n, (name, value)) in lines[..upstream].iter().enumerate() {
        let name_end = offset(name)?.checked_add(name.len())?;
        let value_end = offset(value)?.checked_add(value.len())?;
        let laid_out = offset(name)? == at
            && head.get(name_end..name_end + 2)? == b": "
            && offset(value)? == name_end + 2
            && head.get(value_end..value_end + 2)? == b"\r\n";
        if !laid_out || value.is_empty() || name.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        let same = |(other, _): &Line<'_>| other.eq_ignore_ascii_case(name);
        if lines[n + 1..].iter().any(same) {
            return None;
        }
        at = value_end + 2;
    }
    head.get(start..at)
}

/// `bytes` lowercased in place, eight at a time (byte by byte, lowering was most of
/// writing a line): in each word, the ASCII bytes from `A` to `Z` get their 0x20 bit.
pub(crate) fn lowercase(bytes: &mut [u8]) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact_mut(8);
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_ne_bytes(eight);
        let low = x & LOW7;
        // Bit 7 of each byte: past `Z` (low + 0x25), from `A` on (low + 0x3f), ASCII.
        let past_z = low + 0x2525_2525_2525_2525;
        let from_a = low + 0x3f3f_3f3f_3f3f_3f3f;
        let upper = !x & HIGH & (from_a ^ past_z);
        word.copy_from_slice(&(x | (upper >> 2)).to_ne_bytes());
    }
    words.into_remainder().make_ascii_lowercase();
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderMap, HeaderName, HeaderValue};
    use proptest::prelude::*;

    /// `verbatim` of `head` with the fields `fields` after its lines.
    fn copied(head: &[u8], fields: &[Line<'_>]) -> Option<String> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(head).unwrap() {
            httparse::Status::Complete(len) => len,
            httparse::Status::Partial => panic!("not whole"),
        };
        let mut lines: Vec<Line<'_>> = response
            .headers
            .iter()
            .map(|h| (h.name.as_bytes(), h.value))
            .collect();
        let upstream = lines.len();
        lines.extend_from_slice(fields);
        verbatim(&head[..len], &lines, upstream).map(|raw| String::from_utf8(raw.to_vec()).unwrap())
    }

    #[test]
    fn lines_are_copied_whole_only_when_they_are_written_so() {
        let fields: &[Line<'_>] = &[(b"ratelimit", b"x")];
        assert_eq!(
            copied(
                b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok",
                fields
            )
            .as_deref(),
            Some("x-a: 1\r\ncontent-length: 2\r\n")
        );
        for head in [
            &b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nx-a:  1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a:1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a: 1 \r\n\r\n",
            b"HTTP/1.1 200 OK\nx-a: 1\n\n",
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\nx-b: 2\r\nx-a: 3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a:\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nratelimit: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
        ] {
            assert_eq!(
                copied(head, fields),
                None,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn a_removed_name_s_place_is_taken_by_the_last_as_in_a_header_map() {
        let lines: &[Line<'_>] = &[
            (b"A", b"1"),
            (b"Connection", b"x-b"),
            (b"c", b"3"),
            (b"X-B", b"2"),
            (b"a", b"4"),
            (b"D", b"5"),
        ];
        let mut map = HeaderMap::new();
        for (n, v) in lines {
            map.append(
                HeaderName::from_bytes(n).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        let mut groups = Groups::of(lines);
        groups.strip_hop_by_hop(lines);
        for name in ["connection", "x-b"] {
            map.remove(name);
        }
        let mut out = Vec::new();
        groups.write(&mut out, lines, None);
        let ours = String::from_utf8(out).unwrap();
        let mut theirs = String::new();
        for name in map.keys() {
            for value in map.get_all(name) {
                theirs.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
            }
        }
        assert_eq!(ours, theirs);
        assert_eq!(ours, "a: 1\r\na: 4\r\nd: 5\r\nc: 3\r\n");
    }

    /// A header line of names that come again in other cases, hop-by-hop ones among them.
    fn line() -> impl Strategy<Value = (String, String)> {
        let name = proptest::sample::select(vec![
            "Accept",
            "accept",
            "X-A",
            "x-a",
            "X-b",
            "Connection",
            "Keep-Alive",
            "TE",
            "Content-Length",
            "Date",
            "Upgrade",
        ]);
        (name.prop_map(str::to_owned), "[!-~]([ -~]{0,10}[!-~])?")
    }

    /// The lines of a head, each `name: value`, parsed as a map: what a client reads of it.
    fn parsed_map(lines: &[u8]) -> HeaderMap {
        let head = [&b"HTTP/1.1 200 OK\r\n"[..], lines, b"\r\n"].concat();
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        assert!(response.parse(&head).expect("well formed").is_complete());
        let mut map = HeaderMap::new();
        for h in response.headers.iter() {
            map.append(
                HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(h.value).unwrap(),
            );
        }
        map
    }

    proptest! {
        /// Eight at a time, as byte by byte.
        #[test]
        fn lowercase_is_make_ascii_lowercase(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut ours = bytes.clone();
            lowercase(&mut ours);
            prop_assert_eq!(ours, bytes.to_ascii_lowercase());
        }

        /// Lines written in order, or as groups with the hop-by-hop ones stripped, read
        /// back as the header map hyper would hold: each name's values, in order, and
        /// nothing the strip removed. Compared as maps, not bytes, so the test holds
        /// whatever order a map keeps its names in.
        #[test]
        fn written_lines_read_back_as_the_map_they_stand_for(
            lines in proptest::collection::vec(line(), 0..12),
        ) {
            let lines: Vec<Line<'_>> = lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
            let mut map = HeaderMap::new();
            for (n, v) in &lines {
                map.append(HeaderName::from_bytes(n).unwrap(), HeaderValue::from_bytes(v).unwrap());
            }
            let mut out = Vec::new();
            write_in_order(&mut out, &lines, |l| *l, None);
            prop_assert_eq!(parsed_map(&out), map.clone());

            let mut groups = Groups::of(&lines);
            groups.strip_hop_by_hop(&lines);
            let named: Vec<String> = map
                .get_all("connection")
                .iter()
                .flat_map(|v| v.to_str().unwrap().split(',').map(|n| n.trim().to_ascii_lowercase()).collect::<Vec<_>>())
                .filter(|n| !n.is_empty())
                .collect();
            for name in named.iter().map(String::as_str).chain(HOP_BY_HOP.iter().map(|n| std::str::from_utf8(n).unwrap())) {
                map.remove(name);
            }
            let mut out = Vec::new();
            groups.write(&mut out, &lines, None);
            prop_assert_eq!(parsed_map(&out), map);
        }
    }
}
