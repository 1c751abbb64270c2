//! The decision API: `POST /v1/check`, `/v1/settle` and `/v1/release`, JSON in and out
//! (and forward-auth, `/v1/auth`, in `auth.rs`).
//!
//! The shapes are documented in `docs/decision-api.md` and `docs/openapi.yaml`. A decision
//! is always a 200 (the decision is in the body, with the status and headers the caller
//! should send); 4xx answers are about the API request itself, as problem+json.

mod auth;
mod body;
mod check;
mod decision_json;
mod envoy_json;
mod grants;
mod lean;
mod lean_head;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use ratewarden_policy::Bounds;

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::{Door, Wire};
use crate::serve::reply::{self, Body};

use crate::serve::bodies::parse;
use auth::{Flavour, ENVOY_PREFIX};
use body::read_json;
use grants::{Release, Settle};

pub(crate) use body::{body_timed_out, declared_length, json_content_type};
pub(crate) use check::check;

/// The decision API as a listener's door.
pub(crate) struct Api;

impl Door for Api {
    const NAME: &'static str = "api";

    async fn lean(
        &self,
        stream: Wire,
        app: &Arc<App>,
        peer: SocketAddr,
        bounds: Bounds,
        stop: &mut Stop<'_>,
    ) -> Option<Rewind<Wire>> {
        lean::serve(stream, app, peer, bounds, stop).await
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

/// The endpoints that take a JSON body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Check,
    Settle,
    Release,
    /// envoyproxy/ratelimit's `POST /json`.
    EnvoyJson,
    Unknown,
}

async fn handle(app: &Arc<App>, peer: SocketAddr, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    // envoyproxy/ratelimit's HTTP endpoints, for configs loaded with --envoy-config.
    if path == "/healthcheck" && request.method() == Method::GET {
        return if app.is_ready() {
            Response::new(reply::full("OK"))
        } else {
            reply::problem(StatusCode::SERVICE_UNAVAILABLE, "shutting down")
        };
    }
    // Forward-auth takes any method: a proxy asks with the method it was given.
    // The doors other than /v1/check are boxed, here and below: this future is as large as
    // its largest state, and hyper moves it whole (twice a request) before it first runs.
    let flavour = match path {
        "/v1/auth" => Some(Flavour::Plain),
        "/v1/auth/nginx" => Some(Flavour::Nginx),
        _ if path
            .strip_prefix(ENVOY_PREFIX)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')) =>
        {
            Some(Flavour::Envoy)
        }
        _ => None,
    };
    if let Some(flavour) = flavour {
        return Box::pin(auth::handle(app, peer, request, flavour)).await;
    }
    // The endpoint as a tag, not the path copied: the request is moved on below.
    let endpoint = match path {
        "/v1/check" => Endpoint::Check,
        "/v1/settle" => Endpoint::Settle,
        "/v1/release" => Endpoint::Release,
        "/json" => Endpoint::EnvoyJson,
        _ => Endpoint::Unknown,
    };
    if endpoint == Endpoint::Unknown {
        return reply::problem(
            StatusCode::NOT_FOUND,
            format!("no such endpoint `{path}`; the decision API has POST /v1/check, /v1/settle and /v1/release, forward-auth at /v1/auth, /v1/auth/nginx and /v1/auth/envoy/… (and POST /json, GET /healthcheck for Envoy configs)"),
        );
    }
    if request.method() != Method::POST {
        let mut response = reply::problem(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("`{path}` takes POST, not {}", request.method()),
        );
        response
            .headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
        return response;
    }
    // envoyproxy/ratelimit takes /json whatever its Content-Type (curl -d sends a form type).
    let strict = endpoint != Endpoint::EnvoyJson;
    // The body is read (bounded in bytes and time) before a slot is taken: a client
    // sending its body a byte at a time holds a connection, never a place in flight. The
    // place is taken before deciding (in the admission pipeline): shed load before the store.
    let settings = app.settings();
    let body = match read_json(&settings, request, strict).await {
        Ok(body) => body,
        Err(problem) => return problem.response(),
    };
    match endpoint {
        Endpoint::Check => check(app, &settings, peer, &body).await.response(),
        Endpoint::EnvoyJson => Box::pin(envoy_json::handle(app, &settings, body)).await,
        Endpoint::Settle => match parse::<Settle>(&body) {
            Ok(settle) => Box::pin(grants::settle(app, peer, settle)).await,
            Err(problem) => problem.response(),
        },
        // `Unknown` was answered above; the match must name it.
        Endpoint::Release | Endpoint::Unknown => match parse::<Release>(&body) {
            Ok(release) => Box::pin(grants::release(app, peer, release)).await,
            Err(problem) => problem.response(),
        },
    }
}
