//! Forward-auth: `/v1/auth` (Traefik, Caddy, HAProxy), `/v1/auth/nginx` (nginx's
//! `auth_request`, ingress-nginx) and `/v1/auth/envoy/…` (Envoy's HTTP `ext_authz` with
//! `path_prefix: /v1/auth/envoy`), any method, on the decision API's listener.
//!
//! A proxy asks about a request before forwarding it, describing it in headers: the method,
//! the URI, the host and the client's address, beside the client's own headers (its API key,
//! its tenant). Those headers are believed only from `trusted_proxies`: anyone else could
//! name their own path and address, and so choose their own budget. The answer is the
//! gateway's: 200 with the RateLimit fields for the proxy to copy onto the response, or the
//! contract's 429 (or 503). nginx's `auth_request` takes only 2xx, 401 and 403 (anything
//! else is an error, a 500 to the client), so its flavour answers a limit with 403 and the
//! same headers, and the nginx config turns that back into a 429 (`docs/front-doors.md`).

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::HeaderMap;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::serve::admission::{self, Ask, Ruling};
use crate::serve::app::App;
use crate::serve::guard;
use crate::serve::reply::{self, Body, Problem};
use ratewarden_policy::Answer;

/// Which proxy family asks: it decides the status of a limited request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// `/v1/auth`: a limit is the contract's 429, passed on to the client as it is.
    Plain,
    /// `/v1/auth/nginx`: a limit is a 403 with the 429's headers and body.
    Nginx,
    /// `/v1/auth/envoy/…`: Envoy's HTTP `ext_authz` asks with the request's own method and
    /// its path after the prefix, so those are read from the request line (which a client
    /// cannot write into) rather than from headers; a limit is the contract's 429.
    Envoy,
}

impl Flavour {
    /// The path it is asked on, as logs name it.
    fn door(self) -> &'static str {
        match self {
            Self::Plain => "/v1/auth",
            Self::Nginx => "/v1/auth/nginx",
            Self::Envoy => ENVOY_PREFIX,
        }
    }
}

/// The prefix Envoy's `path_prefix` puts before the proxied path.
pub(crate) const ENVOY_PREFIX: &str = "/v1/auth/envoy";

/// Where the proxied request's URI may be named: Traefik and Caddy, then nginx, then
/// ingress-nginx (which always sends the absolute `X-Original-URL`, and `X-Original-URI`
/// only with `auth-method`).
const URI_HEADERS: [&str; 3] = ["x-forwarded-uri", "x-original-uri", "x-original-url"];
/// Where its method may be named.
const METHOD_HEADERS: [&str; 2] = ["x-forwarded-method", "x-original-method"];

/// The attributes of the proxied request, as the proxy named them.
struct Proxied<'a> {
    method: &'a str,
    path: std::borrow::Cow<'a, str>,
    /// The URI's query, if it has one.
    query: Option<&'a str>,
    host: Option<&'a str>,
}

