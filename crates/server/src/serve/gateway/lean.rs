//! The gateway's own HTTP/1.1 path (issue 16, "gateway vs nginx >= 1.10"): a plain `GET`
//! or `HEAD` decided and forwarded from the connection's buffers, with no hyper server,
//! hyper-util client, `Request`, `Response` or header map in between. Through hyper the
//! gateway reaches 0.77 of nginx's `limit_req` because hyper's server and hyper-util's
//! pooled client, deciding nothing, already execute 2.0x nginx's instructions; a sketch on
//! this design (`examples/bare.rs --lean-limit`) reached 1.14x (`docs/benchmarks.md`,
//! "Below hyper"; what it serves and hands over: `docs/serving.md`).
//!
//! As the decision API's lean path (`lean.rs`): it serves only what `lean_gateway_head`
//! recognises exactly, under rules it serves whole (`eligible`), and hands anything else to
//! hyper's gateway for the rest of the connection, the bytes read so far first. What it
//! serves it serves as `gateway.rs` does, line for line: the same `ratewarden_policy`
//! request, the shedder, the decision, the contract's refusals and problem answers, the
//! forwarded head (hop-by-hop lines dropped, the forwarding lines as `forwarding_headers`
//! writes them, in the order hyper's header map leaves them), the response head as hyper
//! writes it back (hop-by-hop dropped, the RateLimit fields appended), and the metrics.
//!
//! Bodies are framed as hyper's client reads them and hyper's server sends them: a
//! `Content-Length` answer relayed as it comes; a chunked one decoded (`chunked.rs`) and
//! chunked anew, its extensions and trailers dropped; one framed by the upstream's close
//! sent chunked (an HTTP/1.0 one too: the client is answered in HTTP/1.1); a `Content-Length` left
//! beside `Transfer-Encoding` sent as that length. The client is watched while the
//! upstream answers (gone: the exchange and its upstream connection are dropped, as hyper
//! drops the request's future), and one timer entry, the connection's, times the exchange
//! and each body read.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;
use ratewarden_core::adaptive::Completion;
use ratewarden_core::{AlgorithmKind, DisplayDuration};
use ratewarden_policy::config::Bounds;
use ratewarden_policy::Identity;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::lean::{Conn, MoreHead, FLUSH_AT, SHRINK_OVER};
use crate::serve::conn::rewind::Rewind;
use crate::serve::gateway::lean_head::{self, Get, Head};
use crate::serve::gateway::lean_upstream::{Answered, Failed, MAX_RESPONSE_HEADERS};
use crate::serve::gateway::upstream::{Local, Upstream};
use crate::serve::gateway::{self, admit, Admission, PermitGuard};
use crate::serve::h1::chunked::Chunked;
use crate::serve::reply::{Plain, Problem};
use crate::serve::shed::Slot;

/// The role the metrics count answers under.
const ROLE: &str = "gateway";

/// What one recognised request comes to, once its head is no longer borrowed.
// One at a time, on the connection's stack: boxing the large variant would be an
// allocation per request.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// Hyper's to serve.
    Other,
    /// Not whole yet.
    Partial,
    /// Answered without the upstream (a refusal, a problem): the head's length, whether to
    /// close, the answer.
    Refused(usize, bool, Plain),
    /// To forward: the head's length, whether to close, and what it holds.
    Forward(usize, bool, Allowed),
}

/// An allowed request, its forwarded head in the caller's buffer.
struct Allowed {
    /// A `HEAD`: the answer has no body whatever it says.
    head_only: bool,
    /// The RateLimit fields for the answer.
    fields: Vec<(HeaderName, HeaderValue)>,
    /// Held until the answer is relayed: the rule's permit and the place in flight.
    held: (PermitGuard, Slot),
    /// The upstream's bounds as the request found them: a reload changes the next
    /// request's, as in `gateway.rs`.
    bounds: Bounds,
}

