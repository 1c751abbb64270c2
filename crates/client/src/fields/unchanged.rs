//! Telling, without parsing, an answer whose rate limit fields are the bytes of the last one.
//!
//! A comparison of raw bytes is a small fraction of a Structured Field parse, and a server
//! whose policy has not changed sends the same `RateLimit-Policy` on every answer.

use crate::fields::Lines;

/// The raw lines of an answer's `RateLimit` and `RateLimit-Policy` fields, kept to compare
/// the next answer's against.
///
/// Each line is kept behind its length and each field ends in a marker no length can be,
/// so different line splits never compare equal (a value made with `http`'s unchecked
/// constructors may hold any byte, so no byte is safe as a separator).
#[derive(Debug, Clone, Default)]
pub(crate) struct RawFields {
    /// Length-prefixed lines, field by field; empty when nothing is kept.
    raw: Vec<u8>,
}

/// Ends a field's lines.
const END: [u8; 8] = u64::MAX.to_le_bytes();

fn len_bytes(line: &[u8]) -> [u8; 8] {
    (line.len() as u64).to_le_bytes()
}

impl RawFields {
    /// Whether the fields are, line for line, the ones kept.
    pub(crate) fn matches(&self, fields: &[&Lines<'_>]) -> bool {
        if self.raw.is_empty() {
            return false;
        }
        let mut rest = self.raw.as_slice();
        for field in fields {
            for line in field.iter() {
                let line = line.as_bytes();
                let Some(after) = rest.strip_prefix(&len_bytes(line)[..]) else {
                    return false;
                };
                let Some(after) = after.strip_prefix(line) else {
                    return false;
                };
                rest = after;
            }
            let Some(after) = rest.strip_prefix(&END[..]) else {
                return false;
            };
            rest = after;
        }
        rest.is_empty()
    }

    /// Keeps these fields (the buffer is reused: no allocation once it is large enough).
    pub(crate) fn keep(&mut self, fields: &[&Lines<'_>]) {
        self.raw.clear();
        for field in fields {
            for line in field.iter() {
                let line = line.as_bytes();
                self.raw.extend_from_slice(&len_bytes(line));
                self.raw.extend_from_slice(line);
            }
            self.raw.extend_from_slice(&END);
        }
    }

    /// Keeps nothing: the next answer is parsed whatever it holds.
    pub(crate) fn forget(&mut self) {
        self.raw.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::{answer_with, AnswerFields};
    use http::HeaderMap;

    fn kept(h: &HeaderMap) -> RawFields {
        let mut raw = RawFields::default();
        let f = AnswerFields::looked_up(h);
        raw.keep(&[&f.state, &f.policy]);
        raw
    }

    /// Matched through lookups, and through the walk when it reads the map: the same.
    fn matches(raw: &RawFields, h: &HeaderMap) -> bool {
        let f = AnswerFields::looked_up(h);
        let looked_up = raw.matches(&[&f.state, &f.policy]);
        let f = AnswerFields::of(h);
        assert_eq!(raw.matches(&[&f.state, &f.policy]), looked_up, "{h:?}");
        looked_up
    }

    #[test]
    fn the_same_lines_match_and_any_other_split_or_byte_does_not() {
        let one = answer_with(&["a;r=1, b;r=2"], &["a;q=5"]);
        let raw = kept(&one);
        assert!(matches(&raw, &one));
        for other in [
            answer_with(&["a;r=1", "b;r=2"], &["a;q=5"]),
            answer_with(&["a;r=1, b;r=3"], &["a;q=5"]),
            answer_with(&["a;r=1, b;r=2"], &[]),
            answer_with(&["a;r=1, b;r=2"], &["a;q=5", ""]),
            answer_with(&["a;r=1, b;r=2", ""], &["a;q=5"]),
            answer_with(&["a;r=1, b;r=2a;q=5"], &[]),
            answer_with(&[], &["a;r=1, b;r=2", "a;q=5"]),
        ] {
            assert!(!matches(&raw, &other), "{other:?}");
        }
    }

    #[test]
    fn nothing_kept_matches_nothing() {
        let mut raw = RawFields::default();
        let none = HeaderMap::new();
        assert!(!matches(&raw, &none), "an empty buffer is nothing kept");
        let f = AnswerFields::of(&none);
        raw.keep(&[&f.state, &f.policy]);
        assert!(matches(&raw, &none));
        raw.forget();
        assert!(!matches(&raw, &none));
    }
}