pub(crate) async fn handle(
    app: &Arc<App>,
    peer: SocketAddr,
    request: Request<Incoming>,
    flavour: Flavour,
) -> Response<Body> {
    let identity = app.engine.identity();
    if !identity.trusted().contains(peer.ip()) {
        app.log_untrusted(
            &peer.ip().to_string(),
            flavour.door(),
            "`[server] trusted_proxies`",
        );
        return reply::problem(
            StatusCode::FORBIDDEN,
            format!(
                "{} is not a trusted proxy (`[server] trusted_proxies`): forward-auth takes the \
                 request's path, method and client address from headers that only a trusted \
                 proxy may set",
                peer.ip()
            ),
        );
    }
    let headers = request.headers();
    let own_path = (flavour == Flavour::Envoy).then(|| {
        let rest = request
            .uri()
            .path()
            .strip_prefix(ENVOY_PREFIX)
            .unwrap_or("");
        if rest.is_empty() {
            "/"
        } else {
            rest
        }
    });
    let client_header = identity.trusted().header().name();
    let proxied = match read(headers, request.method().as_str(), own_path, client_header) {
        Ok(proxied) => proxied,
        Err(problem) => return problem.response(),
    };
    // The client's own headers, as the upstream will read them: one reading only.
    // The proxy never sends the body: a `_method` there is beyond this door (the gateway
    // reads it); one in the query is refused as the override headers are.
    if let Some(detail) = guard::ambiguous_identity(headers, &identity)
        .or_else(|| guard::method_override(headers, proxied.method))
        .or_else(|| query_override(proxied.query, proxied.method))
    {
        return reply::problem(StatusCode::BAD_REQUEST, detail);
    }
    let header_pairs = ratewarden_policy::parts::header_pairs(headers);
    // The proxy is the peer and trusted: the engine reads the client's address from the
    // forwarding headers, as it does behind a load balancer.
    let engine_request = ratewarden_policy::Request {
        peer: peer.ip(),
        method: proxied.method,
        path: &proxied.path,
        host: proxied.host,
        headers: &header_pairs,
        cost: None,
        api_key: None,
        tenant: None,
        body: None,
        client_cert: None,
    };
    let settings = app.settings();
    let ask = Ask::Request(&engine_request);
    let (answer, _slot) = match admission::admit(app, admission::FORWARD_AUTH, ask, &settings).await
    {
        Ruling::Decided(decided) => (decided.answer, decided.slot),
        Ruling::Shed(response) => return reply::contract(response),
        Ruling::Undecided(undecided) => return reply::problem(undecided.status, undecided.detail),
    };
    match answer {
        Answer::Go { headers, delay } => {
            if !delay.is_zero() {
                // A queueing rule: the proxy waits for our answer, so the request waits
                // its turn, as nginx's `limit_req burst=N` would make it.
                tokio::time::sleep(delay).await;
            }
            let mut response = Response::new(reply::full(""));
            reply::append_headers(&mut response, headers);
            response
        }
        Answer::Stop(refused) => {
            let mut response = reply::contract(refused);
            if flavour == Flavour::Nginx && response.status() == StatusCode::TOO_MANY_REQUESTS {
                *response.status_mut() = StatusCode::FORBIDDEN;
            }
            response
        }
    }
}

/// Reads the proxied request's method, path and host from the forwarding headers (the
/// path and method from the request itself when `own_path` is given: Envoy's flavour); a
/// 400 naming the header when one is missing, unreadable or contradicted by another, or
/// when `client_header` (`[server] client_ip_header`) does not name the client.
fn read<'a>(
    headers: &'a HeaderMap,
    own_method: &'a str,
    own_path: Option<&'a str>,
    client_header: &str,
) -> Result<Proxied<'a>, Problem> {
    let bad = |detail: String| Problem::new(StatusCode::BAD_REQUEST, detail);
    let uri = match own_path {
        Some(path) => path,
        None => named(headers, &URI_HEADERS, target)?.ok_or_else(|| {
            bad(
                "the proxy named no request URI: send `X-Forwarded-Uri` (Traefik, Caddy), \
                 `X-Original-URI` (nginx: `proxy_set_header X-Original-URI $request_uri`) or \
                 `X-Original-URL` (ingress-nginx)"
                    .to_owned(),
            )
        })?,
    };
    // Without an address to read, every client would be counted as the proxy itself. Only
    // the configured header names it: another the proxy passed through is the client's.
    if !headers.contains_key(client_header) {
        return Err(bad(format!(
            "the proxy named no client address in `{client_header}` (`[server] \
             client_ip_header`): send it (nginx: `proxy_set_header X-Forwarded-For \
             $proxy_add_x_forwarded_for`), or set `client_ip_header` to the header your proxy \
             writes"
        )));
    }
    let path = uri.split(['?', '#']).next().unwrap_or(uri);
    let query = uri
        .split('#')
        .next()
        .and_then(|before| before.split_once('?'))
        .map(|(_, query)| query);
    // The spelling the gateway would forward, so that every alias of a path is decided as
    // that path.
    let path = ratewarden_policy::path::normalize(path).map_err(|error| {
        let source = if own_path.is_some() {
            "the path after `/v1/auth/envoy`"
        } else {
            uri_header(headers)
        };
        bad(format!("`{source}`: {error}"))
    })?;
    let method = match own_path {
        Some(_) => own_method,
        None => named(headers, &METHOD_HEADERS, as_is)?.unwrap_or(own_method),
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(bad(format!(
            "the proxied method must be an HTTP method such as `GET`, not `{method}`"
        )));
    }
    // Caddy and Envoy keep the client's `Host`; nginx and Traefik name it apart, and
    // ingress-nginx within `X-Original-URL`.
    let host = match named(headers, &["x-forwarded-host"], as_is)? {
        Some(host) => Some(host),
        None => match named(headers, &["x-original-url"], authority)? {
            Some(host) => Some(host),
            None => named(headers, &["host"], as_is)?,
        },
    };
    Ok(Proxied {
        method,
        path,
        query,
        host,
    })
}

