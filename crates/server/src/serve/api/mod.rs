//! The decision API: `POST /v1/check`, `/v1/settle` and `/v1/release`, JSON in and out
//! (and forward-auth, `/v1/auth`, in `auth.rs`).
//!
//! The shapes are documented in `docs/decision-api.md` and `docs/openapi.yaml`. A decision
//! is always a 200 (the decision is in the body, with the status and headers the caller
//! should send); 4xx answers are about the API request itself, as problem+json.

mod auth;
mod check_json;
mod decision_json;
pub(crate) mod forwarded;
pub(crate) mod lean;
mod lean_head;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::Incoming;
use ratewarden_core::{DisplayDuration, Outcome, NANOS_PER_SEC};
use ratewarden_policy::{GrantId, Owner, ReleaseError, ServerSettings, SettleError};
use serde::Deserialize;

use crate::serve::api::decision_json::{DecisionOut, PolicyOut};
use serde_json::json;

use crate::serve::api::auth::{Flavour, ENVOY_PREFIX};
use crate::serve::app::{Answer, App};
use crate::serve::reply::{self, Body, Plain, Problem};

/// The most a caller may claim one request costs.
pub(crate) const MAX_COST: u64 = 1_000_000_000;

/// A string of a request body, borrowed from the body unless it has escapes (serde does
/// not borrow through an `Option<Cow>`, hence the wrapper).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// `/v1/check`'s body. Its strings borrow from the body where they can (no escapes), one
/// allocation fewer each per request. Most bodies are read by hand (`check_json`), the
/// rest by serde.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(deny_unknown_fields)]
pub(crate) struct Check<'a> {
    /// The client's address; the API caller's own when absent.
    #[serde(borrow)]
    pub(crate) ip: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) method: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) path: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) host: Option<Text<'a>>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    #[serde(borrow)]
    pub(crate) api_key: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) tenant: Option<Text<'a>>,
    pub(crate) cost: Option<u64>,
}

/// `/v1/settle`: the reservation, the real cost, and the client again as the check named it
/// (its attributes, as in [`Check`]): only the client a reservation was issued for may
/// settle it (issue 12, item 4).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settle {
    reservation: String,
    cost: u64,
    ip: Option<String>,
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    api_key: Option<String>,
    tenant: Option<String>,
}

/// `/v1/release`: the permit, and the client again as the check named it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Release {
    permit: String,
    ip: Option<String>,
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    api_key: Option<String>,
    tenant: Option<String>,
}

/// A client's attributes as a body names them: the same fields, with the same defaults, in
/// a check, a settle and a release, so that a settle rebuilds the keys its check built.
struct Subject<'a> {
    ip: Option<&'a str>,
    method: Option<&'a str>,
    path: Option<&'a str>,
    host: Option<&'a str>,
    headers: &'a BTreeMap<String, String>,
    api_key: Option<&'a str>,
    tenant: Option<&'a str>,
}

macro_rules! subject {
    ($body:expr) => {
        Subject {
            ip: $body.ip.as_deref(),
            method: $body.method.as_deref(),
            path: $body.path.as_deref(),
            host: $body.host.as_deref(),
            headers: &$body.headers,
            api_key: $body.api_key.as_deref(),
            tenant: $body.tenant.as_deref(),
        }
    };
}

/// A subject read and checked: what [`ratewarden_policy::Request`] borrows.
struct Resolved<'a> {
    ip: IpAddr,
    method: &'a str,
    path: std::borrow::Cow<'a, str>,
    host: Option<&'a str>,
    headers: Vec<(&'a str, &'a str)>,
    api_key: Option<&'a str>,
    tenant: Option<&'a str>,
}