/// Serves `stream` (a gateway listener's connection, just accepted) until it closes; or
/// hands it back, with what was read of it, for hyper to serve the rest.
pub(crate) async fn serve(
    stream: TcpStream,
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    bounds: Bounds,
    stop: &mut Stop<'_>,
) -> Option<Rewind<TcpStream>> {
    let Some(upstream) = local.upstream.as_ref() else {
        return Some(Rewind::new(Vec::new(), stream));
    };
    let mut conn = Conn::new(stream, bounds);
    // The forwarded head, and the upstream's answer: one of each per connection.
    let mut forwarded = Vec::with_capacity(1024);
    let mut forwarding = Forwarding::new(peer);
    let mut bufs = Buffers::default();
    loop {
        let step = {
            let identity = app.engine.identity();
            let mut lines = lean_head::lines();
            let buf = &conn.buf[conn.start..conn.end];
            match lean_head::read(buf, &mut lines, &identity, peer.ip()) {
                // Asked per request: a reload that brings a rule the lean path does not
                // serve applies to kept-alive connections too.
                _ if !eligible(app, &identity) => Step::Other,
                Head::Other => Step::Other,
                Head::Partial => Step::Partial,
                Head::Get(get) => decide(app, peer, &get, (&mut forwarded, &mut forwarding)).await,
            }
        };
        let (len, close, allowed) = match step {
            Step::Other => return conn.hand_off().await,
            Step::Partial => match conn.more_head(stop).await {
                MoreHead::Read => continue,
                MoreHead::HandOff => return conn.hand_off().await,
                MoreHead::Close => {
                    conn.close().await;
                    return None;
                }
                MoreHead::Gone => return None,
            },
            Step::Refused(len, close, plain) => {
                app.metrics.gateway_path(true);
                let close = close || stop.now();
                conn.answer(app, ROLE, &plain, close);
                if close {
                    conn.close().await;
                    return None;
                }
                conn.start += len;
                conn.next();
                continue;
            }
            Step::Forward(len, close, allowed) => (len, close, allowed),
        };
        app.metrics.gateway_path(true);
        conn.start += len;
        let relayed = relay(
            app, upstream, &mut conn, stop, &forwarded, &mut bufs, allowed, close,
        )
        .await;
        match relayed {
            // A shutdown begun while the body was relayed: no further request is served,
            // as hyper serves none once keep-alive is off.
            Relayed::Kept if stop.now() => {
                conn.close().await;
                return None;
            }
            Relayed::Kept => {}
            Relayed::Close => {
                conn.close().await;
                return None;
            }
            Relayed::Abort => return None,
        }
        // A long head or chunked body grew them: an idle connection does not keep that.
        if bufs.answer.len() > SHRINK_OVER || bufs.decoded.capacity() > SHRINK_OVER {
            bufs = Buffers::default();
        }
        conn.next();
        if conn.out.len() >= FLUSH_AT && !conn.flush().await {
            return None;
        }
    }
}

/// Decides a recognised request as `gateway::handle` does, and writes its forwarded head
/// into `forwarded` when it is allowed.
async fn decide(
    app: &Arc<App>,
    peer: SocketAddr,
    get: &Get<'_, '_>,
    (forwarded, forwarding): (&mut Vec<u8>, &mut Forwarding),
) -> Step {
    // What is matched is what is forwarded: one spelling of the path. One the normalizer
    // refuses is hyper's to answer (a 400 with the reason).
    let Ok(path) = ratewarden_policy::path::normalize(get.path) else {
        return Step::Other;
    };
    // Every value is visible ASCII (the head's reader checked).
    let pairs: Vec<(&str, &str)> = get
        .headers
        .iter()
        .filter_map(|h| Some((h.name, std::str::from_utf8(h.value).ok()?)))
        .collect();
    let request = ratewarden_policy::Request {
        peer: peer.ip(),
        method: get.method,
        path: &path,
        host: Some(get.host),
        headers: &pairs,
        cost: None,
        api_key: None,
        tenant: None,
    };
    let settings = app.settings();
    let (fields, permit, slot) = match admit(app, &request, &settings).await {
        Admission::Refused(plain) => return Step::Refused(get.len, get.close, plain),
        Admission::Admitted {
            fields,
            permit,
            slot,
        } => (fields, permit, slot),
    };
    // Only a trusted proxy's list names a client apart from the peer: the rules in force
    // are asked again only then, most heads having none.
    let identity = get.forwarded_for.map(|_| app.engine.identity());
    let trusted = identity
        .as_deref()
        .map(ratewarden_policy::Identity::trusted);
    forwarded_head(forwarded, forwarding, get, &path, trusted);
    Step::Forward(
        get.len,
        get.close,
        Allowed {
            head_only: get.method == "HEAD",
            fields,
            held: (permit, slot),
            bounds: settings.bounds,
        },
    )
}

