//! A connection served on a lean HTTP/1.1 path (the decision API's, `api/lean.rs`, and the
//! gateway's, `gateway/lean/`): its read buffer with the unserved bytes, its buffered
//! answers, and its one timer entry, which times the wait for a kept-alive connection's next
//! request (`idle_timeout`), for the rest of a head (`header_read_timeout`) and for the rest
//! of a body (`api_body_timeout`), as `idle.rs` times hyper's connections.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;

use ratewarden_policy::config::Bounds;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::send::Sending;
use crate::serve::conn::wire::Wire;
use crate::serve::h1::answer::{self, Answer};
use crate::serve::reply::Plain;

/// The read buffer's first size: a check's head and body are a few hundred bytes.
pub(crate) const FIRST_BUFFER: usize = 4 * 1024;

/// A buffer grown past this goes back to its first size once empty.
pub(crate) const SHRINK_OVER: usize = 16 * 1024;

/// Answers past this many bytes are written before serving more pipelined requests.
pub(crate) const FLUSH_AT: usize = 64 * 1024;

/// What a read is waiting for, which sets its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A kept-alive connection's next request: `idle_timeout` until its first byte.
    Idle,
    /// The rest of a head: `header_read_timeout`.
    Head,
    /// The rest of a body: `api_body_timeout`.
    Body,
}

/// How a read ended.
pub(crate) enum Filled {
    /// Bytes arrived.
    Read,
    /// The peer closed, or the connection failed.
    Closed,
    /// The wait's deadline passed.
    TimedOut,
    /// The shutdown began while waiting for a head.
    Stopped,
}

/// What to do once more of a head that was not whole has been waited for
/// ([`Conn::more_head`]).
pub(crate) enum MoreHead {
    /// Bytes arrived: read the head again.
    Read,
    /// As long as `max_header_bytes` and not whole: hyper's to answer (431).
    HandOff,
    /// The peer closed mid-head, a deadline passed, or the shutdown began: closed without an
    /// answer, as hyper does (what is buffered written first).
    Close,
    /// Writing the answers buffered failed: the connection is gone.
    Gone,
}

/// Whether `at` has passed; if not, `cx` is woken by then, by `sleep`. The timer entry is
/// moved only when `at` is earlier than where it stands: a later deadline (the next
/// request's, nearly always) lets it fire early, once, and be set then: moving it is a
/// timer-wheel update, and a request would move it twice.
fn poll_deadline(
    sleep: &mut Pin<Box<Sleep>>,
    cx: &mut std::task::Context<'_>,
    at: Instant,
) -> bool {
    if sleep.deadline() > at {
        sleep.as_mut().reset(at);
    }
    while sleep.as_mut().poll(cx).is_ready() {
        if sleep.deadline() >= at {
            return true;
        }
        // Fired for an earlier wait: the time is now `at`'s.
        sleep.as_mut().reset(at);
    }
    false
}

/// Appends `plain` as the codec writes an answer: its content type (with `cache-control:
/// no-store`) first when it has one, as [`Plain::response`] puts them first for hyper.
fn write_plain(out: &mut Vec<u8>, plain: &Plain, close: bool) {
    let typed;
    let first: &[(&str, &str)] = match plain.kind {
        Some(kind) => {
            typed = [("content-type", kind), ("cache-control", "no-store")];
            &typed
        }
        None => &[],
    };
    let answer = Answer {
        status: plain.status,
        first,
        headers: &plain.headers,
        body: &plain.body,
    };
    answer::write(out, &answer, close);
}

/// One connection's state, over TCP or TLS.
pub(crate) struct Conn {
    pub(crate) stream: Wire,
    /// Bytes read; the unserved ones are `buf[start..end]`.
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Answers not yet written.
    pub(crate) out: Vec<u8>,
    pub(crate) wait: Wait,
    /// The current wait's deadline, once a read has blocked in it.
    pub(crate) deadline: Option<Instant>,
    /// The connection's one timer entry.
    pub(crate) sleep: Pin<Box<Sleep>>,
    pub(crate) bounds: Bounds,
}

impl Conn {
    /// `stream`, just accepted: its first head is timed from now.
    pub(crate) fn new(stream: Wire, bounds: Bounds) -> Self {
        let deadline = Instant::now() + bounds.header_read_timeout;
        Self {
            stream,
            buf: vec![0; FIRST_BUFFER],
            start: 0,
            end: 0,
            out: Vec::new(),
            wait: Wait::Head,
            deadline: Some(deadline),
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            bounds,
        }
    }

    /// Starts a wait of `kind`: its deadline is set when a read first blocks in it.
    pub(crate) fn begin(&mut self, kind: Wait) {
        self.wait = kind;
        self.deadline = None;
    }

