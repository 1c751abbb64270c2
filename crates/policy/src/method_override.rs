//! The `_method` parameter: Rails (Rack's `MethodOverride`), Laravel and Symfony serve a
//! `POST` whose form names `_method=DELETE` as a `DELETE`, so a rule on `DELETE /account`
//! must see it, or the request must be refused.
//!
//! The parameter is looked for where those frameworks read it: the query string (Symfony,
//! Laravel), an `application/x-www-form-urlencoded` body (a `POST` with no `Content-Type`
//! too: Rack parses it as a form), a `multipart/form-data` part (and Rack's
//! `multipart/mixed` and `multipart/related`), and a JSON object's top-level key (Laravel
//! reads a JSON body as its input). Names are read as PHP and Rack read them:
//! percent-decoded, cut at a NUL, leading spaces dropped, `.`, ` ` and an unclosed `[`
//! read as `_`, brackets around the key taken off, so `.method`, `[_method]` and
//! `%5Fmethod` are `_method` too; case is ignored. A value overrides when it is a method
//! name (ASCII letters only, as Symfony demands and Rack's list holds), uppercased as they
//! uppercase it; an array (`_method[]=…`) or any other value overrides nothing there.
//!
//! [`Scan`] reads a body piece by piece, as it arrives: it never holds more than a few
//! bounded names and values, whatever the body's length.

/// The longest decoded name kept: longer ones are not `_method`.
const MAX_NAME: usize = 16;

/// The longest value kept: no method is longer; a longer value overrides nothing.
const MAX_VALUE: usize = 32;

/// The longest raw JSON string kept (`\u005f` spells one byte in six).
const MAX_JSON_STRING: usize = 6 * MAX_VALUE;

/// The longest head of a multipart part read for its name.
pub const MAX_PART_HEAD: usize = 8 * 1024;

/// Whether a decoded parameter name reads as `_method` to Rack, PHP or Symfony.
fn is_override_name(name: &[u8]) -> bool {
    // PHP reads a name as a C string: it ends at a NUL.
    let name = name.split(|&b| b == 0).next().unwrap_or(name);
    // PHP drops leading spaces, then reads `.`, ` ` and an unclosed `[` as `_`.
    let name = match name.iter().position(|&b| b != b' ') {
        Some(start) => &name[start..],
        None => return false,
    };
    let php = match name {
        [first, rest @ ..] => {
            matches!(first, b'_' | b'.' | b' ' | b'[') && rest.eq_ignore_ascii_case(b"method")
        }
        [] => false,
    };
    // Rack 2 takes the key out of leading brackets and trailing `]`: `[_method]`.
    let start = name.iter().position(|&b| b != b'[' && b != b']');
    let rack = start.is_some_and(|start| {
        let key = &name[start..];
        let end = key.iter().rposition(|&b| b != b']').map_or(0, |e| e + 1);
        key[..end].eq_ignore_ascii_case(b"_method")
    });
    php || rack
}

/// The method a `_method` value names, uppercased; `None` when it names none.
fn method_of(value: &[u8]) -> Option<String> {
    if value.is_empty() || value.len() > MAX_VALUE || !value.iter().all(u8::is_ascii_alphabetic) {
        return None;
    }
    Some(String::from_utf8_lossy(value).to_ascii_uppercase())
}

/// Whether `query` may spell a `_method` parameter at all: it holds `method` in any case,
/// or an escape (which may spell any of its letters). Most queries do not, and need not be
/// read by [`in_query`].
///
/// # Examples
///
/// ```
/// use ratewarden_policy::method_override::may_name_method;
///
/// assert!(may_name_method("_METHOD=put"));
/// assert!(may_name_method("_%6Dethod=put"));
/// assert!(!may_name_method("page=2&sort=name"));
/// ```
pub fn may_name_method(query: &str) -> bool {
    query.contains('%')
        || query
            .as_bytes()
            .windows(6)
            .any(|w| w.eq_ignore_ascii_case(b"method"))
}

/// The methods the `_method` parameters of `query` (a target's query, without the `?`)
/// name, in order.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::method_override::in_query;
///
/// assert_eq!(in_query("a=1&_method=delete"), ["DELETE"]);
/// assert_eq!(in_query("%5Fmethod=PUT;x"), ["PUT"]);
/// assert!(in_query("_method[]=DELETE&method=PUT").is_empty());
/// ```
pub fn in_query(query: &str) -> Vec<String> {
    let mut form = Form::default();
    let mut found = Vec::new();
    form.feed(query.as_bytes(), &mut found);
    form.finish(&mut found);
    found
}

