//! Settling an estimate from the upstream's answer (`settle_from`): the real cost read from
//! a response header, a JSON answer, or the last `usage` event of a `text/event-stream`
//! answer as it is relayed, and the reservation settled with it before the answer's end
//! reaches the client.
//!
//! Nothing is held back on the way: every frame goes on as it comes, a JSON answer's bytes
//! are copied aside (up to [`MAX_JSON_ANSWER`]), and of an event stream only its last bytes
//! are (at least [`MAX_EVENT`], at most twice that, in one buffer allocated at its first
//! frame), read once at its end ([`last_usage`]): a stream's usage comes last, and reading
//! every event on its way cost a sixth more than relaying it (`scripts/bench-llm`). Copying
//! a token event of a few hundred bytes costs less than keeping its `Bytes` (a count taken
//! and given back, a place in a list), and leaves the tail in one piece to read. An answer
//! that ends without a readable cost, or a stream cut before it, leaves the estimate
//! standing (never zero), and `ratewarden_settled_total{rule, result}` says which.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::{HeaderMap, CONTENT_TYPE};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use ratewarden_policy::usage::{last_usage, LastUsage, UsagePath, MAX_EVENT};
use ratewarden_policy::{GrantId, Owner, SettleError, SettleFrom, Verdict};

use crate::serve::app::App;
use crate::serve::reply::BoxError;

/// The most of a JSON answer kept to read its cost from: a chat completion's answer is a
/// few kilobytes. A longer one is relayed whole, and settles at its estimate (`malformed`).
pub(crate) const MAX_JSON_ANSWER: usize = 4 * 1024 * 1024;

/// A reservation the gateway settles from the answer: its id, the verdict that made it
/// (the engine settles only for it), and which of its rules read their cost from the
/// answer (indices into `verdict.rules`: names and paths are read there, not copied).
pub(crate) struct Settlement {
    id: GrantId,
    verdict: Arc<Verdict>,
    rules: Vec<usize>,
}

impl Settlement {
    /// The settlement `verdict` asks for: when it holds a reservation, and a rule it
    /// charged reads its cost from the answer.
    pub(crate) fn of(verdict: &Arc<Verdict>) -> Option<Self> {
        let id = verdict.reservation?;
        let rules: Vec<usize> = verdict
            .outcomes
            .iter()
            .map(|o| o.rule)
            .filter(|&r| verdict.rules[r].settle_from.is_some())
            .collect();
        (!rules.is_empty()).then(|| Settlement {
            id,
            verdict: Arc::clone(verdict),
            rules,
        })
    }

    /// Whether a rule reads the answer's body: the upstream is then asked for it
    /// uncompressed (a compressed body cannot be read on its way).
    pub(crate) fn reads_body(&self) -> bool {
        self.froms()
            .any(|from| matches!(from, SettleFrom::Usage(_)))
    }

    /// Where each rule reads its cost, in the order of `rules`.
    fn froms(&self) -> impl Iterator<Item = &SettleFrom> {
        self.rules
            .iter()
            .filter_map(|&r| self.verdict.rules[r].settle_from.as_ref())
    }

    /// The answer's body, relayed as it comes and read for each rule's cost; `headers`
    /// are the answer's head.
    pub(crate) fn watch<B>(self, app: &Arc<App>, headers: &HeaderMap, body: B) -> Settling<B> {
        let events = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
            });
        let readers = self
            .froms()
            .map(|from| match from {
                SettleFrom::Header(name) => Reader::Header(header_cost(headers, name)),
                SettleFrom::Usage(_) if events => Reader::Events,
                SettleFrom::Usage(_) => Reader::Json,
            })
            .collect();
        let json = self.reads_body() && !events;
        let tail = (events && self.reads_body()).then(Tail::default);
        Settling {
            inner: body,
            app: Arc::clone(app),
            settlement: Some(self),
            readers,
            tail,
            json: json.then(Vec::new),
            json_overflow: false,
            settling: None,
            ended: false,
        }
    }
}

/// A header's whole number: `Ok(None)` when absent, `Err` when it is not one.
fn header_cost(headers: &HeaderMap, name: &str) -> Result<Option<u64>, ()> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(());
    }
    let text = value.to_str().map_err(|_| ())?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    text.parse().map(Some).map_err(|_| ())
}

