//! What an answer says a request really cost: an LLM API's token `usage`, read from a JSON
//! body or from the events of a `text/event-stream` answer as they stream by.
//!
//! A cost known only once the upstream has answered is charged as an estimate and settled
//! with what the answer says ([`UsagePath`] names where: `usage.total_tokens`, or a sum
//! such as `usage.prompt_tokens + usage.completion_tokens`). A JSON answer is read whole;
//! a streamed one is fed to an [`EventStream`] piece by piece as it is relayed, which keeps
//! only the event being read (bounded) and the last usage seen: OpenAI-compatible servers
//! send `usage` once, in the last event before `data: [DONE]`, and `null` in the others.
//!
//! Nothing here decides what a missing usage means: the caller settles at the estimate
//! (a stream cut before its usage arrived, a body without one), never at zero.

use std::fmt;
use std::str::FromStr;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The longest event kept for reading (its `data` lines joined). A longer event is relayed
/// as any other but not read: a usage event is a few hundred bytes.
pub const MAX_EVENT: usize = 64 * 1024;

/// The most fields one [`UsagePath`] adds up.
pub const MAX_TERMS: usize = 8;

/// The most names in one field's path (`usage.completion_tokens_details.reasoning_tokens`
/// is three).
pub const MAX_DEPTH: usize = 8;

/// Where a JSON answer's cost is read: one field, or the sum of several, each a dotted path
/// of object keys from the top (`usage.total_tokens`,
/// `usage.prompt_tokens + usage.completion_tokens`).
///
/// # Examples
///
/// ```
/// use ratewarden_policy::usage::UsagePath;
///
/// let path: UsagePath = "usage.prompt_tokens + usage.completion_tokens".parse().unwrap();
/// let body = br#"{"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
/// assert_eq!(path.read_json(body), Some(42));
/// assert!("usage..total".parse::<UsagePath>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsagePath {
    /// The fields added up, each a list of keys from the top.
    terms: Vec<Vec<String>>,
    /// The first key in quotes (`"usage"`), as an event that names it holds it: built once.
    quoted_head: String,
}

/// A [`UsagePath`] that cannot be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a usage path ({why}): write dotted keys such as `usage.total_tokens`, joined by `+` to add them up")]
pub struct UsagePathError {
    /// What was written.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl FromStr for UsagePath {
    type Err = UsagePathError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |why| UsagePathError {
            text: text.to_owned(),
            why,
        };
        let mut terms = Vec::new();
        for term in text.split('+') {
            let keys: Vec<String> = term.trim().split('.').map(str::to_owned).collect();
            if keys.iter().any(|k| k.is_empty()) {
                return Err(error("an empty key"));
            }
            if keys
                .iter()
                .any(|k| k.chars().any(|c| c.is_whitespace() || c.is_control()))
            {
                return Err(error("a key with a space in it"));
            }
            if keys.len() > MAX_DEPTH {
                return Err(error("more than 8 keys deep"));
            }
            terms.push(keys);
        }
        if terms.len() > MAX_TERMS {
            return Err(error("more than 8 fields added up"));
        }
        let quoted_head = format!("\"{}\"", terms[0][0]);
        Ok(UsagePath { terms, quoted_head })
    }
}

impl fmt::Display for UsagePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            f.write_str(&term.join("."))?;
        }
        Ok(())
    }
}

impl UsagePath {
    /// The cost `value` holds at this path: every field present, each a whole number of
    /// at least 0, added up (saturating). `None` when a field is missing, `null`, negative,
    /// fractional or not a number.
    pub fn read(&self, value: &Value) -> Option<u64> {
        let mut sum: u64 = 0;
        for term in &self.terms {
            let mut at = value;
            for key in term {
                at = at.as_object()?.get(key)?;
            }
            sum = sum.saturating_add(at.as_u64()?);
        }
        Some(sum)
    }

