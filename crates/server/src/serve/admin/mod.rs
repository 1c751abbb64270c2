//! The admin listener: `/metrics`, `/live`, `/ready`, `POST /reload`, and the operator's
//! view: the dashboard at `/` (`dashboard.rs`), `/v1/top`, `/v1/explain`, `/v1/keys` and
//! `/v1/keys/reset` (`endpoints.rs`). Every route first passes the `Host` check, and every
//! route with data or an effect the bearer token check when a token is set.

mod dashboard;
mod endpoints;

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use http::uri::Authority;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use ratewarden_policy::{AdminAccess, ADMIN_TOKEN_ENV};
use serde_json::json;

use self::endpoints as operator;
use ratewarden_policy::Bounds;

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::{Door, Wire};
use crate::serve::reply::{self, Body};

/// The admin listener as a door: hyper serves all of it, with no path of its own.
pub(crate) struct Admin;

impl Door for Admin {
    const NAME: &'static str = "admin";

    async fn lean(
        &self,
        stream: Wire,
        _app: &Arc<App>,
        _peer: SocketAddr,
        _bounds: Bounds,
        _stop: &mut Stop<'_>,
    ) -> Option<Rewind<Wire>> {
        Some(Rewind::new(Vec::new(), stream))
    }

    async fn handle(
        &self,
        app: &Arc<App>,
        peer: SocketAddr,
        request: Request<Incoming>,
    ) -> Response<Body> {
        handle(app, peer, request).await
    }
}

async fn handle(app: &Arc<App>, peer: SocketAddr, request: Request<Incoming>) -> Response<Body> {
    let settings = app.settings();
    let access = &settings.admin_access;
    if let Some(refused) = host_refusal(&request, access) {
        return refused;
    }
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    if !is_open(&path) {
        if let Some(refused) = token_refusal(&request, access, peer, &path) {
            return refused;
        }
    }
    if is_operator(&path) {
        return operator_view(app, access, peer, request).await;
    }
    match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => {
            app.metrics.in_flight.set(app.shedder.in_flight() as i64);
            let mut response = Response::new(reply::full(app.metrics.encode()));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        (&Method::GET, "/live") => reply::json(StatusCode::OK, &json!({ "status": "live" })),
        (&Method::GET, "/ready") => {
            if app.is_ready() {
                reply::json(
                    StatusCode::OK,
                    &json!({ "status": "ready", "config_version": app.engine.version() }),
                )
            } else {
                reply::problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: starting or shutting down",
                )
            }
        }
        (&Method::POST, "/reload") => match post_refusal(&request, "/reload", access) {
            Some(refused) => refused,
            None => reload(app).await,
        },
        (_, "/metrics" | "/live" | "/ready") => {
            reply::problem(StatusCode::METHOD_NOT_ALLOWED, "this endpoint takes GET")
        }
        (_, "/reload") => {
            reply::problem(StatusCode::METHOD_NOT_ALLOWED, "`/reload` takes POST")
        }
        (_, path) => reply::problem(
            StatusCode::NOT_FOUND,
            format!("no such endpoint `{path}`; the admin listener has the dashboard at /, /metrics, /live, /ready, POST /reload, /v1/dashboard, /v1/top, POST /v1/explain, /v1/keys and POST /v1/keys/reset"),
        ),
    }
}

/// The dashboard and the operator's endpoints: what shows or changes limiter state.
fn is_operator(path: &str) -> bool {
    matches!(
        path,
        "/" | "/dashboard.js"
            | "/dashboard.css"
            | "/v1/dashboard"
            | "/v1/top"
            | "/v1/explain"
            | "/v1/keys"
            | "/v1/keys/reset"
    )
}

async fn operator_view(
    app: &Arc<App>,
    access: &AdminAccess,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/" | "/dashboard.js" | "/dashboard.css") => dashboard::asset(&path)
            .unwrap_or_else(|| {
                reply::problem(StatusCode::NOT_FOUND, format!("no such page `{path}`"))
            }),
        (&Method::GET, "/v1/dashboard") => dashboard::answer(app),
        (&Method::GET, "/v1/top") => operator::answer(operator::top(app, query.as_deref())),
        (&Method::GET, "/v1/keys") => {
            operator::answer(operator::key_state(app, query.as_deref()).await)
        }
        (&Method::POST, "/v1/explain" | "/v1/keys/reset") => {
            if let Some(refused) = post_refusal(&request, &path, access) {
                return refused;
            }
            if path == "/v1/explain" {
                operator::answer(operator::explain(app, peer, request).await)
            } else {
                operator::answer(operator::reset(app, peer, request).await)
            }
        }
        (_, "/v1/explain" | "/v1/keys/reset") => reply::problem(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("`{path}` takes POST"),
        ),
        _ => reply::problem(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("`{path}` takes GET"),
        ),
    }
}

