//! Which address a request is counted under: table-driven.

use std::net::IpAddr;

use ratewarden_policy::{client_ip, ClientIpHeader, IpGrouping, TrustedProxies};

fn trusted(ranges: &[&str]) -> TrustedProxies {
    TrustedProxies::parse(ranges.iter().copied()).unwrap()
}

/// A case: what it shows, the socket's peer, the configured header's lines, and the client
/// we expect (`Err(value)`: refused, naming the value that is not an address).
type Case<'a> = (&'a str, &'a str, &'a [&'a str], Result<&'a str, &'a str>);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn run(header: ClientIpHeader, cases: &[Case<'_>]) {
    let ours = trusted(&["10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.250"]).with_header(header);
    for (case, peer, lines, want) in cases {
        let got = client_ip(ip(peer), lines, &ours).map_err(|e| e.value);
        assert_eq!(got, want.map(ip).map_err(str::to_owned), "{case}");
    }
}

#[test]
fn the_client_address_comes_only_through_trusted_proxies() {
    run(
        ClientIpHeader::XForwardedFor,
        &[
            ("no proxy, no header", "203.0.113.7", &[], Ok("203.0.113.7")),
            (
                "spoofed XFF from an untrusted peer is ignored",
                "203.0.113.7",
                &["198.51.100.1"],
                Ok("203.0.113.7"),
            ),
            (
                "one trusted proxy",
                "10.0.0.2",
                &["203.0.113.7"],
                Ok("203.0.113.7"),
            ),
            (
                "a client's spoofed entry left of the real one",
                "10.0.0.2",
                &["1.2.3.4, 203.0.113.7"],
                Ok("203.0.113.7"),
            ),
            (
                "a chain of trusted proxies is walked",
                "10.0.0.2",
                &["203.0.113.7, 10.9.9.9, 192.0.2.250"],
                Ok("203.0.113.7"),
            ),
            (
                "several header lines read in order",
                "10.0.0.2",
                &["1.2.3.4, 203.0.113.7", "10.9.9.9"],
                Ok("203.0.113.7"),
            ),
            (
                "the walk stops at the first untrusted hop",
                "10.0.0.2",
                &["203.0.113.7, 198.51.100.9, 10.9.9.9"],
                Ok("198.51.100.9"),
            ),
            (
                "every hop trusted: the leftmost",
                "10.0.0.2",
                &["10.1.1.1, 10.2.2.2"],
                Ok("10.1.1.1"),
            ),
            (
                "trusted proxy, no header: the proxy",
                "10.0.0.2",
                &[],
                Ok("10.0.0.2"),
            ),
            (
                "empty list elements are skipped",
                "10.0.0.2",
                &["203.0.113.7,, ", " , 10.9.9.9,"],
                Ok("203.0.113.7"),
            ),
            (
                "garbage left of the proxy's hop is never reached",
                "10.0.0.2",
                &["unknown, \"1.2.3.4, 203.0.113.7"],
                Ok("203.0.113.7"),
            ),
            (
                "an unknown hop from the proxy refuses: never the proxy's budget",
                "10.0.0.2",
                &["203.0.113.7, unknown"],
                Err("unknown"),
            ),
            (
                "an unknown hop behind a second trusted proxy refuses",
                "10.0.0.2",
                &["203.0.113.7, _hidden, 10.9.9.9"],
                Err("_hidden"),
            ),
            (
                "an IPv4 hop with a port",
                "10.0.0.2",
                &["203.0.113.7:51234"],
                Ok("203.0.113.7"),
            ),
            (
                "IPv6 proxies",
                "2001:db8:ffff::1",
                &["2001:db8:1::5"],
                Ok("2001:db8:1::5"),
            ),
            (
                "an IPv4-mapped peer is its IPv4 address",
                "::ffff:10.0.0.2",
                &["203.0.113.7"],
                Ok("203.0.113.7"),
            ),
            (
                "an IPv4-mapped client is unwrapped",
                "10.0.0.2",
                &["::ffff:203.0.113.7"],
                Ok("203.0.113.7"),
            ),
        ],
    );
}

