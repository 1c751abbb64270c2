//! The time a body may take, so a slow peer cannot keep a connection or an in-flight slot
//! (issue 12, items 6 and 7). The numbers are `[server]` fields
//! (`ratewarden_policy::Bounds`): the body timeouts and minimum rate here, the head's time
//! and bytes on each connection (`listen.rs`), the upstream's timeouts in `gateway.rs` and
//! `upstream.rs`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::serve::reply::BoxError;

/// A body that came too slowly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TooSlow {
    /// No byte for the idle timeout.
    #[error("the {0} sent nothing for {1:?}")]
    Stalled(&'static str, Duration),
    /// Fewer bytes than the minimum rate allows.
    #[error("the {0} came slower than {1} bytes a second")]
    BelowRate(&'static str, u64),
}

/// A body that fails with [`TooSlow`] when it stalls, or falls below a minimum rate.
///
/// Only the time spent waiting on this body counts: while the other side is slow to take
/// what was read (backpressure from a slow upstream or a slow client), this body is not
/// polled, and is not to blame. One timer, set whenever a wait starts: it fires at the
/// earlier of the idle timeout and the moment the body's average rate over its waits would
/// fall below the minimum.
pub(crate) struct Paced<B> {
    inner: B,
    /// Whose body, for the error: "client" or "upstream".
    whose: &'static str,
    idle: Duration,
    /// Bytes a second, 0 for no minimum.
    min_rate: u64,
    grace: Duration,
    /// Time spent waiting on `inner` in earlier waits.
    waited: Duration,
    /// When the wait in progress started, if one is.
    waiting_since: Option<Instant>,
    bytes: u64,
    /// Made at the first wait: a body that never waits (a GET's empty one, a small one
    /// that came with the head) costs no allocation and no clock read.
    timer: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl<B> Paced<B> {
    pub(crate) fn new(
        inner: B,
        whose: &'static str,
        idle: Duration,
        min_rate: u64,
        grace: Duration,
    ) -> Self {
        Self {
            inner,
            whose,
            idle,
            min_rate,
            grace,
            waited: Duration::ZERO,
            waiting_since: None,
            bytes: 0,
            timer: None,
            done: false,
        }
    }

    /// Starts a wait at `now`, and sets the timer for it.
    fn start_waiting(&mut self, now: Instant) {
        self.waiting_since = Some(now);
        let mut allowed = self.idle;
        if self.min_rate > 0 {
            // bytes / waited >= min_rate holds until waited = bytes / min_rate.
            let budget =
                Duration::from_secs_f64(self.bytes as f64 / self.min_rate as f64).max(self.grace);
            allowed = allowed.min(budget.saturating_sub(self.waited));
        }
        match &mut self.timer {
            Some(timer) => timer.as_mut().reset(now + allowed),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(now + allowed))),
        }
    }

    /// Ends the wait in progress at `now`.
    fn stop_waiting(&mut self, now: Instant) {
        if let Some(since) = self.waiting_since.take() {
            self.waited += now.saturating_duration_since(since);
        }
    }

    /// Which limit the timer firing at `now` broke.
    fn broken(&self, now: Instant) -> TooSlow {
        let this_wait = self
            .waiting_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        if this_wait >= self.idle || self.min_rate == 0 {
            TooSlow::Stalled(self.whose, self.idle)
        } else {
            TooSlow::BelowRate(self.whose, self.min_rate)
        }
    }
}

impl<B> HttpBody for Paced<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.stop_waiting(Instant::now());
                match frame {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            this.bytes += data.len() as u64;
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Some(Err(error)) => Poll::Ready(Some(Err(error.into()))),
                    None => {
                        this.done = true;
                        Poll::Ready(None)
                    }
                }
            }
            Poll::Pending => {
                if this.waiting_since.is_none() {
                    this.start_waiting(Instant::now());
                }
                // start_waiting has made it; were it not there, the idle bound still holds.
                let idle = this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.done = true;
                        Poll::Ready(Some(Err(Box::new(this.broken(Instant::now())))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error`, or an error it wraps, is a body that came too slowly.
pub(crate) fn too_slow<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a TooSlow> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(slow) = error.downcast_ref::<TooSlow>() {
            return Some(slow);
        }
        next = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::channel::Channel;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_fails_after_the_idle_timeout() {
        let (mut tx, body) = Channel::<Bytes, std::convert::Infallible>::new(8);
        let mut paced = Paced::new(body, "client", Duration::from_secs(10), 0, Duration::ZERO);
        tx.send_data(Bytes::from_static(b"a")).await.unwrap();
        let start = Instant::now();
        assert!(paced.frame().await.unwrap().is_ok());
        let error = paced.frame().await.unwrap().unwrap_err();
        assert!(
            matches!(too_slow(&*error), Some(TooSlow::Stalled(..))),
            "{error}"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_fails_when_its_rate_falls_below_the_minimum() {
        let (mut tx, body) = Channel::<Bytes, std::convert::Infallible>::new(8);
        let start = Instant::now();
        // A byte every 5 s never stalls for the idle 10 s, but is far below 1 KiB/s: it
        // is cut when the grace ends.
        let mut paced = Paced::new(
            body,
            "client",
            Duration::from_secs(10),
            1024,
            Duration::from_secs(10),
        );
        let sender = tokio::spawn(async move {
            for _ in 0..10 {
                if tx.send_data(Bytes::from_static(b"a")).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        let error = loop {
            match paced.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(error)) => break error,
                None => panic!("the trickle was let through"),
            }
        };
        assert!(
            matches!(too_slow(&*error), Some(TooSlow::BelowRate(..))),
            "{error}"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        sender.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn time_the_reader_is_slow_to_ask_is_not_held_against_the_body() {
        let (mut tx, body) = Channel::<Bytes, std::convert::Infallible>::new(8);
        let mut paced = Paced::new(
            body,
            "upstream",
            Duration::from_secs(10),
            1024,
            Duration::from_secs(10),
        );
        tx.send_data(Bytes::from(vec![b'a'; 100])).await.unwrap();
        assert!(paced.frame().await.unwrap().is_ok());
        // The reader (a slow client) comes back a minute later; the next chunk is a
        // moment away: neither stalled nor below the rate while it was asked.
        tokio::time::sleep(Duration::from_secs(60)).await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send_data(Bytes::from(vec![b'a'; 100])).await.unwrap();
        });
        assert!(paced.frame().await.unwrap().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_a_steady_rate_comes_through_whole() {
        let (mut tx, body) = Channel::<Bytes, std::convert::Infallible>::new(8);
        let paced = Paced::new(
            body,
            "client",
            Duration::from_secs(10),
            1024,
            Duration::from_secs(10),
        );
        tokio::spawn(async move {
            for _ in 0..30 {
                tx.send_data(Bytes::from(vec![b'a'; 2048])).await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let all = paced.collect().await.unwrap().to_bytes();
        assert_eq!(all.len(), 30 * 2048);
    }
}
