//! The client's request body on its way to the upstream: when the gateway is waiting on
//! the upstream rather than on the client, and whether the client broke its own body.
//!
//! The upstream's response timeout runs only while the gateway waits on the upstream:
//! from the body's end, and while the upstream does not take the body it was handed. The
//! time spent waiting on the client is the client's, bounded by `Paced` (`limits.rs`). A
//! body the client broke (a malformed chunk, too slow, cut short) is the client's fault:
//! a 400 or a 408, and no signal about the upstream.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::serve::conn::pacing;
use crate::serve::reply::BoxError;

/// How a client broke its own request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Stalled, or slower than the minimum rate: a 408.
    Slow(String),
    /// Malformed (a bad chunk), or cut short by the client: a 400.
    Broken(String),
}

/// What the body and the request waiting for the answer share.
#[derive(Debug)]
struct State {
    /// The last time the body moved: a frame handed on, its end, or its start.
    moved: Instant,
    /// The body is waiting on the client.
    waiting_on_client: bool,
    /// The body has been handed on whole.
    done: bool,
    fault: Option<Fault>,
}

/// The progress of one request body, read by the request that forwards it.
#[derive(Debug, Clone)]
pub(crate) struct Progress(Arc<Mutex<State>>);

impl Progress {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the upstream will have kept the gateway waiting for `timeout`, as things stand:
    /// while the body waits on the client, no sooner than `timeout` from now.
    pub(crate) fn deadline(&self, timeout: Duration) -> Instant {
        let state = self.state();
        if state.waiting_on_client {
            Instant::now() + timeout
        } else {
            state.moved + timeout
        }
    }

    /// Whether the upstream has kept the gateway waiting for `timeout`: the body whole
    /// (or not taken by the upstream) and no answer since.
    pub(crate) fn upstream_late(&self, timeout: Duration) -> bool {
        let state = self.state();
        !state.waiting_on_client && Instant::now() >= state.moved + timeout
    }

    /// How the client broke its body, if it did.
    pub(crate) fn fault(&self) -> Option<Fault> {
        self.state().fault.clone()
    }
}

/// A client's body that reports its progress to a [`Progress`].
pub(crate) struct Watched<B> {
    inner: B,
    progress: Progress,
}

impl<B: HttpBody> Watched<B> {
    /// Watches `inner`, and the progress to read while it is forwarded.
    pub(crate) fn new(inner: B) -> (Self, Progress) {
        let progress = Progress(Arc::new(Mutex::new(State {
            moved: Instant::now(),
            waiting_on_client: false,
            done: inner.is_end_stream(),
            fault: None,
        })));
        let watched = Self {
            inner,
            progress: progress.clone(),
        };
        (watched, progress)
    }
}

impl<B> HttpBody for Watched<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let mut state = this.progress.state();
        match &polled {
            Poll::Pending => state.waiting_on_client = true,
            Poll::Ready(ready) => {
                state.waiting_on_client = false;
                state.moved = Instant::now();
                match ready {
                    None => state.done = true,
                    Some(Err(error)) => state.fault = Some(fault(&**error)),
                    Some(Ok(_)) => {}
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The fault a client's body failed with: too slow, or else broken, with every cause's
/// words (hyper's outer error says only that a body could not be read).
pub(crate) fn fault(error: &(dyn std::error::Error + 'static)) -> Fault {
    if let Some(slow) = pacing::too_slow(error) {
        return Fault::Slow(slow.to_string());
    }
    if let Some(late) = error.downcast_ref::<LateOverride>() {
        return Fault::Broken(late.to_string());
    }
    let mut words = String::from("the request body could not be read");
    let mut next = Some(error);
    while let Some(e) = next {
        let said = e.to_string();
        if !said.is_empty() && !words.ends_with(&said) {
            words.push_str(": ");
            words.push_str(&said);
        }
        next = e.source();
    }
    Fault::Broken(words)
}

/// A body cut because, past what was read before deciding, it names another method than
/// the one it was decided as (`overrides.rs` scans it as it streams).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LateOverride(pub(crate) String);

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::channel::Channel;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn the_upstream_is_not_late_while_the_body_waits_on_the_client() {
        let (mut tx, body) = Channel::<Bytes, BoxError>::new(1);
        let (mut watched, progress) = Watched::new(body);
        let timeout = Duration::from_secs(2);
        tx.send_data(Bytes::from_static(b"a")).await.unwrap();
        assert!(watched.frame().await.unwrap().is_ok());
        let waiting = tokio::spawn(async move {
            let next = watched.frame().await;
            (watched, next)
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!progress.upstream_late(timeout), "the client's time");
        tx.send_data(Bytes::from_static(b"b")).await.unwrap();
        let (watched, _) = waiting.await.unwrap();
        drop(tx);
        let mut watched = watched;
        assert!(watched.frame().await.is_none());
        assert!(!progress.upstream_late(timeout));
        tokio::time::sleep(timeout).await;
        assert!(
            progress.upstream_late(timeout),
            "the body is whole: the upstream's time"
        );
        assert_eq!(progress.fault(), None);
    }

    #[tokio::test]
    async fn a_body_error_is_the_client_s_fault_with_its_causes() {
        let (tx, body) = Channel::<Bytes, BoxError>::new(1);
        let (mut watched, progress) = Watched::new(body);
        tx.abort(Box::new(std::io::Error::other("invalid chunk size")));
        assert!(watched.frame().await.unwrap().is_err());
        assert_eq!(
            progress.fault(),
            Some(Fault::Broken(
                "the request body could not be read: invalid chunk size".into()
            ))
        );
    }
}
