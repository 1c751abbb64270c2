//! The client's address, and the key it is counted under.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The address ranges of the proxies whose forwarding headers we believe.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::TrustedProxies;
///
/// let trusted = TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"])?;
/// assert!(trusted.contains("10.1.2.3".parse()?));
/// assert!(!trusted.contains("192.0.2.1".parse()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<IpNet>,
}

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
        Ok(Self { ranges })
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
/// The socket's `peer` is the client unless it is a trusted proxy. Then the forwarding
/// headers are read from the right, the nearest hop first: each address added by a trusted
/// hop is believed, and the first one that is not itself a trusted proxy is the client.
/// `forwarded` holds the values of `Forwarded` header lines (RFC 7239, its `for=` parameters),
/// `x_forwarded_for` those of `X-Forwarded-For`; lines are read in order, and `Forwarded` is
/// used when present. A value that is not an address (`unknown`, an obfuscated `_hidden`)
/// stops the walk at the proxy that wrote it, whose address is then the key.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::{client_ip, TrustedProxies};
///
/// let trusted = TrustedProxies::parse(["10.0.0.0/8"])?;
/// let lb = "10.0.0.2".parse()?;
/// // Through our load balancer: the client it saw.
/// assert_eq!(client_ip(lb, &[], &["203.0.113.9"], &trusted), "203.0.113.9".parse::<std::net::IpAddr>()?);
/// // Straight from the internet, a header is just something the client typed.
/// let direct = "198.51.100.4".parse()?;
/// assert_eq!(client_ip(direct, &[], &["1.2.3.4"], &trusted), direct);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_ip(
    peer: IpAddr,
    forwarded: &[&str],
    x_forwarded_for: &[&str],
    trusted: &TrustedProxies,
) -> IpAddr {
    let client = unmapped(peer);
    if !trusted.contains(client) {
        return client;
    }
    // The hops from the right, the last line's last element first, as they come: a list of
    // them made first was a third of what reading a proxy's list cost.
    if forwarded.is_empty() {
        let hops = x_forwarded_for
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(','));
        walk(client, hops, trusted)
    } else {
        let hops = forwarded
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(','))
            .filter_map(forwarded_for);
        walk(client, hops, trusted)
    }
}

/// Walks `hops`, the nearest first, from the trusted `client`: each address a trusted hop
/// added is believed, and the first that is not itself trusted (or that is not an address)
/// ends the walk.
fn walk<'a>(
    mut client: IpAddr,
    hops: impl Iterator<Item = &'a str>,
    trusted: &TrustedProxies,
) -> IpAddr {
    for hop in hops {
        let Some(ip) = parse_hop(hop) else {
            break;
        };
        client = ip;
        if !trusted.contains(client) {
            break;
        }
    }
    client
}

/// The `for=` parameter of one `Forwarded` element (`for=192.0.2.60;proto=http`).
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })
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

    /// `client_ip` as it was written first: every hop collected, then walked backwards.
    fn client_ip_collected(
        peer: IpAddr,
        forwarded: &[&str],
        x_forwarded_for: &[&str],
        trusted: &TrustedProxies,
    ) -> IpAddr {
        let mut client = unmapped(peer);
        if !trusted.contains(client) {
            return client;
        }
        let hops: Vec<&str> = if forwarded.is_empty() {
            x_forwarded_for.iter().flat_map(|l| l.split(',')).collect()
        } else {
            forwarded
                .iter()
                .flat_map(|l| l.split(','))
                .filter_map(forwarded_for)
                .collect()
        };
        for hop in hops.iter().rev() {
            let Some(ip) = parse_hop(hop) else { break };
            client = ip;
            if !trusted.contains(client) {
                break;
            }
        }
        client
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
            forwarded in prop::collection::vec(line(true), 0..3),
            x_forwarded_for in prop::collection::vec(line(false), 0..4),
        ) {
            let trusted = TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"]).unwrap();
            let peer: IpAddr = peer.parse().unwrap();
            let forwarded: Vec<&str> = forwarded.iter().map(String::as_str).collect();
            let x_forwarded_for: Vec<&str> = x_forwarded_for.iter().map(String::as_str).collect();
            prop_assert_eq!(
                client_ip(peer, &forwarded, &x_forwarded_for, &trusted),
                client_ip_collected(peer, &forwarded, &x_forwarded_for, &trusted)
            );
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
