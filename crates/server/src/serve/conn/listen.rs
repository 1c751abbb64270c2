//! Listeners: accept connections, serve HTTP/1.1 or HTTP/2 on each (over TLS when the
//! listener has it), and stop gracefully.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::serve::app::App;

use crate::serve::conn::clients::Clients;
use crate::serve::conn::door::Door;
use crate::serve::conn::graceful::{Shutdown, Stop, Ticket};
use crate::serve::conn::idle;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::tls::{self, Tls, ViaTls};
use crate::serve::conn::wire::Wire;

/// What a client's first bytes are when it speaks HTTP/2 without TLS, by prior knowledge
/// (RFC 9113 §3.3): the start of the connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// The HTTP/2 streams a client may have reset before we have seen them answered, at once
/// (hyper's own default): past it the connection is closed with `ENHANCE_YOUR_CALM`. The
/// rapid-reset attack (CVE-2023-44487) opens and resets streams as fast as it can; each
/// reset stream still counts here until the request it began is dropped.
pub(crate) const H2_MAX_PENDING_RESETS: usize = 20;

/// The HTTP/2 streams a client may make us reset for its errors (a malformed head, a
/// flow-control breach) over a connection's life before it is closed: a client that keeps
/// sending what must be refused is not served for ever (hyper's default).
pub(crate) const H2_MAX_ERROR_RESETS: usize = 1024;

/// An HTTP/2 connection idle this long is pinged, and closed when the ping is not answered
/// within [`H2_PING_TIMEOUT`].
pub(crate) const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// A connection ready for hyper: its stream, the protocol it speaks, and, over TLS, what
/// its requests are told of that.
struct Accepted<S> {
    stream: S,
    protocol: Protocol,
    tls: Option<ViaTls>,
}