/// How one rule's cost is read from the answer.
enum Reader {
    /// From the head, already read: a number, absent, or not one.
    Header(Result<Option<u64>, ()>),
    /// From the JSON answer's bytes, read at its end (at the rule's usage path).
    Json,
    /// From the event stream's last usage event, read from its tail at its end.
    Events,
}

/// An event stream's last bytes, copied as they pass: at least [`MAX_EVENT`] of them (all,
/// for a shorter stream), at most [`TAIL_BYTES`].
#[derive(Default)]
struct Tail {
    /// The bytes kept, allocated to [`TAIL_BYTES`] at the first frame (never grown).
    bytes: Vec<u8>,
    /// Bytes were let go from the front: the tail is not the whole stream.
    dropped: bool,
}

/// The most of a stream's end a [`Tail`] keeps. Twice [`MAX_EVENT`], so that the front is
/// let go (a copy of [`MAX_EVENT`] bytes within the buffer) once for every [`MAX_EVENT`]
/// bytes or more that pass.
const TAIL_BYTES: usize = 2 * MAX_EVENT;

/// How much of a stream's end is read first for its usage: its last event and `[DONE]`,
/// most often in its last frame or two. The whole tail is read only when this finds none.
const SHORT_TAIL: usize = 4096;

impl Tail {
    /// The next frame's bytes, appended.
    fn push(&mut self, data: &[u8]) {
        if self.bytes.len() + data.len() <= self.bytes.capacity() {
            self.bytes.extend_from_slice(data);
        } else {
            self.push_past_capacity(data);
        }
    }

    /// The first frame, or one that does not fit: the buffer is allocated, or its front
    /// let go so that the last [`MAX_EVENT`] bytes of the stream are kept.
    #[cold]
    #[inline(never)]
    fn push_past_capacity(&mut self, data: &[u8]) {
        if self.bytes.capacity() < TAIL_BYTES {
            self.bytes.reserve_exact(TAIL_BYTES - self.bytes.len());
        }
        if self.bytes.len() + data.len() <= TAIL_BYTES {
            self.bytes.extend_from_slice(data);
            return;
        }
        self.dropped = true;
        if data.len() >= MAX_EVENT {
            self.bytes.clear();
            self.bytes
                .extend_from_slice(&data[data.len() - MAX_EVENT..]);
            return;
        }
        // With `data` (shorter than MAX_EVENT) the bytes kept pass TAIL_BYTES, so they are
        // more than `keep`: their last `keep` move to the front, and `data` follows.
        let keep = MAX_EVENT - data.len();
        let from = self.bytes.len() - keep;
        self.bytes.copy_within(from.., 0);
        self.bytes.truncate(keep);
        self.bytes.extend_from_slice(data);
    }

    /// The last usage at `path`: read from the last [`SHORT_TAIL`] bytes first, then, when
    /// they hold none, from everything kept.
    fn usage(&self, path: &UsagePath) -> LastUsage {
        let kept = &self.bytes[..];
        if kept.len() > SHORT_TAIL {
            let got = last_usage(path, &kept[kept.len() - SHORT_TAIL..], false);
            if matches!(got, LastUsage::Read(_)) {
                return got;
            }
        }
        last_usage(path, kept, !self.dropped)
    }
}

/// What came of one rule's settle, for `ratewarden_settled_total{result}`.
fn read(
    reader: &Reader,
    from: &SettleFrom,
    json: Option<&[u8]>,
    json_overflow: bool,
    tail: Option<&Tail>,
    complete: bool,
) -> Result<u64, &'static str> {
    let path = match from {
        SettleFrom::Usage(path) => Some(path),
        SettleFrom::Header(_) => None,
    };
    match (reader, path) {
        (Reader::Header(Ok(Some(cost))), _) => Ok(*cost),
        (Reader::Header(Ok(None)), _) => Err("absent"),
        (Reader::Header(Err(())), _) => Err("malformed"),
        (_, None) => Err("absent"),
        (Reader::Json, _) if !complete => Err("cut"),
        (Reader::Json, _) if json_overflow => Err("malformed"),
        (Reader::Json, Some(path)) => {
            let body = json.unwrap_or_default();
            match serde_json::from_slice::<serde_json::Value>(body) {
                Err(_) => Err("malformed"),
                Ok(value) => path.read(&value).ok_or(if has_head(&value, path) {
                    "malformed"
                } else {
                    "absent"
                }),
            }
        }
        // A usage read before the stream was cut is the stream's usage: OpenAI-compatible
        // servers send it once, at the end.
        (Reader::Events, Some(path)) => {
            let usage = tail.map_or(LastUsage::None, |t| t.usage(path));
            match usage {
                LastUsage::Read(cost) => Ok(cost),
                _ if !complete => Err("cut"),
                LastUsage::Unreadable => Err("malformed"),
                LastUsage::None => Err("absent"),
            }
        }
    }
}

