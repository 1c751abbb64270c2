//! A client's connection as every listener serves it (the HTTP ones and gRPC's): a TCP
//! stream, or the TLS stream over one. One type, not a type parameter: the lean paths and
//! hyper's connections are built once for both, at the cost of a branch on each read and
//! write.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A client's connection.
pub(crate) enum Wire {
    Tcp(TcpStream),
    /// Boxed: a TLS session's state is some kilobytes, a TCP stream a few words.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Wire {
    /// Whether the client came over TLS: what the gateway tells the upstream.
    pub(crate) fn tls(&self) -> bool {
        matches!(self, Wire::Tls(_))
    }
}

impl AsyncRead for Wire {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Wire::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Wire::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Wire::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Wire::Tcp(s) => s.is_write_vectored(),
            Wire::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_flush(cx),
            Wire::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Wire::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