/// How a body may carry `_method`, from its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/x-www-form-urlencoded`, or no `Content-Type`.
    Form,
    /// `multipart/form-data` (or `mixed`, `related`) with this boundary.
    Multipart(Vec<u8>),
    /// JSON (`application/json`, any `+json`: a type that holds `/json` or `+json`).
    Json,
}

/// How each `Content-Type` value of a request (none: a form, as Rack reads it) says its
/// body may carry `_method`; empty when no framework reads it there. A multipart type
/// without a boundary is read as no multipart body at all, as the frameworks do.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::method_override::{body_kinds, BodyKind};
///
/// assert_eq!(body_kinds(None::<&str>), [BodyKind::Form]);
/// assert_eq!(body_kinds(["application/vnd.api+json"]), [BodyKind::Json]);
/// assert_eq!(
///     body_kinds(["multipart/form-data; boundary=\"xy\""]),
///     [BodyKind::Multipart(b"xy".to_vec())]
/// );
/// assert!(body_kinds(["text/plain"]).is_empty());
/// // Two boundaries: parsers disagree on which is the body's, so both are read.
/// assert_eq!(
///     body_kinds(["multipart/form-data; boundary=a; boundary=b"]),
///     [BodyKind::Multipart(b"a".to_vec()), BodyKind::Multipart(b"b".to_vec())]
/// );
/// ```
pub fn body_kinds<'a>(content_types: impl IntoIterator<Item = &'a str>) -> Vec<BodyKind> {
    let mut kinds = Vec::new();
    let mut any = false;
    for value in content_types {
        any = true;
        let media = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let mut found = Vec::new();
        if media == "application/x-www-form-urlencoded" {
            found.push(BodyKind::Form);
        } else if media.starts_with("multipart/") {
            // Every `boundary=` the value holds: PHP takes the first, Rack's pattern the
            // last, wherever it stands; the body is read under each.
            found.extend(boundaries(value).map(BodyKind::Multipart));
        }
        for kind in found {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        // Laravel reads a body as JSON when its `Content-Type` holds `/json` or `+json`
        // anywhere, parameters too.
        let lower = value.to_ascii_lowercase();
        if (lower.contains("/json") || lower.contains("+json")) && !kinds.contains(&BodyKind::Json)
        {
            kinds.push(BodyKind::Json);
        }
    }
    if !any {
        kinds.push(BodyKind::Form);
    }
    kinds
}

/// The values after each `boundary=` in a `Content-Type` value, any case, unquoted, up to
/// a `;`, `,` or `"`.
fn boundaries(value: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    let bytes = value.as_bytes();
    (0..bytes.len()).filter_map(move |at| {
        let key = bytes.get(at..at + 9)?;
        if !key.eq_ignore_ascii_case(b"boundary=") {
            return None;
        }
        let rest = &bytes[at + 9..];
        let rest = rest.strip_prefix(b"\"").unwrap_or(rest);
        let end = rest
            .iter()
            .position(|&b| matches!(b, b';' | b',' | b'"'))
            .unwrap_or(rest.len());
        let boundary = rest[..end].trim_ascii();
        (!boundary.is_empty()).then(|| boundary.to_vec())
    })
}

/// Reads a body, piece by piece, for the methods its `_method` parameters name, under
/// every kind it may be read as.
#[derive(Debug)]
pub struct Scan {
    readers: Vec<Reader>,
    found: Vec<String>,
    unreadable: Option<&'static str>,
}

#[derive(Debug)]
enum Reader {
    Form(Form),
    Multipart(Multipart),
    Json(Json),
}

impl Scan {
    /// A scan of a body of `kinds`.
    pub fn new(kinds: &[BodyKind]) -> Self {
        let readers = kinds
            .iter()
            .map(|kind| match kind {
                BodyKind::Form => Reader::Form(Form::default()),
                BodyKind::Multipart(boundary) => Reader::Multipart(Multipart::new(boundary)),
                BodyKind::Json => Reader::Json(Json::default()),
            })
            .collect();
        Self {
            readers,
            found: Vec::new(),
            unreadable: None,
        }
    }

    /// Reads the body's next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        for reader in &mut self.readers {
            match reader {
                Reader::Form(form) => form.feed(bytes, &mut self.found),
                Reader::Multipart(multipart) => {
                    if let Err(why) = multipart.feed(bytes, &mut self.found) {
                        self.unreadable.get_or_insert(why);
                    }
                }
                Reader::Json(json) => json.feed(bytes, &mut self.found),
            }
        }
    }

    /// The body has ended.
    pub fn finish(&mut self) {
        for reader in &mut self.readers {
            match reader {
                Reader::Form(form) => form.finish(&mut self.found),
                Reader::Multipart(multipart) => multipart.finish(&mut self.found),
                Reader::Json(_) => {}
            }
        }
    }

    /// The methods named so far, in order.
    pub fn found(&self) -> &[String] {
        &self.found
    }

    /// Why the body cannot be read for `_method` (a multipart part's head past
    /// [`MAX_PART_HEAD`]), if it cannot: what it overrides is unknowable.
    pub fn unreadable(&self) -> Option<&'static str> {
        self.unreadable
    }
}

