//! The gateway: decide each request, then forward the allowed ones to the upstream,
//! streaming both ways, and add the RateLimit fields to what comes back.

pub(crate) mod lean;
mod overrides;
mod sent_body;
pub(crate) mod upstream;

pub(crate) use upstream::Local;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::{PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use ratewarden_core::adaptive::Completion;
use ratewarden_core::DisplayDuration;
use ratewarden_policy::{Bounds, ClientIpHeader, Identity, ServerSettings};
use tokio::net::TcpStream;

use crate::serve::admission::{self, Ask, Decided};
use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::pacing::Paced;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::Door;
use crate::serve::guard;
use crate::serve::reply::{self, Body, Holding, Plain, Problem};
use crate::serve::shed::Slot;
use overrides::Scanned;
use ratewarden_policy::Answer;
use sent_body::{Fault, Watched};
use upstream::Upstream;

/// The gateway as a listener's door, with the worker's connections to the upstream.
pub(crate) struct Gateway {
    pub(crate) local: Arc<Local>,
}

impl Door for Gateway {
    const NAME: &'static str = "gateway";

    async fn lean(
        &self,
        stream: TcpStream,
        app: &Arc<App>,
        peer: SocketAddr,
        bounds: Bounds,
        stop: &mut Stop<'_>,
    ) -> Option<Rewind<TcpStream>> {
        lean::serve(stream, app, &self.local, peer, bounds, stop).await
    }

    async fn handle(
        &self,
        app: &Arc<App>,
        peer: SocketAddr,
        request: Request<Incoming>,
    ) -> Response<Body> {
        handle(app, &self.local, peer, request).await
    }
}

/// Releases an allowed request's concurrency permit when dropped: when its response has
/// been sent, or the client went away. It keeps the verdict that carried the permit: the
/// engine releases a permit only to its owner.
pub(crate) struct PermitGuard {
    pub(crate) app: Arc<App>,
    pub(crate) held: Option<(ratewarden_policy::GrantId, ratewarden_policy::Verdict)>,
    /// How the upstream answered, once it has: what adaptive rules learn from. `None`
    /// (the client went away first, or its own body was too slow) teaches them nothing.
    pub(crate) completion: Option<Completion>,
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        let Some((id, verdict)) = self.held.take() else {
            return;
        };
        let app = Arc::clone(&self.app);
        let completion = self.completion;
        ratewarden_policy::release_soon(Box::pin(async move {
            let owner = ratewarden_policy::Owner::Verdict(&verdict);
            let now = app.clock.now();
            let _ = match completion {
                Some(c) => app.engine.release_with(id, owner, c, now).await,
                None => app.engine.release(id, owner, now).await,
            };
        }));
    }
}

/// What the gateway makes of a request before the upstream sees it, whichever HTTP/1.1
/// path read it (`handle` here, `lean::decide`).
pub(crate) enum Admission {
    /// Answered without the upstream: at capacity (503), a request the rules cannot read
    /// one way (problem+json), or the contract's 429 or 503.
    Refused(Plain),
    /// To forward, with the RateLimit fields to add to the answer, and what stays held
    /// until the answer has been relayed: the rule's permit and the place in flight.
    Admitted {
        fields: Vec<(HeaderName, HeaderValue)>,
        permit: PermitGuard,
        slot: Slot,
    },
}

