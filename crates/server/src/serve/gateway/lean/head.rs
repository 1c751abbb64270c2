//! Which request heads the gateway's lean path serves itself: a plain
//! HTTP/1.1 `GET` or `HEAD` without a body, whose identity nobody could read two ways.
//!
//! Everything this does not recognise exactly goes to hyper's gateway (`gateway/mod.rs`
//! and its `forwarding_headers`, with `guard.rs`), which serves the rest of the connection: a
//! head this reads wrongly can only be sent there, never answered or forwarded differently.
//! So it hands off, besides what hyper answers with an error, every head `guard.rs` or
//! `overrides.rs` would look at twice (a second `Host`, an override header or a query's
//! `_method` naming another method, an underscore in a name, an identity header repeated or
//! not visible ASCII, `Connection` naming a header) and every head whose forwarded form
//! takes more than dropping `Connection`, adding our forwarding lines and adding our hop to
//! one `X-Forwarded-For` line: any other hop-by-hop header, and any forwarding header but
//! one line each of `X-Forwarded-For` (when it is the configured `client_ip_header`),
//! `X-Forwarded-Proto` and `X-Forwarded-Host` from a trusted proxy (a load balancer's).
//! `Forwarded`, `X-Real-IP` and every other header naming the client
//! (`forwarding::CLIENT_HEADERS`, a configured `client_ip_header`) always go, and so does any
//! forwarding line from a peer we do not trust, whose lines hyper's gateway rewrites.

use std::net::IpAddr;

use ratewarden_policy::{ClientIpHeader, Identity};

use crate::serve::h1::request::{self, Header, Lines, Parsed};

/// The longest header name looked up among the identity headers; a longer one goes to
/// hyper (no header the rules name is that long in practice).
const MAX_NAME: usize = 64;

/// The longest target hyper's server reads (`u16::MAX - 1`); a longer one it answers 414,
/// so it goes to hyper whatever `max_header_bytes` lets through.
const MAX_TARGET: usize = u16::MAX as usize - 1;

/// What the bytes at the start of a connection's buffer are.
#[derive(Debug)]
pub(crate) enum Head<'h, 'b> {
    /// A request the lean path serves.
    Get(Get<'h, 'b>),
    /// Not a whole head yet: read more (the caller bounds how much).
    Partial,
    /// Anything else (another request, a parse error): hyper's.
    Other,
}

/// A `GET` or `HEAD` the lean path serves.
#[derive(Debug)]
pub(crate) struct Get<'h, 'b> {
    /// The head's length in bytes: the next request starts there.
    pub(crate) len: usize,
    /// `GET` or `HEAD`.
    pub(crate) method: &'b str,
    /// The target's path, as sent (not yet normalized).
    pub(crate) path: &'b str,
    /// What follows the target's `?`, if it has one.
    pub(crate) query: Option<&'b str>,
    /// The one `Host` line's value.
    pub(crate) host: &'b str,
    /// Every header line, `Connection` among them, in order; each value visible ASCII.
    pub(crate) headers: &'h [Header<'b>],
    /// `Connection: close`: answer, then close.
    pub(crate) close: bool,
    /// Where in `headers` the one `X-Forwarded-For` line is, sent by a trusted proxy: our
    /// hop is added to its list.
    pub(crate) forwarded_for: Option<usize>,
    /// A trusted proxy sent its `X-Forwarded-Proto` line: forwarded as it came, and ours
    /// not added.
    pub(crate) forwarded_proto: bool,
}

