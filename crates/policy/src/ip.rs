//! The client's address, and the key it is counted under.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The address ranges of the proxies whose forwarding header we believe, and which header
/// that is ([`ClientIpHeader`], `X-Forwarded-For` unless [`with_header`](Self::with_header)
/// says otherwise).
///
/// # Examples
///
/// ```
/// use ratewarden_policy::{ClientIpHeader, TrustedProxies};
///
/// let trusted = TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"])?;
/// assert!(trusted.contains("10.1.2.3".parse()?));
/// assert!(!trusted.contains("192.0.2.1".parse()?));
/// assert_eq!(trusted.header().name(), "x-forwarded-for");
/// let trusted = trusted.with_header(ClientIpHeader::Forwarded);
/// assert_eq!(trusted.header().name(), "forwarded");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpNet>,
    header: ClientIpHeader,
}

/// The one header our proxies write the client's address in (`[server] client_ip_header`).
///
/// Only this header is read for the address: a proxy writes one forwarding header and passes
/// the others through as the client sent them, so reading two and picking one would let a
/// client name its own address in the one the proxy does not write.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::ClientIpHeader;
///
/// assert_eq!(ClientIpHeader::default(), ClientIpHeader::XForwardedFor);
/// assert_eq!(ClientIpHeader::parse("forwarded")?, ClientIpHeader::Forwarded);
/// assert_eq!(ClientIpHeader::parse("CF-Connecting-IP")?.name(), "cf-connecting-ip");
/// assert!(ClientIpHeader::parse("X_Real_IP").is_err());
/// # Ok::<(), ratewarden_policy::HeaderNameError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For`: a comma list, each proxy appending the address it saw.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): the `for=` parameter of each element.
    Forwarded,
    /// Another header (`X-Real-IP`, `CF-Connecting-IP`, `True-Client-IP`), its name in
    /// lowercase, read as a comma list of addresses as `X-Forwarded-For` is.
    Other(Box<str>),
}

/// A `client_ip_header` that cannot name a forwarding header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNameError {
    /// The name as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for HeaderNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.input, self.reason)
    }
}

impl std::error::Error for HeaderNameError {}

/// Headers that never carry a client's address: each describes the connection, or another
/// part of the request, and one of them named here is a slip for the header wanted.
const NOT_ADDRESS_HEADERS: [&str; 14] = [
    "host",
    "authorization",
    "cookie",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

impl ClientIpHeader {
    /// The header called `name`, in any case.
    ///
    /// # Errors
    ///
    /// A name that is not an HTTP token (RFC 9110 §5.6.2), one with `_` (nginx drops such
    /// headers and CGI-style servers read them as `-`), or a header that never carries a
    /// client's address (`Host`, `Connection`, `X-Forwarded-Proto`, ...).
    pub fn parse(name: &str) -> Result<Self, HeaderNameError> {
        let error = |reason| HeaderNameError {
            input: name.to_owned(),
            reason,
        };
        let lower = name.trim().to_ascii_lowercase();
        if lower.is_empty() {
            return Err(error("is empty: name a header such as `X-Forwarded-For`"));
        }
        if !lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^`|~_".contains(&b))
        {
            return Err(error("is not a header name (letters, digits and `-`)"));
        }
        if lower.contains('_') {
            return Err(error(
                "has `_`: nginx drops such headers and some upstreams read them as `-`; \
                 spell it with `-`",
            ));
        }
        if NOT_ADDRESS_HEADERS.contains(&lower.as_str()) {
            return Err(error(
                "never carries the client's address: name the header your proxy writes it in \
                 (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`, ...)",
            ));
        }
        Ok(match lower.as_str() {
            "x-forwarded-for" => Self::XForwardedFor,
            "forwarded" => Self::Forwarded,
            _ => Self::Other(lower.into()),
        })
    }

    /// The header's name in lowercase, as `http::HeaderName` spells it.
    pub fn name(&self) -> &str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
            Self::Other(name) => name,
        }
    }
}

