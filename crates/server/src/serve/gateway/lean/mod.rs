//! The gateway's own HTTP/1.1 path: a plain `GET` or `HEAD` decided and forwarded from the
//! connection's buffers, with no hyper server, hyper-util client, `Request`, `Response` or
//! header map in between (why, and what it costs beside hyper: `docs/benchmarks.md`, "The
//! gateway's lean path"; what it serves and hands over: `docs/serving.md`).
//!
//! It serves only what [`head`] recognises exactly, under rules it serves whole
//! ([`eligible`]), and hands anything else to hyper's gateway for the rest of the
//! connection, the bytes read so far first. What it serves it serves as `proxy::handle`
//! does: the same `ratewarden_policy` request and admission ([`decide`]), the forwarded head
//! ([`forward`]), the answer relayed with the RateLimit fields ([`relay`]), its body framed
//! as hyper's client reads it and hyper's server sends it ([`body`]), over a worker's pool
//! of upstream connections ([`upstream`]). Messages are read and written by the codec
//! (`serve::h1`); this path only says which lines go where.

mod body;
mod forward;
mod head;
mod relay;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use ratewarden_core::AlgorithmKind;
use ratewarden_policy::config::Bounds;
use ratewarden_policy::{Identity, PermitGuard};

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::lean::{Conn, MoreHead, FLUSH_AT, SHRINK_OVER};
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::Wire;
use crate::serve::gateway::passage::{pass, Passage};
use crate::serve::gateway::upstream::Local;
use crate::serve::h1::request;
use crate::serve::reply::Plain;
use crate::serve::shed::Slot;
use forward::Forwarding;
use head::{Get, Head};
use relay::{Buffers, Relay, Relayed};

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
    /// To forward: the head's length, and what it holds.
    Forward(usize, Allowed),
}

/// An allowed request, its forwarded head in the connection's buffer.
struct Allowed {
    /// A `HEAD`: the answer has no body whatever it says.
    head_only: bool,
    /// `Connection: close`: answer, then close.
    close: bool,
    /// The RateLimit fields for the answer.
    fields: Vec<(HeaderName, HeaderValue)>,
    /// Held until the answer is relayed: the rule's permit and the place in flight.
    held: (Option<PermitGuard>, Slot),
    /// The upstream's bounds as the request found them: a reload changes the next
    /// request's, as on hyper's path.
    bounds: Bounds,
}

/// Serves `stream` (a gateway listener's connection, just accepted) until it closes; or
/// hands it back, with what was read of it, for hyper to serve the rest.
pub(crate) async fn serve(
    stream: Wire,
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    bounds: Bounds,
    stop: &mut Stop<'_>,
) -> Option<Rewind<Wire>> {
    // The lean path speaks HTTP/1.1 to the upstream: an HTTP/2 one is hyper's.
    let Some(upstream) = local.upstream.as_ref().filter(|u| !u.http2) else {
        return Some(Rewind::new(Vec::new(), stream));
    };
    let tls = stream.tls();
    let mut conn = Conn::new(stream, bounds);
    // The forwarded head, and the upstream's answer: one of each per connection.
    let mut forwarded = Vec::with_capacity(1024);
    let mut forwarding = Forwarding::new(peer, tls);
    let mut bufs = Buffers::default();
    loop {
        let step = {
            let identity = app.engine.identity();
            let mut lines = request::lines();
            let buf = &conn.buf[conn.start..conn.end];
            match head::read(buf, &mut lines, &identity, peer.ip()) {
                // Asked per request: a reload that brings a rule the lean path does not
                // serve applies to kept-alive connections too.
                _ if !eligible(app, &identity) => Step::Other,
                Head::Other => Step::Other,
                Head::Partial => Step::Partial,
                Head::Get(get) => decide(app, peer, &get, (&mut forwarded, &mut forwarding)).await,
            }
        };
        let (len, allowed) = match step {
            Step::Other => return conn.hand_off().await,
            Step::Partial => match conn.more_head(stop).await {
                MoreHead::Read => continue,
                more => return conn.end(more).await,
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
            Step::Forward(len, allowed) => (len, allowed),
        };
        app.metrics.gateway_path(true);
        conn.start += len;
        let relay = Relay {
            app,
            upstream,
            conn: &mut conn,
            bufs: &mut bufs,
        };
        match relay.run(&forwarded, allowed, stop).await {
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

/// Decides a recognised request as `proxy::handle` does, and writes its forwarded head
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
        body: None,
        client_cert: None,
    };
    let settings = app.settings();
    let (fields, permit, slot) = match pass(app, &request, &settings).await {
        Passage::Refused(plain) => return Step::Refused(get.len, get.close, plain),
        Passage::Admitted {
            fields,
            permit,
            slot,
            // None: the lean path serves no rule settled from the answer (`eligible`).
            settlement: _,
        } => (fields, permit, slot),
    };
    // Only a trusted proxy's list names a client apart from the peer: the rules in force
    // are asked again only then, most heads having none.
    let identity = get.forwarded_for.map(|_| app.engine.identity());
    let trusted = identity
        .as_deref()
        .map(ratewarden_policy::Identity::trusted);
    forwarding.write_head(forwarded, get, &path, trusted);
    Step::Forward(
        get.len,
        Allowed {
            head_only: get.method == "HEAD",
            close: get.close,
            fields,
            held: (permit, slot),
            bounds: settings.bounds,
        },
    )
}

/// Whether the rules in force need nothing the lean path does not do: no rule that holds
/// a request (a queue, an adaptive limit) or a permit past the answer's head (a
/// concurrency limit, which hyper's gateway releases when the client has the body), and
/// none settled from the answer (`settle_from`: hyper's path reads the answer). Asked
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
        let eligible = app.engine.rule_list().iter().all(|rule| {
            // A rule settled from the answer reads the answer as it is relayed: hyper's path.
            rule.adaptive.is_none()
                && rule.settle_from.is_none()
                && !matches!(
                    rule.limit.kind(),
                    AlgorithmKind::Concurrency | AlgorithmKind::LeakyQueue
                )
        });
        *seen = Some((Arc::clone(identity), eligible));
        eligible
    })
}
