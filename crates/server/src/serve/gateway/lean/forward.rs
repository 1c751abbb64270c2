//! The head the lean path forwards: the request as `proxy::forward` makes it of what the
//! client sent, in the bytes hyper-util's client writes for it.

use std::net::{IpAddr, SocketAddr};

use ratewarden_policy::TrustedProxies;

use super::head::Get;
use crate::serve::gateway::forwarding;
use crate::serve::h1::head::{request_line, write_in_order, write_line, Groups, Line};
use crate::serve::h1::request::Header;

/// What a connection's requests tell the upstream of its client.
pub(super) struct Forwarding {
    /// The connection's peer.
    ip: IpAddr,
    /// The forwarding lines and the head's end for a request that carries no forwarding
    /// line (most): the same for every such request of the connection, trusted proxy or
    /// not, since `forwarding_headers` then has no list of a proxy's to add to.
    plain: Vec<u8>,
    /// The values for a trusted proxy's request, made anew for each (in buffers kept for
    /// the connection).
    forwarded_for: String,
    forwarded: String,
    /// How the client reached us (`forwarding::proto`).
    proto: &'static str,
}

impl Forwarding {
    /// For the requests of a connection from `peer`, over TLS or not.
    pub(super) fn new(peer: SocketAddr, tls: bool) -> Self {
        let ip = peer.ip();
        let proto = forwarding::proto(tls);
        let mut forwarded_for = String::with_capacity(48);
        let mut forwarded = String::with_capacity(64);
        forwarding::forwarding_values(
            ip,
            ip,
            (None, None),
            (&mut forwarded_for, &mut forwarded),
            proto,
        );
        let mut plain = Vec::with_capacity(128);
        tail(
            &mut plain,
            Some(forwarded_for.as_bytes()),
            forwarded.as_bytes(),
            Some(proto),
        );
        Self {
            ip,
            plain,
            forwarded_for,
            forwarded,
            proto,
        }
    }

    /// Writes into `out` (cleared first) the head hyper-util's client writes for the
    /// request `proxy::forward` makes of `get`: the normalized `path` and the query as
    /// sent; the header lines grouped by name as a header map keeps them, lowercase;
    /// `Connection` removed (the map's removal moves its last name into the gap); a trusted
    /// proxy's `X-Forwarded-For` line, where it stands, with our hop added (the map's
    /// `insert` keeps a name's place); then the forwarding lines the map did not have, in
    /// the order `forwarding_headers` inserts them, naming the client that line gives
    /// through `trusted` (given with the line). The head's reader took no other forwarding
    /// line: from a peer we do not trust, none at all.
    pub(super) fn write_head(
        &mut self,
        out: &mut Vec<u8>,
        get: &Get<'_, '_>,
        path: &str,
        trusted: Option<&TrustedProxies>,
    ) {
        out.clear();
        request_line(out, get.method, path, get.query);
        let proxied = get.forwarded_for.is_some() || get.forwarded_proto;
        if proxied {
            // Visible ASCII (the head's reader checked).
            let sent = get
                .forwarded_for
                .and_then(|at| std::str::from_utf8(get.headers[at].value).ok());
            // The admission read the same line: a client it could not know was refused
            // there.
            let client = match (sent, trusted) {
                (Some(sent), Some(trusted)) => {
                    ratewarden_policy::client_ip(self.ip, &[sent], trusted).unwrap_or(self.ip)
                }
                _ => self.ip,
            };
            forwarding::forwarding_values(
                self.ip,
                client,
                (sent, None),
                (&mut self.forwarded_for, &mut self.forwarded),
                self.proto,
            );
        }
        let connection = get
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("connection"));
        if connection || get.forwarded_for.is_some() {
            let mut lines: Vec<Line<'_>> = get.headers.iter().map(header_line).collect();
            if let Some(at) = get.forwarded_for {
                lines[at].1 = self.forwarded_for.as_bytes();
            }
            if connection {
                let mut groups = Groups::of(&lines);
                groups.remove(&lines, b"connection");
                groups.write(out, &lines, None);
            } else {
                write_in_order(out, &lines, |l| *l, None);
            }
        } else {
            // Nothing removed or replaced (most heads): no list of lines to build.
            write_in_order(out, get.headers, header_line, None);
        }
        if !proxied {
            out.extend_from_slice(&self.plain);
            return;
        }
        tail(
            out,
            get.forwarded_for
                .is_none()
                .then_some(self.forwarded_for.as_bytes()),
            self.forwarded.as_bytes(),
            (!get.forwarded_proto).then_some(self.proto),
        );
    }
}

/// Our forwarding lines the head did not have, in the order `forwarding_headers` inserts
/// them (`X-Forwarded-For` unless the head's own line took our hop, `Forwarded`, and
/// `X-Forwarded-Proto`, `proto`, unless the head has one), then the head's end.
fn tail(out: &mut Vec<u8>, forwarded_for: Option<&[u8]>, forwarded: &[u8], proto: Option<&str>) {
    if let Some(forwarded_for) = forwarded_for {
        write_line(out, b"x-forwarded-for", forwarded_for);
    }
    write_line(out, b"forwarded", forwarded);
    if let Some(proto) = proto {
        write_line(out, b"x-forwarded-proto", proto.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// A request head's line as name and value.
fn header_line<'h>(h: &'h Header<'_>) -> Line<'h> {
    (h.name.as_bytes(), h.value)
}