/// A trusted proxy that put something other than an address where the client's address
/// belongs (`unknown`, an obfuscated `_hidden`, a `Forwarded` element without `for=`).
///
/// Such a request is refused rather than counted under the proxy's address: every client
/// behind that proxy would then share one budget, and one of them could spend it for all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIpError {
    /// The header read (`[server] client_ip_header`), lowercase.
    pub header: String,
    /// The element that is not an address, as sent.
    pub value: String,
    /// The trusted hop that wrote it: the socket's peer, or an address the walk believed.
    pub proxy: IpAddr,
}

impl fmt::Display for ClientIpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` from the trusted proxy {} holds `{}` where the client's address belongs: \
             the client cannot be told apart from the proxy's other clients",
            self.header, self.proxy, self.value
        )
    }
}

impl std::error::Error for ClientIpError {}

/// A prefix that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixError {
    /// The text as given.
    pub input: String,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not an address or a prefix (write `10.0.0.0/8`, `192.0.2.7` or `2001:db8::/32`)",
            self.input
        )
    }
}

impl std::error::Error for PrefixError {}

/// Reads `10.0.0.0/8`, or a bare address as a single-address prefix.
fn parse_net(text: &str) -> Result<IpNet, PrefixError> {
    let text = text.trim();
    IpNet::from_str(text)
        .or_else(|_| IpAddr::from_str(text).map(IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| PrefixError {
            input: text.to_owned(),
        })
}

impl TrustedProxies {
    /// The proxies at `ranges`: prefixes such as `10.0.0.0/8`, or single addresses.
    ///
    /// # Errors
    ///
    /// The first range that is neither an address nor a prefix.
    pub fn parse<'a>(ranges: impl IntoIterator<Item = &'a str>) -> Result<Self, PrefixError> {
        let ranges = ranges
            .into_iter()
            .map(parse_net)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            ranges,
            header: ClientIpHeader::default(),
        })
    }

    /// These proxies, writing the client's address in `header`.
    pub fn with_header(self, header: ClientIpHeader) -> Self {
        Self { header, ..self }
    }

    /// The header these proxies write the client's address in.
    pub fn header(&self) -> &ClientIpHeader {
        &self.header
    }

    /// No proxy is trusted: the socket's peer is always the client.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether `ip` is one of our proxies.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        self.ranges.iter().any(|net| net.contains(&ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is the IPv4 address it maps.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Finds the client's address.
///
/// The socket's `peer` is the client unless it is a trusted proxy. Then `lines`, the values
/// of the one header the proxies write the address in ([`TrustedProxies::header`]), are read
/// from the right, the nearest hop first: each address added by a trusted hop is believed,
/// and the first one that is not itself a trusted proxy is the client. Lines are read in
/// order; empty list elements are skipped (RFC 9110 §5.6.1). A trusted proxy that sent no
/// such header is itself the client.
///
/// # Errors
///
/// A hop that a trusted proxy wrote and that is not an address (`unknown`, `_hidden`, a
/// `Forwarded` element without `for=`): the client cannot be known, and keying the request
/// under the proxy would let it spend the budget of every client behind that proxy.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::{client_ip, TrustedProxies};
///
/// let trusted = TrustedProxies::parse(["10.0.0.0/8"])?;
/// let lb = "10.0.0.2".parse()?;
/// // Through our load balancer: the client it saw.
/// assert_eq!(client_ip(lb, &["203.0.113.9"], &trusted)?, "203.0.113.9".parse::<std::net::IpAddr>()?);
/// // Straight from the internet, a header is just something the client typed.
/// let direct = "198.51.100.4".parse()?;
/// assert_eq!(client_ip(direct, &["1.2.3.4"], &trusted)?, direct);
/// // A proxy that does not know its client does not make the client the proxy.
/// assert!(client_ip(lb, &["unknown"], &trusted).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_ip(
    peer: IpAddr,
    lines: &[&str],
    trusted: &TrustedProxies,
) -> Result<IpAddr, ClientIpError> {
    let client = unmapped(peer);
    if !trusted.contains(client) {
        return Ok(client);
    }
    // The hops from the right, the last line's last element first, as they come: a list of
    // them made first was a third of what reading a proxy's list cost.
    let elements = lines.iter().rev().flat_map(|line| line.rsplit(','));
    match trusted.header {
        ClientIpHeader::Forwarded => walk(client, elements.map(forwarded_for), trusted),
        _ => walk(client, elements.map(Ok), trusted),
    }
}

/// Walks `hops`, the nearest first, from the trusted `client`: each address a trusted hop
/// added is believed, and the first that is not itself trusted ends the walk. Each hop is
/// the text of its address, or (`Err`) an element that names none.
fn walk<'a>(
    mut client: IpAddr,
    hops: impl Iterator<Item = Result<&'a str, &'a str>>,
    trusted: &TrustedProxies,
) -> Result<IpAddr, ClientIpError> {
    for hop in hops {
        let text = match hop {
            Ok(text) | Err(text) => text.trim(),
        };
        if text.is_empty() {
            continue;
        }
        let Some(ip) = hop.ok().and_then(parse_hop) else {
            return Err(ClientIpError {
                header: trusted.header.name().to_owned(),
                value: text.to_owned(),
                proxy: client,
            });
        };
        client = ip;
        if !trusted.contains(client) {
            break;
        }
    }
    Ok(client)
}

/// The `for=` parameter of one `Forwarded` element (`for=192.0.2.60;proto=http`), or the
/// element itself when it has none: a proxy that added an element without saying whom for
/// has not named the client, and the element left of it is not its to vouch for.
fn forwarded_for(element: &str) -> Result<&str, &str> {
    element
        .split(';')
        .find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("for")
                .then_some(value.trim())
        })
        .filter(|value| !value.is_empty())
        .ok_or(element)
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:443`, `"[2001:db8::1]:4711"`, `2001:db8::1`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Some(rest) = hop.strip_prefix('[') {
        let (addr, _port) = rest.split_once(']')?;
        return addr
            .parse::<Ipv6Addr>()
            .ok()
            .map(|v6| unmapped(IpAddr::V6(v6)));
    }
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(unmapped(ip));
    }
    // An IPv4 address with a port.
    let (addr, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// How addresses are grouped into keys: the prefix length for IPv4 and for IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpGrouping {
    v4: u8,
    v6: u8,
}