/// The admission pipeline as the gateway renders it: a refusal to answer, or the fields,
/// permit and place to forward with, after a queueing rule's delay (as nginx's
/// `limit_req burst=N` holds a request). A client that goes away meanwhile drops this
/// future, and with it the place and the permit.
pub(crate) async fn admit(
    app: &Arc<App>,
    request: &ratewarden_policy::Request<'_>,
    settings: &ServerSettings,
) -> Admission {
    let decided =
        match admission::admit(app, admission::GATEWAY, Ask::Request(request), settings).await {
            admission::Admission::Decided(decided) => decided,
            admission::Admission::Shed(response) => {
                return Admission::Refused(Plain::contract(response))
            }
            admission::Admission::Undecided(undecided) => {
                return Admission::Refused(Problem::new(undecided.status, undecided.detail).plain())
            }
        };
    let Decided {
        verdict,
        answer,
        slot,
    } = decided;
    let (fields, delay) = match answer {
        Answer::Stop(response) => return Admission::Refused(Plain::contract(response)),
        Answer::Go { headers, delay } => (headers, delay),
    };
    let permit = PermitGuard {
        app: Arc::clone(app),
        held: verdict.permit.map(|id| (id, verdict)),
        completion: None,
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Admission::Admitted {
        fields,
        permit,
        slot,
    }
}

async fn handle(
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    app.metrics.gateway_path(false);
    let Some(upstream) = &local.upstream else {
        return reply::problem(StatusCode::BAD_GATEWAY, "no upstream is configured");
    };
    let identity = app.engine.identity();
    // One reading of `[server]` for the whole request: a reload in the middle changes the
    // next request, not half of this one.
    let settings = app.settings();
    let bounds = settings.bounds;
    if let Some(refused) = guard::refusal(&request, &identity, settings.method_override) {
        return refused;
    }
    // What is matched is what is forwarded: one spelling of the path.
    let path = match ratewarden_policy::path::normalize(request.uri().path()) {
        Ok(path) => path.into_owned(),
        Err(error) => return reply::problem(StatusCode::BAD_REQUEST, error.to_string()),
    };
    let (parts, body) = request.into_parts();
    // A client body that stalls or trickles is cut, and its request with it: it does not
    // hold a connection, or an in-flight slot, for as long as it likes.
    let body = Paced::new(
        body,
        "client",
        bounds.body_idle_timeout,
        bounds.body_min_rate,
        bounds.body_rate_grace,
    );
    // Decided as the method the upstream will serve it as, or refused.
    let (method, body) = match overrides::read(&parts, body, &settings).await {
        Ok(read) => read,
        Err(refused) => return refused.response(),
    };
    let header_pairs = ratewarden_policy::parts::header_pairs(&parts.headers);
    // Without a host (HTTP/1.0 in origin-form), the upstream is told its own authority:
    // that is what it routes on, so that is what is decided on.
    let host = ratewarden_policy::parts::host(&parts).or(Some(upstream.authority.as_str()));
    let engine_request = ratewarden_policy::Request {
        peer: peer.ip(),
        method: method.as_str(),
        path: &path,
        host,
        headers: &header_pairs,
        cost: None,
        api_key: None,
        tenant: None,
    };
    let (headers, mut permit, slot) = match admit(app, &engine_request, &settings).await {
        Admission::Refused(plain) => return plain.response(),
        Admission::Admitted {
            fields,
            permit,
            slot,
        } => (fields, permit, slot),
    };
    let sent = app.clock.now();
    let forwarded = forward(upstream, &identity, &bounds, peer, &path, (parts, body)).await;
    // The round trip is to the response head, as the upstream's own latency; a 5xx, a
    // timeout or a failed connection is a drop: the upstream is failing, which is what an
    // adaptive limit must back off from. A body the client broke (malformed, too slow,
    // cut) is neither: one client's faults would otherwise shed everyone's requests.
    let rtt_ns = Some(app.clock.now().saturating_sub(sent));
    permit.completion = match &forwarded {
        Ok(response) => Some(Completion {
            rtt_ns,
            dropped: response.status().is_server_error(),
        }),
        Err(Failed::Body(_)) => None,
        Err(_) => Some(Completion {
            rtt_ns,
            dropped: true,
        }),
    };
    let response = match forwarded {
        Ok(response) => response,
        Err(Failed::Timeout) => {
            tracing::warn!(upstream = %upstream.authority, "the upstream did not answer in time");
            return reply::problem(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the upstream did not answer within {}",
                    DisplayDuration(bounds.upstream_response_timeout)
                ),
            );
        }
        Err(Failed::Body(Fault::Slow(why))) => {
            return reply::problem(StatusCode::REQUEST_TIMEOUT, why);
        }
        Err(Failed::Body(Fault::Broken(why))) => {
            return reply::problem(StatusCode::BAD_REQUEST, why);
        }
        Err(Failed::Client(error)) => {
            if is_connect_timeout(&error) {
                tracing::warn!(%error, upstream = %upstream.authority, "the upstream did not take the connection in time");
                return reply::problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the upstream did not take the connection in time",
                );
            }
            tracing::warn!(%error, upstream = %upstream.authority, "upstream request failed");
            return reply::problem(
                StatusCode::BAD_GATEWAY,
                "the upstream (`[server] upstream`, named in the log) could not be reached or failed \
             to answer",
            );
        }
    };
    let (mut parts, body) = response.into_parts();
    // Hyper writes the response's version: ours (RFC 9110 §6.2), not an HTTP/1.0
    // upstream's, which would tell an HTTP/1.1 client it may not keep its connection.
    parts.version = http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    // An upstream that stops sending mid-body does not hold the slot and the permit forever.
    let body = Paced::new(
        body,
        "upstream",
        bounds.upstream_idle_timeout,
        0,
        Duration::ZERO,
    );
    let body = Holding::new(body.boxed(), (permit, slot));
    let mut response = Response::from_parts(parts, body.boxed());
    reply::append_headers(&mut response, headers);
    response
}

