//! The request side: what the engine knows of a request, and what it reads from it: the
//! client's address, the headers a rule matches and keys on, credentials, the keys and
//! costs of the rules that apply, and the hashes that fix a key's spelling.
//!
//! Nothing here holds state or asks a store: each function reads a request under the rules
//! it is given.

mod credentials;
mod descriptor;
mod flow_hash;
mod hash;
mod identity;
mod keys;
mod matching;

pub use descriptor::RequestDescriptor;
pub(crate) use flow_hash::FlowHash;
pub(crate) use hash::bounded_part;
pub use hash::{api_key_digest, fingerprint, rollout_bucket};
pub use identity::Identity;
pub(crate) use keys::{
    api_key, build_key, cost_of, enforces, json_part, part_words, push_part, STOOD_IN,
};

use std::net::IpAddr;

use crate::ip::{client_ip, ClientIpError, TrustedProxies};

/// The header a request's criticality is read from: `critical`, `default` or
/// `sheddable`. A client may lower its own class; only a trusted proxy may raise it.
pub const CRITICALITY_HEADER: &str = "x-criticality";

/// What the engine needs to know of a request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The socket's peer address.
    pub peer: IpAddr,
    /// The method, such as `GET`.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The `Host` (or `:authority`).
    pub host: Option<&'a str>,
    /// Header lines, names in any case, in the order received.
    pub headers: &'a [(&'a str, &'a str)],
    /// The cost under every matching rule, when the caller says (the decision API's `cost`);
    /// otherwise each rule's own.
    pub cost: Option<u64>,
    /// The API key, when the caller names it outright (the decision API's `api_key`); it
    /// wins over the request's headers.
    pub api_key: Option<&'a str>,
    /// The tenant, when the caller names it outright; it wins over the tenant header.
    pub tenant: Option<&'a str>,
    /// The body, when the door read it whole before deciding (the gateway does for a JSON
    /// body when a rule's cost is an estimate from it, [`Cost::Body`](crate::Cost::Body));
    /// `None` otherwise, and such a rule charges its `max_cost`.
    pub body: Option<&'a [u8]>,
    /// The subject of the client's TLS certificate, verified in the handshake (the
    /// `client_cert` key part); `None` without one.
    pub client_cert: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub(crate) fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a str> + 's {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// The first line of header `name`: for matching, where any line will do.
    pub(crate) fn header(&self, name: &str) -> Option<&'a str> {
        self.header_values(name).next()
    }

    /// The one line of header `name`, for a key or a cost: a repeated header is refused,
    /// since a proxy and the upstream may each read a different line of it, and keying
    /// on the first would let a client pick its own budget.
    pub(crate) fn single_header(&self, name: &str) -> Result<Option<&'a str>, Repeated> {
        let mut values = self.header_values(name);
        let first = values.next();
        if values.next().is_some() {
            return Err(Repeated);
        }
        Ok(first)
    }
}

/// A header that came more than once where one line is needed.
#[derive(Debug)]
pub(crate) struct Repeated;

/// The client's address. The forwarding header is gathered only when the peer is one of our
/// proxies: for every other request (most of them, without a proxy) it cannot matter.
pub(crate) fn client_of(
    request: &Request<'_>,
    trusted: &TrustedProxies,
) -> Result<IpAddr, ClientIpError> {
    if !trusted.contains(request.peer) {
        return client_ip(request.peer, &[], trusted);
    }
    let lines: Vec<&str> = request.header_values(trusted.header().name()).collect();
    client_ip(request.peer, &lines, trusted)
}