/// Whether `value` holds the path's first key at all (a usage there, but not readable at
/// the path, is malformed; none is absent).
fn has_head(value: &serde_json::Value, path: &UsagePath) -> bool {
    value
        .as_object()
        .and_then(|o| o.get(path.head()))
        .is_some_and(|v| !v.is_null())
}

/// An answer's body on its way to the client, read for the costs of a [`Settlement`]. The
/// settle runs before the body's end is handed on (so a client that has the whole answer
/// sees its cost charged), and when the body is dropped before its end (a client gone, an
/// upstream cut).
pub(crate) struct Settling<B> {
    inner: B,
    app: Arc<App>,
    /// Taken when the settle starts.
    settlement: Option<Settlement>,
    readers: Vec<Reader>,
    /// An event stream's last bytes, when a rule reads one.
    tail: Option<Tail>,
    /// A JSON answer's bytes so far, when a rule reads one.
    json: Option<Vec<u8>>,
    json_overflow: bool,
    /// The settle in progress, and what to hand on once it is done: the frame the end came
    /// with, or the end itself.
    settling: Option<(SettleFuture, Option<Frame<Bytes>>)>,
    ended: bool,
}

/// The settle on its way. Behind a `Mutex` only to be `Sync`, as a response body must be:
/// it is polled through `&mut`, which takes no lock.
type SettleFuture = std::sync::Mutex<Pin<Box<dyn Future<Output = ()> + Send>>>;

impl<B> Settling<B> {
    fn feed(&mut self, data: &Bytes) {
        if let Some(json) = &mut self.json {
            if json.len() + data.len() > MAX_JSON_ANSWER {
                self.json_overflow = true;
                self.json = None;
            } else {
                json.extend_from_slice(data);
            }
        }
        if let Some(tail) = &mut self.tail {
            tail.push(data);
        }
    }

    /// The settle of what was read: `complete` when the answer reached its end.
    fn settle(&mut self, complete: bool) -> Option<SettleFuture> {
        let settlement = self.settlement.take()?;
        let json = self.json.as_deref();
        let tail = self.tail.as_ref();
        // Each rule by its index in the verdict, which the settle holds: no name copied.
        let mut actuals: Vec<(usize, u64)> = Vec::new();
        let mut results: Vec<(usize, &'static str)> = Vec::new();
        for (&rule, reader) in settlement.rules.iter().zip(&self.readers) {
            let Some(from) = settlement.verdict.rules[rule].settle_from.as_ref() else {
                continue;
            };
            match read(reader, from, json, self.json_overflow, tail, complete) {
                Ok(cost) => actuals.push((rule, cost)),
                Err(why) => results.push((rule, why)),
            }
        }
        let app = Arc::clone(&self.app);
        Some(std::sync::Mutex::new(Box::pin(async move {
            let now = app.clock.now();
            let rules = &settlement.verdict.rules;
            let named: Vec<(&str, u64)> = actuals
                .iter()
                .map(|&(r, c)| (rules[r].name.as_str(), c))
                .collect();
            let owner = Owner::Verdict(&settlement.verdict);
            let settled = if named.is_empty() {
                Ok(())
            } else {
                app.engine
                    .settle_answered(settlement.id, owner, &named, now)
                    .await
            };
            let answered = match settled {
                Ok(()) => "answer",
                // Past its `settle`: the estimate stood.
                Err(SettleError::Unknown) => "late",
                Err(error) => {
                    tracing::warn!(%error, "settling from the answer failed");
                    "late"
                }
            };
            for &(rule, _) in &actuals {
                app.metrics.settled(&rules[rule].name, answered);
            }
            for &(rule, why) in &results {
                app.metrics.settled(&rules[rule].name, why);
            }
        })))
    }
}

impl<B> Settling<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    /// A frame that came: read, and told whether the answer ends with it. Out of line, so
    /// that the polls that hear "not yet" (two of three) run a small function.
    #[inline(never)]
    fn passed(&mut self, frame: &Frame<Bytes>) -> bool {
        if let Some(data) = frame.data_ref() {
            self.feed(data);
        }
        self.inner.is_end_stream()
    }

