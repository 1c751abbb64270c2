//! The gRPC listener's connections, each client held to `[server] max_connections_per_client`
//! as the HTTP listeners hold theirs: one HTTP/2 connection carries many streams, each up to
//! `[envoy] max_message_bytes`, so connections are what bounds a stranger's share. With
//! `[tls.grpc]`, each connection's handshake runs as a task of its own ([`handshakes`]), so
//! a client slow to finish one holds up no one else's.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

use crate::serve::app::App;
use crate::serve::conn::clients::{Clients, Open};
use crate::serve::conn::tls::Tls;
use crate::serve::conn::Wire;

/// Connections whose TLS handshake is done, in the order they finish: `capped`'s
/// connections, each shaken hands with in a task of its own (for as long as
/// `header_read_timeout`, as on the HTTP listeners).
pub(super) fn handshakes(capped: Capped, tls: Arc<Tls>) -> Handshaken {
    let (tx, rx) = mpsc::channel(64);
    let app = Arc::clone(&capped.app);
    tokio::spawn(async move {
        let mut capped = capped;
        let timeout = app.started().bounds.header_read_timeout;
        while let Some(accepted) = capped.next().await {
            let Ok(counted) = accepted else { continue };
            let Wire::Tcp(stream) = counted.stream else {
                continue;
            };
            let (tx, app, tls) = (tx.clone(), Arc::clone(&app), Arc::clone(&tls));
            let open = counted._open;
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, tls.acceptor().accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx
                            .send(Counted {
                                stream: Wire::Tls(Box::new(stream)),
                                _open: open,
                            })
                            .await;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "TLS handshake failed on the gRPC listener");
                        app.metrics.tls_handshake_failed("grpc");
                    }
                    Err(_) => app.metrics.tls_handshake_failed("grpc"),
                }
            });
        }
    });
    Handshaken { rx }
}

/// The connections [`handshakes`] finished.
pub(super) struct Handshaken {
    rx: mpsc::Receiver<Counted>,
}

impl Stream for Handshaken {
    type Item = io::Result<Counted>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

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
                        stream: Wire::Tcp(stream),
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
    stream: Wire,
    /// Uncounts the connection when dropped; `None` for a trusted proxy's.
    _open: Option<Open>,
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        match &self.stream {
            Wire::Tcp(stream) => stream.connect_info(),
            Wire::Tls(stream) => stream.get_ref().0.connect_info(),
        }
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
