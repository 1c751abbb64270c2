//! The answer of `/v1/check` written as JSON by hand, straight into a buffer of about its
//! final size.
//!
//! Through `serde_json` the answer was a fifth of the decision API's work per request:
//! every string escaped byte by byte (keys, names and header values, a few hundred bytes in
//! all, none of which usually needs escaping) into a vector grown by doubling. Here a string
//! is copied in runs between the bytes that need escaping, and integers go through `itoa`.
//! The output is byte for byte what `serde_json::to_vec` writes for the same struct (the
//! tests below check it on arbitrary answers), so clients see no difference.

#[cfg(test)]
use serde::Serialize;

/// The answer of `/v1/check` (see `docs/decision-api.md`).
#[cfg_attr(test, derive(Serialize, Debug, Clone))]
pub(crate) struct DecisionOut<'a> {
    pub(crate) allowed: bool,
    pub(crate) status: u16,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) delay_ms: u64,
    pub(crate) policies: Vec<PolicyOut<'a>>,
    pub(crate) violated_policies: Vec<&'a str>,
    pub(crate) would_have_rejected: Vec<&'a str>,
    /// 32 hex digits.
    pub(crate) reservation: Option<String>,
    /// 32 hex digits.
    pub(crate) permit: Option<String>,
    pub(crate) config_version: u64,
    /// `[name, value]` pairs, in order; the names are header names (tokens, with nothing
    /// to escape).
    pub(crate) headers: Vec<(&'a str, &'a str)>,
    pub(crate) body: Option<&'a str>,
}

/// One rule's part in the answer.
#[cfg_attr(test, derive(Serialize, Debug, Clone))]
pub(crate) struct PolicyOut<'a> {
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
    pub(crate) outcome: &'static str,
    pub(crate) enforced: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) reset_after_ms: u64,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) delay_ms: Option<u64>,
    pub(crate) store_failed: bool,
}

impl DecisionOut<'_> {
    /// The answer as compact JSON.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut out = Json(Vec::with_capacity(self.size_hint()));
        out.raw(b"{\"allowed\":");
        out.bool(self.allowed);
        out.raw(b",\"status\":");
        out.int(u64::from(self.status));
        out.raw(b",\"retry_after_ms\":");
        out.opt_int(self.retry_after_ms);
        out.raw(b",\"delay_ms\":");
        out.int(self.delay_ms);
        out.raw(b",\"policies\":[");
        for (i, p) in self.policies.iter().enumerate() {
            out.comma(i);
            p.write(&mut out);
        }
        out.raw(b"],\"violated_policies\":");
        out.strings(&self.violated_policies);
        out.raw(b",\"would_have_rejected\":");
        out.strings(&self.would_have_rejected);
        out.raw(b",\"reservation\":");
        out.opt_str(self.reservation.as_deref());
        out.raw(b",\"permit\":");
        out.opt_str(self.permit.as_deref());
        out.raw(b",\"config_version\":");
        out.int(self.config_version);
        out.raw(b",\"headers\":[");
        for (i, (name, value)) in self.headers.iter().enumerate() {
            out.comma(i);
            out.raw(b"[");
            out.plain(name);
            out.raw(b",");
            out.str(value);
            out.raw(b"]");
        }
        out.raw(b"],\"body\":");
        out.opt_str(self.body);
        out.raw(b"}");
        out.0
    }

    /// About the answer's length: its fixed text, its strings unescaped, 20 digits a
    /// number. Enough that the buffer is allocated once in the common case.
    fn size_hint(&self) -> usize {
        let strings = |s: &[&str]| s.iter().map(|s| s.len() + 3).sum::<usize>();
        256 + self
            .policies
            .iter()
            .map(PolicyOut::size_hint)
            .sum::<usize>()
            + strings(&self.violated_policies)
            + strings(&self.would_have_rejected)
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len() + 8)
                .sum::<usize>()
            + self.body.map_or(0, str::len)
            + 2 * 34
    }
}

impl PolicyOut<'_> {
    fn write(&self, out: &mut Json) {
        out.raw(b"{\"name\":");
        out.str(self.name);
        out.raw(b",\"key\":");
        out.str(self.key);
        out.raw(b",\"outcome\":");
        out.plain(self.outcome);
        out.raw(b",\"enforced\":");
        out.bool(self.enforced);
        out.raw(b",\"limit\":");
        out.int(self.limit);
        out.raw(b",\"remaining\":");
        out.int(self.remaining);
        out.raw(b",\"reset_after_ms\":");
        out.int(self.reset_after_ms);
        out.raw(b",\"retry_after_ms\":");
        out.opt_int(self.retry_after_ms);
        out.raw(b",\"delay_ms\":");
        out.opt_int(self.delay_ms);
        out.raw(b",\"store_failed\":");
        out.bool(self.store_failed);
        out.raw(b"}");
    }

    fn size_hint(&self) -> usize {
        200 + self.name.len() + self.key.len() + 5 * 20
    }
}

/// A JSON text being written.
struct Json(Vec<u8>);

