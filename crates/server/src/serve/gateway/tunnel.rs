//! Upgraded connections through the gateway (WebSocket, and any other HTTP/1.1 `Upgrade`):
//! the request is decided as any other and forwarded with its `Upgrade` and `Connection`
//! fields; when the upstream answers `101 Switching Protocols`, the client gets the
//! upstream's 101 and the two connections are joined, bytes copied both ways until either
//! side closes.
//!
//! The joined connection holds what the request took that lasts: a concurrency rule's
//! permit is given back when the connection closes, not when its 101 is sent. Its place in
//! flight is given back at the 101 (a connection open for hours is not a request in
//! flight; `max_connections_per_client` bounds how many a client holds). It is closed when
//! no byte has crossed either way for `[server] upgraded_idle_timeout`, and at the latest
//! after `upgraded_max_duration`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use std::{io, pin::Pin};

use http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use http::{Request, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Whether `request` asks to switch protocols: HTTP/1.1, an `Upgrade` field, and
/// `upgrade` among its `Connection` options. HTTP/2 has no `Upgrade` (RFC 9113 §8.6).
pub(super) fn asks<B>(request: &Request<B>) -> Option<HeaderValue> {
    if request.version() != Version::HTTP_11 {
        return None;
    }
    let upgrade = request.headers().get(UPGRADE)?;
    connection_upgrade(request.headers()).then(|| upgrade.clone())
}

fn connection_upgrade(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|o| o.trim().eq_ignore_ascii_case("upgrade"))
        })
    })
}

/// Puts the upgrade back on a request whose hop-by-hop fields were removed: `Upgrade` as
/// the client sent it, and `Connection: upgrade`.
pub(super) fn restore(headers: &mut HeaderMap, upgrade: HeaderValue) {
    headers.insert(UPGRADE, upgrade);
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
}

/// Joins the client's upgraded connection to the upstream's once both are handed over,
/// holding `held` until it closes.
pub(super) async fn join<T: Send>(
    client: OnUpgrade,
    upstream: OnUpgrade,
    held: T,
    idle: Duration,
    most: Duration,
) {
    let (client, upstream) = match tokio::join!(client, upstream) {
        (Ok(client), Ok(upstream)) => (client, upstream),
        (Err(error), _) | (_, Err(error)) => {
            tracing::debug!(%error, "an upgraded connection was not handed over");
            return;
        }
    };
    let moved = Arc::new(AtomicU64::new(0));
    let client = Moving {
        inner: TokioIo::new(client),
        moved: Arc::clone(&moved),
    };
    let (mut client_reads, mut client_writes) = tokio::io::split(client);
    let (mut upstream_reads, mut upstream_writes) = tokio::io::split(TokioIo::new(upstream));
    // Each way copied until its end, which is passed on (a half-close). The upstream's end
    // ends the connection: what it had to say is said (a WebSocket's server closes the TCP
    // connection after the closing handshake, RFC 6455 §7.1.1), and a client that keeps its
    // side open after that holds nothing.
    let up = async {
        let copied = tokio::io::copy(&mut client_reads, &mut upstream_writes).await;
        let _ = upstream_writes.shutdown().await;
        copied
    };
    let down = async {
        let copied = tokio::io::copy(&mut upstream_reads, &mut client_writes).await;
        let _ = client_writes.shutdown().await;
        copied
    };
    let idle_out = async {
        // Woken every `idle`: closed when nothing moved since the last look.
        let mut seen = 0;
        loop {
            tokio::time::sleep(idle).await;
            let now = moved.load(Ordering::Relaxed);
            if now == seen {
                return "idle";
            }
            seen = now;
        }
    };
    tokio::pin!(up, down, idle_out);
    let too_long = tokio::time::sleep(most);
    tokio::pin!(too_long);
    let mut up_ended = false;
    let ended = loop {
        tokio::select! {
            copied = &mut up, if !up_ended => {
                up_ended = true;
                if copied.is_err() {
                    break "failed";
                }
            }
            copied = &mut down => break if copied.is_ok() { "closed" } else { "failed" },
            why = &mut idle_out => break why,
            () = &mut too_long => break "too long",
        }
    };
    tracing::debug!(ended, "an upgraded connection ended");
    drop(held);
}

/// The client's side of a joined connection, counting what crosses it either way (every
/// byte crosses the client's side), for the idle bound.
struct Moving<S> {
    inner: S,
    moved: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Moving<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        this.moved.fetch_add(n as u64, Ordering::Relaxed);
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Moving<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &written {
            this.moved.fetch_add(*n as u64, Ordering::Relaxed);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