/// Why forwarding failed.
enum Failed {
    /// No response head within `[server] upstream_response_timeout` of the request's end
    /// (or of the upstream's last taking of its body).
    Timeout,
    /// The client broke its own request body.
    Body(Fault),
    /// The upstream client's error: connecting, sending, receiving.
    Client(hyper_util::client::legacy::Error),
}

fn is_connect_timeout(error: &hyper_util::client::legacy::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        next = e.source();
    }
    false
}

async fn forward(
    upstream: &Upstream,
    identity: &Identity,
    bounds: &Bounds,
    peer: SocketAddr,
    path: &str,
    (mut parts, body): (Parts, Scanned<Paced<Incoming>>),
) -> Result<Response<Incoming>, Failed> {
    // The host decided on: the target's authority wins over `Host` (`guard::host`), and the
    // upstream must not be told another one, nor its own address for want of a `Host`.
    if let Some(authority) = parts.uri.authority() {
        if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
            parts.headers.insert(header::HOST, host);
        }
    }
    // The normalized path the rules matched, and the query as the client sent it.
    let target = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let target = PathAndQuery::try_from(target).unwrap_or_else(|_| PathAndQuery::from_static("/"));
    let mut uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(upstream.authority.clone())
        .path_and_query(target);
    if let Ok(built) = std::mem::take(&mut uri).build() {
        parts.uri = built;
    }
    strip_hop_by_hop(&mut parts.headers);
    forwarding_headers(&mut parts.headers, identity, peer);
    let (body, progress) = Watched::new(body);
    let sent = upstream
        .client()
        .request(Request::from_parts(parts, body.boxed()));
    let mut sent = std::pin::pin!(sent);
    // An upload may take longer than the upstream may take to answer: the upstream's time
    // runs from the body's end, or while it does not take the body it was handed.
    let timeout = bounds.upstream_response_timeout;
    loop {
        match tokio::time::timeout_at(progress.deadline(timeout), &mut sent).await {
            Ok(Ok(response)) => return Ok(response),
            // The client's body failed, and the upstream's request with it.
            Ok(Err(error)) => {
                return Err(match progress.fault() {
                    Some(fault) => Failed::Body(fault),
                    None => Failed::Client(error),
                })
            }
            Err(_) if progress.upstream_late(timeout) => return Err(Failed::Timeout),
            Err(_) => {}
        }
    }
}

/// Tells the upstream who the client is: the client we keyed on, in every header that
/// names it. The one header our proxies write (`[server] client_ip_header`) has our hop
/// added to the list a trusted proxy sent; `X-Forwarded-For` and `Forwarded`, when not that
/// header, are written anew as the client and our hop; any other header naming the client
/// (`X-Real-IP`, `True-Client-IP`, ...) is replaced by the client. An upstream must not take
/// a client's word for its address in a header our proxy passed through untouched.
fn forwarding_headers(headers: &mut HeaderMap, identity: &Identity, peer: SocketAddr) {
    let ip = peer.ip();
    let trusted = identity.trusted();
    let mut forwarded_for = String::with_capacity(48);
    let mut forwarded = String::with_capacity(64);
    let (sent, who) = if trusted.contains(ip) {
        let name = trusted.header().name();
        let lines: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        // The admission read the same lines: a client it could not know was refused there.
        let who = ratewarden_policy::client_ip(ip, &lines, trusted).unwrap_or(ip);
        let sent = (!lines.is_empty()).then(|| lines.join(", "));
        let sent = match trusted.header() {
            ClientIpHeader::XForwardedFor => (sent, None),
            ClientIpHeader::Forwarded => (None, sent),
            ClientIpHeader::Other(_) => (None, None),
        };
        (sent, who)
    } else {
        for name in [&X_FORWARDED_HOST, &X_FORWARDED_PROTO] {
            if headers.contains_key(name) {
                headers.remove(name);
            }
        }
        ((None, None), ip)
    };
    forwarding_values(
        ip,
        who,
        (sent.0.as_deref(), sent.1.as_deref()),
        &mut forwarded_for,
        &mut forwarded,
    );
    for (name, value) in [(X_FORWARDED_FOR, forwarded_for), (FORWARDED, forwarded)] {
        // Every line the client sent under the name goes: replaced by ours, or (were ours
        // not a valid value) dropped, never forwarded as the client wrote it.
        match HeaderValue::try_from(value) {
            Ok(value) => {
                headers.insert(name, value);
            }
            Err(_) => {
                headers.remove(name);
            }
        }
    }
    let configured = match trusted.header() {
        ClientIpHeader::Other(name) => HeaderName::from_bytes(name.as_bytes()).ok(),
        _ => None,
    };
    let known = CLIENT_HEADERS;
    let naming = known.iter().chain(configured.as_ref());
    if headers.keys().any(|name| naming.clone().any(|n| n == name)) {
        let mut text = String::with_capacity(40);
        ratewarden_policy::push_ip(&mut text, who);
        let value = HeaderValue::try_from(text).ok();
        for name in naming {
            if headers.contains_key(name) {
                match &value {
                    Some(value) => headers.insert(name, value.clone()),
                    None => headers.remove(name),
                };
            }
        }
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(PROTO));
    }
}

