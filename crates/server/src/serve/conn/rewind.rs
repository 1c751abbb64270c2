//! A stream that first yields bytes already read from it: how the lean path (`lean.rs`)
//! hands a connection to hyper with the head it read but does not serve (hyper-util's own
//! `Rewind` is private).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, read from `prefix` first.
#[derive(Debug)]
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    /// How much of `prefix` has been read.
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S> Rewind<S> {
    /// The bytes still to be read before the stream's.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix[self.at..]
    }
}

impl<S: AsyncRead + Unpin> Rewind<S> {
    /// Reads what the stream has next onto the end of the prefix (to look at a
    /// connection's first bytes before choosing who serves it); 0 at its end.
    pub(crate) async fn read_more(&mut self) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        self.prefix.drain(..self.at);
        self.at = 0;
        let had = self.prefix.len();
        self.prefix.resize(had + 1024, 0);
        let read = self.inner.read(&mut self.prefix[had..]).await;
        self.prefix.truncate(had + *read.as_ref().unwrap_or(&0));
        read
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                // Read whole: its memory goes back now, not with the connection.
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_prefix_comes_first_then_the_stream() {
        let mut rewound = Rewind::new(b"GET / ".to_vec(), &b"HTTP/1.1\r\n"[..]);
        let mut small = [0u8; 4];
        rewound.read_exact(&mut small).await.expect("four bytes");
        assert_eq!(&small, b"GET ");
        let mut rest = Vec::new();
        rewound.read_to_end(&mut rest).await.expect("the rest");
        assert_eq!(rest, b"/ HTTP/1.1\r\n");
    }
}