#[test]
fn forwarded_is_read_only_when_it_is_the_configured_header() {
    run(
        ClientIpHeader::Forwarded,
        &[
            (
                "Forwarded with quotes, brackets and a port",
                "10.0.0.2",
                &["for=\"[2001:db8:cafe::17]:4711\";proto=https"],
                Ok("2001:db8:cafe::17"),
            ),
            (
                "Forwarded elements, several per line",
                "10.0.0.2",
                &["for=192.0.2.43, for=203.0.113.60;by=10.0.0.2"],
                Ok("203.0.113.60"),
            ),
            (
                "a client's element left of the proxy's is never reached",
                "10.0.0.2",
                &["for=198.51.100.1, for=unknown;x=\"", "for=203.0.113.60"],
                Ok("203.0.113.60"),
            ),
            (
                "an obfuscated node from the proxy refuses",
                "10.0.0.2",
                &["for=198.51.100.1, for=_hidden"],
                Err("_hidden"),
            ),
            (
                "a proxy's element without for= vouches for no element left of it",
                "10.0.0.2",
                &["for=198.51.100.1, proto=https;by=10.0.0.2"],
                Err("proto=https;by=10.0.0.2"),
            ),
            (
                "an empty for= is no address",
                "10.0.0.2",
                &["for=198.51.100.1, for="],
                Err("for="),
            ),
        ],
    );
}

#[test]
fn another_configured_header_is_read_as_a_list_of_addresses() {
    let header = ClientIpHeader::parse("CF-Connecting-IP").unwrap();
    run(
        header,
        &[
            (
                "one address",
                "10.0.0.2",
                &["203.0.113.7"],
                Ok("203.0.113.7"),
            ),
            (
                "from a peer not trusted it is ignored",
                "198.51.100.1",
                &["203.0.113.7"],
                Ok("198.51.100.1"),
            ),
            ("garbage refuses", "10.0.0.2", &["nope"], Err("nope")),
        ],
    );
}

#[test]
fn with_no_trusted_proxy_the_peer_is_always_the_client() {
    let got = client_ip(ip("10.0.0.2"), &["1.2.3.4"], &TrustedProxies::none());
    assert_eq!(got, Ok(ip("10.0.0.2")));
}

#[test]
fn a_header_name_that_cannot_carry_the_client_is_refused_by_name() {
    for (name, says) in [
        ("", "is empty"),
        ("X Real IP", "not a header name"),
        ("X-Real-IP:", "not a header name"),
        ("x_real_ip", "`_`"),
        ("Host", "never carries"),
        ("X-Forwarded-Proto", "never carries"),
        ("connection", "never carries"),
    ] {
        let error = ClientIpHeader::parse(name).unwrap_err().to_string();
        assert!(error.contains(says), "{name:?}: {error}");
        assert!(error.contains(&format!("`{name}`")), "{name:?}: {error}");
    }
    assert_eq!(
        ClientIpHeader::parse(" X-FORWARDED-FOR ").unwrap(),
        ClientIpHeader::XForwardedFor
    );
    assert_eq!(
        ClientIpHeader::parse("True-Client-IP").unwrap().name(),
        "true-client-ip"
    );
}

#[test]
fn ipv6_clients_share_a_budget_per_64() {
    let group = IpGrouping::default();
    let cases = [
        ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", true),
        ("2001:db8:1:2::1", "2001:db8:1:3::1", false),
        ("192.0.2.1", "192.0.2.2", false),
        ("192.0.2.1", "::ffff:192.0.2.1", true),
    ];
    for (a, b, shared) in cases {
        assert_eq!(group.key(ip(a)) == group.key(ip(b)), shared, "{a} and {b}");
    }
    let wide = IpGrouping::new(24, 48).unwrap();
    assert_eq!(wide.key(ip("192.0.2.77")).to_string(), "192.0.2.0/24");
    assert_eq!(
        wide.key(ip("2001:db8:1:2::1")).to_string(),
        "2001:db8:1::/48"
    );
    let exact = IpGrouping::new(32, 128).unwrap();
    assert_ne!(exact.key(ip("2001:db8::1")), exact.key(ip("2001:db8::2")));
    assert!(IpGrouping::new(33, 64).unwrap_err().contains("/33"));
    assert!(IpGrouping::new(32, 129).unwrap_err().contains("/129"));
}

#[test]
fn bad_trusted_ranges_say_which() {
    let err = TrustedProxies::parse(["10.0.0.0/8", "ten.zero"]).unwrap_err();
    assert!(err.to_string().contains("`ten.zero`"), "{err}");
}