    /// After a request: the next one's wait.
    pub(crate) fn next(&mut self) {
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

    /// Writes `answer` into the write buffer, and counts it as hyper's path does for the
    /// listener of `role`.
    pub(crate) fn answer(&mut self, app: &App, role: &'static str, answer: &Plain, close: bool) {
        write_plain(&mut self.out, answer, close);
        app.metrics.responded(role, answer.status.as_u16());
    }

    /// Makes the buffer hold `len` unserved bytes from `start`.
    pub(crate) fn make_room(&mut self, len: usize) {
        if self.start + len > self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
    }

    /// Waits for more of a head that is not whole yet, as both lean paths do: the head is
    /// timed from its first byte (before it, a kept-alive connection is idle), the answers
    /// to earlier requests are written first, and the head is bounded by
    /// `max_header_bytes`.
    pub(crate) async fn more_head(&mut self, stop: &mut Stop<'_>) -> MoreHead {
        let limit = self.bounds.max_header_bytes;
        if self.end - self.start >= limit {
            return MoreHead::HandOff;
        }
        if self.wait == Wait::Idle && self.end > self.start {
            // The next request's first byte: its head is timed from here.
            self.begin(Wait::Head);
        }
        if !self.flush().await {
            return MoreHead::Gone;
        }
        match self.fill(limit, stop).await {
            Filled::Read => MoreHead::Read,
            Filled::Closed | Filled::TimedOut | Filled::Stopped => MoreHead::Close,
        }
    }

    /// Reads more, keeping at most `limit` unserved bytes.
    pub(crate) async fn fill(&mut self, limit: usize, stop: &mut Stop<'_>) -> Filled {
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
            if poll_deadline(sleep, cx, at) {
                return Poll::Ready(Filled::TimedOut);
            }
            Poll::Pending
        })
        .await
    }

    /// Whether `at` has passed; if not, `cx` is woken by then (see [`poll_deadline`]).
    pub(crate) fn poll_deadline(&mut self, cx: &mut std::task::Context<'_>, at: Instant) -> bool {
        poll_deadline(&mut self.sleep, cx, at)
    }

    /// While a request is in flight: whether the client went away (its read side closed or
    /// failed), as hyper's server watches a busy connection. It reads only while nothing
    /// unserved is buffered, at most `limit` bytes: bytes that come are the next request's,
    /// kept, and from then on the connection is not watched (as hyper: a half-closed
    /// pipelining client still gets its answers).
    pub(crate) fn poll_gone(&mut self, cx: &mut std::task::Context<'_>, limit: usize) -> bool {
        if self.start != self.end {
            return false;
        }
        (self.start, self.end) = (0, 0);
        let upto = self.buf.len().min(limit);
        let mut read = ReadBuf::new(&mut self.buf[..upto]);
        match Pin::new(&mut self.stream).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) if read.filled().is_empty() => true,
            Poll::Ready(Ok(())) => {
                self.end = read.filled().len();
                false
            }
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        }
    }

    /// Writes the answers buffered; false when the connection failed.
    pub(crate) async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        // Within `send_timeout` of each write that moves bytes: a client that stops
        // reading does not hold the connection (and what its answer holds) for ever.
        let mut sending = Sending::new(&mut self.stream, self.bounds.send_timeout);
        // Flushed too: a TLS stream may keep records it could not write yet.
        let written = sending.write_all(&self.out).await.is_ok() && sending.flush().await.is_ok();
        self.out.clear();
        // Many pipelined answers grew it: not kept for the connection's life.
        if self.out.capacity() > SHRINK_OVER {
            self.out = Vec::new();
        }
        written
    }

    /// Writes what is buffered and closes.
    pub(crate) async fn close(mut self) {
        if self.flush().await {
            let _ = self.stream.shutdown().await;
        }
    }

    /// The connection for hyper, the bytes not served first.
    /// Ends the connection as a head that is still not whole says (`more_head`, anything
    /// but [`MoreHead::Read`]): handed to hyper, closed, or gone. Both lean paths end so.
    pub(crate) async fn end(self, more: MoreHead) -> Option<Rewind<Wire>> {
        match more {
            // Not an end: the caller reads the head again. Were it ever passed, the head
            // is hyper's to read, which is what a lean path does with what it cannot.
            MoreHead::Read | MoreHead::HandOff => self.hand_off().await,
            MoreHead::Close => {
                self.close().await;
                None
            }
            MoreHead::Gone => None,
        }
    }

    pub(crate) async fn hand_off(mut self) -> Option<Rewind<Wire>> {
        // Answers to earlier pipelined requests go first.
        if !self.flush().await {
            return None;
        }
        let unserved = self.buf[self.start..self.end].to_vec();
        Some(Rewind::new(unserved, self.stream))
    }
}
