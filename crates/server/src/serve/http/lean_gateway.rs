//! The gateway's own HTTP/1.1 path (issue 16, "gateway vs nginx >= 1.10"): a plain `GET`
//! or `HEAD` decided and forwarded from the connection's buffers, with no hyper server,
//! hyper-util client, `Request`, `Response` or header map in between. Through hyper the
//! gateway reaches 0.77 of nginx's `limit_req` because hyper's server and hyper-util's
//! pooled client, deciding nothing, already execute 2.0x nginx's instructions; a sketch on
//! this design (`examples/bare.rs --lean-limit`) reached 1.14x (`docs/lean-gateway-plan.md`).
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
//! Bodies: a `Content-Length` answer relayed as it comes; a chunked one relayed as it
//! comes while `chunked.rs` follows its framing (hyper's gateway decodes and encodes it
//! again: the same body, in chunks cut elsewhere); one framed by the upstream's close sent
//! chunked, as hyper sends it.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;
use ratewarden_core::adaptive::Completion;
use ratewarden_core::{AlgorithmKind, DisplayDuration, NANOS_PER_SEC};
use ratewarden_policy::config::Bounds;
use ratewarden_policy::Identity;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::chunked::Chunked;
use super::gateway::{push_node, PermitGuard};
use super::graceful::Stop;
use super::lean_conn::{Conn, Filled, Wait, FLUSH_AT};
use super::lean_gateway_head::{self, Get, Head};
use super::lean_upstream::{Answered, Failed, MAX_RESPONSE_HEADERS};
use super::rewind::Rewind;
use super::upstream::{Local, Upstream};
use crate::serve::app::{Answer, App};
use crate::serve::reply::{Plain, Problem};
use crate::serve::shed::Slot;
use crate::serve::timer::ClockTimer;

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
pub(super) async fn serve(
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
    // The forwarded head, and the upstream's answer as read: one of each per connection.
    let mut forwarded = Vec::with_capacity(1024);
    let mut answer = Vec::new();
    loop {
        let step = {
            let identity = app.engine.identity();
            let mut lines = lean_gateway_head::lines();
            match lean_gateway_head::read(&conn.buf[conn.start..conn.end], &mut lines, &identity) {
                // Asked per request: a reload that brings a rule the lean path does not
                // serve applies to kept-alive connections too.
                _ if !eligible(app, &identity) => Step::Other,
                Head::Other => Step::Other,
                Head::Partial => Step::Partial,
                Head::Get(get) => decide(app, peer, &get, &mut forwarded).await,
            }
        };
        let (len, close, allowed) = match step {
            Step::Other => return conn.hand_off().await,
            // A head as long as the bound and not whole: hyper answers it (431).
            Step::Partial if conn.end - conn.start >= bounds.max_header_bytes => {
                return conn.hand_off().await
            }
            Step::Partial => {
                if conn.wait == Wait::Idle && conn.end > conn.start {
                    // The next request's first byte: its head is timed from here.
                    conn.begin(Wait::Head);
                }
                if !conn.flush().await {
                    return None;
                }
                match conn.fill(bounds.max_header_bytes, stop).await {
                    Filled::Read => continue,
                    // A partial head at the peer's close, a deadline, the shutdown: closed
                    // without an answer, as hyper does.
                    Filled::Closed | Filled::TimedOut | Filled::Stopped => {
                        conn.close().await;
                        return None;
                    }
                }
            }
            Step::Refused(len, close, plain) => {
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
        conn.start += len;
        let relayed = relay(
            app,
            upstream,
            &mut conn,
            &forwarded,
            &mut answer,
            allowed,
            close || stop.now(),
        )
        .await;
        match relayed {
            Relayed::Kept => {}
            Relayed::Close => {
                conn.close().await;
                return None;
            }
            Relayed::Abort => return None,
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
    forwarded: &mut Vec<u8>,
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
    let refused = |plain| Step::Refused(get.len, get.close, plain);
    let settings = app.settings();
    let critical = settings.critical.iter().any(|m| m.matches(&request));
    let Some(slot) = app.shedder.enter(critical).await else {
        app.metrics.shed("in_flight");
        return refused(Plain::contract(ratewarden_http::unavailable(
            app.jittered(NANOS_PER_SEC),
            "the server is at capacity",
        )));
    };
    let started = app.clock.now();
    let timer = ClockTimer(Arc::clone(&app.clock));
    let verdict = match app.engine.decide_waiting(&request, &timer).await {
        Ok(verdict) => verdict,
        Err(e) => {
            let status = super::api::request_error_status(&e);
            return refused(Problem::new(status, e.to_string()).plain());
        }
    };
    app.metrics
        .decision_seconds
        .observe(app.clock.now().saturating_sub(started) as f64 / 1e9);
    let (fields, delay) = match app.answer_with(&verdict, &settings) {
        Answer::Stop(response) => return refused(Plain::contract(response)),
        Answer::Go { headers, delay } => (headers, delay),
    };
    let permit = PermitGuard {
        app: Arc::clone(app),
        held: verdict.permit.map(|id| (id, verdict)),
        completion: None,
    };
    if !delay.is_zero() {
        // The rules `eligible` takes have no queueing rule; were one there, its wait.
        tokio::time::sleep(delay).await;
    }
    forwarded_head(forwarded, peer, get, &path);
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
/// last name into the gap); then the forwarding lines. The head's reader took no
/// forwarding line from the client, so trusted proxy or not they are ours alone.
fn forwarded_head(out: &mut Vec<u8>, peer: SocketAddr, get: &Get<'_, '_>, path: &str) {
    out.clear();
    out.extend_from_slice(get.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    if let Some(query) = get.query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let lines: Vec<(&[u8], &[u8])> = get
        .headers
        .iter()
        .map(|h| (h.name.as_bytes(), h.value))
        .collect();
    let mut groups = groups(&lines);
    remove(&mut groups, &lines, b"connection");
    write_groups(out, &lines, &groups, None);
    let ip = peer.ip();
    let mut client = String::with_capacity(48);
    ratewarden_policy::push_ip(&mut client, ip);
    let mut node = String::with_capacity(64);
    push_node(&mut node, ip, &client);
    for (name, value) in [
        ("x-forwarded-for", client.as_str()),
        ("forwarded", node.as_str()),
    ] {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        if name == "forwarded" {
            out.extend_from_slice(b";proto=http");
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"x-forwarded-proto: http\r\n\r\n");
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
    let at = out.len();
    out.extend_from_slice(name);
    out[at..].make_ascii_lowercase();
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How a relayed exchange left the client's connection.
enum Relayed {
    /// Ready for its next request.
    Kept,
    /// To be closed once written (asked for, or the answer was framed by the close).
    Close,
    /// Broken mid-answer: dropped, as hyper drops a connection whose body failed.
    Abort,
}

/// How the upstream's answer body is framed.
enum Framing {
    /// No body (`HEAD`, 204, 304).
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`: relayed as it came.
    Chunked,
    /// Until the upstream closes: relayed chunked.
    Close,
}

/// Forwards the head in `forwarded` and relays the answer into `conn`'s write buffer.
async fn relay(
    app: &Arc<App>,
    upstream: &Upstream,
    conn: &mut Conn,
    forwarded: &[u8],
    buf: &mut Vec<u8>,
    allowed: Allowed,
    close: bool,
) -> Relayed {
    let Allowed {
        head_only,
        fields,
        held: (mut permit, _slot),
        bounds,
    } = allowed;
    let sent = app.clock.now();
    let exchanged = upstream
        .lean
        .exchange(
            forwarded,
            buf,
            bounds.upstream_connect_timeout,
            bounds.upstream_response_timeout,
            bounds.upstream_pool_idle,
        )
        .await;
    let rtt_ns = Some(app.clock.now().saturating_sub(sent));
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
    let Answered {
        mut stream,
        head,
        filled,
    } = match exchanged {
        Ok(answered) => answered,
        Err(Failed::Timeout) => {
            tracing::warn!("the upstream did not answer in time");
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
        Err(Failed::ConnectTimeout) => {
            tracing::warn!("the upstream did not take the connection in time");
            let problem = Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                "the upstream did not take the connection in time",
            );
            return failed(conn, &mut permit, problem);
        }
        Err(Failed::Broken(error)) => {
            tracing::warn!(%error, "upstream request failed");
            let problem = Problem::new(
                StatusCode::BAD_GATEWAY,
                "the upstream could not be reached or failed to answer",
            );
            return failed(conn, &mut permit, problem);
        }
    };
    let mut headers =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    // Parsed whole by the exchange already.
    let _ = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        &buf[..head],
        &mut headers,
    );
    let code = response.code.unwrap_or(0);
    let Ok(status) = StatusCode::from_u16(code) else {
        tracing::warn!(code, "upstream answered a status that is not one");
        let problem = Problem::new(
            StatusCode::BAD_GATEWAY,
            "the upstream could not be reached or failed to answer",
        );
        return failed(conn, &mut permit, problem);
    };
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
    let framing = match framing(&lines[..upstream_lines], status, head_only) {
        Ok(framing) => framing,
        Err(why) => {
            tracing::warn!(%why, "upstream answer not relayed");
            let problem = Problem::new(
                StatusCode::BAD_GATEWAY,
                "the upstream could not be reached or failed to answer",
            );
            return failed(conn, &mut permit, problem);
        }
    };
    permit.completion = Some(Completion {
        rtt_ns,
        dropped: status.is_server_error(),
    });
    let reusable = response.version == Some(1)
        && !has_token(&lines[..upstream_lines], b"connection", b"close")
        && !matches!(framing, Framing::Close);
    // The head as hyper writes the response `gateway::handle` makes of this one.
    let out = &mut conn.out;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(response.reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut groups = groups(&lines[..upstream_lines]);
    strip_hop_by_hop(&mut groups, &lines[..upstream_lines]);
    for (at, (name, _)) in lines.iter().enumerate().skip(upstream_lines) {
        if !groups
            .iter()
            .any(|&g| lines[g].0.eq_ignore_ascii_case(name))
        {
            groups.push(at);
        }
    }
    write_groups(out, &lines, &groups, Some(b"content-length"));
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    let named = |n: &[u8]| groups.iter().any(|&g| lines[g].0.eq_ignore_ascii_case(n));
    if matches!(framing, Framing::Chunked | Framing::Close) {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !named(b"content-length") {
        let implicit = !head_only
            && !status.is_informational()
            && status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED;
        if implicit {
            out.extend_from_slice(b"content-length: 0\r\n");
        }
    }
    if !named(b"date") {
        super::lean_answer::date(out);
    }
    out.extend_from_slice(b"\r\n");
    app.metrics.responded(ROLE, status.as_u16());
    drop(lines);
    // The body.
    let mut body = &buf[head..filled];
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut chunked = Chunked::default();
    loop {
        // How much of `body` ends the answer, once it is whole.
        let end = match framing {
            Framing::None => Some(0),
            Framing::Length(_) => {
                let take = body.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                conn.out.extend_from_slice(&body[..take]);
                left -= take as u64;
                (left == 0).then_some(take)
            }
            Framing::Chunked => match chunked.feed(body) {
                Ok(end) => {
                    conn.out
                        .extend_from_slice(&body[..end.unwrap_or(body.len())]);
                    end
                }
                Err(error) => {
                    tracing::warn!(%error, "the upstream's chunked answer is malformed");
                    let _ = conn.flush().await;
                    return Relayed::Abort;
                }
            },
            Framing::Close => {
                // Framed anew as chunked, as hyper frames a body of unknown length.
                if !body.is_empty() {
                    conn.out
                        .extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                    conn.out.extend_from_slice(body);
                    conn.out.extend_from_slice(b"\r\n");
                }
                None
            }
        };
        if let Some(end) = end {
            // Bytes past the answer are nobody's: that connection is not reused.
            if end == body.len() && reusable {
                upstream.lean.put(stream);
            }
            return if close { Relayed::Close } else { Relayed::Kept };
        }
        // The client has what there is while the upstream sends the rest: a body streams.
        if !conn.flush().await {
            return Relayed::Abort;
        }
        let read = tokio::time::timeout(bounds.upstream_idle_timeout, stream.read(&mut buf[..]));
        match read.await {
            Ok(Ok(0)) if matches!(framing, Framing::Close) => {
                conn.out.extend_from_slice(b"0\r\n\r\n");
                return if close { Relayed::Close } else { Relayed::Kept };
            }
            Ok(Ok(n)) if n > 0 => body = &buf[..n],
            // Closed short, failed, or stalled: the client's answer cannot be finished.
            _ => {
                let _ = conn.flush().await;
                return Relayed::Abort;
            }
        }
    }
}

/// How the body of an answer with `lines` is framed, as hyper's client reads it.
fn framing(
    lines: &[(&[u8], &[u8])],
    status: StatusCode,
    head_only: bool,
) -> Result<Framing, String> {
    if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::None);
    }
    let codings: Vec<&[u8]> = lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .collect();
    if let Some(last) = codings.last() {
        if lines
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
        {
            // Two framings: what request smuggling is made of.
            return Err("both `transfer-encoding` and `content-length`".into());
        }
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
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
            let part = part.trim_ascii();
            let n = decimal(part).ok_or_else(|| "an invalid `content-length`".to_owned())?;
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

/// A `Content-Length` value: decimal digits only, no overflow.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
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

/// Removes what `gateway::strip_hop_by_hop` removes, in its order: the names `Connection`
/// lists, then the fixed list.
fn strip_hop_by_hop(groups: &mut Vec<usize>, lines: &[(&[u8], &[u8])]) {
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
    if !lines
        .iter()
        .any(|(n, _)| HOP_BY_HOP.iter().any(|h| n.eq_ignore_ascii_case(h)))
    {
        return;
    }
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
