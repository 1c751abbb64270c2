//! The lean path's answer (`lean.rs`), written straight into the connection's write buffer
//! line for line as hyper writes the same [`Plain`] answer: the status line, the answer's
//! header lines (one name's values together, in the order of first appearance, as a
//! `HeaderMap` iterates), `connection: close` when closing, `content-length`, `date`.

use std::cell::RefCell;
use std::time::{Duration, UNIX_EPOCH};

use http::StatusCode;
use ratewarden_core::{Clock, RealClock, NANOS_PER_SEC};

use crate::serve::reply::Plain;

/// Appends `answer` to `out`, with `connection: close` when `close`.
pub(crate) fn write(out: &mut Vec<u8>, answer: &Plain, close: bool) {
    out.reserve(200 + answer.body.len());
    if answer.status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(answer.status.as_str().as_bytes());
        out.push(b' ');
        let reason = answer.status.canonical_reason().unwrap_or("<none>");
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(kind) = answer.kind {
        line(out, "content-type", kind);
        line(out, "cache-control", "no-store");
    }
    let headers = &answer.headers;
    for (at, (name, _)) in headers.iter().enumerate() {
        if headers[..at].iter().any(|(seen, _)| seen == name) {
            continue;
        }
        for (_, value) in headers[at..].iter().filter(|(other, _)| other == name) {
            if Plain::is_header_value(value) {
                line(out, name.as_str(), value);
            }
        }
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(answer.body.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    date(out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&answer.body);
}

/// Appends a `date` line with the time now, as hyper writes it.
pub(crate) fn date(out: &mut Vec<u8>) {
    out.extend_from_slice(b"date: ");
    DATE.with(|date| out.extend_from_slice(date.borrow_mut().now()));
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

thread_local! {
    /// Each worker thread's `date`, formatted once a second as hyper does.
    static DATE: RefCell<Date> = RefCell::new(Date::new());
}

/// The `date` value (IMF-fixdate), cached for the second it names.
struct Date {
    /// Read per answer; anchored afresh at the system time every second, so the header
    /// follows the system clock as hyper's does (a `RealClock` alone would drift from it).
    clock: RealClock,
    /// The second (Unix time) `text` names.
    second: u64,
    text: String,
}

impl Date {
    fn new() -> Self {
        let mut date = Self {
            clock: RealClock::new(),
            second: 0,
            text: String::new(),
        };
        date.format();
        date
    }

    fn now(&mut self) -> &[u8] {
        if self.clock.now() / NANOS_PER_SEC != self.second {
            self.clock = RealClock::new();
            self.format();
        }
        self.text.as_bytes()
    }

    fn format(&mut self) {
        self.second = self.clock.now() / NANOS_PER_SEC;
        self.text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(self.second));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, CONTENT_TYPE, RETRY_AFTER};

    fn text(answer: &Plain, close: bool) -> String {
        let mut out = Vec::new();
        write(&mut out, answer, close);
        String::from_utf8(out).expect("ASCII")
    }

    #[test]
    fn an_answer_is_written_as_hyper_writes_it() {
        let ok = text(&Plain::json(StatusCode::OK, &b"{}"[..]), false);
        let (head, date) = ok.split_once("date: ").expect("a date");
        assert_eq!(
            head,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: no-store\r\ncontent-length: 2\r\n"
        );
        let (date, body) = date.split_once("\r\n\r\n").expect("the head's end");
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        assert_eq!(body, "{}");
        let contract = Plain {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: None,
            headers: vec![
                (RETRY_AFTER, "1".to_owned()),
                (CONTENT_TYPE, "text/plain".to_owned()),
                (RETRY_AFTER, "2".to_owned()),
                (HeaderName::from_static("x-bad"), "a\nb".to_owned()),
            ],
            body: "no".into(),
        };
        let closed = text(&contract, true);
        assert!(
            closed.starts_with(
                "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nretry-after: 2\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: 2\r\ndate: "
            ),
            "{closed}"
        );
    }
}
