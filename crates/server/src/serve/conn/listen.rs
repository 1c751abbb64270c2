//! Listeners: accept connections, serve HTTP/1.1 on each, and stop gracefully.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1::Builder;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::serve::app::App;

use crate::serve::conn::clients::Clients;
use crate::serve::conn::door::Door;
use crate::serve::conn::graceful::{Shutdown, Stop, Ticket};
use crate::serve::conn::idle;

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
) {
    let graceful = Shutdown::new();
    // As started: these `[server]` bounds take a restart (a reload says so).
    let bounds = app.started().bounds;
    let mut http = hyper::server::conn::http1::Builder::new();
    // A client that never finishes its headers does not hold a connection long
    // (slowloris), and a head past the bound is a 431, not memory.
    // The config refuses a bound under hyper's floor, where this would panic. Each
    // connection's timer (`idle`) gives the wait for a kept-alive connection's next request
    // `idle_timeout` instead.
    http.header_read_timeout(bounds.header_read_timeout)
        .max_buf_size(bounds.max_header_bytes);
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
        let http = http.clone();
        // The door's own path first (the decision API's `/v1/check`, the gateway's plain
        // `GET` and `HEAD`), anything else handed to hyper with the bytes read so far.
        tokio::spawn(async move {
            let _open = open;
            let rest = {
                let (stopping, rx) = ticket.parts();
                let changed = pin!(rx.changed());
                let mut stop = Stop::new(stopping, changed);
                door.lean(stream, &app, peer, bounds, &mut stop).await
            };
            if let Some(rest) = rest {
                served(http, rest, app, door, peer, ticket).await;
            }
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

/// `stream` served by hyper to its end (or the shutdown's). Built outside the task's
/// future, whose `Send` the compiler cannot prove for hyper's connection inside it.
fn served<S, D: Door>(
    mut http: Builder,
    stream: S,
    app: Arc<App>,
    door: Arc<D>,
    peer: SocketAddr,
    ticket: Ticket,
) -> impl Future<Output = ()> + Send + 'static
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let bounds = app.started().bounds;
    let service = service_fn(move |request: Request<Incoming>| {
        let (app, door) = (Arc::clone(&app), Arc::clone(&door));
        async move {
            let response = door.handle(&app, peer, request).await;
            app.metrics.responded(D::NAME, response.status().as_u16());
            Ok::<_, Infallible>(response)
        }
    });
    // A write that waits `send_timeout` without progress ends the connection (`send.rs`).
    let stream = crate::serve::conn::send::Sending::new(stream, bounds.send_timeout);
    let (stream, timer) = idle::timed(stream, bounds.idle_timeout, bounds.header_read_timeout);
    let connection = http
        .timer(timer)
        .serve_connection(TokioIo::new(stream), service);
    let connection = ticket.watch(connection);
    async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, %peer, "connection ended with an error");
        }
    }
}