/// An `application/x-www-form-urlencoded` reader: `name=value` pairs split at `&` and `;`
/// (older Rack splits at both), `+` a space, `%XX` decoded.
#[derive(Debug, Default)]
struct Form {
    in_value: bool,
    /// The decoded name so far, past its leading spaces; `None` once too long.
    name: Option<Vec<u8>>,
    /// Leading spaces are still being dropped.
    leading: bool,
    /// The decoded value so far, when the name is `_method`; `None` once too long.
    value: Option<Vec<u8>>,
    /// A `%` escape's digits so far.
    escape: Option<Vec<u8>>,
    started: bool,
}

impl Form {
    fn feed(&mut self, bytes: &[u8], found: &mut Vec<String>) {
        for &b in bytes {
            if !self.started {
                self.start_pair();
            }
            if let Some(digits) = &mut self.escape {
                digits.push(b);
                if digits.len() < 2 && b.is_ascii_hexdigit() {
                    continue;
                }
                let digits = self.escape.take().unwrap_or_default();
                match (digits.len(), std::str::from_utf8(&digits)) {
                    (2, Ok(hex)) if hex.bytes().all(|d| d.is_ascii_hexdigit()) => {
                        let decoded = u8::from_str_radix(hex, 16).unwrap_or(b'%');
                        self.push(decoded);
                        continue;
                    }
                    // Not an escape: the `%` and what followed, as written (PHP keeps them).
                    _ => {
                        self.push(b'%');
                        let (last, before) = digits.split_last().unwrap_or((&b'%', &[]));
                        for &d in before {
                            self.push(d);
                        }
                        // The byte that ended it is read afresh: a separator still separates.
                        self.read(*last, found);
                        continue;
                    }
                }
            }
            self.read(b, found);
        }
    }

    fn read(&mut self, b: u8, found: &mut Vec<String>) {
        match b {
            b'&' | b';' => {
                self.end_pair(found);
                self.start_pair();
            }
            b'=' if !self.in_value => {
                self.in_value = true;
                if self.name.as_deref().is_some_and(is_override_name) {
                    self.value = Some(Vec::new());
                }
            }
            b'%' => self.escape = Some(Vec::with_capacity(2)),
            b'+' => self.push(b' '),
            b => self.push(b),
        }
    }

    fn push(&mut self, b: u8) {
        if self.in_value {
            if let Some(value) = &mut self.value {
                if value.len() > MAX_VALUE {
                    // Too long for a method: kept as too long, never shortened into one.
                    return;
                }
                value.push(b);
            }
            return;
        }
        if self.leading && b == b' ' {
            return;
        }
        self.leading = false;
        if let Some(name) = &mut self.name {
            if name.len() >= MAX_NAME {
                self.name = None;
            } else {
                name.push(b);
            }
        }
    }

    fn start_pair(&mut self) {
        self.started = true;
        self.in_value = false;
        self.name = Some(Vec::new());
        self.leading = true;
        self.value = None;
    }

    fn end_pair(&mut self, found: &mut Vec<String>) {
        if let Some(digits) = self.escape.take() {
            self.push(b'%');
            for d in digits {
                self.push(d);
            }
        }
        if let Some(value) = self.value.take() {
            if let Some(method) = method_of(&value) {
                found.push(method);
            }
        }
    }

