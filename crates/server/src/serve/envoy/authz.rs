//! Envoy's external authorization over gRPC (`envoy.service.auth.v3.Authorization/Check`),
//! beside the rate limit service: a `CheckRequest`'s attributes become the request the
//! gateway would have decided (source address, method, path, host, headers), and the
//! verdict comes back as the contract says, in Envoy's terms: OK with the RateLimit fields
//! in `response_headers_to_add`, or a denied response with the 429's status, headers and
//! body. A store failure follows the rules' failure policies: `UNAVAILABLE` (for Envoy's
//! `failure_mode_allow` to settle) only when a `closed` rule could not be checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use envoy_types::ext_authz::v3::pb::{
    Address, Authorization, CheckRequest, CheckResponse, DeniedHttpResponse, HeaderValue,
    HeaderValueOption, HttpResponse, HttpStatus, OkHttpResponse,
};
use envoy_types::pb::google::rpc;
use http::HeaderName;
use tonic::{Code, Request, Response, Status};

use crate::serve::admission::{self, Ask, Ruling};
use crate::serve::app::App;
use ratewarden_policy::Answer;

/// The service, over the server's engine.
pub(crate) struct Authz {
    pub(crate) app: Arc<App>,
}

#[tonic::async_trait]
impl Authorization for Authz {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let app = &self.app;
        // The attributes name the client's address and path: believed only from our proxies,
        // as the HTTP door's forwarding headers are.
        let peer = request.remote_addr().map(|a: SocketAddr| a.ip());
        if !peer.is_some_and(|ip| app.engine.identity().trusted().contains(ip)) {
            let who = peer.map_or_else(|| "an unknown peer".to_owned(), |ip| ip.to_string());
            app.log_untrusted(&who, "ext_authz Check", "`[server] trusted_proxies`");
            return Err(Status::permission_denied(format!(
                "{who} is not a trusted proxy (`[server] trusted_proxies`): a CheckRequest \
                 names the client's address and path, which only a trusted proxy may do"
            )));
        }
        check(app, &request.into_inner()).await.map(Response::new)
    }
}

/// Decides one `CheckRequest`. Bad input is `INVALID_ARGUMENT` naming the field.
async fn check(app: &Arc<App>, request: &CheckRequest) -> Result<CheckResponse, Status> {
    let attributes = request.attributes.as_ref();
    let source = attributes
        .and_then(|a| a.source.as_ref())
        .and_then(|p| p.address.as_ref())
        .and_then(|a| a.address.as_ref());
    let peer: IpAddr = match source {
        Some(Address::SocketAddress(socket)) => socket.address.trim().parse().map_err(|_| {
            Status::invalid_argument(format!(
                "`attributes.source.address`: `{}` is not an IP address",
                socket.address
            ))
        })?,
        _ => {
            return Err(Status::invalid_argument(
                "`attributes.source.address` must be the client's socket address",
            ))
        }
    };
    let Some(http) = attributes
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
    else {
        return Err(Status::invalid_argument(
            "`attributes.request.http` is missing: only HTTP requests are decided",
        ));
    };
    let method = http.method.as_str();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Status::invalid_argument(format!(
            "`attributes.request.http.method` must be an HTTP method, not `{method}`"
        )));
    }
    let path = http.path.split(['?', '#']).next().unwrap_or("");
    // The spelling the gateway would forward: every alias of a path is that path.
    let path = ratewarden_policy::path::normalize(path).map_err(|error| {
        Status::invalid_argument(format!("`attributes.request.http.path`: {error}"))
    })?;
    // Envoy sends `headers`, or `header_map` when asked to keep raw values; pseudo-headers
    // (`:path`, `:authority`) are already read above.
    let mut headers: Vec<(&str, &str)> = http
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if headers.is_empty() {
        if let Some(map) = &http.header_map {
            for h in &map.headers {
                let value = if h.value.is_empty() {
                    std::str::from_utf8(&h.raw_value).unwrap_or("")
                } else {
                    h.value.as_str()
                };
                headers.push((h.key.as_str(), value));
            }
        }
    }
    headers.retain(|(name, _)| !name.starts_with(':'));
    let engine_request = ratewarden_policy::Request {
        peer,
        method,
        path: &path,
        host: Some(http.host.as_str()).filter(|h| !h.is_empty()),
        headers: &headers,
        cost: None,
        api_key: None,
        tenant: None,
        body: None,
        client_cert: None,
    };
    let settings = app.settings();
    let ask = Ask::Request(&engine_request);
    let (answer, _slot) = match admission::admit(app, admission::EXT_AUTHZ, ask, &settings).await {
        Ruling::Decided(decided) => (decided.answer, decided.slot),
        Ruling::Shed(_) => {
            return Err(Status::unavailable(
                "overloaded: too many requests in flight",
            ))
        }
        Ruling::Undecided(undecided) => {
            let code = if undecided.status.is_server_error() {
                Code::FailedPrecondition
            } else {
                Code::InvalidArgument
            };
            return Err(Status::new(code, undecided.detail));
        }
    };
    match answer {
        Answer::Go { headers, delay } => {
            if !delay.is_zero() {
                // A queueing rule: Envoy holds the request until we answer.
                tokio::time::sleep(delay).await;
            }
            Ok(CheckResponse {
                status: Some(rpc::Status::default()),
                http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                    response_headers_to_add: options(&headers),
                    ..OkHttpResponse::default()
                })),
                ..CheckResponse::default()
            })
        }
        // The only 503 a verdict makes: a `closed` rule whose store failed.
        Answer::Stop(refused) if refused.status == 503 => Err(Status::unavailable(
            "the rate limit store failed and a rule fails closed",
        )),
        Answer::Stop(refused) => Ok(CheckResponse {
            status: Some(rpc::Status {
                code: Code::ResourceExhausted as i32,
                message: "over a rate limit".to_owned(),
                ..rpc::Status::default()
            }),
            http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                status: Some(HttpStatus {
                    code: i32::from(refused.status),
                }),
                headers: options(&refused.headers),
                body: refused.body,
            })),
            ..CheckResponse::default()
        }),
    }
}

/// Header lines as Envoy's header options (appended, as the gateway appends them).
fn options<V: AsRef<[u8]>>(headers: &[(HeaderName, V)]) -> Vec<HeaderValueOption> {
    headers
        .iter()
        .map(|(name, value)| HeaderValueOption {
            header: Some(HeaderValue {
                key: name.as_str().to_owned(),
                // Ours are visible ASCII.
                value: String::from_utf8_lossy(value.as_ref()).into_owned(),
                ..HeaderValue::default()
            }),
            ..HeaderValueOption::default()
        })
        .collect()
}
