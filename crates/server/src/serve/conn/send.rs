//! `[server] send_timeout`: the longest a write to a client may make no progress.
//!
//! A client that asks for an answer and never reads it holds, for as long as its connection
//! stays open, everything the answer held: the place in flight, a concurrency permit, the
//! upstream's connection. Neither hyper nor the lean paths time a write, so without this a
//! few hundred connections that stop reading (the per-client cap allows 256 a worker) could
//! hold every place for ever. As nginx's `send_timeout`, the time runs between writes that
//! move bytes, never over the whole answer: a slow reader that keeps reading is not cut.
//!
//! [`Sending`] wraps a connection's writes: a write the socket takes at once costs nothing
//! more; only one that waits (the client's window is full) arms a timer, dropped as soon
//! as bytes move again.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A connection whose writes fail with `TimedOut` once one has waited `timeout` without
/// progress.
#[derive(Debug)]
pub(crate) struct Sending<S> {
    inner: S,
    timeout: Duration,
    /// Armed while a write waits; dropped when bytes move.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> Sending<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After a write that waits: the error once it has waited `timeout` (the timer woken
    /// with the write's task, so a client that never reads is still cut).
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of its answer for `send_timeout`",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    /// `polled`, a write's or a flush's outcome, with the stall timed.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(done) => {
                self.stalled = None;
                Poll::Ready(done)
            }
            Poll::Pending => self.poll_stalled(cx).map(Err),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sending<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sending<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A write into a pipe nobody reads fails at `timeout`, not before.
    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_at_the_timeout() {
        let (near, _far) = tokio::io::duplex(16);
        let mut sending = Sending::new(near, Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        let error = sending.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    /// A reader that takes a byte every 4 s, under a 5 s timeout, is never cut: the time
    /// runs between writes that move bytes, not over the whole answer.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_never_cut() {
        let (near, mut far) = tokio::io::duplex(1);
        let mut sending = Sending::new(near, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut byte = [0u8; 1];
            while far.read(&mut byte).await.unwrap() == 1 {
                got.push(byte[0]);
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
            got
        });
        let started = tokio::time::Instant::now();
        sending.write_all(b"0123456789").await.unwrap();
        sending.shutdown().await.unwrap();
        drop(sending);
        assert_eq!(reader.await.unwrap(), b"0123456789");
        assert!(started.elapsed() >= Duration::from_secs(36), "it was slow");
    }
}