impl<'a> Subject<'a> {
    /// Checks the fields (a 422 naming the one that is wrong) and applies the defaults.
    fn resolve(self, peer: SocketAddr) -> Result<Resolved<'a>, Problem> {
        let ip = match self.ip {
            None => peer.ip(),
            Some(text) => match text.trim().parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => {
                    return Err(Problem::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("`ip` must be an IPv4 or IPv6 address, not `{text}`"),
                    ))
                }
            },
        };
        let method = self.method.unwrap_or("GET");
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`method` must be an HTTP method such as \"GET\", not `{method}`"),
            ));
        }
        let path = self.path.unwrap_or("/");
        if !path.starts_with('/') {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`path` must start with `/`, not `{path}`"),
            ));
        }
        let path = path.split('?').next().unwrap_or(path);
        // The spelling the gateway would forward, so that every alias of a path is decided
        // as that path (issue 12, item 2). A field the API cannot use is a 422.
        let path = match ratewarden_policy::path::normalize(path) {
            Ok(path) => path,
            Err(error) => {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("`path`: {error}"),
                ))
            }
        };
        Ok(Resolved {
            ip,
            method,
            path,
            host: self.host,
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            api_key: self.api_key,
            tenant: self.tenant,
        })
    }
}

impl Resolved<'_> {
    fn request(&self, cost: Option<u64>) -> ratewarden_policy::Request<'_> {
        ratewarden_policy::Request {
            peer: self.ip,
            method: self.method,
            path: &self.path,
            host: self.host,
            headers: &self.headers,
            cost,
            api_key: self.api_key,
            tenant: self.tenant,
        }
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

pub(crate) async fn handle(
    app: &Arc<App>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
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
        return Box::pin(crate::serve::api::auth::handle(app, peer, request, flavour)).await;
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
    // sending its body a byte at a time holds a connection, never a place in flight
    // (issue 12, item 6). The slot is taken before deciding: shed load before the store.
    let settings = app.settings();
    let body = match read_json(&settings, request, strict).await {
        Ok(body) => body,
        Err(problem) => return problem.response(),
    };
    if endpoint == Endpoint::Check {
        return check(app, &settings, peer, &body).await.response();
    }
    let Some(_slot) = app.shedder.enter(false).await else {
        return at_capacity(app).response();
    };
    match endpoint {
        Endpoint::EnvoyJson => Box::pin(crate::serve::envoy::json(app, body)).await,
        Endpoint::Settle => match parse::<Settle>(&body) {
            Ok(settle) => Box::pin(self::settle(app, peer, settle)).await,
            Err(problem) => problem.response(),
        },
        // `Check` and `Unknown` were answered above; the match must name them.
        Endpoint::Check | Endpoint::Release | Endpoint::Unknown => match parse::<Release>(&body) {
            Ok(release) => Box::pin(self::release(app, peer, release)).await,
            Err(problem) => problem.response(),
        },
    }
}