impl Default for IpGrouping {
    /// IPv4 by address (/32), IPv6 by /64: the smallest block a host is handed.
    fn default() -> Self {
        Self { v4: 32, v6: 64 }
    }
}

impl IpGrouping {
    /// Groups IPv4 addresses by `/v4` and IPv6 by `/v6`.
    ///
    /// # Errors
    ///
    /// When a length is longer than its family's addresses (32 or 128 bits).
    pub fn new(v4: u8, v6: u8) -> Result<Self, String> {
        if v4 > 32 {
            return Err(format!("an IPv4 prefix is at most /32, not /{v4}"));
        }
        if v6 > 128 {
            return Err(format!("an IPv6 prefix is at most /128, not /{v6}"));
        }
        Ok(Self { v4, v6 })
    }

    /// The prefix `ip` is counted under, IPv4-mapped IPv6 unwrapped first.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_policy::IpGrouping;
    ///
    /// let group = IpGrouping::default();
    /// let a = group.key("2001:db8:1:2:aaaa::1".parse()?);
    /// let b = group.key("2001:db8:1:2:bbbb::2".parse()?);
    /// assert_eq!(a, b);
    /// assert_eq!(a.to_string(), "2001:db8:1:2::/64");
    /// assert_eq!(group.key("::ffff:192.0.2.1".parse()?).to_string(), "192.0.2.1/32");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self, ip: IpAddr) -> IpNet {
        match unmapped(ip) {
            IpAddr::V4(v4) => Ipv4Net::new(v4, self.v4)
                .map(|n| IpNet::V4(n.trunc()))
                .unwrap_or_else(|_| IpNet::from(IpAddr::V4(v4))),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.v6)
                .map(|n| IpNet::V6(n.trunc()))
                .unwrap_or_else(|_| IpNet::from(IpAddr::V6(v6))),
        }
    }
}

