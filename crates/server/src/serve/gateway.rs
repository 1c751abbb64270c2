//! The gateway: decide each request, then forward the allowed ones to the upstream,
//! streaming both ways, and add the RateLimit fields to what comes back.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewarden_core::NANOS_PER_SEC;

use super::app::{Answer, App};
use super::listen::Local;
use super::reply::{self, Body, Holding};

/// The service behind the gateway, and a pool of connections to it.
pub(crate) struct Upstream {
    authority: Authority,
    client: Client<HttpConnector, Incoming>,
}

impl Upstream {
    pub(crate) fn new(url: &str) -> anyhow::Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("`[server] upstream` `{url}` is not a URL"))?;
        let authority = uri
            .authority()
            .cloned()
            .with_context(|| format!("`[server] upstream` `{url}` has no host"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { authority, client })
    }
}

/// Releases an allowed request's concurrency permit when dropped: when its response has
/// been sent, or the client went away.
struct PermitGuard {
    app: Arc<App>,
    permit: Option<ratewarden_policy::GrantId>,
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        let Some(id) = self.permit.take() else {
            return;
        };
        let app = Arc::clone(&self.app);
        let release = async move {
            let _ = app.engine.release(id, app.clock.now()).await;
        };
        // A store that answers at once (in memory) releases here; one a network away
        // releases on a task of its own. Outside a runtime the lease lets the permit go.
        let mut release = Box::pin(release);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        if release.as_mut().poll(&mut context).is_pending() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(release);
            }
        }
    }
}

pub(crate) async fn handle(
    app: &Arc<App>,
    local: &Local,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let Some(upstream) = &local.upstream else {
        return reply::problem(StatusCode::BAD_GATEWAY, "no upstream is configured");
    };
    let header_pairs: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(Authority::as_str));
    let engine_request = ratewarden_policy::Request {
        peer: peer.ip(),
        method: request.method().as_str(),
        path: request.uri().path(),
        host,
        headers: &header_pairs,
        cost: None,
        api_key: None,
        tenant: None,
    };
    let critical = app
        .settings()
        .critical
        .iter()
        .any(|m| m.matches(&engine_request));
    let Some(slot) = app.shedder.enter(critical).await else {
        app.metrics.shed("in_flight");
        return reply::contract(ratewarden_http::unavailable(
            app.jittered(NANOS_PER_SEC),
            "the server is at capacity",
        ));
    };
    let started = app.clock.now();
    let verdict = match app.engine.decide(&engine_request, started).await {
        Ok(verdict) => verdict,
        Err(e) => return reply::problem(super::api::request_error_status(&e), e.to_string()),
    };
    app.metrics
        .decision_seconds
        .observe(app.clock.now().saturating_sub(started) as f64 / 1e9);
    let permit = PermitGuard {
        app: Arc::clone(app),
        permit: verdict.permit,
    };
    let (headers, delay) = match app.answer(&verdict) {
        Answer::Stop(response) => return reply::contract(response),
        Answer::Go { headers, delay } => (headers, delay),
    };
    if !delay.is_zero() {
        // A queueing rule: wait our turn, as nginx's `limit_req burst=N` does. A client that
        // goes away meanwhile drops this future, and with it the permit and the place.
        tokio::time::sleep(delay).await;
    }
    let response = match forward(upstream, peer, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::warn!(%error, "upstream request failed");
            return reply::problem(
                StatusCode::BAD_GATEWAY,
                "the upstream could not be reached or failed to answer",
            );
        }
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = Holding::new(body.map_err(Into::into).boxed(), (permit, slot));
    let mut response = Response::from_parts(parts, body.boxed());
    reply::add_headers(&mut response, &headers);
    response
}

async fn forward(
    upstream: &Upstream,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(upstream.authority.clone())
        .path_and_query(path);
    if let Ok(built) = std::mem::take(&mut uri).build() {
        parts.uri = built;
    }
    strip_hop_by_hop(&mut parts.headers);
    // The client's address for the upstream, appended to any list from proxies before us.
    let client = peer.ip().to_string();
    let forwarded_for = match parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(before) => format!("{before}, {client}"),
        None => client,
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
        parts.headers.insert("x-forwarded-for", value);
    }
    if !parts.headers.contains_key("x-forwarded-proto") {
        parts
            .headers
            .insert("x-forwarded-proto", HeaderValue::from_static("http"));
    }
    upstream
        .client
        .request(Request::from_parts(parts, body))
        .await
}

/// Removes the headers that describe one connection, not the message (RFC 9110 §7.6.1):
/// the fixed list, and any named in `Connection`.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}
