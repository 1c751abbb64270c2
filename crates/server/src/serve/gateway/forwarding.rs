//! The forwarding headers the gateway sends the upstream: who the client is, in every
//! header that names it, and how it reached us. Both paths write them from here: hyper's
//! (`forwarding_headers`, on a `HeaderMap`) and the lean one (`lean::forward`, on the
//! head's lines), so neither may phrase our hop another way.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ratewarden_policy::{ClientIpHeader, Identity};

/// Tells the upstream who the client is: the client we keyed on, in every header that
/// names it. The one header our proxies write (`[server] client_ip_header`) has our hop
/// added to the list a trusted proxy sent; `X-Forwarded-For` and `Forwarded`, when not that
/// header, are written anew as the client and our hop; any other header naming the client
/// (`X-Real-IP`, `True-Client-IP`, ...) is replaced by the client. An upstream must not take
/// a client's word for its address in a header our proxy passed through untouched.
/// `proto` is how the client reached us ([`proto`]).
pub(super) fn forwarding_headers(
    headers: &mut HeaderMap,
    identity: &Identity,
    peer: SocketAddr,
    proto: &'static str,
) {
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
        (&mut forwarded_for, &mut forwarded),
        proto,
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
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
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
/// is written anew as the client and our hop, with `proto` when we begin it. Both gateway
/// paths write their lines from this one function.
pub(crate) fn forwarding_values(
    peer: std::net::IpAddr,
    client: std::net::IpAddr,
    (sent_for, sent_forwarded): (Option<&str>, Option<&str>),
    (forwarded_for, forwarded): (&mut String, &mut String),
    proto: &'static str,
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
        forwarded.push_str(proto);
    }
}

/// How a client reached us, over TLS or not: the `X-Forwarded-Proto` we add when none is
/// forwarded, and the `proto=` of a `Forwarded` list we begin.
pub(crate) fn proto(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

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
