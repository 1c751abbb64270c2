//! The gateway on hyper's path: every request the lean path hands over (other methods,
//! bodies, upgrades, heads it does not read itself), forwarded with hyper-util's client.

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
use ratewarden_policy::{Bounds, Identity};

use super::forwarding::{self, forwarding_headers};
use super::grpc;
use super::overrides::{self, Scanned};
use super::passage::{pass, Passage};
use super::sent_body::{Fault, Watched};
use super::settling::Settlement;
use super::tunnel;
use super::upstream::{Local, Upstream};
use crate::serve::app::App;
use crate::serve::conn::pacing::Paced;
use crate::serve::conn::tls::ViaTls;
use crate::serve::guard;
use crate::serve::reply::{self, Body, Holding};

pub(super) async fn handle(
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    // A gRPC call is answered in gRPC's terms when the gateway answers it itself.
    let call = grpc::is_call(request.headers());
    let response = relay(app, local, peer, request, call).await;
    if call {
        grpc::answer(response)
    } else {
        response
    }
}

async fn relay(
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    mut request: Request<Incoming>,
    call: bool,
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
    // An upgrade (WebSocket) is forwarded as asked, to an HTTP/1.1 upstream; the client's
    // side of it is taken now, before the request is taken apart.
    let upgrade = tunnel::asks(&request).filter(|_| !upstream.http2);
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
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
    // The shared rule list: cloning the config for each request would copy every rule.
    let for_rules = app
        .engine
        .rule_list()
        .iter()
        .any(ratewarden_policy::Rule::reads_body);
    let (method, body) = match overrides::read(&parts, body, &settings, for_rules).await {
        Ok(read) => read,
        Err(refused) => return refused.response(),
    };
    let header_pairs = ratewarden_policy::parts::header_pairs(&parts.headers);
    // Without a host (HTTP/1.0 in origin-form), the upstream is told its own authority:
    // that is what it routes on, so that is what is decided on.
    let host = ratewarden_policy::parts::host(&parts).or(Some(upstream.authority.as_str()));
    // Verified in the TLS handshake, on a listener that asks for client certificates.
    let client_cert = parts
        .extensions
        .get::<ViaTls>()
        .and_then(|tls| tls.client_subject.clone());
    let engine_request = ratewarden_policy::Request {
        peer: peer.ip(),
        method: method.as_str(),
        path: &path,
        host,
        headers: &header_pairs,
        cost: None,
        api_key: None,
        tenant: None,
        body: body.whole(),
        client_cert: client_cert.as_deref(),
    };
    let (headers, mut permit, slot, settlement) = match pass(app, &engine_request, &settings).await
    {
        Passage::Refused(plain) if call => return grpc::refusal(plain),
        Passage::Refused(plain) => return plain.response(),
        Passage::Admitted {
            fields,
            permit,
            slot,
            settlement,
        } => (fields, permit, slot, settlement),
    };
    let mut parts = parts;
    if settlement.as_ref().is_some_and(Settlement::reads_body) {
        // The answer is read on its way: asked for as it can be read.
        parts.headers.remove(header::ACCEPT_ENCODING);
    }
    let sent = app.clock.now();
    let forwarded = forward(
        upstream,
        &identity,
        &bounds,
        peer,
        &path,
        (parts, body),
        upgrade,
    )
    .await;
    // The round trip is to the response head, as the upstream's own latency; a 5xx, a
    // timeout or a failed connection is a drop: the upstream is failing, which is what an
    // adaptive limit must back off from. A body the client broke (malformed, too slow,
    // cut) is neither: one client's faults would otherwise shed everyone's requests.
    let rtt_ns = Some(app.clock.now().saturating_sub(sent));
    if let Some(permit) = &mut permit {
        permit.completion = match &forwarded {
            // A gRPC service answers its failures in a 200: its `grpc-status` says (when it
            // comes in the head; a status in the trailers is the service's, after the fact).
            Ok(response) => Some(Completion {
                rtt_ns,
                dropped: response.status().is_server_error()
                    || (call && grpc::failed(response.headers())),
            }),
            Err(Failed::Body(_)) => None,
            Err(_) => Some(Completion {
                rtt_ns,
                dropped: true,
            }),
        };
    }
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
    let mut response = response;
    if let (Some(client), StatusCode::SWITCHING_PROTOCOLS) = (client_upgrade, response.status()) {
        // Switched: the two connections are joined once hyper hands them over, holding the
        // permit until they close; the place in flight goes with this answer.
        let upstream = hyper::upgrade::on(&mut response);
        tokio::spawn(tunnel::join(
            client,
            upstream,
            permit,
            bounds.upgraded_idle_timeout,
            bounds.upgraded_max_duration,
        ));
        let (parts, _) = response.into_parts();
        let mut response = Response::from_parts(parts, reply::full(bytes::Bytes::new()));
        reply::append_headers(&mut response, headers);
        drop(slot);
        return response;
    }
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
    let held = (permit, slot);
    let body = match settlement {
        Some(settlement) => Holding::new(settlement.watch(app, &parts.headers, body), held).boxed(),
        None => Holding::new(body, held).boxed(),
    };
    let mut response = Response::from_parts(parts, body);
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
    upgrade: Option<HeaderValue>,
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
    // `te: trailers` is the one TE an HTTP/2 peer may send, and a gRPC server may ask for
    // it: kept for an HTTP/2 upstream, as hop-by-hop as the rest for an HTTP/1.1 one.
    let trailers = upstream.http2
        && parts.headers.get_all(header::TE).iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
            })
        });
    strip_hop_by_hop(&mut parts.headers);
    let proto = forwarding::proto(parts.extensions.get::<ViaTls>().is_some());
    forwarding_headers(&mut parts.headers, identity, peer, proto);
    if trailers {
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(upgrade) = upgrade {
        tunnel::restore(&mut parts.headers, upgrade);
    }
    // The upstream is spoken to in its own protocol, whatever the client spoke to us (an
    // HTTP/2 request's authority is its `Host`, set above, which an HTTP/2 upstream is
    // sent too).
    if upstream.http2 {
        parts.version = http::Version::HTTP_2;
    } else {
        parts.version = http::Version::HTTP_11;
    }
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
