//! Graceful shutdown of a listener's connections, as hyper-util's `GracefulShutdown` does it,
//! without its cost on every poll of every connection.
//!
//! hyper-util polls a `watch` channel's `changed()` before each poll of the connection,
//! taking the channel's waiter lock each time: 950 instructions of the decision API's
//! request (2026-12-03), more than the idle timer. Here a connection polls the channel only
//! to register its waker (again only when its task's waker changes) and otherwise reads one
//! flag; the shutdown sets the flag before it wakes the connections, so none misses it.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Waker;

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

    /// `connection`, served to its end, shut down gracefully (its request in flight
    /// finished, then closed) once [`Shutdown::shutdown`] is called.
    pub(crate) fn watch<C>(
        &self,
        connection: C,
    ) -> impl Future<Output = Result<(), C::Error>> + Send + 'static
    where
        C: GracefulConnection + Send + 'static,
    {
        let stopping = Arc::clone(&self.stopping);
        let rx = self.tx.subscribe();
        watched(connection, stopping, rx)
    }

    /// Signals every connection to finish, and waits until all have.
    pub(crate) async fn shutdown(self) {
        // The flag first: a connection woken by the send reads it.
        self.stopping.store(true, Ordering::Release);
        let _ = self.tx.send(());
        self.tx.closed().await;
    }
}

async fn watched<C: GracefulConnection>(
    connection: C,
    stopping: Arc<AtomicBool>,
    mut rx: watch::Receiver<()>,
) -> Result<(), C::Error> {
    let mut connection = pin!(connection);
    // Held to the end: the shutdown counts the connection open until then.
    let mut changed = pin!(rx.changed());
    // The waker the channel holds, and whether the channel can still wake (its sender is
    // gone when the listener is dropped without a shutdown).
    let mut registered: Option<Waker> = None;
    let mut listening = true;
    let mut shut = false;
    poll_fn(|cx| {
        if !shut {
            if listening && !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                listening = changed.as_mut().poll(cx).is_pending();
                registered = Some(cx.waker().clone());
            }
            // After registering: a shutdown that came before is seen here, one after wakes.
            if stopping.load(Ordering::Acquire) {
                shut = true;
                connection.as_mut().graceful_shutdown();
            }
        }
        connection.as_mut().poll(cx)
    })
    .await
}