/// Reads the head at the start of `buf`, its lines into `lines`; `identity` names the
/// headers that decide who a request is under the rules in force, and the proxies whose
/// forwarding lines are believed (the connection's `peer` among them, or not).
pub(crate) fn read<'h, 'b>(
    buf: &'b [u8],
    lines: &'h mut Lines<'b>,
    identity: &Identity,
    peer: IpAddr,
) -> Head<'h, 'b> {
    let head = match request::parse(buf, lines) {
        Parsed::Complete(head) => head,
        Parsed::Partial => return Head::Partial,
        // Too many headers, a byte out of place: hyper answers (400, 431) or serves it.
        Parsed::Invalid => return Head::Other,
    };
    let (1, method @ ("GET" | "HEAD"), target, len) =
        (head.minor, head.method, head.target, head.len)
    else {
        return Head::Other;
    };
    // Origin-form, and only bytes every parser reads alike (hyper's `Uri` refuses some that
    // httparse takes, such as UTF-8).
    if !target.starts_with('/')
        || target.len() > MAX_TARGET
        || !target.bytes().all(plain_target_byte)
    {
        return Head::Other;
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    // A `_method` naming another method is hyper's to refuse (`overrides.rs`).
    if query.is_some_and(|q| overrides_method(q, method)) {
        return Head::Other;
    }
    let headers: &'h [Header<'b>] = head.headers;
    let mut host = None;
    let mut close = None;
    let (mut forwarded_for, mut forwarded_host, mut forwarded_proto) = (None, false, false);
    // Asked of the rules in force at each request (a reload may change `trusted_proxies`
    // under a kept-alive connection), and only of a head with a forwarding line: most
    // have none.
    let mut trusted = None;
    let mut trusted = || *trusted.get_or_insert_with(|| identity.trusted().contains(peer));
    // Only the header our proxies write the client in has our hop added where it stands;
    // any other header naming the client is rewritten, which hyper's gateway does.
    let (read_for, custom) = match identity.trusted().header() {
        ClientIpHeader::XForwardedFor => (true, None),
        ClientIpHeader::Forwarded => (false, None),
        ClientIpHeader::Other(name) => (false, Some(name.as_bytes())),
    };
    for (at, header) in headers.iter().enumerate() {
        let name = header.name.as_bytes();
        if !header
            .value
            .iter()
            .all(|&b| (b' '..=b'~').contains(&b) || b == b'\t')
            || name.contains(&b'_')
        {
            return Head::Other;
        }
        // By length first: most lines are then one compare away from being passed.
        let is = |wanted: &[u8]| name.eq_ignore_ascii_case(wanted);
        let handed = match name.len() {
            2 => is(b"te"),
            4 if is(b"host") => {
                if host.is_some() {
                    return Head::Other;
                }
                // Visible ASCII, checked above.
                host = std::str::from_utf8(header.value).ok();
                false
            }
            // A header `Connection: close` would name, to be removed.
            5 => is(b"close"),
            6 => is(b"expect"),
            7 => is(b"upgrade") || is(b"trailer"),
            9 => is(b"forwarded") || is(b"x-real-ip"),
            11 => is(b"x-client-ip"),
            10 if is(b"connection") => {
                if close.is_some() {
                    return Head::Other;
                }
                close = match request::connection_close(header.value) {
                    Some(close) => Some(close),
                    None => return Head::Other,
                };
                false
            }
            10 => is(b"keep-alive"),
            13 => is(b"x-http-method") || is(b"x-rewrite-url"),
            14 => is(b"content-length") || is(b"x-original-url") || is(b"true-client-ip"),
            // From a trusted proxy, once each: a second line is a list hyper's gateway joins,
            // from anyone else lines it removes or replaces.
            15 if is(b"x-forwarded-for") => {
                !read_for || !trusted() || forwarded_for.replace(at).is_some()
            }
            16 if is(b"x-forwarded-host") => {
                !trusted() || std::mem::replace(&mut forwarded_host, true)
            }
            16 => is(b"proxy-connection") || is(b"cf-connecting-ip") || is(b"fastly-client-ip"),
            17 if is(b"x-forwarded-proto") => {
                !trusted() || std::mem::replace(&mut forwarded_proto, true)
            }
            17 => is(b"transfer-encoding") || is(b"x-method-override"),
            18 => is(b"proxy-authenticate"),
            19 => is(b"proxy-authorization") || is(b"x-cluster-client-ip"),
            22 => is(b"x-http-method-override"),
            _ => false,
        };
        let handed = handed || custom.is_some_and(is);
        if handed || repeated_identity(headers, at, identity) {
            return Head::Other;
        }
    }
    // A `Host` that is not a host is hyper's gateway's to refuse (`guard::host_problem`).
    let Some(host) = host.filter(|h| ratewarden_policy::host::name(h).is_ok()) else {
        return Head::Other;
    };
    Head::Get(Get {
        len,
        method,
        path,
        query,
        host,
        headers,
        close: close.unwrap_or(false),
        forwarded_for,
        forwarded_proto,
    })
}