async fn settle(app: &App, peer: SocketAddr, settle: Settle) -> Response<Body> {
    if settle.cost > MAX_COST {
        return too_costly(settle.cost).response();
    }
    let id = match settle.reservation.parse::<GrantId>() {
        Ok(id) => id,
        Err(e) => return reply::problem(StatusCode::BAD_REQUEST, format!("`reservation`: {e}")),
    };
    let owner = match subject!(settle).resolve(peer) {
        Ok(owner) => owner,
        Err(refused) => return refused.response(),
    };
    let owner = owner.request(None);
    let settled = app
        .engine
        .settle(id, Owner::Request(&owner), settle.cost, app.clock.now())
        .await;
    let status = match &settled {
        Ok(()) => {
            return reply::json(StatusCode::OK, &json!({ "settled": settle.reservation }));
        }
        Err(SettleError::Unknown) => StatusCode::NOT_FOUND,
        Err(SettleError::NotOwner { .. }) => StatusCode::FORBIDDEN,
        Err(SettleError::TooCostly { .. }) => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let error = settled.err().map(|e| e.to_string()).unwrap_or_default();
    reply::problem(
        status,
        format!("reservation {}: {error}", settle.reservation),
    )
}

async fn release(app: &App, peer: SocketAddr, release: Release) -> Response<Body> {
    let id = match release.permit.parse::<GrantId>() {
        Ok(id) => id,
        Err(e) => return reply::problem(StatusCode::BAD_REQUEST, format!("`permit`: {e}")),
    };
    let owner = match subject!(release).resolve(peer) {
        Ok(owner) => owner,
        Err(refused) => return refused.response(),
    };
    let owner = owner.request(None);
    match app
        .engine
        .release(id, Owner::Request(&owner), app.clock.now())
        .await
    {
        Ok(()) => reply::json(StatusCode::OK, &json!({ "released": release.permit })),
        Err(e) => {
            let status = match e {
                ReleaseError::Unknown => StatusCode::NOT_FOUND,
                ReleaseError::NotOwner { .. } => StatusCode::FORBIDDEN,
            };
            reply::problem(status, format!("permit {}: {e}", release.permit))
        }
    }
}

/// The body, within `[server] max_body`, as JSON.
async fn read_json(
    settings: &ServerSettings,
    request: Request<Incoming>,
    strict: bool,
) -> Result<Bytes, Problem> {
    if strict {
        json_content_type(request.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()))?;
    }
    let (max, timeout) = (settings.max_body, settings.bounds.api_body_timeout);
    // A declared length over the bound is refused before a byte of the body is read (hyper
    // has read `Content-Length` into the body's exact size already).
    let body = request.into_body();
    if let Some(length) = body.size_hint().exact() {
        declared_length(length, max)?;
    }
    let mut read = std::pin::pin!(read_to_end(body, max));
    // The timer is armed only for a body that is not there at once. hyper hands a body over
    // only once it is asked for, so the first poll always waits; it wakes this task again
    // (as asking for the body does), and a body still missing at the second poll, a moment
    // later, gets `timeout` from then. A body that came with its head, nearly every one,
    // costs no timer: arming and dropping one was 1,700 instructions a request (2026-12-03).
    let mut polls = 0;
    let early = std::future::poll_fn(|cx| match read.as_mut().poll(cx) {
        Poll::Ready(read) => Poll::Ready(Some(read)),
        Poll::Pending if polls == 0 => {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Poll::Pending => Poll::Ready(None),
    })
    .await;
    let timed = match early {
        Some(read) => Ok(read),
        None => tokio::time::timeout(timeout, read).await,
    };
    let Ok(read) = timed else {
        return Err(body_timed_out(timeout));
    };
    match read {
        Ok(body) => Ok(body),
        Err(BodyError::TooLarge) => Err(too_large(max)),
        Err(BodyError::Read(error)) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!("the body could not be read: {error}"),
        )),
    }
}

/// The 415 of a body that is not JSON, from its `Content-Type` (absent: taken as JSON).
/// Shared by hyper's path and the lean one (`lean.rs`).
pub(crate) fn json_content_type(kind: Option<&[u8]>) -> Result<(), Problem> {
    let Some(kind) = kind else {
        return Ok(());
    };
    // As `HeaderValue::to_str` reads it: visible ASCII, else nothing.
    let kind = if kind
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\t')
    {
        std::str::from_utf8(kind).unwrap_or("")
    } else {
        ""
    };
    let essence = kind.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("the body must be `application/json`, not `{kind}`"),
        ))
    }
}

/// The 413 of a declared `Content-Length` over `max`, before a byte of the body is read.
pub(crate) fn declared_length(length: u64, max: usize) -> Result<(), Problem> {
    if length > max as u64 {
        Err(too_large(max))
    } else {
        Ok(())
    }
}

/// The 408 of a body that did not arrive within `[server] api_body_timeout`.
pub(crate) fn body_timed_out(timeout: std::time::Duration) -> Problem {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the body did not arrive within {} (`[server] api_body_timeout`)",
            DisplayDuration(timeout)
        ),
    )
}

