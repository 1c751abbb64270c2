//! One exchange with the upstream: the forwarded head sent, the answer's head read and
//! written back as hyper's gateway writes the response it makes of it (hop-by-hop lines
//! dropped, the RateLimit fields added), then its body relayed ([`super::body`]); while the
//! upstream answers, the client is watched (gone: the exchange is dropped, as hyper drops
//! the request's future).

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;
use ratewarden_core::adaptive::Completion;
use ratewarden_core::DisplayDuration;
use ratewarden_policy::PermitGuard;
use tokio::time::Instant;

use super::{Allowed, ROLE};
use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::lean::Conn;
use crate::serve::gateway::upstream::pool::{Answered, Failed};
use crate::serve::gateway::upstream::Upstream;
use crate::serve::h1::answer::date;
use crate::serve::h1::body::{encode_as, framing, Decoder, Encode, Encoder, Framing};
use crate::serve::h1::head::{
    has_token, is_named, status_line, verbatim, write_in_order, write_length, write_line, Groups,
    Line, HOP_BY_HOP,
};
use crate::serve::h1::response;
use crate::serve::reply::Problem;
use crate::serve::shed::Slot;

/// How a relayed exchange left the client's connection.
pub(super) enum Relayed {
    /// Ready for its next request.
    Kept,
    /// To be closed once written (asked for, or the shutdown began).
    Close,
    /// Broken mid-answer, or the client went away: dropped, as hyper drops a connection
    /// whose body failed, and a request whose client is gone.
    Abort,
}

/// The connection's buffers for the upstream's answer: as read, and a chunked body's data.
#[derive(Default)]
pub(super) struct Buffers {
    pub(super) answer: Vec<u8>,
    pub(super) decoded: Vec<u8>,
}

/// An exchange's parts: the client's connection, its upstream, and the buffers kept for
/// the connection.
pub(super) struct Relay<'r> {
    pub(super) app: &'r Arc<App>,
    pub(super) upstream: &'r Upstream,
    pub(super) conn: &'r mut Conn,
    pub(super) bufs: &'r mut Buffers,
}

/// What the exchange's end tells: the rule's permit (taught how the upstream answered),
/// the round trip's time, and whether the client's connection closes after the answer.
struct Ending {
    /// The place in flight, let go before the permit (fields drop in order).
    _slot: Slot,
    permit: Option<PermitGuard>,
    rtt_ns: Option<u64>,
    close: bool,
}

impl Ending {
    /// The upstream answered (`dropped`: it failed the request).
    fn complete(&mut self, dropped: bool) {
        if let Some(permit) = &mut self.permit {
            permit.completion = Some(Completion {
                rtt_ns: self.rtt_ns,
                dropped,
            });
        }
    }

    /// The client's connection once this answer is written.
    fn relayed(&self) -> Relayed {
        if self.close {
            Relayed::Close
        } else {
            Relayed::Kept
        }
    }
}

/// Why an answer's head was not relayed.
enum Fault {
    /// Not an answer hyper's client takes: answered 502.
    Broken,
    /// One hyper's server cannot send: the connection is dropped.
    Abort,
}

/// An answer whose head is written: how its body comes and goes.
pub(super) struct Sending {
    /// The head's length in the answer's buffer: its body starts there.
    pub(super) head: usize,
    pub(super) decoder: Decoder,
    pub(super) encoder: Encoder,
    /// Whether the upstream's connection may carry another request after this body.
    reusable: bool,
}