    /// The value `value` holds at a path of one field (`model`); `None` for a sum or a
    /// path that is not there.
    pub fn value<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        let [term] = self.terms.as_slice() else {
            return None;
        };
        let mut at = value;
        for key in term {
            at = at.as_object()?.get(key)?;
        }
        Some(at)
    }

    /// The cost a whole JSON body holds at this path; `None` when the body is not JSON or
    /// the path is not there (see [`read`](Self::read)).
    pub fn read_json(&self, body: &[u8]) -> Option<u64> {
        let head = self.head();
        if !self.terms.iter().all(|t| t[0] == head) {
            let value: Value = serde_json::from_slice(body).ok()?;
            return self.read(&value);
        }
        // Every field under one key (`usage`): only its value is built; the rest of the
        // body (an event's id, model, choices) is checked as JSON and skipped.
        let mut json = serde_json::Deserializer::from_slice(body);
        let under = TopLevelKey(head).deserialize(&mut json).ok()?;
        json.end().ok()?;
        let under = under?;
        let mut sum: u64 = 0;
        for term in &self.terms {
            let mut at = &under;
            for key in &term[1..] {
                at = at.as_object()?.get(key)?;
            }
            sum = sum.saturating_add(at.as_u64()?);
        }
        Some(sum)
    }

    /// The first key of the path's first field (`usage`): an event that does not name it
    /// is not parsed, and an answer without it has no usage at all.
    pub fn head(&self) -> &str {
        self.terms
            .first()
            .and_then(|t| t.first())
            .map_or("", String::as_str)
    }
}