/// `/v1/check` once its body is read whole: a place in flight, the body read, the decision.
/// Both hyper's path (`handle`) and the lean one (`lean.rs`) answer through this.
pub(crate) async fn check(
    app: &Arc<App>,
    settings: &ServerSettings,
    peer: SocketAddr,
    body: &[u8],
) -> Plain {
    // The slot is taken before deciding: shed load before the store.
    let Some(_slot) = app.shedder.enter(false).await else {
        return at_capacity(app);
    };
    match parse_check(body) {
        Ok(check) => decide(app, settings, peer, check).await,
        Err(problem) => problem.plain(),
    }
}

/// The contract's 503 of a server with every place in flight taken.
fn at_capacity(app: &App) -> Plain {
    app.metrics.shed("in_flight");
    Plain::contract(ratewarden_http::unavailable(
        app.jittered(NANOS_PER_SEC),
        "the server is at capacity",
    ))
}

/// Why a body could not be read whole.
enum BodyError {
    /// It is over the bound.
    TooLarge,
    Read(hyper::Error),
}

/// `body` to its end, refused past `max` bytes. Kept as hyper hands it over when it comes
/// in one piece, as a small body nearly always does (http-body-util's `Limited` and
/// `Collect` queued every piece first, an allocation and 1,000 instructions a request).
async fn read_to_end(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut first = Bytes::new();
    let mut joined = Vec::new();
    while let Some(frame) = body.frame().await {
        // Trailers are not part of the body.
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue;
        };
        let read = first.len() + joined.len() + data.len();
        if read > max {
            return Err(BodyError::TooLarge);
        }
        if first.is_empty() && joined.is_empty() {
            first = data;
        } else {
            if joined.is_empty() {
                joined.reserve(read);
                joined.extend_from_slice(&std::mem::take(&mut first));
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(if joined.is_empty() {
        first
    } else {
        Bytes::from(joined)
    })
}

fn too_large(max: usize) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over {max} bytes (`[server] max_body`)"),
    )
}

/// A `/v1/check` body: by hand when it is plain (`check_json`), else as [`parse`] reads it.
fn parse_check(body: &[u8]) -> Result<Check<'_>, Problem> {
    match crate::serve::api::check_json::read(body) {
        Some(check) => Ok(check),
        None => parse(body),
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Problem> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde_json::Value>(body).is_ok()
    {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the body must be a JSON object, such as {\"ip\": \"203.0.113.7\", \"path\": \"/orders\"}",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let status = if e.is_data() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        let what = if e.is_eof() && body.iter().all(u8::is_ascii_whitespace) {
            "the body is empty; it must be a JSON object".to_owned()
        } else {
            format!("the body is not a valid request: {e}")
        };
        Problem::new(status, what)
    })
}

/// A `/v1/check` body read and checked exactly as `/v1/check` reads it: what `explain`
/// (the command and the admin listener's `POST /v1/explain`) takes.
pub(crate) struct CheckBody<'a>(Check<'a>);

/// A [`CheckBody`]'s request, its defaults applied.
pub(crate) struct CheckRequest<'a> {
    resolved: Resolved<'a>,
    cost: Option<u64>,
}

impl<'a> CheckBody<'a> {
    /// The body, or the 4xx `/v1/check` would answer it with.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Self, Problem> {
        let check = parse_check(body)?;
        if let Some(cost) = check.cost.filter(|&c| c > MAX_COST) {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`cost` is {cost}; it must be at most {MAX_COST}"),
            ));
        }
        Ok(Self(check))
    }

    /// Its fields checked, with `peer` the client when it names no `ip`.
    pub(crate) fn resolve(&self, peer: SocketAddr) -> Result<CheckRequest<'_>, Problem> {
        Ok(CheckRequest {
            resolved: subject!(self.0).resolve(peer)?,
            cost: self.0.cost,
        })
    }
}

impl CheckRequest<'_> {
    /// What the engine is asked.
    pub(crate) fn request(&self) -> ratewarden_policy::Request<'_> {
        self.resolved.request(self.cost)
    }
}

fn too_costly(cost: u64) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("`cost` is {cost}; it must be at most {MAX_COST}"),
    )
}

