//! Graceful shutdown of a listener's connections, as hyper-util's `GracefulShutdown` does it,
//! without its cost on every poll of every connection.
//!
//! hyper-util polls a `watch` channel's `changed()` before each poll of the connection,
//! taking the channel's waiter lock each time. Here a connection polls the channel only
//! to register its waker (again only when its task's waker changes) and otherwise reads one
//! flag; the shutdown sets the flag before it wakes the connections, so none misses it.
//!
//! Every connection takes a [`Ticket`] at accept. hyper's are watched with it
//! ([`Ticket::watch`]); one of the decision API's lean path (`lean.rs`) reads the same flag
//! between requests, registers with the channel ([`Stop`]) only when it waits for one, and
//! hands the ticket on with the connection if hyper takes it over.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};

use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::watch;

/// The shutdown signal of a listener's connections, and the count of those still open.
pub(crate) struct Shutdown {
    stopping: Arc<AtomicBool>,
    /// Each watched connection holds a receiver: the shutdown waits for all to drop.
    tx: watch::Sender<()>,
}

impl Shutdown {
    pub(crate) fn new() -> Self {
        Self {
            stopping: Arc::new(AtomicBool::new(false)),
            tx: watch::Sender::new(()),
        }
    }

    /// A connection's place in the shutdown, taken at accept: the shutdown waits for it to
    /// be dropped.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            stopping: Arc::clone(&self.stopping),
            rx: self.tx.subscribe(),
        }
    }

    /// Signals every connection to finish, and waits until all have.
    pub(crate) async fn shutdown(self) {
        // The flag first: a connection woken by the send reads it.
        self.stopping.store(true, Ordering::Release);
        let _ = self.tx.send(());
        self.tx.closed().await;
    }
}

/// A connection's place in its listener's shutdown (see [`Shutdown::ticket`]).
pub(crate) struct Ticket {
    stopping: Arc<AtomicBool>,
    rx: watch::Receiver<()>,
}

impl Ticket {
    /// `connection` (hyper's), served to its end, shut down gracefully (its request in
    /// flight finished, then closed) once [`Shutdown::shutdown`] is called.
    pub(crate) fn watch<C>(
        self,
        connection: C,
    ) -> impl Future<Output = Result<(), C::Error>> + Send + 'static
    where
        C: Graceful + Send + 'static,
    {
        watched(connection, self.stopping, self.rx)
    }

    /// The flag and the channel, for a [`Stop`] pinned where the connection is served.
    pub(crate) fn parts(&mut self) -> (&AtomicBool, &mut watch::Receiver<()>) {
        (&self.stopping, &mut self.rx)
    }
}

/// What [`Stop`] polls: the channel's `changed()`, pinned by its connection.
pub(crate) type Changed<'a> =
    Pin<&'a mut (dyn Future<Output = Result<(), watch::error::RecvError>> + Send + 'a)>;

/// The shutdown's signal as one connection polls it: a flag read, and the channel polled
/// only to register a waker the channel does not hold yet.
pub(crate) struct Stop<'a> {
    stopping: &'a AtomicBool,
    changed: Changed<'a>,
    /// The waker the channel holds.
    registered: Option<Waker>,
    /// Whether the channel can still wake (its sender is gone when the listener is dropped
    /// without a shutdown).
    listening: bool,
}

impl<'a> Stop<'a> {
    pub(crate) fn new(stopping: &'a AtomicBool, changed: Changed<'a>) -> Self {
        Self {
            stopping,
            changed,
            registered: None,
            listening: true,
        }
    }

    /// Whether the shutdown has begun.
    pub(crate) fn now(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether the shutdown has begun; if not, `cx` is woken when it does.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.listening
            && !self
                .registered
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.listening = self.changed.as_mut().poll(cx).is_pending();
            self.registered = Some(cx.waker().clone());
        }
        // After registering: a shutdown that came before is seen here, one after wakes.
        self.now()
    }
}

/// A connection that can be asked to finish what it serves and close: hyper-util's
/// [`GracefulConnection`] connections, and an HTTP/1.1 connection that may be upgraded
/// (which hyper-util's trait leaves out).
pub(crate) trait Graceful: Future<Output = Result<(), Self::Error>> {
    type Error: std::error::Error + Send + Sync + 'static;

    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, B, S> Graceful for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: Read + Write + Unpin + Send + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Error = hyper::Error;

    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, B, S, E> Graceful for http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: Read + Write + Unpin + 'static,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    type Error = hyper::Error;

    fn graceful_shutdown(self: Pin<&mut Self>) {
        GracefulConnection::graceful_shutdown(self);
    }
}

async fn watched<C: Graceful>(
    connection: C,
    stopping: Arc<AtomicBool>,
    mut rx: watch::Receiver<()>,
) -> Result<(), C::Error> {
    let mut connection = pin!(connection);
    // Held to the end: the shutdown counts the connection open until then.
    let changed = pin!(rx.changed());
    let mut stop = Stop::new(&stopping, changed);
    let mut shut = false;
    poll_fn(|cx| {
        if !shut && stop.poll(cx) {
            shut = true;
            connection.as_mut().graceful_shutdown();
        }
        connection.as_mut().poll(cx)
    })
    .await
}