/// The value of one key of a JSON object (the last, when given twice), the others read
/// for their syntax only (`IgnoredAny`): a usage event's `usage` without building the
/// values of everything else it carries.
struct TopLevelKey<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for TopLevelKey<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, json: D) -> Result<Self::Value, D::Error> {
        json.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopLevelKey<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_it) = map.next_key_seed(IsKey(self.0))? {
            if is_it {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether an object's key is the one looked for, compared where it lies (no `String`).
struct IsKey<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for IsKey<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, json: D) -> Result<bool, D::Error> {
        json.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsKey<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// The events of a `text/event-stream` answer, fed as they stream by, for the last usage
/// they carry.
///
/// An event is its `data:` lines joined by `\n`, ended by a blank line (the HTML Living
/// Standard's event stream: lines end in CR LF, LF or CR; a `:` line is a comment; other
/// fields are ignored). Each event whose data names the path's first key with an object
/// value (`"usage":{`) is parsed as JSON and read at the path; the last one read wins.
/// Everything else (the many token events with `"usage":null`, `[DONE]`) costs a search
/// for that key and nothing more.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::usage::EventStream;
///
/// let mut events = EventStream::new("usage.total_tokens".parse().unwrap());
/// events.feed(b"data: {\"choices\":[],\"usage\":null}\n\ndata: {\"usage\":{\"total_");
/// events.feed(b"tokens\":42}}\n\ndata: [DONE]\n\n");
/// assert_eq!(events.usage(), Some(42));
/// ```
#[derive(Debug)]
pub struct EventStream {
    path: UsagePath,
    /// Finds `"head"` with its quotes: what an event must hold to be parsed (built once:
    /// a searcher costs more to build than to run over one event).
    needle: memchr::memmem::Finder<'static>,
    /// The line being read (up to [`MAX_EVENT`]).
    line: Vec<u8>,
    /// The current event's data so far (up to [`MAX_EVENT`]).
    data: Vec<u8>,
    /// The current event has a `data` field (an empty one too).
    has_data: bool,
    /// The current line or event outgrew [`MAX_EVENT`]: it is skipped to its end.
    skipping_line: bool,
    skipping_event: bool,
    /// The last byte fed was a CR: a LF right after it ends nothing more.
    after_cr: bool,
    /// The last usage read.
    last: Option<u64>,
    /// Events that named the path's key with an object but could not be read at the path.
    unreadable: u64,
}

impl EventStream {
    /// A stream whose events are read at `path`.
    pub fn new(path: UsagePath) -> Self {
        let needle = memchr::memmem::Finder::new(path.quoted_head.as_bytes()).into_owned();
        EventStream {
            path,
            needle,
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            skipping_line: false,
            skipping_event: false,
            after_cr: false,
            last: None,
            unreadable: 0,
        }
    }

    /// Reads the next piece of the stream, wherever it was cut.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', bytes) {
                // A whole line in this piece, none begun before it: read where it lies.
                Some(end) if self.line.is_empty() && !self.skipping_line && end <= MAX_EVENT => {
                    self.after_cr = bytes[end] == b'\r';
                    self.line_at(&bytes[..end]);
                    bytes = &bytes[end + 1..];
                }
                Some(end) => {
                    self.push_line_bytes(&bytes[..end]);
                    self.after_cr = bytes[end] == b'\r';
                    self.end_line();
                    bytes = &bytes[end + 1..];
                }
                None => {
                    self.push_line_bytes(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// The last usage the stream carried so far; `None` when none could be read.
    pub fn usage(&self) -> Option<u64> {
        self.last
    }

    /// Events that named the usage's key with an object but held no usage at the path (a
    /// malformed usage): for a metric, as the caller then settles at the estimate.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) {
        if self.skipping_line {
            return;
        }
        if self.line.len() + bytes.len() > MAX_EVENT {
            self.skipping_line = true;
            self.line.clear();
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    /// A whole line read where it lies (no line was begun in an earlier piece).
    fn line_at(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.end_event();
        } else {
            self.field(line);
        }
    }

    fn end_line(&mut self) {
        if std::mem::take(&mut self.skipping_line) {
            // A line past the bound: its event is not read.
            self.skipping_event = true;
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.end_event();
        } else {
            self.field(&line);
        }
        self.line = line;
        self.line.clear();
    }

    /// One line of an event: `name: value`, `name:value`, `name` (empty value), or a
    /// comment (`:`…).
    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' || self.skipping_event {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if name != b"data" {
            return;
        }
        let extra = usize::from(self.has_data) + value.len();
        if self.data.len() + extra > MAX_EVENT {
            self.skipping_event = true;
            self.data.clear();
            return;
        }
        if self.has_data {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
    }

    fn end_event(&mut self) {
        let skipped = std::mem::take(&mut self.skipping_event);
        if std::mem::take(&mut self.has_data) && !skipped && self.names_an_object() {
            match self.path.read_json(&self.data) {
                Some(cost) => self.last = Some(cost),
                None => self.unreadable += 1,
            }
        }
        self.data.clear();
    }

    /// Whether the event's data holds the path's first key followed by an object: the
    /// one event of a stream worth parsing.
    fn names_an_object(&self) -> bool {
        let len = self.needle.needle().len();
        self.needle.find_iter(&self.data).any(|at| {
            let rest = &self.data[at + len..];
            let mut rest = rest.iter().skip_while(|b| b.is_ascii_whitespace());
            rest.next() == Some(&b':') && rest.find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        })
    }
}

/// What the last usage event of an event stream's tail says: see [`last_usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastUsage {
    /// The cost it gave.
    Read(u64),
    /// It named the usage with an object that holds no cost at the path (malformed).
    Unreadable,
    /// No event in the tail names the usage with an object.
    None,
}

/// The last usage of an event stream, read from its `tail` (its last bytes; `whole` when
/// they are all of it): the last event naming the path's first key with an object, found
/// from the end, and read as [`EventStream`] reads it. A stream's usage comes in its last
/// events, so a relay need keep only the stream's last bytes (at least [`MAX_EVENT`]) and
/// read them once, when the stream ends, instead of reading every event on its way.
///
/// A tail that is not the whole stream is read from its first line break (the first line
/// may be cut), and an event cut by the tail's start is not read.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::usage::{last_usage, LastUsage};
///
/// let path = "usage.total_tokens".parse().unwrap();
/// let tail = b"okens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":42}}\n\ndata: [DONE]\n\n";
/// assert_eq!(last_usage(&path, tail, false), LastUsage::Read(42));
/// assert_eq!(last_usage(&path, b"data: {\"usage\":null}\n\n", true), LastUsage::None);
/// ```
pub fn last_usage(path: &UsagePath, tail: &[u8], whole: bool) -> LastUsage {
    let tail = if whole {
        tail
    } else {
        match memchr::memchr2(b'\n', b'\r', tail) {
            Some(end) => &tail[end + 1..],
            None => return LastUsage::None,
        }
    };
    let needle = &path.quoted_head;
    // As the event's data lines will be joined: the key, `:` and `{` may each begin
    // another `data:` line.
    let names_an_object = |at: usize| {
        let rest = joined_blank(&tail[at + needle.len()..]);
        rest.first() == Some(&b':') && joined_blank(&rest[1..]).first() == Some(&b'{')
    };
    let Some(at) =
        memchr::memmem::rfind_iter(tail, needle.as_bytes()).find(|&at| names_an_object(at))
    else {
        return LastUsage::None;
    };
    let start = event_start(tail, at);
    // Most often the event is one `data:` line: read where it lies, as the stream reader
    // would (which names the same event unreadable when its usage does not parse).
    if let Some(data) = one_data_line(tail, start, at) {
        return match path.read_json(data) {
            Some(cost) => LastUsage::Read(cost),
            None => LastUsage::Unreadable,
        };
    }
    let mut events = EventStream::new(path.clone());
    events.feed(&tail[start..]);
    events.feed(b"\n\n");
    match (events.usage(), events.unreadable()) {
        (Some(cost), _) => LastUsage::Read(cost),
        (None, 0) => LastUsage::None,
        (None, _) => LastUsage::Unreadable,
    }
}

/// `bytes` past the white space that begins them, where a line end followed by `data:`
/// (the next line of the same event's data) counts as white space too.
fn joined_blank(mut bytes: &[u8]) -> &[u8] {
    loop {
        let blank = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len());
        let skipped = &bytes[..blank];
        // Line ends crossed, a CR LF counting one: two make a blank line, which ends the
        // event.
        let ends = skipped
            .iter()
            .enumerate()
            .filter(|&(i, b)| *b == b'\r' || (*b == b'\n' && (i == 0 || skipped[i - 1] != b'\r')))
            .count();
        if ends > 1 {
            return bytes;
        }
        bytes = &bytes[blank..];
        match bytes.strip_prefix(b"data:") {
            Some(next) if ends == 1 => bytes = next,
            _ => return bytes,
        }
    }
}

/// The data of the event beginning at `start` when it is one `data:` line holding byte
/// `at`, of at most [`MAX_EVENT`] bytes, that a blank line (or the tail's end) ends.
fn one_data_line(tail: &[u8], start: usize, at: usize) -> Option<&[u8]> {
    let rest = &tail[start..];
    let end = memchr::memchr2(b'\n', b'\r', rest).unwrap_or(rest.len());
    if start + end <= at || end > MAX_EVENT {
        return None;
    }
    let data = rest[..end].strip_prefix(b"data:")?;
    let after = &rest[end..];
    // The line's end, then an empty line: LF LF, CR CR, CR LF CR (LF), CR LF LF; or nothing.
    let blank = matches!(
        after,
        [] | [b'\n' | b'\r']
            | [b'\r', b'\n']
            | [b'\n', b'\n' | b'\r', ..]
            | [b'\r', b'\r', ..]
            | [b'\r', b'\n', b'\n' | b'\r', ..]
    );
    blank.then(|| data.strip_prefix(b" ").unwrap_or(data))
}

/// Where the event holding byte `at` of `tail` begins: after the blank line before it
/// (lines end in CR LF, LF or CR), or at the start. Walks back a line at a time: an event
/// is a line or a few.
fn event_start(tail: &[u8], at: usize) -> usize {
    let mut end = at;
    loop {
        let Some(t) = memchr::memrchr2(b'\n', b'\r', &tail[..end]) else {
            return 0;
        };
        // A CR LF is one line end.
        let term = if tail[t] == b'\n' && t > 0 && tail[t - 1] == b'\r' {
            t - 1
        } else {
            t
        };
        // The line this ends is empty: the event begins after it.
        if term == 0 || matches!(tail[term - 1], b'\n' | b'\r') {
            return t + 1;
        }
        end = term;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn total() -> UsagePath {
        "usage.total_tokens".parse().unwrap()
    }

    const STREAM: &str = concat!(
        ": keep-alive\n\n",
        "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
        "event: message\r\ndata: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\" there\"}}],\r\n",
        "data: \"usage\":null}\r\n\r\n",
        "data: {\"id\":\"1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":33,\"total_tokens\":42}}\r\r",
        "data: [DONE]\n\n",
    );

    #[test]
    fn a_path_adds_its_fields_and_reads_only_whole_numbers() {
        let sum: UsagePath = "usage.prompt_tokens + usage.completion_tokens"
            .parse()
            .unwrap();
        let value: Value = serde_json::from_str(
            r#"{"usage":{"prompt_tokens":9,"completion_tokens":33,"total_tokens":42}}"#,
        )
        .unwrap();
        assert_eq!(sum.read(&value), Some(42));
        assert_eq!(total().read(&value), Some(42));
        for bad in [
            r#"{"usage":null}"#,
            r#"{"usage":{"total_tokens":-1}}"#,
            r#"{"usage":{"total_tokens":4.5}}"#,
            r#"{"usage":{"total_tokens":"42"}}"#,
            r#"{"usage":[42]}"#,
            r#"{}"#,
        ] {
            let value: Value = serde_json::from_str(bad).unwrap();
            assert_eq!(total().read(&value), None, "{bad}");
        }
        assert_eq!(total().read_json(b"not json"), None);
        assert_eq!(
            sum.to_string(),
            "usage.prompt_tokens + usage.completion_tokens"
        );
    }

    #[test]
    fn a_path_that_cannot_be_read_says_why() {
        for (text, why) in [
            ("", "an empty key"),
            ("usage.", "an empty key"),
            ("usage..total", "an empty key"),
            ("usage.total tokens", "a key with a space in it"),
            ("a.b.c.d.e.f.g.h.i", "more than 8 keys deep"),
            ("a+b+c+d+e+f+g+h+i", "more than 8 fields added up"),
        ] {
            let error = text.parse::<UsagePath>().unwrap_err();
            assert_eq!(error.why, why, "{text}");
            assert!(error.to_string().contains(&format!("`{text}`")));
        }
    }

    #[test]
    fn the_last_usage_of_a_stream_is_read_and_nulls_and_comments_are_passed_over() {
        let mut events = EventStream::new(total());
        events.feed(STREAM.as_bytes());
        assert_eq!(events.usage(), Some(42));
        assert_eq!(events.unreadable(), 0);
    }

    #[test]
    fn a_stream_cut_before_its_usage_has_none() {
        let cut = &STREAM[..STREAM.find("\"prompt_tokens").unwrap()];
        let mut events = EventStream::new(total());
        events.feed(cut.as_bytes());
        assert_eq!(events.usage(), None);
        // The event was never ended: nothing half-read counts.
        events.feed(b"\n\n");
        assert_eq!(events.usage(), None);
        assert_eq!(events.unreadable(), 1);
    }

    #[test]
    fn a_malformed_usage_is_counted_and_a_later_one_still_read() {
        let mut events = EventStream::new(total());
        events.feed(b"data: {\"usage\":{\"total_tokens\":\"many\"}}\n\n");
        assert_eq!((events.usage(), events.unreadable()), (None, 1));
        events.feed(b"data: {\"usage\":{\"total_tokens\":7}}\n\n");
        assert_eq!((events.usage(), events.unreadable()), (Some(7), 1));
    }

    #[test]
    fn an_event_past_the_bound_is_not_read_and_the_stream_goes_on() {
        let mut events = EventStream::new(total());
        let huge = format!(
            "data: {{\"usage\":{{\"total_tokens\":1}},\"pad\":\"{}\"}}\n\n",
            "x".repeat(MAX_EVENT)
        );
        events.feed(huge.as_bytes());
        assert_eq!(events.usage(), None);
        events.feed(b"data: {\"usage\":{\"total_tokens\":5}}\n\n");
        assert_eq!(events.usage(), Some(5));
        // Many data lines adding up past the bound: the same.
        let mut many = EventStream::new(total());
        for _ in 0..=MAX_EVENT / 1000 {
            many.feed(format!("data: {}\n", "y".repeat(1000)).as_bytes());
        }
        many.feed(b"data: {\"usage\":{\"total_tokens\":3}}\n\n");
        assert_eq!(many.usage(), None);
        assert!(many.data.capacity() <= 2 * MAX_EVENT);
    }

    #[test]
    fn the_last_usage_is_read_from_a_tail_as_from_the_whole_stream() {
        assert_eq!(
            last_usage(&total(), STREAM.as_bytes(), true),
            LastUsage::Read(42)
        );
        // Any tail holding the usage event whole reads the same; one starting inside it
        // does not read it.
        let usage_at = STREAM
            .find("data: {\"id\":\"1\",\"choices\":[],\"usage\":{")
            .unwrap();
        for from in 0..STREAM.len() {
            let got = last_usage(&total(), &STREAM.as_bytes()[from..], from == 0);
            if from < usage_at {
                assert_eq!(got, LastUsage::Read(42), "from {from}");
            } else {
                assert_ne!(got, LastUsage::Read(42), "from {from}");
            }
        }
        let malformed = b"data: {\"usage\":{\"total_tokens\":\"many\"}}\n\ndata: [DONE]\n\n";
        assert_eq!(last_usage(&total(), malformed, true), LastUsage::Unreadable);
        let cut = &STREAM[..STREAM.find("\"prompt_tokens").unwrap()];
        assert_eq!(
            last_usage(&total(), cut.as_bytes(), true),
            LastUsage::Unreadable
        );
        assert_eq!(last_usage(&total(), b"", true), LastUsage::None);
    }

    proptest! {
        /// Wherever the stream is cut into pieces, the same usage is read.
        #[test]
        fn any_cut_of_the_stream_reads_the_same(cuts in proptest::collection::vec(0..STREAM.len(), 0..12)) {
            let bytes = STREAM.as_bytes();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut events = EventStream::new(total());
            let mut from = 0;
            for cut in cuts {
                events.feed(&bytes[from..cut]);
                from = cut;
            }
            events.feed(&bytes[from..]);
            prop_assert_eq!(events.usage(), Some(42));
            prop_assert_eq!(events.unreadable(), 0);
        }

        /// Reading only the head's value answers as reading the whole body as a `Value`
        /// does: for bodies made of usage-like pieces, valid JSON or not, duplicate keys,
        /// escaped keys and values of every type.
        #[test]
        fn reading_the_head_alone_answers_as_the_whole_value(
            pieces in proptest::collection::vec(0..PIECES.len(), 0..6),
            cut in 0usize..4,
        ) {
            let mut body = String::from("{");
            for (i, p) in pieces.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(PIECES[*p]);
            }
            body.push('}');
            // Some bodies cut short or with a tail: not JSON.
            let body = match cut {
                1 => body[..body.len() - 1].to_owned(),
                2 => format!("{body} x"),
                _ => body,
            };
            let sum: UsagePath = "usage.prompt_tokens + usage.completion_tokens".parse().unwrap();
            for path in [total(), sum] {
                let whole = serde_json::from_slice::<Value>(body.as_bytes())
                    .ok()
                    .and_then(|v| path.read(&v));
                prop_assert_eq!(path.read_json(body.as_bytes()), whole, "{}", body);
            }
        }
    }

    proptest! {
        /// Read from the end, a whole stream's last usage is the one its events, read in
        /// order, end with: for streams of usage events, nulls, multi-line and commented
        /// events, `[DONE]`, with every kind of line end.
        #[test]
        fn the_last_usage_from_the_end_is_the_last_read_in_order(
            events in proptest::collection::vec((0..EVENTS.len(), 0..ENDS.len()), 0..6),
        ) {
            let mut stream = String::new();
            for (event, end) in events {
                stream.push_str(&EVENTS[event].replace('|', ENDS[end]));
                stream.push_str(ENDS[end]);
                stream.push_str(ENDS[end]);
            }
            let mut reader = EventStream::new(total());
            reader.feed(stream.as_bytes());
            reader.feed(b"\n\n");
            let in_order = match reader.usage() {
                Some(cost) => LastUsage::Read(cost),
                None if reader.unreadable() > 0 => LastUsage::Unreadable,
                None => LastUsage::None,
            };
            let from_end = last_usage(&total(), stream.as_bytes(), true);
            // The stream reader keeps the last readable usage; from the end, the last
            // event naming a usage decides, readable or not.
            match from_end {
                LastUsage::Unreadable => prop_assert!(reader.unreadable() > 0, "{:?}", stream),
                got => prop_assert_eq!(got, in_order, "{:?}", stream),
            }
        }
    }

    /// Events for the stream property; `|` is a line end inside the event.
    const EVENTS: [&str; 10] = [
        r#"data: {"id":"1","usage":"#,
        r#"data: {"total_tokens":3}"#,
        r#"data: {"choices":[{"delta":{"content":"a"}}],"usage":null}"#,
        r#"data: {"choices":[],"usage":{"total_tokens":42}}"#,
        r#"data:{"usage":{"total_tokens":7}}"#,
        r#"event: message|data: {"usage":{"total_tokens":9}}"#,
        r#"data: {"usage":|data: {"total_tokens":11}}"#,
        r#": keep-alive"#,
        r#"data: [DONE]"#,
        r#"data: {"usage":{"total_tokens":"x"}}"#,
    ];
    const ENDS: [&str; 3] = ["\n", "\r\n", "\r"];

    const PIECES: [&str; 10] = [
        r#""usage":{"prompt_tokens":9,"completion_tokens":33,"total_tokens":42}"#,
        r#""usage":null"#,
        r#""usage":{"total_tokens":"7"}"#,
        r#""usage":{"total_tokens":-1,"prompt_tokens":1,"completion_tokens":2}"#,
        r#""us\u0061ge":{"total_tokens":5,"prompt_tokens":2,"completion_tokens":3}"#,
        r#""id":"chatcmpl-1","object":"chat.completion.chunk""#,
        r#""choices":[{"delta":{"content":"hi \"usage\""},"index":0}]"#,
        r#""created":1700000000.5"#,
        r#""usage":[1,2]"#,
        r#""model":{"usage":{"total_tokens":3}}"#,
    ];
}
