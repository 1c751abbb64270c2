//! The gRPC listener's connections, each client held to `[server] max_connections_per_client`
//! as the HTTP listeners hold theirs: one HTTP/2 connection carries many streams, each up to
//! `[envoy] max_message_bytes`, so connections are what bounds a stranger's share.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

use crate::serve::app::App;
use crate::serve::conn::clients::{Clients, Open};

/// The accepted connections of `inner`, less those of a client that has its share open
/// already: those are closed at once.
pub(super) struct Capped {
    pub(super) inner: TcpIncoming,
    pub(super) clients: Arc<Clients>,
    pub(super) app: Arc<App>,
}

impl Stream for Capped {
    type Item = io::Result<Counted>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let stream = match ready!(Pin::new(&mut this.inner).poll_next(cx)) {
                Some(Ok(stream)) => stream,
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => return Poll::Ready(None),
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            // The proxies of the rules in force, as on the HTTP listeners.
            match this
                .clients
                .admit(peer.ip(), this.app.engine.identity().trusted())
            {
                Some(open) => {
                    return Poll::Ready(Some(Ok(Counted {
                        stream,
                        _open: open,
                    })))
                }
                None => this.app.metrics.shed("connections"),
            }
        }
    }
}

/// An accepted connection, counted against its client until it closes.
pub(super) struct Counted {
    stream: TcpStream,
    /// Uncounts the connection when dropped; `None` for a trusted proxy's.
    _open: Option<Open>,
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