/// The head hyper-util's client writes for the request `gateway::forward` makes of `get`:
/// the normalized path and the query as sent; the header lines grouped by name as a
/// header map keeps them, lowercase; `Connection` removed (the map's removal moves its
/// last name into the gap); a trusted proxy's `X-Forwarded-For` line, where it stands,
/// with our hop added (the map's `insert` keeps a name's place); then the forwarding lines
/// the map did not have, in the order `forwarding_headers` inserts them, naming the client
/// that line gives through `trusted` (given with the line). The head's reader took no other
/// forwarding line: from a peer we do not trust, none at all.
fn forwarded_head(
    out: &mut Vec<u8>,
    forwarding: &mut Forwarding,
    get: &Get<'_, '_>,
    path: &str,
    trusted: Option<&ratewarden_policy::TrustedProxies>,
) {
    out.clear();
    out.extend_from_slice(get.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    if let Some(query) = get.query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let proxied = get.forwarded_for.is_some() || get.forwarded_proto;
    if proxied {
        // Visible ASCII (the head's reader checked).
        let sent = get
            .forwarded_for
            .and_then(|at| std::str::from_utf8(get.headers[at].value).ok());
        // The admission read the same line: a client it could not know was refused there.
        let client = match (sent, trusted) {
            (Some(sent), Some(trusted)) => {
                ratewarden_policy::client_ip(forwarding.ip, &[sent], trusted)
                    .unwrap_or(forwarding.ip)
            }
            _ => forwarding.ip,
        };
        gateway::forwarding_values(
            forwarding.ip,
            client,
            (sent, None),
            &mut forwarding.forwarded_for,
            &mut forwarding.forwarded,
        );
    }
    let connection = get
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("connection"));
    if connection || get.forwarded_for.is_some() {
        let mut lines: Vec<(&[u8], &[u8])> = get.headers.iter().map(header_line).collect();
        if let Some(at) = get.forwarded_for {
            lines[at].1 = forwarding.forwarded_for.as_bytes();
        }
        if connection {
            let mut groups = groups(&lines);
            remove(&mut groups, &lines, b"connection");
            write_groups(out, &lines, &groups, None);
        } else {
            write_in_order(out, &lines, |l| *l, None);
        }
    } else {
        // Nothing removed or replaced (most heads): no list of lines to build.
        write_in_order(out, get.headers, header_line, None);
    }
    if !proxied {
        out.extend_from_slice(&forwarding.plain);
        return;
    }
    forwarding_tail(
        out,
        get.forwarded_for
            .is_none()
            .then_some(forwarding.forwarded_for.as_bytes()),
        forwarding.forwarded.as_bytes(),
        !get.forwarded_proto,
    );
}

/// Our forwarding lines the head did not have, in the order `forwarding_headers` inserts
/// them (`X-Forwarded-For` unless the head's own line took our hop, `Forwarded`, and
/// `X-Forwarded-Proto` unless the head has one), then the head's end.
fn forwarding_tail(out: &mut Vec<u8>, forwarded_for: Option<&[u8]>, forwarded: &[u8], proto: bool) {
    if let Some(forwarded_for) = forwarded_for {
        write_line(out, b"x-forwarded-for", forwarded_for);
    }
    write_line(out, b"forwarded", forwarded);
    if proto {
        write_line(out, b"x-forwarded-proto", gateway::PROTO.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// A request head's line as name and value.
fn header_line<'h>(h: &'h httparse::Header<'_>) -> (&'h [u8], &'h [u8]) {
    (h.name.as_bytes(), h.value)
}

/// What a connection's requests tell the upstream of its client.
struct Forwarding {
    /// The connection's peer.
    ip: std::net::IpAddr,
    /// The forwarding lines and the head's end for a request that carries no forwarding
    /// line (most): the same for every such request of the connection, trusted proxy or
    /// not, since `forwarding_headers` then has no list of a proxy's to add to.
    plain: Vec<u8>,
    /// The values for a trusted proxy's request, made anew for each (in buffers kept for
    /// the connection).
    forwarded_for: String,
    forwarded: String,
}

impl Forwarding {
    fn new(peer: SocketAddr) -> Self {
        let ip = peer.ip();
        let mut forwarded_for = String::with_capacity(48);
        let mut forwarded = String::with_capacity(64);
        gateway::forwarding_values(ip, ip, (None, None), &mut forwarded_for, &mut forwarded);
        let mut plain = Vec::with_capacity(128);
        forwarding_tail(
            &mut plain,
            Some(forwarded_for.as_bytes()),
            forwarded.as_bytes(),
            true,
        );
        Self {
            ip,
            plain,
            forwarded_for,
            forwarded,
        }
    }
}

/// Writes each name's lines, in order of its first appearance, names lowercase (as
/// `write_groups`, when no name is removed); of the name `first_only`, only the first line.
fn write_in_order<T>(
    out: &mut Vec<u8>,
    lines: &[T],
    line: impl Fn(&T) -> (&[u8], &[u8]),
    first_only: Option<&[u8]>,
) {
    for (at, this) in lines.iter().enumerate() {
        let (name, value) = line(this);
        let same = |other: &T| {
            let other = line(other).0;
            other.len() == name.len() && other.eq_ignore_ascii_case(name)
        };
        if lines[..at].iter().any(same) {
            // Written with its name's first line.
            continue;
        }
        write_line(out, name, value);
        if first_only.is_some_and(|n| name.eq_ignore_ascii_case(n)) {
            continue;
        }
        for other in &lines[at + 1..] {
            if same(other) {
                write_line(out, name, line(other).1);
            }
        }
    }
}

/// The first line of each name, in order of first appearance: a header map's names.
fn groups(lines: &[(&[u8], &[u8])]) -> Vec<usize> {
    let mut groups = Vec::with_capacity(lines.len());
    for (at, (name, _)) in lines.iter().enumerate() {
        if !lines[..at]
            .iter()
            .any(|(seen, _)| seen.eq_ignore_ascii_case(name))
        {
            groups.push(at);
        }
    }
    groups
}

/// Removes the name `lower` as `HeaderMap::remove` does: its place taken by the last name.
fn remove(groups: &mut Vec<usize>, lines: &[(&[u8], &[u8])], lower: &[u8]) {
    if let Some(at) = groups
        .iter()
        .position(|&g| lines[g].0.eq_ignore_ascii_case(lower))
    {
        groups.swap_remove(at);
    }
}

/// Writes each group's lines, names lowercase; of the name `first_only`, only the first
/// line (as hyper writes `content-length`).
fn write_groups(
    out: &mut Vec<u8>,
    lines: &[(&[u8], &[u8])],
    groups: &[usize],
    first_only: Option<&[u8]>,
) {
    for &g in groups {
        let name = lines[g].0;
        write_line(out, name, lines[g].1);
        if first_only.is_some_and(|n| name.eq_ignore_ascii_case(n)) {
            continue;
        }
        // Most names come once: a length compare passes the others.
        for (other, value) in &lines[g + 1..] {
            if other.len() == name.len() && other.eq_ignore_ascii_case(name) {
                write_line(out, name, value);
            }
        }
    }
}

/// `name: value`, the name lowercase (lowered in place: byte by byte through an iterator
/// was a tenth of the request's instructions).
fn write_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    // One reservation, and the separators pushed: a copy call each cost more than them.
    out.reserve(name.len() + value.len() + 4);
    let at = out.len();
    out.extend_from_slice(name);
    lowercase(&mut out[at..]);
    out.push(b':');
    out.push(b' ');
    out.extend_from_slice(value);
    out.push(b'\r');
    out.push(b'\n');
}

/// The bytes of `head` that hold its header lines (`lines[..upstream]`), when they are
/// exactly what `write_in_order` would write of all `lines`: every name lowercase and
/// distinct (so one line each, in order), none of the later lines (the fields) named as
/// one of them, and each line `name: value` CRLF, one after the other. Most upstreams
/// write their heads so; copying the block is a tenth of writing it line by line.
fn verbatim<'a>(head: &'a [u8], lines: &[(&[u8], &[u8])], upstream: usize) -> Option<&'a [u8]> {
    let (first, _) = lines.first().filter(|_| upstream > 0)?;
    // Where each line lies in `head`: the lines were parsed from it.
    let base = head.as_ptr() as usize;
    let offset = |bytes: &[u8]| (bytes.as_ptr() as usize).checked_sub(base);
    let start = offset(first)?;
    let mut at = start;
    for (n, (name, value)) in lines[..upstream].iter().enumerate() {
        let name_end = offset(name)?.checked_add(name.len())?;
        let value_end = offset(value)?.checked_add(value.len())?;
        let laid_out = offset(name)? == at
            && head.get(name_end..name_end + 2)? == b": "
            && offset(value)? == name_end + 2
            && head.get(value_end..value_end + 2)? == b"\r\n";
        if !laid_out || value.is_empty() || name.iter().any(u8::is_ascii_uppercase) {
            return None;
        }
        let same = |(other, _): &(&[u8], &[u8])| other.eq_ignore_ascii_case(name);
        if lines[n + 1..].iter().any(same) {
            return None;
        }
        at = value_end + 2;
    }
    head.get(start..at)
}