/// Whether `query`'s `_method` parameters name another method than `method`.
fn overrides_method(query: &str, method: &str) -> bool {
    use ratewarden_policy::method_override::{in_query, may_name_method};
    may_name_method(query)
        && in_query(query)
            .iter()
            .any(|named| !named.eq_ignore_ascii_case(method))
}

/// Whether the line at `at` is an identity header that comes again later: the limiter
/// could count one line and the upstream read the other (`guard::ambiguous_identity`).
fn repeated_identity(headers: &[Header<'_>], at: usize, identity: &Identity) -> bool {
    let name = headers[at].name;
    let later = &headers[at + 1..];
    if !later.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
        return false;
    }
    let mut lower = [0u8; MAX_NAME];
    let Some(lower) = lower.get_mut(..name.len()) else {
        // Too long to look up: not ours to judge.
        return true;
    };
    lower.copy_from_slice(name.as_bytes());
    lower.make_ascii_lowercase();
    // A header name is ASCII (httparse's token bytes).
    std::str::from_utf8(lower).map_or(true, |lower| identity.decides(lower))
}

/// A byte of a target the lean path takes: RFC 3986's unreserved and sub-delims, `:`, `@`,
/// `/`, `?` and `%` (not checked as an escape: the path's normalizer does that).
fn plain_target_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::h1::request::{lines, MAX_HEADERS};
    use proptest::prelude::*;
    use ratewarden_memory::{MemoryStore, StoreConfig};
    use ratewarden_policy::{config, Engine};

    /// The identity of a rule keyed on `X-Team`, `10.0.0.0/8` our proxies.
    fn identity() -> std::sync::Arc<Identity> {
        let rules = "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n\
                     [[limit]]\nname = \"per-team\"\nkey = [\"header:X-Team\"]\n\
                     algorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n";
        let engine: Engine<MemoryStore> = Engine::new(
            config::parse("r.toml", rules).expect("valid rules"),
            MemoryStore::new(StoreConfig::default()),
        );
        engine.identity()
    }

    /// A client straight from the internet.
    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 4));
    /// Our load balancer.
    const PROXY: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    /// What the lean path makes of `head` from a client not trusted: `Some((method, path,
    /// query, host, close, lines))` when it serves it.
    fn get(head: &[u8]) -> Option<(String, String, Option<String>, String, bool, usize)> {
        let identity = identity();
        let mut lines = lines();
        match read(head, &mut lines, &identity, CLIENT) {
            Head::Get(get) => {
                assert!(get.len <= head.len());
                Some((
                    get.method.to_owned(),
                    get.path.to_owned(),
                    get.query.map(str::to_owned),
                    get.host.to_owned(),
                    get.close,
                    get.headers.len(),
                ))
            }
            _ => None,
        }
    }

    #[test]
    fn a_plain_get_or_head_is_served_here() {
        let head =
            b"GET /a/b?x=1&y HTTP/1.1\r\nHost: example.com\r\nX-Team: t\r\nAccept: */*\r\n\r\nGET";
        let (method, path, query, host, close, lines) = get(head).expect("served");
        assert_eq!(
            (method.as_str(), path.as_str(), query.as_deref()),
            ("GET", "/a/b", Some("x=1&y"))
        );
        assert_eq!((host.as_str(), close, lines), ("example.com", false, 3));
        let head = b"HEAD / HTTP/1.1\r\nhost: a\r\nConnection: Close\r\n\r\n";
        let (method, _, query, _, close, _) = get(head).expect("served");
        assert_eq!((method.as_str(), query, close), ("HEAD", None, true));
        let kept = b"GET /%7e? HTTP/1.1\r\nHost: a\r\nconnection: keep-alive\r\nAccept: a\r\nAccept: b\r\n\r\n";
        let (_, path, query, _, close, _) = get(kept).expect("a repeated header no rule reads");
        assert_eq!(
            (path.as_str(), query.as_deref(), close),
            ("/%7e", Some(""), false)
        );
    }

    #[test]
    fn a_head_not_whole_yet_is_partial() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let identity = identity();
        for end in 0..head.len() {
            let mut lines = lines();
            assert!(
                matches!(
                    read(&head[..end], &mut lines, &identity, CLIENT),
                    Head::Partial
                ),
                "{end} bytes"
            );
        }
    }

    #[test]
    fn anything_the_guard_or_the_forwarding_would_look_at_goes_to_hyper() {
        for head in [
            &b"POST / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"get / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"OPTIONS / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /a{b} HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x-team\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nConnection: close\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nClose: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nKeep-Alive: timeout=5\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nTrailer: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nProxy-Connection: keep-alive\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nProxy-Authenticate: Basic\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Host: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Real-IP: 1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method-Override: DELETE\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method: DELETE\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Method-Override: DELETE\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Original-URL: /admin\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Rewrite-URL: /admin\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX_Team: t\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Other_Name: t\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Team: t\r\nx-team: u\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Team: caf\xc3\xa9\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Other: \x80\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"\x00\x01garbage\r\n\r\n",
        ] {
            assert!(
                get(head).is_none(),
                "{:?} is hyper's",
                String::from_utf8_lossy(head)
            );
        }
        let many: Vec<u8> = [
            &b"GET / HTTP/1.1\r\nHost: a\r\n"[..],
            &b"X-A: 1\r\n".repeat(MAX_HEADERS),
            b"\r\n",
        ]
        .concat();
        assert!(get(&many).is_none(), "more header lines than the array");
    }

    #[test]
    fn every_other_header_naming_the_client_goes_to_hyper_which_rewrites_it() {
        for name in crate::serve::gateway::forwarding::CLIENT_HEADERS {
            for peer in [CLIENT, PROXY] {
                let head = format!("GET / HTTP/1.1\r\nHost: a\r\n{name}: 1.2.3.4\r\n\r\n");
                let identity = identity();
                let mut lines = lines();
                assert!(
                    !matches!(
                        read(head.as_bytes(), &mut lines, &identity, peer),
                        Head::Get(_)
                    ),
                    "{name} from {peer} is hyper's"
                );
            }
        }
    }

    #[test]
    fn under_another_client_ip_header_x_forwarded_for_and_that_header_go_to_hyper() {
        for (header, line) in [
            ("Forwarded", "X-Forwarded-For: 203.0.113.9"),
            ("X-Edge-Client", "X-Forwarded-For: 203.0.113.9"),
            ("X-Edge-Client", "x-edge-client: 203.0.113.9"),
        ] {
            let rules = format!(
                "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\nclient_ip_header = \"{header}\"\n"
            );
            let engine: Engine<MemoryStore> = Engine::new(
                config::parse("r.toml", &rules).expect("valid rules"),
                MemoryStore::new(StoreConfig::default()),
            );
            let identity = engine.identity();
            let head = format!("GET / HTTP/1.1\r\nHost: a\r\n{line}\r\n\r\n");
            let mut storage = lines();
            assert!(
                !matches!(
                    read(head.as_bytes(), &mut storage, &identity, PROXY),
                    Head::Get(_)
                ),
                "{line} under {header} is hyper's"
            );
            let plain = b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\r\n";
            let mut storage = lines();
            assert!(
                matches!(read(plain, &mut storage, &identity, PROXY), Head::Get(_)),
                "a head naming no client is still served here under {header}"
            );
        }
    }

    /// What the lean path makes of `head` from `peer`: `Some((forwarded_for,
    /// forwarded_proto))` when it serves it.
    fn proxied(head: &[u8], peer: IpAddr) -> Option<(Option<usize>, bool)> {
        let identity = identity();
        let mut lines = lines();
        match read(head, &mut lines, &identity, peer) {
            Head::Get(get) => Some((get.forwarded_for, get.forwarded_proto)),
            _ => None,
        }
    }

    #[test]
    fn a_trusted_proxy_s_one_line_each_of_x_forwarded_for_proto_and_host_is_served_here() {
        let mapped: IpAddr = "::ffff:10.0.0.2".parse().unwrap();
        for (head, wanted) in [
            (
                &b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n"[..],
                (Some(1), false),
            ),
            (
                b"GET / HTTP/1.1\r\nX-FORWARDED-FOR: 203.0.113.9\r\nHost: a\r\n\r\n",
                (Some(0), false),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-proto: https\r\nAccept: */*\r\n\
                  X-Forwarded-Host: shop\r\nx-Forwarded-for: 1.2.3.4, 10.0.0.9\r\n\r\n",
                (Some(4), true),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\r\n",
                (None, true),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Host: shop\r\n\r\n",
                (None, false),
            ),
            // Whatever the list holds, the rules read it as hyper's path does: not ours to
            // judge here.
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For:\r\n\r\n",
                (Some(1), false),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: ,,\r\n\r\n",
                (Some(1), false),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: unknown,\t[2001:db8::1]:80 , x\r\n\r\n",
                (Some(1), false),
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
                (Some(2), false),
            ),
        ] {
            for peer in [PROXY, mapped] {
                assert_eq!(
                    proxied(head, peer),
                    Some(wanted),
                    "{:?} from {peer}",
                    String::from_utf8_lossy(head)
                );
            }
            assert_eq!(
                proxied(head, CLIENT),
                None,
                "{:?} from a client is hyper's",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn a_trusted_proxy_s_forwarding_lines_hyper_would_join_drop_or_refuse_go_to_hyper() {
        for head in [
            &b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nAccept: */*\r\nx-forwarded-for: 5.6.7.8\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n 5.6.7.8\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\n\t5.6.7.8\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\x01\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\x7f\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.\xc3\xa9\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For : 1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: http\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Host: a\r\nX-FORWARDED-HOST: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nForwarded: for=1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Real-IP: 1.2.3.4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x-forwarded-for\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
        ] {
            assert_eq!(
                proxied(head, PROXY),
                None,
                "{:?} is hyper's",
                String::from_utf8_lossy(head)
            );
        }
    }

    /// A header line of the pieces the reader looks at: a forwarding name in any case, or
    /// another, and a value of the bytes a list may hold.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let name = proptest::sample::select(vec![
            "X-Forwarded-For",
            "x-forwarded-for",
            "X-FORWARDED-FOR",
            "X-Forwarded-Proto",
            "X-Forwarded-Host",
            "Forwarded",
            "X-Real-IP",
            "Accept",
            "X-Team",
        ]);
        let piece = proptest::sample::select(vec![
            &b"1.2.3.4"[..],
            b"10.0.0.9",
            b", ",
            b",",
            b" ",
            b"\t",
            b"unknown",
            b"[::1]:80",
            b"\x01",
            b"\x80",
        ]);
        let value = proptest::collection::vec(piece, 0..4);
        (name, value).prop_map(|(name, value)| [name.as_bytes(), b": ", &value.concat()].concat())
    }

    fn is_named(line: &[u8], name: &str) -> bool {
        line.len() > name.len()
            && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
            && line[name.len()] == b':'
    }

    proptest! {
        /// From a peer we do not trust, no forwarding line is served here; from a trusted
        /// proxy, one line each of `X-Forwarded-For`, `-Proto` and `-Host` is, and never
        /// `Forwarded` or `X-Real-IP`; trust only ever adds heads the lean path serves.
        #[test]
        fn only_a_trusted_proxy_s_single_forwarding_lines_are_served_here(
            lines in proptest::collection::vec(line(), 0..5),
        ) {
            let head = [
                &b"GET / HTTP/1.1\r\nHost: a\r\n"[..],
                &lines.iter().flat_map(|l| [&l[..], b"\r\n"]).collect::<Vec<_>>().concat(),
                b"\r\n",
            ]
            .concat();
            let count = |name: &str| lines.iter().filter(|l| is_named(l, name)).count();
            let forwarding = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "x-real-ip"];
            let from_client = proxied(&head, CLIENT);
            let from_proxy = proxied(&head, PROXY);
            if from_client.is_some() {
                prop_assert!(forwarding.iter().all(|n| count(n) == 0));
                prop_assert_eq!(from_client, Some((None, false)));
                prop_assert_eq!(from_proxy, from_client);
            }
            if let Some((forwarded_for, forwarded_proto)) = from_proxy {
                prop_assert!(count("forwarded") == 0 && count("x-real-ip") == 0);
                prop_assert!(count("x-forwarded-host") <= 1);
                prop_assert!(count("x-forwarded-for") <= 1 && count("x-forwarded-proto") <= 1);
                let at = lines.iter().position(|l| is_named(l, "x-forwarded-for"));
                // `Host` is the head's first line.
                prop_assert_eq!(forwarded_for, at.map(|at| at + 1));
                prop_assert_eq!(forwarded_proto, count("x-forwarded-proto") == 1);
            }
        }
    }
}