impl Relay<'_> {
    /// Forwards the head in `forwarded` and relays the answer into the client's write
    /// buffer.
    pub(super) async fn run(
        mut self,
        forwarded: &[u8],
        allowed: Allowed,
        stop: &mut Stop<'_>,
    ) -> Relayed {
        let Allowed {
            head_only,
            close,
            fields,
            held: (permit, slot),
            bounds,
        } = allowed;
        // The round trip teaches a rule that holds a permit (a concurrency or adaptive
        // rule) and nothing else: without one the clock is not read for it.
        let sent = permit.is_some().then(|| self.app.clock.now());
        // One reading of the time for the exchange: its deadline, and the pool's idle ages.
        let now = Instant::now();
        let exchange = self.upstream.lean.exchange(
            forwarded,
            &mut self.bufs.answer,
            bounds.upstream_connect_timeout,
            bounds.upstream_pool_idle,
            now,
        );
        let response_timeout = bounds.upstream_response_timeout;
        let exchanged = race(self.conn, || now + response_timeout, exchange).await;
        let mut ending = Ending {
            _slot: slot,
            permit,
            rtt_ns: sent.map(|sent| self.app.clock.now().saturating_sub(sent)),
            // A shutdown begun while the upstream answered: this answer says the
            // connection closes, as hyper's does once keep-alive is off.
            close: close || stop.now(),
        };
        let authority = &self.upstream.authority;
        let Answered { mut stream, filled } = match exchanged {
            Raced::Done(Ok(answered)) => answered,
            // The client went away first: its exchange is dropped with it, as hyper drops
            // the request's future, and the rules learn nothing from it.
            Raced::Gone => return Relayed::Abort,
            Raced::TimedOut => {
                tracing::warn!(upstream = %authority, "the upstream did not answer in time");
                let detail = format!(
                    "the upstream did not answer within {}",
                    DisplayDuration(bounds.upstream_response_timeout)
                );
                let problem = Problem::new(StatusCode::GATEWAY_TIMEOUT, detail);
                return self.failed(&mut ending, problem);
            }
            Raced::Done(Err(Failed::ConnectTimeout)) => {
                tracing::warn!(upstream = %authority, "the upstream did not take the connection in time");
                let problem = Problem::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the upstream did not take the connection in time",
                );
                return self.failed(&mut ending, problem);
            }
            Raced::Done(Err(Failed::Broken(error))) => {
                tracing::warn!(%error, upstream = %authority, "upstream request failed");
                return self.broken(&mut ending);
            }
        };
        let sending = match self.write_head(filled, &fields, head_only, &mut ending) {
            Ok(sending) => sending,
            Err(Fault::Broken) => return self.broken(&mut ending),
            Err(Fault::Abort) => {
                let _ = self.conn.flush().await;
                return Relayed::Abort;
            }
        };
        let reusable = sending.reusable;
        let idle = bounds.upstream_idle_timeout;
        match self.body(&mut stream, sending, filled, idle).await {
            Some(ended) => {
                if ended && reusable {
                    self.upstream.lean.put(stream, now);
                }
                ending.relayed()
            }
            None => Relayed::Abort,
        }
    }

    /// Answers `problem` in the upstream's place: a request the upstream dropped.
    fn failed(&mut self, ending: &mut Ending, problem: Problem) -> Relayed {
        ending.complete(true);
        self.conn
            .answer(self.app, ROLE, &problem.plain(), ending.close);
        ending.relayed()
    }

    /// Answers 502: no well-formed answer.
    fn broken(&mut self, ending: &mut Ending) -> Relayed {
        let problem = Problem::new(
            StatusCode::BAD_GATEWAY,
            "the upstream (`[server] upstream`, named in the log) could not be reached or failed \
             to answer",
        );
        self.failed(ending, problem)
    }

    /// Parses the answer's head in `bufs.answer[..filled]` and writes it into the client's
    /// write buffer as hyper writes the response `proxy::handle` makes of it, with the
    /// RateLimit `fields`: in our version, not the upstream's (RFC 9110 §6.2), so an
    /// HTTP/1.0 upstream's answer of unknown length is chunked and the client's connection
    /// kept.
    fn write_head(
        &mut self,
        filled: usize,
        fields: &[(HeaderName, HeaderValue)],
        head_only: bool,
        ending: &mut Ending,
    ) -> Result<Sending, Fault> {
        let mut storage = response::lines();
        let answer = match response::parse(&self.bufs.answer[..filled], &mut storage) {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(%error, "upstream request failed");
                return Err(Fault::Broken);
            }
        };
        let status = answer.status;
        let lines: Vec<Line<'_>> = answer
            .headers
            .iter()
            .map(|h| (h.name.as_bytes(), h.value))
            .chain(
                fields
                    .iter()
                    .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
            )
            .collect();
        let upstream_lines = answer.headers.len();
        let framing = match framing(&lines[..upstream_lines], status, head_only, answer.http10) {
            Ok(framing) => framing,
            Err(why) => {
                tracing::warn!(%why, "upstream answer not relayed");
                return Err(Fault::Broken);
            }
        };
        ending.complete(status.is_server_error());
        // Counted as hyper's listener counts the response the gateway returns, whether or
        // not its head can be written.
        self.app.metrics.responded(ROLE, status.as_u16());
        let reusable = !answer.http10
            && !has_token(&lines[..upstream_lines], b"connection", b"close")
            && framing != Framing::Close;
        // A body known empty (a 204, a 304, a `Content-Length: 0`) but a `HEAD`'s: hyper's
        // server writes none of the upstream's `Content-Length` lines, and
        // `content-length: 0` after the others where the status may have one. A 204
        // relayed with the upstream's `Content-Length: 5` would have a client or a cache in
        // front read the next answer's first bytes as its body.
        let drop_length = !head_only
            && matches!(framing, Framing::None | Framing::Length(0))
            && lines[..upstream_lines]
                .iter()
                .any(|(n, _)| is_named(n, b"content-length"));
        // Most answers carry no hop-by-hop line: then nothing is removed, and the lines are
        // written in order of their names' first appearance with no list of groups built.
        let hop = drop_length
            || lines[..upstream_lines]
                .iter()
                .any(|(n, _)| HOP_BY_HOP.iter().any(|h| is_named(n, h)));
        let mut groups = Groups::default();
        if hop {
            groups = Groups::of(&lines[..upstream_lines]);
            groups.strip_hop_by_hop(&lines[..upstream_lines]);
            if drop_length {
                // Skipped where it stands, not removed from a map: the order stays.
                groups.skip(&lines, b"content-length");
            }
            // The RateLimit fields join a group of their name, or follow.
            groups.append(&lines, upstream_lines);
        }
        let named = |n: &[u8]| {
            if hop {
                groups.find(&lines, n).is_some()
            } else {
                lines.iter().any(|(name, _)| is_named(name, n))
            }
        };
        let first_length = if hop {
            groups.find(&lines, b"content-length")
        } else {
            lines[..upstream_lines]
                .iter()
                .position(|(name, _)| is_named(name, b"content-length"))
        };
        let Some(encode) = encode_as(&lines, first_length, framing) else {
            // Hyper's server cannot write a head whose `Content-Length` lines disagree
            // with each other once `Transfer-Encoding` is gone: it closes the connection
            // without an answer.
            tracing::warn!(
                "upstream answer with `transfer-encoding` and an invalid `content-length` \
                 not relayed"
            );
            return Err(Fault::Abort);
        };
        let out = &mut self.conn.out;
        status_line(out, status, answer.reason);
        if hop {
            groups.write(out, &lines, Some(b"content-length"));
        } else if let Some(raw) = verbatim(&self.bufs.answer[..answer.len], &lines, upstream_lines)
        {
            // The upstream wrote its lines as hyper would: copied whole, the fields after.
            out.extend_from_slice(raw);
            for (name, value) in &lines[upstream_lines..] {
                write_line(out, name, value);
            }
        } else {
            write_in_order(out, &lines, |l| *l, Some(b"content-length"));
        }
        if ending.close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        match encode {
            Encode::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            // A length the upstream's lines no longer say (`Connection` named them): hyper's
            // server writes the body's.
            Encode::Length(n) if !named(b"content-length") => {
                write_length(out, b"content-length", n);
            }
            Encode::Length(_) | Encode::None => {}
        }
        if !named(b"date") {
            date(out);
        }
        out.extend_from_slice(b"\r\n");
        Ok(Sending {
            head: answer.len,
            decoder: Decoder::new(framing),
            encoder: Encoder::new(encode),
            reusable,
        })
    }
}

/// What a wait raced against the client and the clock came to.
pub(super) enum Raced<T> {
    Done(T),
    /// The client went away.
    Gone,
    /// The deadline passed.
    TimedOut,
}

/// Runs `work` until it is done, the client goes away (`Conn::poll_gone`), or the deadline
/// `at` gives passes (read only once `work` waits), on the connection's one timer entry.
pub(super) async fn race<F: Future>(
    conn: &mut Conn,
    at: impl FnOnce() -> Instant,
    work: F,
) -> Raced<F::Output> {
    let mut work = pin!(work);
    let mut at = Some(at);
    let mut deadline = None;
    let limit = conn.bounds.max_header_bytes;
    poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(Raced::Done(done));
        }
        if conn.poll_gone(cx, limit) {
            return Poll::Ready(Raced::Gone);
        }
        let deadline =
            *deadline.get_or_insert_with(|| at.take().map_or_else(Instant::now, |at| at()));
        if conn.poll_deadline(cx, deadline) {
            return Poll::Ready(Raced::TimedOut);
        }
        Poll::Pending
    })
    .await
}