/// Appends `ip` as text, exactly as its `Display` writes it, without `core::fmt` for an
/// IPv4 address: every gateway request writes its client's address into a key and into
/// `X-Forwarded-For`, and formatting four octets through `fmt` cost more than the decision.
///
/// # Examples
///
/// ```
/// let mut out = String::from("for=");
/// ratewarden_policy::push_ip(&mut out, "192.0.2.10".parse()?);
/// assert_eq!(out, "for=192.0.2.10");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => push_ipv4(out, v4),
        IpAddr::V6(v6) => {
            use fmt::Write as _;
            // Writing into a String cannot fail.
            let _ = write!(out, "{v6}");
        }
    }
}

/// Appends `net` as text, exactly as its `Display` writes it (`192.0.2.0/24`), the IPv4 case
/// without `core::fmt` (see [`push_ip`]).
pub fn push_ip_net(out: &mut String, net: IpNet) {
    match net {
        IpNet::V4(v4) => {
            push_ipv4(out, v4.addr());
            out.push('/');
            push_decimal(out, v4.prefix_len());
        }
        IpNet::V6(v6) => {
            use fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

fn push_ipv4(out: &mut String, ip: Ipv4Addr) {
    let [a, b, c, d] = ip.octets();
    push_decimal(out, a);
    for octet in [b, c, d] {
        out.push('.');
        push_decimal(out, octet);
    }
}

/// A byte in decimal, without leading zeros.
fn push_decimal(out: &mut String, n: u8) {
    if n >= 100 {
        out.push(char::from(b'0' + n / 100));
    }
    if n >= 10 {
        out.push(char::from(b'0' + n / 10 % 10));
    }
    out.push(char::from(b'0' + n % 10));
}

#[cfg(test)]
mod text_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_octet_is_written_as_display_writes_it() {
        for n in 0..=255u8 {
            let ip = Ipv4Addr::new(n, 255 - n, n / 7, n.wrapping_mul(13));
            let mut out = String::new();
            push_ip(&mut out, IpAddr::V4(ip));
            assert_eq!(out, ip.to_string());
        }
    }

    /// `client_ip` written plainly: every hop collected, then walked backwards.
    fn client_ip_collected(
        peer: IpAddr,
        lines: &[&str],
        trusted: &TrustedProxies,
    ) -> Result<IpAddr, ClientIpError> {
        let mut client = unmapped(peer);
        if !trusted.contains(client) {
            return Ok(client);
        }
        let forwarded = *trusted.header() == ClientIpHeader::Forwarded;
        let elements: Vec<&str> = lines.iter().flat_map(|l| l.split(',')).collect();
        for element in elements.iter().rev() {
            if element.trim().is_empty() {
                continue;
            }
            let hop = if forwarded {
                element.split(';').find_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    let value = value.trim();
                    (name.trim().eq_ignore_ascii_case("for") && !value.is_empty()).then_some(value)
                })
            } else {
                Some(*element)
            };
            let Some(ip) = hop.and_then(parse_hop) else {
                return Err(ClientIpError {
                    header: trusted.header().name().to_owned(),
                    value: hop.unwrap_or(element).trim().to_owned(),
                    proxy: client,
                });
            };
            client = ip;
            if !trusted.contains(client) {
                break;
            }
        }
        Ok(client)
    }

    /// One hop as a proxy might write it: an address trusted or not, with a port, quoted,
    /// bracketed, `unknown`, empty, padded.
    fn hop() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("10.0.0.1".to_owned()),
            Just("10.9.8.7:443".to_owned()),
            Just("203.0.113.9".to_owned()),
            Just(" 198.51.100.4 ".to_owned()),
            Just("2001:db8::1".to_owned()),
            Just("\"[2001:db8:ffff::2]:4711\"".to_owned()),
            Just("[2001:db8::5]".to_owned()),
            Just("::ffff:10.0.0.3".to_owned()),
            Just("unknown".to_owned()),
            Just("_hidden".to_owned()),
            Just(String::new()),
            "[0-9a-f:.\\[\\]\" ]{0,12}",
        ]
    }

    /// A header line of one to three hops, as `X-Forwarded-For` or as `Forwarded`'s
    /// elements (`for=` among other parameters, or none).
    fn line(forwarded: bool) -> impl Strategy<Value = String> {
        prop::collection::vec((hop(), 0..3u8), 1..4).prop_map(move |hops| {
            let elements: Vec<String> = hops
                .into_iter()
                .map(|(hop, shape)| match (forwarded, shape) {
                    (false, _) => hop,
                    (true, 0) => format!("for={hop}"),
                    (true, 1) => format!("proto=https; FOR={hop};by=10.0.0.1"),
                    (true, _) => format!("by={hop}"),
                })
                .collect();
            elements.join(",")
        })
    }

    proptest! {
        #[test]
        fn the_walk_finds_the_client_the_collected_walk_found(
            peer in prop_oneof![Just("10.0.0.2"), Just("192.0.2.1"), Just("::ffff:10.1.1.1")],
            forwarded in any::<bool>(),
            lines in prop::collection::vec(prop_oneof![line(true), line(false)], 0..4),
        ) {
            let header = if forwarded { ClientIpHeader::Forwarded } else { ClientIpHeader::XForwardedFor };
            let trusted = TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"])
                .unwrap()
                .with_header(header);
            let peer: IpAddr = peer.parse().unwrap();
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            prop_assert_eq!(
                client_ip(peer, &lines, &trusted),
                client_ip_collected(peer, &lines, &trusted)
            );
        }

        /// Whatever a client writes before the hop our proxy appends (an address, garbage,
        /// a quote left open, a second line), the key is the address the proxy saw.
        #[test]
        fn what_a_client_writes_before_the_proxy_s_hop_never_picks_its_key(
            forwarded in any::<bool>(),
            written in prop::collection::vec(prop_oneof![line(true), line(false), "[ -~]{0,24}"], 0..3),
            seen in prop_oneof![Just("203.0.113.9"), Just("2001:db8:1::7"), Just("198.51.100.4")],
        ) {
            let header = if forwarded { ClientIpHeader::Forwarded } else { ClientIpHeader::XForwardedFor };
            let trusted = TrustedProxies::parse(["10.0.0.0/8"]).unwrap().with_header(header);
            let hop = if forwarded && seen.contains(':') {
                format!("for=\"[{seen}]\"")
            } else if forwarded {
                format!("for={seen}")
            } else {
                seen.to_owned()
            };
            let mut lines: Vec<String> = written;
            match lines.last_mut() {
                // nginx's `$proxy_add_x_forwarded_for`: the client's line, then ours.
                Some(last) => *last = format!("{last}, {hop}"),
                None => lines.push(hop),
            }
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let lb: IpAddr = "10.0.0.2".parse().unwrap();
            prop_assert_eq!(client_ip(lb, &lines, &trusted), Ok(seen.parse::<IpAddr>().unwrap()));
        }

        #[test]
        fn addresses_and_nets_are_written_as_display_writes_them(
            v4 in any::<u32>(),
            v6 in any::<u128>(),
            len4 in 0u8..=32,
            len6 in 0u8..=128,
        ) {
            for ip in [IpAddr::V4(Ipv4Addr::from(v4)), IpAddr::V6(Ipv6Addr::from(v6))] {
                let mut out = String::from("x");
                push_ip(&mut out, ip);
                prop_assert_eq!(out, format!("x{ip}"));
            }
            let nets = [
                IpNet::V4(Ipv4Net::new(Ipv4Addr::from(v4), len4).unwrap().trunc()),
                IpNet::V6(Ipv6Net::new(Ipv6Addr::from(v6), len6).unwrap().trunc()),
            ];
            for net in nets {
                let mut out = String::new();
                push_ip_net(&mut out, net);
                prop_assert_eq!(out, net.to_string());
            }
        }
    }
}