/// Why the query's `_method` could make the proxied request another method upstream, if
/// it could (Symfony and Laravel read it there).
fn query_override(query: Option<&str>, method: &str) -> Option<String> {
    let named = ratewarden_policy::method_override::in_query(query?);
    let other = named.iter().find(|m| !m.eq_ignore_ascii_case(method))?;
    Some(format!(
        "`_method={other}` in the query would make this {method} a {other} upstream; send \
         that method"
    ))
}

/// The one value the headers `names` give, each line read by `convert`, if any: lines that
/// disagree, within one header or across them, are refused, since a client could add one
/// the proxy does not replace; a line `convert` cannot read is refused, naming it.
fn named<'a>(
    headers: &'a HeaderMap,
    names: &[&str],
    convert: fn(&str) -> Option<&str>,
) -> Result<Option<&'a str>, Problem> {
    let mut found: Option<(&str, &str)> = None;
    for &name in names {
        for value in headers.get_all(name) {
            let Ok(value) = value.to_str() else {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    format!("`{name}` holds bytes that are not visible ASCII"),
                ));
            };
            let Some(value) = convert(value.trim()) else {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "`{name}: {}` is not a request target (`/path?query` or \
                         `scheme://host/path?query`)",
                        value.trim()
                    ),
                ));
            };
            match found {
                Some((first, seen)) if seen != value => {
                    return Err(Problem::new(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "`{first}: {seen}` and `{name}: {value}` name the request two ways; \
                             the proxy must send one"
                        ),
                    ));
                }
                Some(_) => {}
                None => found = Some((name, value)),
            }
        }
    }
    Ok(found.map(|(_, value)| value))
}

/// The request target of a URI in origin form (`/path?query`) or absolute form
/// (`https://host/path?query`, as ingress-nginx sends `X-Original-URL`).
fn target(uri: &str) -> Option<&str> {
    if uri.starts_with('/') {
        return Some(uri);
    }
    let rest = &uri[uri.find("://")? + 3..];
    match rest.find(['/', '?', '#']) {
        Some(at) if rest[at..].starts_with('/') => Some(&rest[at..]),
        // `https://host` and `https://host?q` ask for `/`.
        _ => Some("/"),
    }
}

/// A header's value as it is.
fn as_is(value: &str) -> Option<&str> {
    Some(value)
}

/// The host of an absolute URI (`https://host:port/path`); `None` for any other form.
fn authority(uri: &str) -> Option<&str> {
    let rest = &uri[uri.find("://")? + 3..];
    let host = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    Some(host).filter(|h| !h.is_empty())
}