    fn finish(&mut self, found: &mut Vec<String>) {
        if self.started {
            self.end_pair(found);
        }
        self.started = false;
    }
}

/// A multipart reader: each part's `Content-Disposition` name, and the value of a part
/// named `_method`. Lines may end in CRLF or LF alone, as lenient parsers take them.
#[derive(Debug)]
struct Multipart {
    /// `--boundary`.
    delimiter: Vec<u8>,
    state: Part,
    /// Bytes not yet read whole: a delimiter or a head cut between pieces.
    pending: Vec<u8>,
    /// At the start of a line (the body's start is one).
    line_start: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    /// Before the first delimiter, or in a part not named `_method`.
    Skip,
    /// In a part's head.
    Head,
    /// In the body of a part named `_method`: its value so far.
    Value(Vec<u8>),
    /// After the closing delimiter.
    Done,
}

impl Multipart {
    fn new(boundary: &[u8]) -> Self {
        let mut delimiter = b"--".to_vec();
        delimiter.extend_from_slice(boundary);
        Self {
            delimiter,
            state: Part::Skip,
            pending: Vec::new(),
            line_start: true,
        }
    }

    fn feed(&mut self, bytes: &[u8], found: &mut Vec<String>) -> Result<(), &'static str> {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        let read = loop {
            match self.state {
                Part::Done => {
                    self.pending.clear();
                    return Ok(());
                }
                Part::Head => {
                    let rest = &self.pending[at..];
                    let Some((end, skip)) = head_end(rest) else {
                        if rest.len() > MAX_PART_HEAD {
                            break Err("a multipart part's head is longer than 8 KiB");
                        }
                        break Ok(());
                    };
                    let named = part_names(&rest[..end]).iter().any(|n| is_override_name(n));
                    at += end + skip;
                    self.line_start = true;
                    self.state = if named {
                        Part::Value(Vec::new())
                    } else {
                        Part::Skip
                    };
                }
                Part::Skip | Part::Value(_) => {
                    let rest = &self.pending[at..];
                    match next_delimiter(rest, &self.delimiter, self.line_start) {
                        Delimiter::None => {
                            // Keep what could be the start of a delimiter cut between pieces.
                            let keep = (self.delimiter.len() + 2).min(rest.len());
                            let take = rest.len() - keep;
                            if let Part::Value(value) = &mut self.state {
                                extend_value(value, &self.pending[at..at + take]);
                            }
                            if take > 0 {
                                self.line_start = self.pending[at + take - 1] == b'\n';
                            }
                            at += take;
                            break Ok(());
                        }
                        Delimiter::Wait => break Ok(()),
                        Delimiter::At {
                            start,
                            next,
                            closing,
                        } => {
                            close_value(&mut self.state, &self.pending[at..at + start], found);
                            at += next;
                            self.line_start = true;
                            // Past the closing delimiter a strict parser reads nothing, a
                            // lenient one may read on: its epilogue is read as parts too.
                            self.state = if closing { Part::Skip } else { Part::Head };
                        }
                    }
                }
            }
        };
        self.pending.drain(..at);
        if self.pending.len() > MAX_PART_HEAD + self.delimiter.len() + 2 {
            return Err("a multipart delimiter's line is longer than 8 KiB");
        }
        read
    }

    fn finish(&mut self, found: &mut Vec<String>) {
        // The body ended in a `_method` part: its value runs to a last delimiter with no
        // line end after it, or (a body cut short) to the end, as a lenient parser takes it.
        let tail = std::mem::take(&mut self.pending);
        let end = delimiter_at_line(&tail, &self.delimiter, self.line_start).unwrap_or(tail.len());
        close_value(&mut self.state, &tail[..end], found);
        self.state = Part::Done;
    }
}

/// Where a part's head ends in `rest`: its length, and the blank line's.
fn head_end(rest: &[u8]) -> Option<(usize, usize)> {
    // A part with no header lines: its blank line comes at once.
    if rest.starts_with(b"\r\n") {
        return Some((0, 2));
    }
    if rest.starts_with(b"\n") {
        return Some((0, 1));
    }
    if rest.len() < 2 {
        return None;
    }
    let crlf = find(rest, b"\r\n\r\n").map(|i| (i, 4));
    let lf = find(rest, b"\n\n").map(|i| (i, 2));
    crlf.into_iter().chain(lf).min_by_key(|(i, _)| *i)
}