async fn decide(app: &App, settings: &ServerSettings, peer: SocketAddr, check: Check<'_>) -> Plain {
    if let Some(cost) = check.cost.filter(|&c| c > MAX_COST) {
        return too_costly(cost).plain();
    }
    let resolved = match subject!(check).resolve(peer) {
        Ok(resolved) => resolved,
        Err(refused) => return refused.plain(),
    };
    let request = resolved.request(check.cost);
    let started = app.clock.now();
    let verdict = match app.engine.decide(&request, started).await {
        Ok(verdict) => verdict,
        Err(e) => return Problem::new(request_error_status(&e), e.to_string()).plain(),
    };
    app.metrics
        .decision_seconds
        .observe(app.clock.now().saturating_sub(started) as f64 / 1e9);
    let answer = app.answer_with(&verdict, settings);
    let policies: Vec<PolicyOut<'_>> = verdict
        .outcomes
        .iter()
        .map(|o| {
            let d = &o.decision;
            let (outcome, retry_after_ms, delay_ms) = match d.outcome {
                Outcome::Allowed => ("allowed", None, None),
                Outcome::Delayed { delay_ns } => ("delayed", None, Some(ms(delay_ns))),
                Outcome::Limited { retry_after_ns } => ("limited", Some(ms(retry_after_ns)), None),
                Outcome::CostTooHigh => ("cost_too_high", None, None),
            };
            PolicyOut {
                name: &verdict.rules[o.rule].name,
                key: &o.key,
                outcome,
                enforced: o.enforced,
                limit: d.limit,
                remaining: d.remaining,
                reset_after_ms: ms(d.reset_after_ns),
                retry_after_ms,
                delay_ms,
                store_failed: o.store_failed,
            }
        })
        .collect();
    let name = |o: &ratewarden_policy::RuleOutcome| verdict.rules[o.rule].name.as_str();
    let (status, headers, body, delay_ms): (_, Vec<(&str, &str)>, _, _) = match &answer {
        Answer::Go { headers, delay } => (
            200,
            headers
                .iter()
                // Ours are visible ASCII.
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or_default()))
                .collect(),
            None,
            ms_duration(*delay),
        ),
        Answer::Stop(response) => (
            response.status,
            response
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            Some(response.body.as_str()).filter(|b| !b.is_empty()),
            0,
        ),
    };
    let out = DecisionOut {
        allowed: verdict.allowed,
        status,
        retry_after_ms: verdict.retry_after_ns.map(ms),
        delay_ms,
        policies,
        violated_policies: verdict.violated().map(name).collect(),
        would_have_rejected: verdict.would_have_rejected().map(name).collect(),
        reservation: verdict.reservation.map(|id| id.to_string()),
        permit: verdict.permit.map(|id| id.to_string()),
        config_version: verdict.version,
        headers,
        body,
    };
    Plain::json(StatusCode::OK, out.to_json())
}

/// Milliseconds, rounded up so a client waiting them is never early.
fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

fn ms_duration(d: std::time::Duration) -> u64 {
    ms(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// One status per meaning, at every door (docs/decision-api.md, "Errors"): a request that
/// cannot be read one way only is a 400, a well-formed one asking too much a 422.
pub(crate) fn request_error_status(error: &ratewarden_policy::RequestError) -> StatusCode {
    if error.is_malformed() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_strings_are_borrowed_and_escaped_ones_still_read() {
        let check: Check<'_> =
            parse(br#"{"api_key":"k-1","tenant":"a\"b\u00e9","path":"/x"}"#).expect("a check");
        let api_key = check.api_key.as_ref().expect("an api_key");
        assert!(
            matches!(api_key.0, Cow::Borrowed("k-1")),
            "no copy of a plain string"
        );
        assert_eq!(check.tenant.as_deref(), Some("a\"b\u{e9}"));
        assert_eq!(check.path.as_deref(), Some("/x"));
        assert_eq!(check.ip.as_deref(), None);
    }
}