/// The header the URI was read from, for an error.
fn uri_header(headers: &HeaderMap) -> &'static str {
    URI_HEADERS
        .into_iter()
        .find(|name| headers.contains_key(*name))
        .unwrap_or(URI_HEADERS[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(lines: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_path_is_normalized_and_the_query_dropped() {
        let map = headers(&[
            ("x-forwarded-uri", "//api/./orders/../orders?page=2"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-method", "POST"),
        ]);
        let proxied = read(&map, "GET", None, "x-forwarded-for")
            .map_err(|p| p.detail)
            .unwrap();
        assert_eq!(proxied.path, "/api/orders");
        assert_eq!(proxied.method, "POST");
    }

    #[test]
    fn nginx_headers_are_read_and_the_own_method_is_the_default() {
        let map = headers(&[
            ("x-original-uri", "/login"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-host", "shop.example"),
            ("host", "ratewarden:8080"),
        ]);
        let proxied = read(&map, "PUT", None, "x-forwarded-for")
            .map_err(|p| p.detail)
            .unwrap();
        assert_eq!(
            (proxied.method, &*proxied.path, proxied.host),
            ("PUT", "/login", Some("shop.example"))
        );
    }

    #[test]
    fn two_uris_that_disagree_are_refused_naming_both() {
        // A client behind Traefik adding `X-Original-URI` of its own.
        let map = headers(&[
            ("x-forwarded-uri", "/expensive"),
            ("x-original-uri", "/cheap"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        let problem = read(&map, "GET", None, "x-forwarded-for")
            .err()
            .expect("refused");
        assert_eq!(problem.status, StatusCode::BAD_REQUEST);
        assert!(
            problem.detail.contains("x-forwarded-uri: /expensive"),
            "{}",
            problem.detail
        );
        assert!(
            problem.detail.contains("x-original-uri: /cheap"),
            "{}",
            problem.detail
        );
    }

    #[test]
    fn a_missing_uri_or_client_address_is_a_400_naming_the_header() {
        let problem = read(
            &headers(&[("x-forwarded-for", "203.0.113.7")]),
            "GET",
            None,
            "x-forwarded-for",
        )
        .err()
        .expect("refused");
        assert!(
            problem.detail.contains("X-Original-URI"),
            "{}",
            problem.detail
        );
        let problem = read(
            &headers(&[("x-forwarded-uri", "/orders")]),
            "GET",
            None,
            "x-forwarded-for",
        )
        .err()
        .expect("refused");
        assert!(
            problem.detail.contains("X-Forwarded-For"),
            "{}",
            problem.detail
        );
        // A forwarding header the proxy does not write names nobody: it may be the client's.
        for (sent, configured) in [
            (("forwarded", "for=203.0.113.7"), "x-forwarded-for"),
            (("x-forwarded-for", "203.0.113.7"), "x-real-ip"),
        ] {
            let map = headers(&[("x-forwarded-uri", "/orders"), sent]);
            let problem = read(&map, "GET", None, configured).err().expect("refused");
            assert!(
                problem.detail.contains(&format!("`{configured}`")),
                "{}",
                problem.detail
            );
        }
    }

    #[test]
    fn envoys_flavour_reads_its_own_request_line_not_the_headers() {
        // A client's own `X-Forwarded-Uri` names nothing here: the path is the request's.
        let map = headers(&[
            ("x-forwarded-uri", "/cheap"),
            ("x-forwarded-method", "GET"),
            ("x-forwarded-for", "203.0.113.7"),
            ("host", "shop.example"),
        ]);
        let proxied = read(&map, "DELETE", Some("/orders/./7"), "x-forwarded-for")
            .map_err(|p| p.detail)
            .unwrap();
        assert_eq!(
            (proxied.method, &*proxied.path, proxied.host),
            ("DELETE", "/orders/7", Some("shop.example"))
        );
    }

    #[test]
    fn ingress_nginx_names_the_uri_absolute_with_its_host() {
        let map = headers(&[
            ("x-original-url", "https://shop.example/orders/./7?page=1"),
            ("x-original-method", "POST"),
            ("x-forwarded-for", "203.0.113.7"),
            ("host", "ratewarden.svc"),
        ]);
        let proxied = read(&map, "GET", None, "x-forwarded-for")
            .map_err(|p| p.detail)
            .unwrap();
        assert_eq!(
            (proxied.method, &*proxied.path, proxied.host),
            ("POST", "/orders/7", Some("shop.example"))
        );
        // With `auth-method`, ingress-nginx sends `X-Original-URI` as well: they agree.
        let map = headers(&[
            ("x-original-url", "http://shop.example/orders?page=1"),
            ("x-original-uri", "/orders?page=1"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        assert_eq!(
            read(&map, "GET", None, "x-forwarded-for")
                .map_err(|p| p.detail)
                .unwrap()
                .path,
            "/orders"
        );
        assert_eq!(target("https://shop.example"), Some("/"));
        assert_eq!(target("orders"), None);
        let map = headers(&[
            ("x-original-url", "orders"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        let problem = read(&map, "GET", None, "x-forwarded-for")
            .err()
            .expect("refused");
        assert!(
            problem.detail.contains("not a request target"),
            "{}",
            problem.detail
        );
    }

    #[test]
    fn a_path_that_cannot_be_normalized_is_a_400() {
        let map = headers(&[
            ("x-forwarded-uri", "/a%2fb"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        let problem = read(&map, "GET", None, "x-forwarded-for")
            .err()
            .expect("refused");
        assert!(
            problem.detail.starts_with("`x-forwarded-uri`"),
            "{}",
            problem.detail
        );
    }
}