/// The next delimiter in a part's body.
enum Delimiter {
    /// None in these bytes.
    None,
    /// One may be: more bytes are needed to tell.
    Wait,
    /// The delimiter begins at `start`; what follows it (its line) ends before `next`;
    /// `closing` for the last.
    At {
        start: usize,
        next: usize,
        closing: bool,
    },
}

/// The next delimiter of `rest` at a line's start (`line_start`: `rest` begins one),
/// whatever follows it on its line: PHP takes any such line as one (Rack wants `--` or the
/// line's end), and reading more lines as delimiters than a parser does only reads more
/// part heads.
fn next_delimiter(rest: &[u8], delimiter: &[u8], line_start: bool) -> Delimiter {
    let Some(i) = delimiter_at_line(rest, delimiter, line_start) else {
        return Delimiter::None;
    };
    let after = &rest[i + delimiter.len()..];
    match find(after, b"\n") {
        Some(end) => Delimiter::At {
            start: i,
            next: i + delimiter.len() + end + 1,
            closing: after.starts_with(b"--"),
        },
        None => Delimiter::Wait,
    }
}

/// Where the first `delimiter` at a line's start in `rest` begins.
fn delimiter_at_line(rest: &[u8], delimiter: &[u8], line_start: bool) -> Option<usize> {
    let mut search = 0;
    while let Some(i) = find(&rest[search..], delimiter) {
        let i = search + i;
        search = i + 1;
        let at_line = if i == 0 {
            line_start
        } else {
            rest[i - 1] == b'\n'
        };
        if at_line {
            return Some(i);
        }
    }
    None
}

/// Ends a `_method` part (when `state` is one) whose remaining body is `tail`, its line
/// break before the delimiter dropped.
fn close_value(state: &mut Part, tail: &[u8], found: &mut Vec<String>) {
    if let Part::Value(value) = state {
        extend_value(value, tail);
        let mut value = std::mem::take(value);
        if value.ends_with(b"\n") {
            value.pop();
            if value.ends_with(b"\r") {
                value.pop();
            }
        }
        if let Some(method) = method_of(&value) {
            found.push(method);
        }
    }
}

fn extend_value(value: &mut Vec<u8>, bytes: &[u8]) {
    let room = (MAX_VALUE + 3).saturating_sub(value.len());
    value.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The `name` parameters of a part head's `Content-Disposition` lines, unquoted.
fn part_names(head: &[u8]) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    for line in head.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if !line[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(b"content-disposition")
        {
            continue;
        }
        let mut rest = &line[colon + 1..];
        // Parameters: `; key=value` or `; key="quoted"`, quotes escaped with `\`.
        while let Some(semi) = rest.iter().position(|&b| b == b';') {
            rest = &rest[semi + 1..];
            let Some(eq) = rest.iter().position(|&b| b == b'=') else {
                break;
            };
            let key = rest[..eq].trim_ascii();
            rest = &rest[eq + 1..];
            let start = rest.iter().position(|b| !b.is_ascii_whitespace());
            rest = &rest[start.unwrap_or(rest.len())..];
            let mut value = Vec::new();
            if rest.first() == Some(&b'"') {
                let mut i = 1;
                while i < rest.len() && rest[i] != b'"' {
                    if rest[i] == b'\\' && i + 1 < rest.len() {
                        i += 1;
                    }
                    value.push(rest[i]);
                    i += 1;
                }
                rest = &rest[(i + 1).min(rest.len())..];
            } else {
                let end = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
                value.extend_from_slice(rest[..end].trim_ascii());
                rest = &rest[end..];
            }
            if key.eq_ignore_ascii_case(b"name") {
                names.push(value);
            }
        }
    }
    names
}

/// A JSON reader: the top-level object's keys, and the string value of a `_method` key.
#[derive(Debug, Default)]
struct Json {
    /// Objects and arrays open.
    depth: usize,
    /// The top level is an object (the first byte but white space was `{`).
    object: Option<bool>,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key (after `{` or `,`), not a value.
    expect_key: bool,
    /// The raw string being read at depth 1 (key, or the value of a `_method` key),
    /// quotes included; `None` once too long.
    raw: Option<Vec<u8>>,
    reading_key: bool,
    /// The last key read was `_method`: its value is wanted.
    want_value: bool,
}

