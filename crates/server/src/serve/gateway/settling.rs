//! Settling an estimate from the upstream's answer (`settle_from`): the real cost read from
//! a response header, a JSON answer, or the last `usage` event of a `text/event-stream`
//! answer as it is relayed, and the reservation settled with it before the answer's end
//! reaches the client.
//!
//! Nothing is held back on the way: every frame goes on as it comes, a JSON answer's bytes
//! are copied aside (up to [`MAX_JSON_ANSWER`]), and of an event stream only its last
//! frames are kept (at least [`MAX_EVENT`] bytes, by reference: no copy), read once at its
//! end ([`last_usage`]): a stream's usage comes last, and reading every event on its way
//! cost a sixth more than relaying it (`scripts/bench-llm`). An answer that ends without a
//! readable cost, or a stream cut before it, leaves the estimate standing (never zero),
//! and `ratewarden_settled_total{rule, result}` says which.

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

/// An event stream's last frames, kept by reference: at least [`MAX_EVENT`] bytes of them
/// (or all, for a shorter stream).
#[derive(Default)]
struct Tail {
    /// The frames; those before `start` are let go (dropped in batches, not one by one).
    frames: Vec<Bytes>,
    start: usize,
    /// The bytes `frames[start..]` hold.
    held: usize,
    /// Frames were let go from the front: the tail is not the whole stream.
    dropped: bool,
}

/// How much of a stream's end is read first for its usage: its last event and `[DONE]`,
/// most often in its last frame or two. The whole tail is read only when this finds none.
const SHORT_TAIL: usize = 4096;

impl Tail {
    fn push(&mut self, data: &Bytes) {
        self.frames.push(data.clone());
        self.held += data.len();
        while self.held - self.frames[self.start].len() >= MAX_EVENT {
            self.held -= self.frames[self.start].len();
            self.start += 1;
            self.dropped = true;
        }
        // Let go of the frames before `start` once they are as many as those kept.
        if self.start > 64 && self.start * 2 > self.frames.len() {
            self.frames.drain(..self.start);
            self.start = 0;
        }
    }

    /// The last usage at `path`: read from the last [`SHORT_TAIL`] bytes first, then, when
    /// they hold none, from everything kept.
    fn usage(&self, path: &UsagePath) -> LastUsage {
        let kept = &self.frames[self.start..];
        let mut from = kept.len();
        let mut bytes = 0;
        while from > 0 && bytes < SHORT_TAIL {
            from -= 1;
            bytes += kept[from].len();
        }
        let whole = from == 0 && !self.dropped;
        let got = last_usage(path, &joined(&kept[from..]), whole);
        if whole || matches!(got, LastUsage::Read(_)) {
            return got;
        }
        last_usage(path, &joined(kept), !self.dropped)
    }
}

/// `frames` in one piece: borrowed when there is one.
fn joined(frames: &[Bytes]) -> std::borrow::Cow<'_, [u8]> {
    match frames {
        [one] => std::borrow::Cow::Borrowed(&one[..]),
        _ => {
            let mut all = Vec::with_capacity(frames.iter().map(Bytes::len).sum());
            for frame in frames {
                all.extend_from_slice(frame);
            }
            std::borrow::Cow::Owned(all)
        }
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
    /// An event stream's last frames, when a rule reads one.
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
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// The answer ended, with `last` its last frame (or none): starts the settle, and hands
    /// `last` on once it is done.
    #[cold]
    #[inline(never)]
    fn end(
        &mut self,
        last: Option<Frame<Bytes>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
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
        // The hot path, polled a few times for every frame of a stream: a frame passing
        // through. The end (a settle to start or to wait for) is out of line, so that this
        // stays a small function.
        if this.settling.is_some() || this.ended {
            return this.poll_end(cx);
        }
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.feed(data);
                }
                if !this.inner.is_end_stream() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                // The last frame: settled before it goes.
                this.end(Some(frame), cx)
            }
            // Cut: what was read settles as the body drops.
            Some(Err(error)) => Poll::Ready(Some(Err(error.into()))),
            None => this.end(None, cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.settling.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
