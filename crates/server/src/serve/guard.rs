//! What the gateway and forward-auth refuse before deciding: requests whose identity the
//! limiter and the upstream could read differently.
//!
//! The rule: the limiter keys on exactly what the upstream will see. A header that decides
//! who a request is (the API key, the tenant, a header a rule keys or matches on, `Host`,
//! the forwarding headers, a cost header) must reach the upstream as it was decided on:
//! never stripped as hop-by-hop because `Connection` names it, never sent twice so that the
//! limiter counts one line and the upstream reads the other. Which headers those are is
//! worked out with the rule set (`ratewarden_policy::Identity`), once per reload.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::Authority;
use http::{Method, Request, Response, StatusCode, Version};
use ratewarden_policy::{Identity, MethodOverride};

use crate::serve::reply::{self, Body};

/// Headers that may come as several lines, each a list: repeating them is not a conflict.
const LIST_HEADERS: [&str; 2] = ["forwarded", "x-forwarded-for"];

/// Headers with which some frameworks let a client replace the method the upstream routes
/// on (Rack's MethodOverride, Symfony, Laravel, ASP.NET): a `GET /login` with
/// `X-HTTP-Method-Override: POST` is a `POST /login` upstream, unseen by a rule on it.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Headers with which some servers let a client replace the path (IIS URL Rewrite,
/// Symfony, Zend): the path the rules matched would not be the one served.
const PATH_OVERRIDES: [&str; 2] = ["x-original-url", "x-rewrite-url"];

/// The methods the gateway forwards, for `Allow`.
const ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// The answer refusing a request whose identity could be read two ways, or that asks for a
/// tunnel; `None` for a request the gateway may decide. Under `method_override = "decide"`
/// a `POST`'s override header is left to `overrides.rs`, which decides it as that method.
pub(crate) fn refusal<B>(
    request: &Request<B>,
    identity: &Identity,
    mode: MethodOverride,
) -> Option<Response<Body>> {
    if request.method() == Method::CONNECT {
        // A tunnel carries bytes we cannot decide on, to wherever the client names.
        let mut response = reply::problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "the gateway does not open tunnels (`CONNECT`)",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        return Some(response);
    }
    let headers = request.headers();
    let bad = |detail: String| Some(reply::problem(StatusCode::BAD_REQUEST, detail));
    if let Some(detail) = host_problem(request) {
        return bad(detail);
    }
    // One look at the few names a request has, instead of a lookup (a name parsed and
    // hashed) for each of the five override headers.
    let overrides = headers.keys().any(|name| {
        let name = name.as_str();
        METHOD_OVERRIDES.contains(&name) || PATH_OVERRIDES.contains(&name)
    });
    if overrides {
        let decided = mode == MethodOverride::Decide && request.method() == Method::POST;
        if !decided {
            if let Some(detail) = method_override(headers, request.method().as_str()) {
                return bad(detail);
            }
        }
        for name in PATH_OVERRIDES {
            if headers.contains_key(name) {
                return bad(format!(
                    "`{name}` would make the upstream serve another path than the one decided on"
                ));
            }
        }
    }
    for name in connection_names(headers) {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            if identity.decides(name.as_str()) {
                return bad(format!(
                    "`Connection` names `{name}`, a header that decides who the request is; \
                     it would be removed before the upstream sees it"
                ));
            }
        }
    }
    if let Some(detail) = ambiguous_identity(headers, identity) {
        return bad(detail);
    }
    None
}

/// Why the request's host cannot be read one way, if it cannot (RFC 9112 §3.2): two `Host`
/// lines, none on HTTP/1.1, one or a target authority that is not a host, or a `Host` that
/// names another host than the target's authority (compared as hosts: `A.example.` is
/// `a.example`).
pub(crate) fn host_problem<B>(request: &Request<B>) -> Option<String> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("the request has two `Host` headers; send one".to_owned());
    }
    let host = match host.map(HeaderValue::to_str) {
        Some(Ok(host)) => Some(host),
        Some(Err(_)) => return Some("`Host` holds bytes that are not visible ASCII".to_owned()),
        None => None,
    };
    let authority = request.uri().authority().map(Authority::as_str);
    if host.is_none() && request.version() == Version::HTTP_11 {
        return Some(
            "an HTTP/1.1 request needs a `Host` header (RFC 9112 §3.2); send the host it is for"
                .to_owned(),
        );
    }
    let host = match host.map(ratewarden_policy::host::normalize) {
        Some(Ok(host)) => Some(host),
        Some(Err(error)) => return Some(format!("`Host`: {error}")),
        None => None,
    };
    if let Some(authority) = authority {
        let target = match ratewarden_policy::host::normalize(authority) {
            Ok(target) => target,
            Err(error) => return Some(format!("the request target's authority: {error}")),
        };
        if host.is_some_and(|host| host != target) {
            return Some(format!(
                "`Host` names another host than the request target's `{authority}`; send \
                 the same host in both"
            ));
        }
    }
    None
}

/// The method override headers' lines, each as its name and the method it names
/// (uppercased, as the frameworks read it).
pub(crate) fn override_headers(
    headers: &HeaderMap,
) -> impl Iterator<Item = (&'static str, String)> + '_ {
    METHOD_OVERRIDES.into_iter().flat_map(move |name| {
        headers.get_all(name).iter().map(move |value| {
            let method = String::from_utf8_lossy(value.as_bytes()).to_ascii_uppercase();
            (name, method)
        })
    })
}

/// Why a request's method could be read as another one upstream (a method override header
/// naming another method than `method`), if it could.
pub(crate) fn method_override(headers: &HeaderMap, method: &str) -> Option<String> {
    for name in METHOD_OVERRIDES {
        for value in headers.get_all(name) {
            if !value.as_bytes().eq_ignore_ascii_case(method.as_bytes()) {
                return Some(format!(
                    "`{name}` would make this {method} another method upstream; send that method"
                ));
            }
        }
    }
    None
}

/// Why the headers that decide who a request is could be read two ways (a repeated line,
/// an underscore spelling, bytes the engine cannot read), if they could: the limiter and
/// the upstream must read the same identity.
pub(crate) fn ambiguous_identity(headers: &HeaderMap, identity: &Identity) -> Option<String> {
    for name in headers.keys() {
        // CGI, WSGI and PHP read `x_api_key` and `x-api-key` as one variable: the upstream
        // may take the line the limiter did not count.
        if name.as_str().contains('_') {
            let dashed = name.as_str().replace('_', "-");
            if identity.decides(&dashed) {
                return Some(format!(
                    "`{name}` reads as `{dashed}` to some upstreams, a header that decides who \
                     the request is; send `{dashed}` only"
                ));
            }
        }
        if !identity.decides(name.as_str()) {
            continue;
        }
        if !LIST_HEADERS.contains(&name.as_str()) && headers.get_all(name).iter().nth(1).is_some() {
            return Some(format!(
                "the request has two `{name}` headers, which decide who it is; send one"
            ));
        }
        // The engine reads text: a value it cannot read would be decided as absent, and
        // forwarded as present.
        if headers.get_all(name).iter().any(|v| v.to_str().is_err()) {
            return Some(format!(
                "`{name}` holds bytes that are not visible ASCII; it decides who the request \
                 is, so it must be readable"
            ));
        }
    }
    None
}

/// The header names listed in `Connection`, lowercase.
pub(crate) fn connection_names(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
}