async fn reload(app: &App) -> Response<Body> {
    match app.reload().await {
        Ok(reloaded) => reply::json(
            StatusCode::OK,
            &json!({
                "reloaded": true,
                "config_version": reloaded.version,
                // Changed in the file, read at start only: not in force until a restart.
                "needs_restart": reloaded.needing_restart,
            }),
        ),
        Err(errors) => {
            let mut response = reply::problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the config was not reloaded; the old rules stay in force:\n{errors}"),
            );
            if let Ok(errors) =
                serde_json::to_value(errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())
            {
                let body = json!({
                    "type": "about:blank",
                    "title": "Unprocessable Content",
                    "status": 422,
                    "detail": "the config was not reloaded; the old rules stay in force",
                    "errors": errors,
                    "config_version": app.engine.version(),
                });
                *response.body_mut() = reply::full(body.to_string());
            }
            response
        }
    }
}

/// The header a client may send instead of a JSON content type: browsers send no custom
/// header cross-origin without a CORS preflight, which this listener never answers.
const RELOAD_HEADER: &str = "x-ratewarden-reload";

/// The answer refusing a `/reload` a web page could have sent: a browser on the
/// operator's machine may POST `text/plain` cross-origin without asking, and a page whose
/// domain was rebound to 127.0.0.1 is "same-origin" with us.
fn post_refusal<B>(
    request: &Request<B>,
    path: &str,
    access: &AdminAccess,
) -> Option<Response<Body>> {
    let headers = request.headers();
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if !json && !headers.contains_key(RELOAD_HEADER) {
        return Some(reply::problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "`{path}` takes `Content-Type: application/json` (or a `{RELOAD_HEADER}` header), \
                 so that a web page cannot send it"
            ),
        ));
    }
    // Only browsers send `Origin`; a browser request must come from a page on this very
    // address, and that address must be one no DNS name can be rebound to.
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
        let answered = host
            .parse::<Authority>()
            .is_ok_and(|a| access.answers_to(a.host()));
        if !origin_host.eq_ignore_ascii_case(host) || !answered {
            return Some(reply::problem(
                StatusCode::FORBIDDEN,
                format!("`{path}` is not for web pages (`Origin: {origin}`, `Host: {host}`)"),
            ));
        }
    }
    None
}

/// The routes anyone who passes the `Host` check may ask, token or not: the probes, whose
/// callers (a kubelet, a load balancer) rarely carry credentials and learn only "up", and
/// the dashboard's own files, which hold no data (the page asks for the token itself).
fn is_open(path: &str) -> bool {
    matches!(
        path,
        "/live" | "/ready" | "/" | "/dashboard.js" | "/dashboard.css"
    )
}

/// The answer refusing a request addressed to a name the listener does not answer to.
///
/// A page whose DNS name was rebound to this address reaches it as its own origin, with
/// its own name in `Host`: refused here, on every route, for `/metrics` names clients and
/// tenants as the operator endpoints do. An absolute-form target names the host too, and
/// both must pass. No `Host` at all is no browser's request (HTTP/1.0 clients send none).
fn host_refusal<B>(request: &Request<B>, access: &AdminAccess) -> Option<Response<Body>> {
    let mut given = request.headers().get_all(HOST).iter();
    let header = match (given.next(), given.next()) {
        (_, Some(_)) => {
            return Some(reply::problem(
                StatusCode::BAD_REQUEST,
                "the request has more than one `Host` header",
            ))
        }
        (None, None) => None,
        (Some(value), None) => match value
            .to_str()
            .ok()
            .and_then(|v| v.parse::<Authority>().ok())
        {
            Some(authority) => Some(authority),
            None => {
                return Some(reply::problem(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the `Host` header `{}` is not a host and port",
                        String::from_utf8_lossy(value.as_bytes())
                    ),
                ))
            }
        },
    };
    let target = request.uri().authority().cloned();
    for authority in header.iter().chain(target.iter()) {
        if !access.answers_to(authority.host()) {
            return Some(reply::problem(
                StatusCode::FORBIDDEN,
                format!(
                    "the admin listener answers requests addressed to an IP address, \
                     `localhost` or a name in `[server] admin_hosts`, not `{}`",
                    authority.host()
                ),
            ));
        }
    }
    None
}

/// The answer refusing a request without the admin token, when one is set.
fn token_refusal<B>(
    request: &Request<B>,
    access: &AdminAccess,
    peer: SocketAddr,
    path: &str,
) -> Option<Response<Body>> {
    let token = access.token.as_ref()?;
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .and_then(|(scheme, rest)| scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim()));
    let detail = match presented {
        Some(presented) if token.verify(presented) => return None,
        Some(_) => {
            // Never the token presented: it may be a real one sent to the wrong server.
            tracing::debug!(%peer, path, "admin request with a wrong bearer token");
            format!("`{path}`: the bearer token is not the admin listener's")
        }
        None => format!(
            "`{path}` takes `Authorization: Bearer <token>`, the token in `[server] \
             admin_token_file` or the {ADMIN_TOKEN_ENV} environment variable"
        ),
    };
    let mut response = reply::problem(StatusCode::UNAUTHORIZED, detail);
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"ratewarden admin\""),
    );
    Some(response)
}
