//! The decision API's own HTTP/1.1 path for `POST /v1/check`: the request parsed from, and
//! the answer written to, the connection's buffers, with no hyper `Request`, `Response`,
//! header map or boxed body in between (issue 16: through hyper the API executed 2.43x the
//! instructions of bare hyper answering the same bytes, ~9,000 of them hyper's objects,
//! futures moved and allocations around a ~10,000 instruction decision).
//!
//! It serves only what `lean_head` recognises exactly (HTTP/1.1, `POST /v1/check`, one
//! plain `Content-Length`, no `Transfer-Encoding`, `Expect` or `Upgrade`). Any other head
//! hands the connection to hyper for good, the bytes read so far first (`rewind.rs`), and
//! hyper serves it as it serves every listener: every other endpoint, error and protocol
//! corner stays hyper's. The check itself goes through the same functions as hyper's path
//! (`api::check` and the 415, 413 and 408 of `api.rs`), and `lean_answer` writes the same
//! lines hyper writes.
//!
//! Bounds, as hyper's path has them: the buffer holds at most `max_header_bytes` while a
//! head is read (a head reaching it goes to hyper, which answers 431) and then the head and
//! a body of at most `max_body` (413 before reading when declared over); the first head
//! must be whole within `header_read_timeout` of the accept, a kept-alive connection's next
//! request must begin within `idle_timeout` and its head be whole within
//! `header_read_timeout` of that (as `idle.rs` times hyper's), and the body must be whole
//! within `api_body_timeout` of the first wait for it (408). One timer entry per
//! connection, set only when a read would block. Pipelined requests are answered in order;
//! answers are written when the next read would block (or past `FLUSH_AT` bytes).
//! Shutdown: a connection waiting for a head closes at once, one with a body or a decision
//! in flight answers it with `connection: close` first.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use ratewarden_policy::config::Bounds;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::api;
use super::graceful::Stop;
use super::lean_head::{self, Head};
use super::rewind::Rewind;
use crate::serve::app::App;
use crate::serve::reply::Plain;

/// The read buffer's first size: a check's head and body are a few hundred bytes.
const FIRST_BUFFER: usize = 4 * 1024;

/// A buffer grown past this goes back to its first size once empty.
const SHRINK_OVER: usize = 16 * 1024;

/// Answers past this many bytes are written before serving more pipelined requests.
const FLUSH_AT: usize = 64 * 1024;

/// What a read is waiting for, which sets its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A kept-alive connection's next request: `idle_timeout` until its first byte.
    Idle,
    /// The rest of a head: `header_read_timeout`.
    Head,
    /// The rest of a body: `api_body_timeout`.
    Body,
}

/// How a read ended.
enum Filled {
    Read,
    /// The peer closed, or the connection failed.
    Closed,
    TimedOut,
    /// The shutdown began while waiting for a head.
    Stopped,
}

/// One connection's state.
struct Conn {
    stream: TcpStream,
    /// Bytes read; the unserved ones are `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Answers not yet written.
    out: Vec<u8>,
    wait: Wait,
    /// The current wait's deadline, once a read has blocked in it.
    deadline: Option<Instant>,
    /// The connection's one timer entry.
    sleep: Pin<Box<tokio::time::Sleep>>,
    bounds: Bounds,
}

/// Serves `stream` (an API listener's connection, just accepted) until it closes; or hands
/// it back, with what was read of it, for hyper to serve the rest.
pub(super) async fn serve(
    stream: TcpStream,
    app: &Arc<App>,
    peer: SocketAddr,
    bounds: Bounds,
    stop: &mut Stop<'_>,
) -> Option<Rewind<TcpStream>> {
    // The first head is timed from the accept.
    let deadline = Instant::now() + bounds.header_read_timeout;
    let mut conn = Conn {
        stream,
        buf: vec![0; FIRST_BUFFER],
        start: 0,
        end: 0,
        out: Vec::new(),
        wait: Wait::Head,
        deadline: Some(deadline),
        sleep: Box::pin(tokio::time::sleep_until(deadline)),
        bounds,
    };
    loop {
        let check = match lean_head::read(&conn.buf[conn.start..conn.end]) {
            Head::Check(check) => check,
            Head::Other => return conn.hand_off().await,
            // A head as long as the bound and not whole: hyper answers it (431).
            Head::Partial if conn.end - conn.start >= bounds.max_header_bytes => {
                return conn.hand_off().await
            }
            Head::Partial => {
                if conn.wait == Wait::Idle && conn.end > conn.start {
                    // The next request's first byte: its head is timed from here.
                    conn.begin(Wait::Head);
                }
                if !conn.flush().await {
                    return None;
                }
                match conn.fill(bounds.max_header_bytes, stop).await {
                    Filled::Read => continue,
                    // A partial head at the peer's close, the head's or the idle deadline,
                    // the shutdown: closed without an answer, as hyper does.
                    Filled::Closed | Filled::TimedOut | Filled::Stopped => {
                        conn.close().await;
                        return None;
                    }
                }
            }
        };
        let (head_len, body_len, close) = (check.len, check.body, check.close);
        let settings = app.settings();
        let refused = api::json_content_type(check.kind)
            .and_then(|()| api::declared_length(body_len, settings.max_body));
        // Used as a length only within max_body, checked below first.
        let whole = head_len.saturating_add(usize::try_from(body_len).unwrap_or(usize::MAX));
        if let Err(problem) = refused {
            // Answered before the body is read, as hyper's path does; the connection is
            // kept only when the body is here already to skip (hyper drains what it can,
            // then closes without saying so in the answer).
            let keep = conn.end - conn.start >= whole;
            conn.answer(app, &problem.plain(), close || stop.now());
            if close || !keep {
                conn.close().await;
                return None;
            }
            conn.start += whole;
            conn.next();
            continue;
        }
        if conn.end - conn.start < whole {
            conn.begin(Wait::Body);
            // The body arrives into the buffer after the head: room for both.
            conn.make_room(whole);
            while conn.end - conn.start < whole {
                match conn.fill(whole, stop).await {
                    Filled::Read => {}
                    Filled::TimedOut => {
                        let timed_out = api::body_timed_out(bounds.api_body_timeout);
                        conn.answer(app, &timed_out.plain(), false);
                        conn.close().await;
                        return None;
                    }
                    Filled::Closed | Filled::Stopped => {
                        conn.close().await;
                        return None;
                    }
                }
            }
        }
        let body = &conn.buf[conn.start + head_len..conn.start + whole];
        let answer = api::check(app, &settings, peer, body).await;
        let close = close || stop.now();
        conn.answer(app, &answer, close);
        if close {
            conn.close().await;
            return None;
        }
        conn.start += whole;
        conn.next();
        if conn.out.len() >= FLUSH_AT && !conn.flush().await {
            return None;
        }
    }
}

