//! Which address a request is counted under: table-driven.

use std::net::IpAddr;

use ratewarden_policy::{client_ip, IpGrouping, TrustedProxies};

fn trusted(ranges: &[&str]) -> TrustedProxies {
    TrustedProxies::parse(ranges.iter().copied()).unwrap()
}

/// A case: what it shows, the socket's peer, `Forwarded` lines, `X-Forwarded-For` lines, and
/// the client we expect.
type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a [&'a str], &'a str);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn the_client_address_comes_only_through_trusted_proxies() {
    let ours = trusted(&["10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.250"]);
    // (case, peer, Forwarded lines, X-Forwarded-For lines, expected client)
    let cases: &[Case<'_>] = &[
        (
            "no proxy, no header",
            "203.0.113.7",
            &[],
            &[],
            "203.0.113.7",
        ),
        (
            "spoofed XFF from an untrusted peer is ignored",
            "203.0.113.7",
            &[],
            &["198.51.100.1"],
            "203.0.113.7",
        ),
        (
            "spoofed Forwarded from an untrusted peer is ignored",
            "203.0.113.7",
            &["for=198.51.100.1"],
            &[],
            "203.0.113.7",
        ),
        (
            "one trusted proxy",
            "10.0.0.2",
            &[],
            &["203.0.113.7"],
            "203.0.113.7",
        ),
        (
            "a client's spoofed entry left of the real one",
            "10.0.0.2",
            &[],
            &["1.2.3.4, 203.0.113.7"],
            "203.0.113.7",
        ),
        (
            "a chain of trusted proxies is walked",
            "10.0.0.2",
            &[],
            &["203.0.113.7, 10.9.9.9, 192.0.2.250"],
            "203.0.113.7",
        ),
        (
            "several header lines read in order",
            "10.0.0.2",
            &[],
            &["1.2.3.4, 203.0.113.7", "10.9.9.9"],
            "203.0.113.7",
        ),
        (
            "the walk stops at the first untrusted hop",
            "10.0.0.2",
            &[],
            &["203.0.113.7, 198.51.100.9, 10.9.9.9"],
            "198.51.100.9",
        ),
        (
            "every hop trusted: the leftmost",
            "10.0.0.2",
            &[],
            &["10.1.1.1, 10.2.2.2"],
            "10.1.1.1",
        ),
        (
            "trusted proxy, no header: the proxy",
            "10.0.0.2",
            &[],
            &[],
            "10.0.0.2",
        ),
        (
            "an unknown hop stops at the proxy that wrote it",
            "10.0.0.2",
            &[],
            &["203.0.113.7, unknown"],
            "10.0.0.2",
        ),
        (
            "Forwarded with quotes, brackets and a port",
            "10.0.0.2",
            &["for=\"[2001:db8:cafe::17]:4711\";proto=https"],
            &[],
            "2001:db8:cafe::17",
        ),
        (
            "Forwarded wins over X-Forwarded-For",
            "10.0.0.2",
            &["for=203.0.113.7"],
            &["198.51.100.1"],
            "203.0.113.7",
        ),
        (
            "Forwarded elements, several per line",
            "10.0.0.2",
            &["for=192.0.2.43, for=203.0.113.60;by=10.0.0.2"],
            &[],
            "203.0.113.60",
        ),
        (
            "an obfuscated Forwarded node stops the walk",
            "10.0.0.2",
            &["for=_hidden"],
            &[],
            "10.0.0.2",
        ),
        (
            "an IPv4 hop with a port",
            "10.0.0.2",
            &[],
            &["203.0.113.7:51234"],
            "203.0.113.7",
        ),
        (
            "IPv6 proxies",
            "2001:db8:ffff::1",
            &[],
            &["2001:db8:1::5"],
            "2001:db8:1::5",
        ),
        (
            "an IPv4-mapped peer is its IPv4 address",
            "::ffff:10.0.0.2",
            &[],
            &["203.0.113.7"],
            "203.0.113.7",
        ),
        (
            "an IPv4-mapped client is unwrapped",
            "10.0.0.2",
            &[],
            &["::ffff:203.0.113.7"],
            "203.0.113.7",
        ),
    ];
    for (case, peer, forwarded, xff, want) in cases {
        let got = client_ip(ip(peer), forwarded, xff, &ours);
        assert_eq!(got, ip(want), "{case}");
    }
}

#[test]
fn with_no_trusted_proxy_the_peer_is_always_the_client() {
    let got = client_ip(
        ip("10.0.0.2"),
        &["for=1.2.3.4"],
        &["1.2.3.4"],
        &TrustedProxies::none(),
    );
    assert_eq!(got, ip("10.0.0.2"));
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
