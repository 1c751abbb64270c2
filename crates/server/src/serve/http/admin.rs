//! The admin listener: `/metrics`, `/live`, `/ready`, `POST /reload`, and the operator's
//! view: the dashboard at `/` (`dashboard.rs`), `/v1/top`, `/v1/explain`, `/v1/keys` and
//! `/v1/keys/reset` (`operator.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_TYPE, HOST, ORIGIN};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::{dashboard, operator};
use crate::serve::app::App;
use crate::serve::reply::{self, Body};

pub(crate) async fn handle(
    app: &Arc<App>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    if is_operator(&path) {
        return operator_view(app, peer, request).await;
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
        (&Method::POST, "/reload") => match post_refusal(&request, "/reload") {
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
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    // Keys, addresses and resets are not for other sites: a page whose name was rebound
    // to this address reaches it with its own name in `Host`, which is refused here.
    let host = request
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !host.is_empty() && !is_address(host) {
        return reply::problem(
            StatusCode::FORBIDDEN,
            format!(
                "the admin listener's operator view answers requests addressed to an IP \
                 address or localhost, not `{host}`"
            ),
        );
    }
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
            if let Some(refused) = post_refusal(&request, &path) {
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

/// The answer refusing a `/reload` a web page could have sent (issue 12, "Smaller"): a browser on the
/// operator's machine may POST `text/plain` cross-origin without asking, and a page whose
/// domain was rebound to 127.0.0.1 is "same-origin" with us.
fn post_refusal<B>(request: &Request<B>, path: &str) -> Option<Response<Body>> {
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
        if !origin_host.eq_ignore_ascii_case(host) || !is_address(host) {
            return Some(reply::problem(
                StatusCode::FORBIDDEN,
                format!("`{path}` is not for web pages (`Origin: {origin}`, `Host: {host}`)"),
            ));
        }
    }
    None
}

/// Whether `host` (with or without a port) is an IP address or `localhost`.
fn is_address(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}