impl Conn {
    /// Starts a wait of `kind`: its deadline is set when a read first blocks in it.
    fn begin(&mut self, kind: Wait) {
        self.wait = kind;
        self.deadline = None;
    }

    /// After a request: the next one's wait.
    fn next(&mut self) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            // A large body grew the buffer: an idle connection does not keep that memory.
            if self.buf.len() > SHRINK_OVER {
                self.buf = vec![0; FIRST_BUFFER];
            }
            self.begin(Wait::Idle);
        } else {
            // Pipelined: already begun.
            self.begin(Wait::Head);
        }
    }

    /// Writes `answer` into the write buffer, and counts it as hyper's path does.
    fn answer(&mut self, app: &App, answer: &Plain, close: bool) {
        super::lean_answer::write(&mut self.out, answer, close);
        app.metrics.responded("api", answer.status.as_u16());
    }

    /// Makes the buffer hold `len` unserved bytes from `start`.
    fn make_room(&mut self, len: usize) {
        if self.start + len > self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
    }

    /// Reads more, keeping at most `limit` unserved bytes.
    async fn fill(&mut self, limit: usize, stop: &mut Stop<'_>) -> Filled {
        let unserved = self.end - self.start;
        if self.end == self.buf.len() {
            // Room to read into: compacted, or grown (doubling) up to the limit.
            let grown = (self.buf.len() * 2).min(limit).max(unserved + 1);
            self.make_room(grown);
        }
        let upto = self.buf.len().min(self.start + limit);
        let Self {
            stream,
            buf,
            end,
            wait,
            deadline,
            sleep,
            bounds,
            ..
        } = self;
        let wait = *wait;
        poll_fn(|cx| {
            let mut read = ReadBuf::new(&mut buf[*end..upto]);
            match Pin::new(&mut *stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    return Poll::Ready(Filled::Closed)
                }
                Poll::Ready(Ok(())) => {
                    *end += read.filled().len();
                    return Poll::Ready(Filled::Read);
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Filled::Closed),
                Poll::Pending => {}
            }
            // The read would block: only now the shutdown and the deadline.
            if wait != Wait::Body && stop.poll(cx) {
                return Poll::Ready(Filled::Stopped);
            }
            let at = *deadline.get_or_insert_with(|| {
                Instant::now()
                    + match wait {
                        Wait::Idle => bounds.idle_timeout,
                        Wait::Head => bounds.header_read_timeout,
                        Wait::Body => bounds.api_body_timeout,
                    }
            });
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Filled::TimedOut);
            }
            Poll::Pending
        })
        .await
    }

    /// Writes the answers buffered; false when the connection failed.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let written = self.stream.write_all(&self.out).await.is_ok();
        self.out.clear();
        // Many pipelined answers grew it: not kept for the connection's life.
        if self.out.capacity() > SHRINK_OVER {
            self.out = Vec::new();
        }
        written
    }

    /// Writes what is buffered and closes.
    async fn close(mut self) {
        if self.flush().await {
            let _ = self.stream.shutdown().await;
        }
    }

    /// The connection for hyper, the bytes not served first.
    async fn hand_off(mut self) -> Option<Rewind<TcpStream>> {
        // Answers to earlier pipelined requests go first.
        if !self.flush().await {
            return None;
        }
        let unserved = self.buf[self.start..self.end].to_vec();
        Some(Rewind::new(unserved, self.stream))
    }
}