    /// The answer ended with `polled`, its last frame or its end: starts the settle, and
    /// hands the frame on once it is done.
    #[cold]
    #[inline(never)]
    fn end(
        &mut self,
        polled: Poll<Option<Result<Frame<Bytes>, BoxError>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let last = match polled {
            Poll::Ready(Some(Ok(frame))) => Some(frame),
            _ => None,
        };
        self.ended = true;
        match self.settle(true) {
            Some(future) => {
                self.settling = Some((future, last));
                self.poll_end(cx)
            }
            None => Poll::Ready(last.map(Ok)),
        }
    }

    /// After the end: the settle on its way, then what it held back.
    #[cold]
    #[inline(never)]
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some((future, _)) = &mut self.settling {
            let future = future.get_mut().unwrap_or_else(PoisonError::into_inner);
            ready!(future.as_mut().poll(cx));
            let (_, held) = self.settling.take().expect("settling");
            return Poll::Ready(held.map(Ok));
        }
        Poll::Ready(None)
    }
}

impl<B> Drop for Settling<B> {
    fn drop(&mut self) {
        // Dropped before its end: what was read settles, the rest stays at its estimate.
        let pending = self.settling.take().map(|(future, _)| future);
        if let Some(future) = pending.or_else(|| self.settle(false)) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(future.into_inner().unwrap_or_else(PoisonError::into_inner));
            }
        }
    }
}

impl<B> HttpBody for Settling<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // The hot path, polled three times for every frame of a stream, twice to hear "not
        // yet": the inner body's answer is handed on as it is. A frame is read out of line,
        // and the end (a settle to start or to wait for) too, so that this stays small.
        // `ended` is set before a settle starts: the one flag stands for both.
        if this.ended {
            return this.poll_end(cx);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Err(_))) => {}
            // The last frame settles before it goes.
            Poll::Ready(Some(Ok(frame))) => {
                if this.passed(frame) {
                    return this.end(polled, cx);
                }
            }
            Poll::Ready(None) => return this.end(polled, cx),
        }
        // Cut (an error): what was read settles as the body drops.
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.settling.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &[u8] =
        b"data: {\"usage\":null}\n\ndata: {\"usage\":{\"total_tokens\":42}}\n\ndata: [DONE]\n\n";

    /// A stream of `events` token events (with `"usage":null`, 61 bytes each), then the
    /// usage event and `[DONE]`.
    fn stream(events: usize) -> Vec<u8> {
        let mut all = Vec::new();
        for _ in 0..events {
            all.extend_from_slice(
                b"data: {\"choices\":[{\"delta\":\"tok\"}],\"usage\":null,\"pad\":\"..\"}\n\n",
            );
        }
        all.extend_from_slice(&STREAM[22..]);
        all
    }

    fn tail_of(stream: &[u8], frame: usize) -> Tail {
        let mut tail = Tail::default();
        for piece in stream.chunks(frame) {
            tail.push(piece);
        }
        tail
    }

    #[test]
    fn a_tail_keeps_the_streams_last_bytes_at_least_an_event_and_at_most_twice_that() {
        let path: UsagePath = "usage.total_tokens".parse().unwrap();
        for (events, frame) in [
            (0, 7),
            (10, 1),
            (500, 64),
            (3000, 100),
            (5000, 7),
            (3000, 200_000),
        ] {
            let all = stream(events);
            let tail = tail_of(&all, frame);
            let kept = tail.bytes.len();
            assert!(
                all.ends_with(&tail.bytes),
                "{events} events, frames of {frame}"
            );
            assert!(kept <= TAIL_BYTES, "{kept} kept of {}", all.len());
            assert!(
                kept >= MAX_EVENT.min(all.len()),
                "{kept} kept of {}",
                all.len()
            );
            assert_eq!(tail.dropped, kept < all.len());
            assert_eq!(tail.usage(&path), LastUsage::Read(42), "{events} events");
        }
    }

    #[test]
    fn a_stream_without_a_usage_reads_none_and_a_cut_usage_is_not_read() {
        let path: UsagePath = "usage.total_tokens".parse().unwrap();
        let all = stream(3000);
        let no_usage = &all[..all.len() - STREAM.len() + 22];
        assert_eq!(tail_of(no_usage, 100).usage(&path), LastUsage::None);
        // Cut in the usage event: its start is kept, its end never came.
        let cut = &all[..all.len() - 30];
        assert_eq!(tail_of(cut, 100).usage(&path), LastUsage::Unreadable);
    }
}