impl Json {
    fn raw(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    /// `s` as a JSON string, known to hold nothing to escape: a header's name (a token) or
    /// an outcome (one of four words). Checked in tests, not per request.
    fn plain(&mut self, s: &str) {
        debug_assert_eq!(next_escape(s.as_bytes(), 0), None, "{s:?}");
        self.0.reserve(s.len() + 2);
        self.0.push(b'"');
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(b'"');
    }

    fn comma(&mut self, i: usize) {
        if i > 0 {
            self.0.push(b',');
        }
    }

    fn bool(&mut self, b: bool) {
        self.raw(if b { b"true" } else { b"false" });
    }

    fn int(&mut self, n: u64) {
        self.raw(itoa::Buffer::new().format(n).as_bytes());
    }

    fn opt_int(&mut self, n: Option<u64>) {
        match n {
            Some(n) => self.int(n),
            None => self.raw(b"null"),
        }
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.raw(b"null"),
        }
    }

    fn strings(&mut self, strings: &[&str]) {
        self.raw(b"[");
        for (i, s) in strings.iter().enumerate() {
            self.comma(i);
            self.str(s);
        }
        self.raw(b"]");
    }

    /// `s` as a JSON string, escaped as `serde_json` escapes: `"` and `\`, the five
    /// controls with a short form, the other controls as `\u00XX`; nothing else. Copied in
    /// runs between the bytes to escape, found eight at a time ([`next_escape`]).
    fn str(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = s.as_bytes();
        self.0.push(b'"');
        let mut start = 0;
        while let Some(i) = next_escape(bytes, start) {
            self.0.extend_from_slice(&bytes[start..i]);
            let b = bytes[i];
            let escaped: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                _ => &[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ],
            };
            self.0.extend_from_slice(escaped);
            start = i + 1;
        }
        self.0.extend_from_slice(&bytes[start..]);
        self.0.push(b'"');
    }
}

/// Whether a JSON string must escape `b`: a control, `"` or `\`.
fn must_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Where the first byte at or after `from` that must be escaped is, looked for a word of
/// eight bytes at a time (a byte at a time, this scan was a tenth of the decision API's own
/// work per request).
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of `x` under `n` (`n` <= 0x80) is set in the result. A
    // borrow may also set it in a byte above one that is under `n`, never in one below the
    // first, so the lowest bit set is exact (the "haszero"/"hasless" tricks of Bit Twiddling
    // Hacks).
    let under = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let mut i = from;
    while let Some(word) = bytes.get(i..i + 8) {
        let mut le = [0; 8];
        le.copy_from_slice(word);
        let x = u64::from_le_bytes(le);
        let found = under(x, 0x20) | under(x ^ (ONES * 0x22), 1) | under(x ^ (ONES * 0x5c), 1);
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    bytes
        .get(i..)?
        .iter()
        .position(|&b| must_escape(b))
        .map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn policy(name: &str, key: &str, n: u64, opt: Option<u64>, b: bool) -> PolicyOut<'static> {
        PolicyOut {
            name: Box::leak(name.to_owned().into_boxed_str()),
            key: Box::leak(key.to_owned().into_boxed_str()),
            outcome: if b { "allowed" } else { "limited" },
            enforced: b,
            limit: n,
            remaining: n / 2,
            reset_after_ms: n / 3,
            retry_after_ms: opt,
            delay_ms: opt.map(|d| d / 2),
            store_failed: !b,
        }
    }

    #[test]
    fn every_control_character_and_quote_is_escaped_as_serde_json_does() {
        let all: String = (0u8..=0x7f)
            .map(char::from)
            .chain("é→\u{1F600}".chars())
            .collect();
        let mut out = Json(Vec::new());
        out.str(&all);
        assert_eq!(out.0, serde_json::to_vec(&all).unwrap());
    }

    proptest! {
        #[test]
        fn the_word_scan_finds_the_first_byte_to_escape(
            bytes in proptest::collection::vec(prop_oneof![any::<u8>(), 0x20u8..0x7f], 0..40),
            from in 0usize..40,
        ) {
            let from = from.min(bytes.len());
            let slow = bytes[from..].iter().position(|&b| must_escape(b)).map(|p| from + p);
            prop_assert_eq!(next_escape(&bytes, from), slow);
        }

        #[test]
        fn the_answer_is_what_serde_json_writes(
            allowed in any::<bool>(),
            status in any::<u16>(),
            numbers in proptest::collection::vec(any::<u64>(), 4),
            opt in proptest::option::of(any::<u64>()),
            strings in proptest::collection::vec(".{0,40}", 6),
            name in "[!#$%&'*+.^_`|~0-9a-z-]{1,20}",
            n_policies in 0usize..4,
        ) {
            let s = |i: usize| -> &'static str { Box::leak(strings[i].clone().into_boxed_str()) };
            let out = DecisionOut {
                allowed,
                status,
                retry_after_ms: opt,
                delay_ms: numbers[0],
                policies: (0..n_policies)
                    .map(|i| policy(&strings[i], &strings[i + 1], numbers[i % 4], opt, allowed ^ (i % 2 == 0)))
                    .collect(),
                violated_policies: vec![s(0), s(1)],
                would_have_rejected: if allowed { Vec::new() } else { vec![s(2)] },
                reservation: opt.map(|n| format!("{n:032x}")),
                permit: None,
                config_version: numbers[3],
                headers: vec![(Box::leak(name.into_boxed_str()), s(4)), ("retry-after", s(5))],
                body: if allowed { None } else { Some(s(5)) },
            };
            prop_assert_eq!(
                String::from_utf8(out.to_json()).unwrap(),
                serde_json::to_string(&out).unwrap()
            );
        }
    }
}
