//! The wait for the next request on a kept-alive connection, timed apart from the request's
//! head: `[server] idle_timeout` until its first byte, `header_read_timeout` from it.
//!
//! hyper's HTTP/1 `header_read_timeout` starts as soon as hyper begins waiting for a head,
//! which on a kept-alive connection is as soon as the previous response is written. So an
//! idle pooled connection was closed after 10 s, and a client honouring a 10 s `Retry-After`
//! on it raced the close (its retry failing with no answer). hyper's HTTP/1 server uses its
//! timer for that one wait alone, so each connection gets a [`HeadTimer`] of its own that
//! reads how many bytes the connection has received ([`Counted`]): while none have come since
//! the wait began, the connection is idle; from the first, the head has `header_read_timeout`
//! as before, so a slowloris is still cut. A fresh connection's first head is timed from the
//! accept by `header_read_timeout` alone: a client that connects and says nothing is not an
//! idle keep-alive, and gets no more time than a slow head.
//!
//! Every wait of a connection shares one timer entry (`Shared::sleep`), reset to each wait's
//! deadline: a later deadline is then a compare-and-swap, where arming a timer for each
//! request and dropping it at its head (two allocations, the timer wheel's lock twice) was
//! 1,500 instructions of the decision API's request (2026-12-03). Between waits the entry
//! stays armed at the last one's deadline; if it fires then, it only wakes the connection.
//!
//! Bytes of a next request read ahead while the previous one was served (pipelining) are
//! not seen as its start: such a head is timed as idle. Pipelining is rare and the
//! connection cap per client still bounds what it holds.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a connection's reader and its timer share: the bytes received so far, whether a
/// head has been waited for before (whether the connection is being kept alive), and the
/// timer entry of every wait.
#[derive(Debug)]
struct Shared {
    received: AtomicU64,
    kept_alive: AtomicBool,
    /// Locked by the connection's one task only (a timer must be `Sync` for hyper).
    sleep: Mutex<Pin<Box<tokio::time::Sleep>>>,
}

impl Shared {
    /// Sets the connection's timer to `after` from now.
    fn arm(&self, after: Duration) {
        let deadline = tokio::time::Instant::now() + after;
        self.sleep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .reset(deadline);
    }
}

/// A connection's stream, counting the bytes it receives for its [`HeadTimer`].
#[derive(Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The timer hyper times a connection's heads with: see the module's documentation.
#[derive(Debug, Clone)]
pub(crate) struct HeadTimer {
    shared: Arc<Shared>,
    idle: Duration,
    head: Duration,
}

/// `stream`, counted, and the timer for hyper to serve it with: heads get `head`, the wait
/// for a kept-alive connection's next request `idle`.
///
/// # Panics
///
/// Outside a tokio runtime with its timer enabled.
pub(crate) fn timed<S>(stream: S, idle: Duration, head: Duration) -> (Counted<S>, HeadTimer) {
    let shared = Arc::new(Shared {
        received: AtomicU64::new(0),
        kept_alive: AtomicBool::new(false),
        // Not in the timer wheel until first armed.
        sleep: Mutex::new(Box::pin(tokio::time::sleep(head))),
    });
    let timer = HeadTimer {
        shared: Arc::clone(&shared),
        idle,
        head,
    };
    (
        Counted {
            inner: stream,
            shared,
        },
        timer,
    )
}

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        // Not used by hyper's HTTP/1 server; a plain sleep of its own if a later hyper does.
        Box::pin(PlainSleep(Box::pin(tokio::time::sleep(duration))))
    }

    /// hyper begins waiting for a head: `deadline` is its `header_read_timeout` from now.
    fn sleep_until(&self, _deadline: Instant) -> Pin<Box<dyn Sleep>> {
        // Relaxed: a connection is served by one task at a time; the atomics only make the
        // shared state `Sync`, as hyper requires of a timer.
        let kept_alive = self.shared.kept_alive.swap(true, Ordering::Relaxed);
        let received = self.shared.received.load(Ordering::Relaxed);
        let (since, first) = if kept_alive {
            (Some(received), self.idle)
        } else {
            (None, self.head)
        };
        self.shared.arm(first);
        Box::pin(HeadWait {
            shared: Arc::clone(&self.shared),
            since,
            head: self.head,
        })
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        *sleep = self.sleep_until(new_deadline);
    }

    fn now(&self) -> Instant {
        // tokio's clock, so that tests under a paused clock see the same time as the sleeps.
        tokio::time::Instant::now().into_std()
    }
}

/// One wait for a head, on the connection's timer: idle until a byte arrives (when `since`
/// is the count it began at), then `head` from that byte.
struct HeadWait {
    shared: Arc<Shared>,
    since: Option<u64>,
    head: Duration,
}

impl Future for HeadWait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if let Some(since) = this.since {
            // hyper polls this whenever the head it is reading is incomplete, so right after
            // the read that brought the first byte.
            if this.shared.received.load(Ordering::Relaxed) != since {
                this.since = None;
                this.shared.arm(this.head);
            }
        }
        let mut sleep = this
            .shared
            .sleep
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sleep.as_mut().poll(cx)
    }
}

impl Sleep for HeadWait {}

/// A sleep of its own, for [`Timer::sleep`].
struct PlainSleep(Pin<Box<tokio::time::Sleep>>);

impl Future for PlainSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl Sleep for PlainSleep {}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.shared
                .received
                .fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