/// `bytes` lowercased in place, eight at a time (byte by byte it was 40% of writing a
/// line): in each word, the ASCII bytes from `A` to `Z` get their 0x20 bit.
fn lowercase(bytes: &mut [u8]) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact_mut(8);
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_ne_bytes(eight);
        let low = x & LOW7;
        // Bit 7 of each byte: past `Z` (low + 0x25), from `A` on (low + 0x3f), ASCII.
        let past_z = low + 0x2525_2525_2525_2525;
        let from_a = low + 0x3f3f_3f3f_3f3f_3f3f;
        let upper = !x & HIGH & (from_a ^ past_z);
        word.copy_from_slice(&(x | (upper >> 2)).to_ne_bytes());
    }
    words.into_remainder().make_ascii_lowercase();
}

/// How a relayed exchange left the client's connection.
enum Relayed {
    /// Ready for its next request.
    Kept,
    /// To be closed once written (asked for, or the shutdown began).
    Close,
    /// Broken mid-answer, or the client went away: dropped, as hyper drops a connection
    /// whose body failed, and a request whose client is gone.
    Abort,
}

/// How the upstream's answer body is framed, as hyper's client reads it.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// No body (`HEAD`, 204, 304).
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`: decoded.
    Chunked,
    /// Until the upstream closes.
    Close,
}

/// How the body goes to the client, as hyper's server frames the body the gateway hands
/// it: the upstream's `Content-Length` when one is left (after `Transfer-Encoding` is
/// dropped as hop-by-hop), chunked otherwise.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// No body.
    None,
    /// This many bytes still to send; what the upstream sends past them is not relayed.
    Length(u64),
    /// Chunked anew: the data of each read one chunk, no extension, no trailer.
    Chunked,
}

/// What a wait raced against the client and the clock came to.
enum Raced<T> {
    Done(T),
    /// The client went away.
    Gone,
    /// The deadline passed.
    TimedOut,
}

/// Runs `work` until it is done, the client goes away (`Conn::poll_gone`), or the deadline
/// `at` gives passes (read only once `work` waits), on the connection's one timer entry.
async fn race<F: Future>(
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

/// The connection's buffers for the upstream's answer: as read, and a chunked body's data.
#[derive(Default)]
struct Buffers {
    answer: Vec<u8>,
    decoded: Vec<u8>,
}

/// Forwards the head in `forwarded` and relays the answer into `conn`'s write buffer.
#[allow(clippy::too_many_arguments)]
async fn relay(
    app: &Arc<App>,
    upstream: &Upstream,
    conn: &mut Conn,
    stop: &mut Stop<'_>,
    forwarded: &[u8],
    bufs: &mut Buffers,
    allowed: Allowed,
    close: bool,
) -> Relayed {
    let Allowed {
        head_only,
        fields,
        held: (mut permit, _slot),
        bounds,
    } = allowed;
    // The round trip teaches a rule that holds a permit (a concurrency or adaptive rule)
    // and nothing else: without one the clock is not read for it.
    let sent = permit.held.is_some().then(|| app.clock.now());
    // One reading of the time for the exchange: its deadline, and the pool's idle ages.
    let now = Instant::now();
    let exchange = upstream.lean.exchange(
        forwarded,
        &mut bufs.answer,
        bounds.upstream_connect_timeout,
        bounds.upstream_pool_idle,
        now,
    );
    let response_timeout = bounds.upstream_response_timeout;
    let exchanged = race(conn, || now + response_timeout, exchange).await;
    let rtt_ns = sent.map(|sent| app.clock.now().saturating_sub(sent));
    // A shutdown begun while the upstream answered: this answer says the connection closes,
    // as hyper's does once keep-alive is off.
    let close = close || stop.now();
    let done = if close { Relayed::Close } else { Relayed::Kept };
    let failed = |conn: &mut Conn, permit: &mut PermitGuard, problem: Problem| {
        permit.completion = Some(Completion {
            rtt_ns,
            dropped: true,
        });
        conn.answer(app, ROLE, &problem.plain(), close);
        if close {
            Relayed::Close
        } else {
            Relayed::Kept
        }
    };
    let broken = |conn: &mut Conn, permit: &mut PermitGuard| {
        let problem = Problem::new(
            StatusCode::BAD_GATEWAY,
            "the upstream (`[server] upstream`, named in the log) could not be reached or failed \
             to answer",
        );
        failed(conn, permit, problem)
    };
    let Answered { mut stream, filled } = match exchanged {
        Raced::Done(Ok(answered)) => answered,
        // The client went away first: its exchange is dropped with it, as hyper drops the
        // request's future, and the rules learn nothing from it.
        Raced::Gone => return Relayed::Abort,
        Raced::TimedOut => {
            tracing::warn!(upstream = %upstream.authority, "the upstream did not answer in time");
            let detail = format!(
                "the upstream did not answer within {}",
                DisplayDuration(bounds.upstream_response_timeout)
            );
            return failed(
                conn,
                &mut permit,
                Problem::new(StatusCode::GATEWAY_TIMEOUT, detail),
            );
        }
        Raced::Done(Err(Failed::ConnectTimeout)) => {
            tracing::warn!(upstream = %upstream.authority, "the upstream did not take the connection in time");
            let problem = Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not take the connection in time",
            );
            return failed(conn, &mut permit, problem);
        }
        Raced::Done(Err(Failed::Broken(error))) => {
            tracing::warn!(%error, upstream = %upstream.authority, "upstream request failed");
            return broken(conn, &mut permit);
        }
    };
    // The head, parsed once: its end was found by the exchange.
    let mut headers =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        &bufs.answer[..filled],
        &mut headers,
    );
    let head = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            tracing::warn!("upstream request failed: a malformed response head");
            return broken(conn, &mut permit);
        }
        Err(error) => {
            tracing::warn!(%error, "upstream request failed: a malformed response head");
            return broken(conn, &mut permit);
        }
    };
    let code = response.code.unwrap_or(0);
    let status = match StatusCode::from_u16(code) {
        // Nothing the lean path forwards asks to switch protocols.
        Ok(status) if code != 101 => status,
        _ => {
            tracing::warn!(
                code,
                "upstream answered a status the gateway does not relay"
            );
            return broken(conn, &mut permit);
        }
    };
    let http10 = response.version != Some(1);
    let lines: Vec<(&[u8], &[u8])> = response
        .headers
        .iter()
        .map(|h| (h.name.as_bytes(), h.value))
        .chain(
            fields
                .iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        )
        .collect();
    let upstream_lines = response.headers.len();
    let framing = match framing(&lines[..upstream_lines], status, head_only, http10) {
        Ok(framing) => framing,
        Err(why) => {
            tracing::warn!(%why, "upstream answer not relayed");
            return broken(conn, &mut permit);
        }
    };
    permit.completion = Some(Completion {
        rtt_ns,
        dropped: status.is_server_error(),
    });
    // Counted as hyper's listener counts the response the gateway returns, whether or not
    // its head can be written.
    app.metrics.responded(ROLE, status.as_u16());
    let reusable = !http10
        && !has_token(&lines[..upstream_lines], b"connection", b"close")
        && !matches!(framing, Framing::Close);
    // Most answers carry no hop-by-hop line: then nothing is removed, and the lines are
    // written in order of their names' first appearance with no list of groups built.
    let is_named = |name: &[u8], n: &[u8]| name.len() == n.len() && name.eq_ignore_ascii_case(n);
    // A body known empty (a 204, a 304, a `Content-Length: 0`) but a `HEAD`'s: hyper's
    // server writes none of the upstream's `Content-Length` lines, and `content-length: 0`
    // after the others where the status may have one. A 204 relayed with the upstream's
    // `Content-Length: 5` would have a client or a cache in front read the next answer's
    // first bytes as its body.
    let drop_length = !head_only
        && matches!(framing, Framing::None | Framing::Length(0))
        && lines[..upstream_lines]
            .iter()
            .any(|(n, _)| is_named(n, b"content-length"));
    let hop = drop_length
        || lines[..upstream_lines]
            .iter()
            .any(|(n, _)| HOP_BY_HOP.iter().any(|h| is_named(n, h)));
    let mut groups = Vec::new();
    if hop {
        groups = self::groups(&lines[..upstream_lines]);
        strip_hop_by_hop(&mut groups, &lines[..upstream_lines]);
        if drop_length {
            // Skipped where it stands, not removed from a map: the order stays.
            groups.retain(|&g| !is_named(lines[g].0, b"content-length"));
        }
        // The RateLimit fields join a group of their name, or follow.
        for (at, (name, _)) in lines.iter().enumerate().skip(upstream_lines) {
            if !groups.iter().any(|&g| is_named(lines[g].0, name)) {
                groups.push(at);
            }
        }
    }
    let named = |n: &[u8]| {
        if hop {
            groups.iter().any(|&g| is_named(lines[g].0, n))
        } else {
            lines.iter().any(|(name, _)| is_named(name, n))
        }
    };
    let first_length = if hop {
        groups
            .iter()
            .copied()
            .find(|&g| is_named(lines[g].0, b"content-length"))
    } else {
        lines[..upstream_lines]
            .iter()
            .position(|(name, _)| is_named(name, b"content-length"))
    };
    let out = match out_framing(&lines, first_length, framing) {
        Some(out) => out,
        None => {
            // Hyper's server cannot write a head whose `Content-Length` lines disagree
            // with each other once `Transfer-Encoding` is gone: it closes the connection
            // without an answer.
            tracing::warn!(
                "upstream answer with `transfer-encoding` and an invalid `content-length` \
                 not relayed"
            );
            let _ = conn.flush().await;
            return Relayed::Abort;
        }
    };
    // The head as hyper writes the response `gateway::handle` makes of this one: in our
    // version, not the upstream's (RFC 9110 §6.2), so an HTTP/1.0 upstream's answer of
    // unknown length is chunked and the client's connection kept.
    let out_buf = &mut conn.out;
    out_buf.extend_from_slice(b"HTTP/1.1 ");
    out_buf.extend_from_slice(status.as_str().as_bytes());
    out_buf.push(b' ');
    out_buf.extend_from_slice(response.reason.unwrap_or("").as_bytes());
    out_buf.extend_from_slice(b"\r\n");
    if hop {
        write_groups(out_buf, &lines, &groups, Some(b"content-length"));
    } else if let Some(raw) = verbatim(&bufs.answer[..head], &lines, upstream_lines) {
        // The upstream wrote its lines as hyper would: copied whole, the fields after.
        out_buf.extend_from_slice(raw);
        for (name, value) in &lines[upstream_lines..] {
            write_line(out_buf, name, value);
        }
    } else {
        write_in_order(out_buf, &lines, |l| *l, Some(b"content-length"));
    }
    if close {
        out_buf.extend_from_slice(b"connection: close\r\n");
    }
    match out {
        Out::Chunked => out_buf.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        // A length the upstream's lines no longer say (`Connection` named them): hyper's
        // server writes the body's.
        Out::Length(n) if !named(b"content-length") => {
            out_buf.extend_from_slice(b"content-length: ");
            out_buf.extend_from_slice(n.to_string().as_bytes());
            out_buf.extend_from_slice(b"\r\n");
        }
        Out::Length(_) | Out::None => {}
    }
    if !named(b"date") {
        crate::serve::h1::answer::date(out_buf);
    }
    out_buf.extend_from_slice(b"\r\n");
    drop(lines);
    let relayed = body(
        conn,
        bufs,
        &mut stream,
        (framing, out),
        head..filled,
        bounds.upstream_idle_timeout,
    )
    .await;
    match relayed {
        Some(ended) => {
            if ended && reusable {
                upstream.lean.put(stream, now);
            }
            done
        }
        None => Relayed::Abort,
    }
}

/// Relays the body that starts at `bufs.answer[read]`, each further read of `stream`
/// within `idle` of the last: `None` when the client's answer could not be finished (its
/// connection is to be dropped), `Some(ended)` when it is whole, `ended` when the
/// upstream's answer ended exactly there (no byte past it, not at its close).
async fn body(
    conn: &mut Conn,
    bufs: &mut Buffers,
    stream: &mut TcpStream,
    (framing, mut out): (Framing, Out),
    read: std::ops::Range<usize>,
    idle: Duration,
) -> Option<bool> {
    let (mut lo, mut hi) = (read.start, read.end);
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut chunked = Chunked::default();
    // The upstream closed (a body framed by its close).
    let mut eof = false;
    loop {
        // This read's data, where in it the upstream's body ended once it has, and whether
        // it is malformed past that data.
        let mut malformed = false;
        let (data, ended): (&[u8], Option<usize>) = match framing {
            _ if eof => (&[], Some(0)),
            Framing::None => (&[], Some(0)),
            Framing::Length(_) => {
                let take = (hi - lo).min(usize::try_from(left).unwrap_or(usize::MAX));
                left -= take as u64;
                (&bufs.answer[lo..lo + take], (left == 0).then_some(take))
            }
            Framing::Chunked => {
                bufs.decoded.clear();
                match chunked.feed(&bufs.answer[lo..hi], &mut bufs.decoded) {
                    Ok(end) => (&bufs.decoded[..], end),
                    Err(error) => {
                        // The data before the fault goes first, as hyper's client hands
                        // it on before the error.
                        tracing::warn!(%error, "the upstream's chunked answer is malformed");
                        malformed = true;
                        (&bufs.decoded[..], None)
                    }
                }
            }
            Framing::Close => (&bufs.answer[lo..hi], None),
        };
        // Written as the client's framing has it; `whole` once it has all it was told of.
        let whole = match &mut out {
            Out::None => true,
            Out::Length(owed) => {
                let take = data.len().min(usize::try_from(*owed).unwrap_or(usize::MAX));
                conn.out.extend_from_slice(&data[..take]);
                *owed -= take as u64;
                *owed == 0
            }
            Out::Chunked => {
                if !data.is_empty() {
                    push_chunk(&mut conn.out, data);
                }
                false
            }
        };
        if malformed && !whole {
            let _ = conn.flush().await;
            return None;
        }
        if let Some(end) = ended {
            if !whole && matches!(out, Out::Length(_)) {
                // The upstream's body ended short of the length the client was told: hyper's
                // server aborts such an answer.
                tracing::warn!("the upstream's body ended short of its `content-length`");
                let _ = conn.flush().await;
                return None;
            }
            match out {
                Out::Chunked => conn.out.extend_from_slice(b"0\r\n\r\n"),
                Out::None | Out::Length(_) => {}
            }
            // Bytes past the answer are nobody's: that connection is not reused.
            return Some(!eof && lo + end == hi);
        }
        if whole {
            // The client has the length it was told (a `Content-Length` beside
            // `Transfer-Encoding`): the rest is not relayed, as hyper's server sends no
            // more; the upstream's connection, mid-answer, goes.
            return Some(false);
        }
        // The client has what there is while the upstream sends the rest: a body streams.
        if !conn.flush().await {
            return None;
        }
        let read = race(
            conn,
            || Instant::now() + idle,
            stream.read(&mut bufs.answer[..]),
        )
        .await;
        match read {
            Raced::Done(Ok(0)) if matches!(framing, Framing::Close) => eof = true,
            Raced::Done(Ok(n)) if n > 0 => (lo, hi) = (0, n),
            // Closed short, failed, stalled, or the client went away: the client's answer
            // cannot be finished.
            _ => {
                tracing::warn!(
                    "the upstream's body was cut, or stalled past upstream_idle_timeout"
                );
                let _ = conn.flush().await;
                return None;
            }
        }
    }
}

/// `data` as one chunk.
fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut size = [0u8; 16];
    let mut at = size.len();
    let mut n = data.len();
    loop {
        at -= 1;
        size[at] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.reserve(size.len() - at + data.len() + 4);
    out.extend_from_slice(&size[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// How the body of an answer with `lines` is framed, as hyper's client reads it.
fn framing(
    lines: &[(&[u8], &[u8])],
    status: StatusCode,
    head_only: bool,
    http10: bool,
) -> Result<Framing, String> {
    if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::None);
    }
    let mut codings = lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding"))
        .peekable();
    if codings.peek().is_some() {
        if http10 {
            return Err("`transfer-encoding` in an HTTP/1.0 answer".into());
        }
        // Hyper's client: `Transfer-Encoding` wins over any `Content-Length`; chunked
        // when the last line's last coding is.
        let last = codings.last().map_or(&b""[..], |(_, v)| v);
        let coding = last.rsplit(|&b| b == b',').next().unwrap_or(b"");
        return Ok(if coding.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    let mut length = None;
    for (_, value) in lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
    {
        for part in value.split(|&b| b == b',') {
            let n = decimal(part.trim_ascii()).ok_or("an invalid `content-length`")?;
            if length.is_some_and(|l| l != n) {
                return Err("two different `content-length` values".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// How hyper's server frames the body it is handed, for an answer read as `framing` whose
/// first `Content-Length` line left (hop-by-hop dropped) is `lines[first_length]`; `None`
/// when it cannot write the head (`Content-Length` lines, beside a `Transfer-Encoding` that
/// framed the body, that are not one number each, all the same).
fn out_framing(
    lines: &[(&[u8], &[u8])],
    first_length: Option<usize>,
    framing: Framing,
) -> Option<Out> {
    match framing {
        Framing::None => Some(Out::None),
        // The body's length is known: the first line is written as it is, or the length
        // when none is left.
        Framing::Length(n) => Some(Out::Length(n)),
        Framing::Chunked | Framing::Close => {
            let Some(first) = first_length else {
                return Some(Out::Chunked);
            };
            let mut length = None;
            for (_, value) in lines[first..]
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
            {
                let n = decimal(value)?;
                if length.is_some_and(|l| l != n) {
                    return None;
                }
                length = Some(n);
            }
            length.map(Out::Length)
        }
    }
}

/// A `Content-Length` value: decimal digits only, within a `u64`.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Whether a line of `name` lists `token`.
fn has_token(lines: &[(&[u8], &[u8])], name: &[u8], token: &[u8]) -> bool {
    lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The headers that describe one connection, as `gateway::HOP_BY_HOP`.
const HOP_BY_HOP: [&[u8]; 9] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

/// Removes what `gateway::strip_hop_by_hop` removes, in its order: the names `Connection`
/// lists, then the fixed list.
fn strip_hop_by_hop(groups: &mut Vec<usize>, lines: &[(&[u8], &[u8])]) {
    // Values hyper reads as text only: the rest it skips.
    let named: Vec<&[u8]> = lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .filter(|(_, v)| v.iter().all(|&b| (b' '..=b'~').contains(&b) || b == b'\t'))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|n| !n.is_empty())
        .collect();
    for name in named {
        remove(groups, lines, name);
    }
    for name in HOP_BY_HOP {
        remove(groups, lines, name);
    }
}

/// Whether the rules in force need nothing the lean path does not do: no rule that holds
/// a request (a queue, an adaptive limit) or a permit past the answer's head (a
/// concurrency limit, which hyper's gateway releases when the client has the body). Asked
/// per request, worked out once per rule set (its identity is made anew at each reload) on
/// each worker.
fn eligible(app: &App, identity: &Arc<Identity>) -> bool {
    thread_local! {
        static SEEN: RefCell<Option<(Arc<Identity>, bool)>> = const { RefCell::new(None) };
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some((known, eligible)) = &*seen {
            if Arc::ptr_eq(known, identity) {
                return *eligible;
            }
        }
        let eligible = app.engine.config().rules.iter().all(|rule| {
            rule.adaptive.is_none()
                && !matches!(
                    rule.limit.kind(),
                    AlgorithmKind::Concurrency | AlgorithmKind::LeakyQueue
                )
        });
        *seen = Some((Arc::clone(identity), eligible));
        eligible
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `verbatim` of `head` with the fields `fields` after its lines.
    fn copied(head: &[u8], fields: &[(&[u8], &[u8])]) -> Option<String> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(head).unwrap() {
            httparse::Status::Complete(len) => len,
            httparse::Status::Partial => panic!("not whole"),
        };
        let mut lines: Vec<(&[u8], &[u8])> = response
            .headers
            .iter()
            .map(|h| (h.name.as_bytes(), h.value))
            .collect();
        let upstream = lines.len();
        lines.extend_from_slice(fields);
        verbatim(&head[..len], &lines, upstream).map(|raw| String::from_utf8(raw.to_vec()).unwrap())
    }

    #[test]
    fn lines_are_copied_whole_only_when_they_are_written_so() {
        let fields: &[(&[u8], &[u8])] = &[(b"ratelimit", b"x")];
        assert_eq!(
            copied(
                b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok",
                fields
            )
            .as_deref(),
            Some("x-a: 1\r\ncontent-length: 2\r\n")
        );
        for head in [
            &b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nx-a:  1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a:1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a: 1 \r\n\r\n",
            b"HTTP/1.1 200 OK\nx-a: 1\n\n",
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\nx-b: 2\r\nx-a: 3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nx-a:\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nratelimit: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
        ] {
            assert_eq!(
                copied(head, fields),
                None,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    proptest! {
        /// Eight at a time, as byte by byte.
        #[test]
        fn lowercase_is_make_ascii_lowercase(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut ours = bytes.clone();
            lowercase(&mut ours);
            prop_assert_eq!(ours, bytes.to_ascii_lowercase());
        }
    }
}