/// Headers besides `X-Forwarded-For` and `Forwarded` that upstreams read as the client's
/// address: whichever of them a request carries says the client we keyed on.
pub(crate) const CLIENT_HEADERS: [HeaderName; 6] = [
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("true-client-ip"),
    HeaderName::from_static("cf-connecting-ip"),
    HeaderName::from_static("x-client-ip"),
    HeaderName::from_static("fastly-client-ip"),
    HeaderName::from_static("x-cluster-client-ip"),
];

/// The values of `X-Forwarded-For` and `Forwarded` we send for the client at `client`, our
/// peer being `peer`, written into `forwarded_for` and `forwarded` (cleared first). `sent`
/// is the list a trusted proxy sent in the one of the two headers it writes the client in
/// (its lines joined), the other `None`: our hop is added to that list, and the other header
/// is written anew as the client and our hop. Both gateway paths write their lines from this
/// one function: the lean path (`lean::forward`) may not phrase our hop
/// another way than hyper's.
pub(crate) fn forwarding_values(
    peer: std::net::IpAddr,
    client: std::net::IpAddr,
    (sent_for, sent_forwarded): (Option<&str>, Option<&str>),
    forwarded_for: &mut String,
    forwarded: &mut String,
) {
    // The client is named apart from our hop only when it is not our peer.
    let before = (client != peer).then_some(client);
    forwarded_for.clear();
    match (sent_for, before) {
        (Some(sent), _) => {
            forwarded_for.push_str(sent);
            forwarded_for.push_str(", ");
        }
        (None, Some(client)) => {
            ratewarden_policy::push_ip(forwarded_for, client);
            forwarded_for.push_str(", ");
        }
        (None, None) => {}
    }
    ratewarden_policy::push_ip(forwarded_for, peer);
    forwarded.clear();
    match (sent_forwarded, before) {
        (Some(sent), _) => {
            forwarded.push_str(sent);
            forwarded.push_str(", ");
        }
        (None, Some(client)) => {
            push_node(forwarded, client);
            forwarded.push_str(", ");
        }
        (None, None) => {}
    }
    push_node(forwarded, peer);
    // A proxy's own list says how its hops came; a list we begin says how ours did.
    if sent_forwarded.is_none() {
        forwarded.push_str(";proto=");
        forwarded.push_str(PROTO);
    }
}

/// How the client reached us: the `X-Forwarded-Proto` we add when none is forwarded, and
/// the `proto=` of a `Forwarded` list we begin (the gateway listens in plain HTTP).
pub(crate) const PROTO: &str = "http";

/// The forwarding headers, as names made once: a name given as text is parsed and
/// lowercased on every lookup.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const FORWARDED: HeaderName = header::FORWARDED;
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// `for=` and `ip` as a `Forwarded` node: RFC 7239 §6 quotes and brackets IPv6.
fn push_node(out: &mut String, ip: std::net::IpAddr) {
    out.push_str("for=");
    match ip {
        std::net::IpAddr::V4(_) => ratewarden_policy::push_ip(out, ip),
        std::net::IpAddr::V6(_) => {
            out.push_str("\"[");
            ratewarden_policy::push_ip(out, ip);
            out.push_str("]\"");
        }
    }
}

/// Removes the headers that describe one connection, not the message (RFC 9110 §7.6.1):
/// the fixed list, and any named in `Connection` (the guard has refused requests whose
/// `Connection` names a header that decides who they are).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests carry none: one look at the few names they have, instead of a lookup
    // for each of the nine.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = guard::connection_names(headers)
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}