/// The protocol a connection speaks, by ALPN or by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// Binds `addr` (named after its `[server]` field in errors), ready for any runtime.
pub(crate) fn bind(addr: SocketAddr, field: &str) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen on {addr} (`[server] {field}`)"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `door` on `listener` until `stop` turns true, then gives open connections `grace`
/// to finish.
pub(crate) async fn serve<D: Door>(
    listener: TcpListener,
    door: Arc<D>,
    app: Arc<App>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
    tls: Option<Arc<Tls>>,
) {
    let graceful = Shutdown::new();
    // As started: these `[server]` bounds take a restart (a reload says so).
    let bounds = app.started().bounds;
    let mut http = http1::Builder::new();
    // A client that never finishes its headers does not hold a connection long
    // (slowloris), and a head past the bound is a 431, not memory.
    // The config refuses a bound under hyper's floor, where this would panic. Each
    // connection's timer (`idle`) gives the wait for a kept-alive connection's next request
    // `idle_timeout` instead.
    http.header_read_timeout(bounds.header_read_timeout)
        .max_buf_size(bounds.max_header_bytes);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    // What an HTTP/2 client may hold of us is set here, not by the client: its streams at
    // once, its head's bytes (CONTINUATION frames past them end the stream with 431 rather
    // than grow without end), and the resets it may cause (rapid reset).
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(bounds.http2_max_streams)
        .max_header_list_size(u32::try_from(bounds.max_header_bytes).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(Some(H2_MAX_PENDING_RESETS))
        .max_local_error_reset_streams(Some(H2_MAX_ERROR_RESETS))
        .keep_alive_interval(Some(bounds.idle_timeout))
        .keep_alive_timeout(H2_PING_TIMEOUT);
    let clients = Arc::new(Clients::new(bounds.max_connections_per_client));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(%error, role = D::NAME, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // The proxies of the rules in force: a reload that trusts a new proxy lifts the
        // cap on its connections at once.
        let Some(open) = clients.admit(peer.ip(), app.engine.identity().trusted()) else {
            // Closed at once: the client has its share of connections open already.
            app.metrics.shed("connections");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (app, door) = (Arc::clone(&app), Arc::clone(&door));
        let mut ticket = graceful.ticket();
        let builders = (http.clone(), h2.clone());
        let tls = tls.clone();
        // The door's own path first (the decision API's `/v1/check`, the gateway's plain
        // `GET` and `HEAD`), anything else handed to hyper with the bytes read so far.
        tokio::spawn(async move {
            let _open = open;
            // Over TLS, the protocol ALPN chose and what the requests are told of it.
            let (wire, known, via) = match tls {
                None => (Wire::Tcp(stream), None, None),
                Some(tls) => {
                    // A client that does not finish its handshake is a client that does not
                    // finish its head: it has as long.
                    let accepted = tokio::time::timeout(
                        bounds.header_read_timeout,
                        tls.acceptor().accept(stream),
                    )
                    .await;
                    let stream = match accepted {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            tracing::debug!(%error, %peer, role = D::NAME, "TLS handshake failed");
                            app.metrics.tls_handshake_failed(D::NAME);
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, role = D::NAME, "TLS handshake timed out");
                            app.metrics.tls_handshake_failed(D::NAME);
                            return;
                        }
                    };
                    let protocol = match stream.get_ref().1.alpn_protocol() {
                        Some(b"h2") => Protocol::Http2,
                        _ => Protocol::Http1,
                    };
                    let via = ViaTls {
                        client_subject: tls::client_subject(stream.get_ref().1),
                    };
                    (Wire::Tls(Box::new(stream)), Some(protocol), Some(via))
                }
            };
            // HTTP/1.1 over TLS on the door's own path too, as in clear text; HTTP/2 and a
            // client with a certificate (whose subject the requests carry) are hyper's.
            let lean = via
                .as_ref()
                .is_none_or(|via| known == Some(Protocol::Http1) && via.client_subject.is_none());
            let mut rest = if lean {
                let (stopping, rx) = ticket.parts();
                let changed = pin!(rx.changed());
                let mut stop = Stop::new(stopping, changed);
                match door.lean(wire, &app, peer, bounds, &mut stop).await {
                    Some(rest) => rest,
                    None => return,
                }
            } else {
                Rewind::new(Vec::new(), wire)
            };
            let protocol = match known {
                Some(protocol) => protocol,
                None => match sniffed(&mut rest, bounds.header_read_timeout).await {
                    Some(protocol) => protocol,
                    None => return,
                },
            };
            let accepted = Accepted {
                stream: rest,
                protocol,
                tls: via,
            };
            served(builders, accepted, app, door, peer, ticket).await;
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            role = D::NAME,
            "shutdown grace ran out with connections still open; closing them"
        );
    }
}

/// The protocol a clear-text connection speaks, by its first bytes: HTTP/2 when they are
/// its preface (prior knowledge), HTTP/1.1 otherwise. What the door's lean path read of it
/// is looked at first; only a connection it handed over unread (or with less than the
/// preface's first line) is read further, for as long as a head may take. `None` when the
/// client sent nothing in that time.
async fn sniffed(rest: &mut Rewind<Wire>, within: Duration) -> Option<Protocol> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let prefix = rest.prefix();
        let n = prefix.len().min(H2_PREFACE.len());
        if prefix[..n] != H2_PREFACE[..n] {
            return Some(Protocol::Http1);
        }
        if n == H2_PREFACE.len() {
            return Some(Protocol::Http2);
        }
        match tokio::time::timeout_at(deadline, rest.read_more()).await {
            // Closed or failed: hyper reads the same end.
            Ok(Ok(0) | Err(_)) => return Some(Protocol::Http1),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

/// A connection served by hyper, in its protocol, to its end (or the shutdown's). Built outside
/// the task's future, whose `Send` the compiler cannot prove for hyper's connection inside
/// it.
fn served<S, D: Door>(
    (mut http, h2): (http1::Builder, http2::Builder<TokioExecutor>),
    Accepted {
        stream,
        protocol,
        tls,
    }: Accepted<S>,
    app: Arc<App>,
    door: Arc<D>,
    peer: SocketAddr,
    ticket: Ticket,
) -> impl Future<Output = ()> + Send + 'static
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let bounds = app.started().bounds;
    let service = service_fn(move |mut request: Request<Incoming>| {
        let (app, door) = (Arc::clone(&app), Arc::clone(&door));
        if let Some(tls) = &tls {
            request.extensions_mut().insert(tls.clone());
        }
        // Boxed: the gateway's answer is a large future, which hyper would otherwise copy
        // into place for each request (HTTP/2 into and out of each stream's task); one
        // allocation costs less than the copies.
        Box::pin(async move {
            let response = door.handle(&app, peer, request).await;
            app.metrics.responded(D::NAME, response.status().as_u16());
            Ok::<_, Infallible>(response)
        })
    });
    // A write that waits `send_timeout` without progress ends the connection (`send.rs`).
    let stream = crate::serve::conn::send::Sending::new(stream, bounds.send_timeout);
    let connection: std::pin::Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>> =
        match protocol {
            Protocol::Http1 => {
                let (stream, timer) =
                    idle::timed(stream, bounds.idle_timeout, bounds.header_read_timeout);
                // With upgrades: the gateway hands a WebSocket's connection on (`tunnel.rs`).
                let connection = http
                    .timer(timer)
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                Box::pin(ticket.watch(connection))
            }
            Protocol::Http2 => {
                Box::pin(ticket.watch(h2.serve_connection(TokioIo::new(stream), service)))
            }
        };
    async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, %peer, "connection ended with an error");
        }
    }
}