impl Json {
    fn feed(&mut self, bytes: &[u8], found: &mut Vec<String>) {
        for &b in bytes {
            if self.object == Some(false) {
                return;
            }
            if self.in_string {
                if let Some(raw) = &mut self.raw {
                    if raw.len() > MAX_JSON_STRING {
                        self.raw = None;
                    } else {
                        raw.push(b);
                    }
                }
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    self.end_string(found);
                }
                continue;
            }
            match b {
                b' ' | b'\t' | b'\r' | b'\n' => {}
                b'{' | b'[' => {
                    if self.object.is_none() {
                        self.object = Some(b == b'{');
                    }
                    self.depth += 1;
                    self.expect_key = self.depth == 1;
                    if self.depth > 1 {
                        self.want_value = false;
                    }
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => {
                    self.expect_key = true;
                    self.want_value = false;
                }
                b'"' => {
                    self.in_string = true;
                    if self.object.is_none() {
                        self.object = Some(false);
                    }
                    let at_top = self.depth == 1;
                    self.reading_key = at_top && self.expect_key;
                    self.raw =
                        (at_top && (self.reading_key || self.want_value)).then(|| vec![b'"']);
                    if self.reading_key {
                        self.expect_key = false;
                    }
                }
                _ => {
                    if self.object.is_none() {
                        self.object = Some(false);
                    }
                    // A number, `true`, `null`: not a string, so no method.
                    if self.depth == 1 && !self.expect_key && b != b':' {
                        self.want_value = false;
                    }
                }
            }
        }
    }

    fn end_string(&mut self, found: &mut Vec<String>) {
        let Some(raw) = self.raw.take() else {
            // Too long for `_method` or a method, or not at the top level.
            self.want_value = false;
            self.reading_key = false;
            return;
        };
        let text = json_string(&raw);
        if self.reading_key {
            self.want_value = text.is_some_and(|k| is_override_name(k.as_bytes()));
        } else if self.want_value {
            self.want_value = false;
            if let Some(method) = text.as_deref().and_then(|v| method_of(v.as_bytes())) {
                found.push(method);
            }
        }
        self.reading_key = false;
    }
}

/// A raw JSON string (quotes included) decoded; a character past ASCII (which neither
/// `_method` nor a method holds) as `?`. `None` when it is not a valid string.
fn json_string(raw: &[u8]) -> Option<String> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut text = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            text.push(if b.is_ascii() { b as char } else { '?' });
            continue;
        }
        let c = match bytes.next()? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hex: Vec<u8> = bytes.by_ref().take(4).copied().collect();
                let code = u32::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?;
                if hex.len() < 4 {
                    return None;
                }
                char::from_u32(code).filter(char::is_ascii).unwrap_or('?')
            }
            _ => return None,
        };
        text.push(c);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan(kinds: &[BodyKind], body: &[u8]) -> Vec<String> {
        let mut scan = Scan::new(kinds);
        scan.feed(body);
        scan.finish();
        scan.found().to_vec()
    }

    fn form(body: &str) -> Vec<String> {
        scan(&[BodyKind::Form], body.as_bytes())
    }

    #[test]
    fn a_form_names_its_method_under_every_spelling_php_and_rack_read() {
        for body in [
            "_method=DELETE",
            "a=1&_method=delete",
            "%5Fmethod=DELETE",
            "%5f%6D%65thod=DELETE",
            ".method=DELETE",
            "+_method=DELETE",
            "%20%20_method=DELETE",
            "[method=DELETE",
            "_METHOD=DELETE",
            "x=1;_method=DELETE",
            "_method=%44ELETE",
            "_method=DELETE&",
            "_method%00x=DELETE",
            "[_method]=DELETE",
            "_method]=DELETE",
        ] {
            assert_eq!(form(body), ["DELETE"], "{body}");
        }
    }

    #[test]
    fn a_form_without_a_method_value_names_none() {
        for body in [
            "",
            "method=DELETE",
            "_method[]=DELETE",
            "_method[a]=DELETE",
            "_method",
            "_method=",
            "_method=DEL ETE",
            "_method=DELETE1",
            "a=_method%3DDELETE",
            "x_method=DELETE",
        ] {
            assert!(form(body).is_empty(), "{body}: {:?}", form(body));
        }
    }

    #[test]
    fn multipart_parts_named_method_are_read_whatever_the_line_ends() {
        let kind = [BodyKind::Multipart(b"XyZ".to_vec())];
        let crlf = b"--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\ndelete\r\n--XyZ--\r\n";
        assert_eq!(scan(&kind, crlf), ["DELETE"]);
        let lf = b"preamble\n--XyZ\ncontent-disposition: form-data; filename=\"a\"; name=_method\n\nPUT\n--XyZ--";
        assert_eq!(scan(&kind, lf), ["PUT"]);
        // Parts past the closing delimiter, and a delimiter line with more after it (PHP
        // takes both), are read too.
        let epilogue = b"--XyZ--\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n";
        assert_eq!(scan(&kind, epilogue), ["DELETE"]);
        let junk = b"--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--XyZjunk\r\nContent-Disposition: form-data; name=_method\r\n\r\nPUT\r\n--XyZ--";
        assert_eq!(scan(&kind, junk), ["PUT"]);
        // A part with no head, then the `_method` one: its head is not swallowed.
        let headless = b"--XyZ\r\n\r\nx\r\n--XyZ\r\nContent-Disposition: form-data; name=_method\r\n\r\nPATCH\r\n--XyZ--";
        assert_eq!(scan(&kind, headless), ["PATCH"]);
        let other = b"--XyZ\r\nContent-Disposition: form-data; name=\"_methods\"\r\n\r\nDELETE\r\n--XyZ\r\nContent-Disposition: form-data; filename=\"_method\"; name=\"f\"\r\n\r\nDELETE\r\n--XyZ--\r\n";
        assert!(scan(&kind, other).is_empty());
    }

    #[test]
    fn json_reads_only_top_level_string_values_of_method() {
        let kind = [BodyKind::Json];
        assert_eq!(
            scan(
                &kind,
                br#"{"a": {"_method": "PUT"}, "\u005fmethod" : "delete"}"#
            ),
            ["DELETE"]
        );
        for body in [
            &br#"{"_method": ["DELETE"]}"#[..],
            br#"{"_method": 1, "x": "DELETE"}"#,
            br#"[{"_method": "DELETE"}]"#,
            br#"{"x": "_method", "y": "DELETE"}"#,
            br#""_method""#,
        ] {
            assert!(
                scan(&kind, body).is_empty(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_multipart_head_past_the_bound_is_unreadable() {
        let mut scan = Scan::new(&[BodyKind::Multipart(b"b".to_vec())]);
        scan.feed(b"--b\r\nContent-Disposition: form-data; name=\"");
        scan.feed(&vec![b'x'; MAX_PART_HEAD + 1]);
        assert!(scan.unreadable().is_some());
    }

    fn bodies() -> impl Strategy<Value = (BodyKind, Vec<u8>)> {
        prop_oneof![
            Just((BodyKind::Form, b"a=1&%5Fmethod=DELETE&b=2".to_vec())),
            Just((
                BodyKind::Multipart(b"--b1".to_vec()),
                b"----b1\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n----b\r\n----b1\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n----b1--\r\n".to_vec()
            )),
            Just((
                BodyKind::Json,
                br#"{"a": "x\"y", "_method": "DELETE", "b": [1, {"c": 2}]}"#.to_vec()
            )),
        ]
    }

    proptest! {
        /// A body cut into pieces anywhere is read as it is read whole.
        #[test]
        fn pieces_anywhere_read_as_the_whole((kind, body) in bodies(), cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let kinds = [kind];
            let whole = scan(&kinds, &body);
            prop_assert_eq!(&whole, &["DELETE".to_owned()]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut scan = Scan::new(&kinds);
            let mut from = 0;
            for cut in cuts {
                scan.feed(&body[from..cut]);
                from = cut;
            }
            scan.feed(&body[from..]);
            scan.finish();
            prop_assert_eq!(scan.found(), &whole[..]);
        }

        /// Whatever the bytes, a scan ends without a panic.
        #[test]
        fn any_bytes_are_read_without_a_panic(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            for kind in [BodyKind::Form, BodyKind::Multipart(b"b".to_vec()), BodyKind::Json] {
                let mut scan = Scan::new(&[kind]);
                scan.feed(&body);
                scan.finish();
            }
        }
    }
}
