//! The contract, header by header: the exact syntax the draft and the RFCs ask for.

use ratewarden_core::{
    Algorithm, CalendarUnit, Concurrency, Decision, FixedWindow, Gcra, Limit, Quota, Rate,
};
use ratewarden_http::{
    allowed_headers, limited, retry_after_secs, unavailable, window_secs, PolicyState,
    QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY,
};
use std::time::Duration;

/// A header's value, from an answer's (`String`) or an allowed response's (`HeaderValue`).
fn header<'a, V: AsRef<[u8]>>(headers: &'a [(http::HeaderName, V)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| std::str::from_utf8(v.as_ref()).ok())
}

/// Valid Structured Field lists, as a client would parse them.
fn parses_as_list(value: &str) -> sfv::List {
    sfv::Parser::new(value)
        .parse::<sfv::List>()
        .expect("a Structured Field list")
}

/// The lesson's GCRA at 5/s, burst 5, after six requests at once.
fn gcra_sixth() -> (Limit, Decision) {
    let limit = Limit::from(Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap());
    let mut state = Default::default();
    for _ in 0..5 {
        limit.decide(&mut state, 0, 1);
    }
    let sixth = limit.decide(&mut state, 0, 1);
    (limit, sixth)
}

#[test]
fn a_429_carries_retry_after_ratelimit_fields_no_store_and_a_problem() {
    let (limit, sixth) = gcra_sixth();
    let policy = PolicyState {
        name: "per-key",
        decision: &sixth,
        window_secs: window_secs(&limit),
        unit: None,
        policy: None,
    };
    let response = limited(
        &[policy],
        &["per-key"],
        sixth.retry_after_ns().unwrap(),
        false,
        false,
    );
    assert_eq!(response.status, 429);
    let h = &response.headers;
    assert_eq!(
        header(h, "Retry-After"),
        Some("1"),
        "200 ms rounds up to 1 s"
    );
    assert_eq!(header(h, "RateLimit-Policy"), Some(r#""per-key";q=5;w=1"#));
    assert_eq!(header(h, "RateLimit"), Some(r#""per-key";r=0;t=1"#));
    assert_eq!(header(h, "Cache-Control"), Some("no-store"));
    assert_eq!(header(h, "Content-Type"), Some("application/problem+json"));
    parses_as_list(header(h, "RateLimit-Policy").unwrap());
    parses_as_list(header(h, "RateLimit").unwrap());
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["type"], QUOTA_EXCEEDED);
    assert_eq!(body["title"], "Quota Exceeded");
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["per-key"]));
    assert!(
        header(h, "X-RateLimit-Limit").is_none(),
        "legacy headers are opt-in"
    );
}

#[test]
fn several_policies_make_one_list_each_with_its_window_and_unit() {
    let minute = Limit::from(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
    let month = Limit::from(Quota::new(1_000_000, CalendarUnit::Month, "UTC").unwrap());
    let inflight = Limit::from(Concurrency::new(20, Duration::from_secs(30)).unwrap());
    let mut s = Default::default();
    let a = minute.decide(&mut s, 30_000_000_000, 4);
    let mut s = Default::default();
    let b = month.decide(&mut s, 1_767_225_600_000_000_000, 1);
    let mut s = Default::default();
    let c = inflight.decide(&mut s, 0, 1);
    let policies = [
        PolicyState {
            name: "burst",
            decision: &a,
            window_secs: window_secs(&minute),
            unit: None,
            policy: None,
        },
        PolicyState {
            name: "monthly",
            decision: &b,
            window_secs: window_secs(&month),
            unit: None,
            policy: None,
        },
        PolicyState {
            name: "in-flight",
            decision: &c,
            window_secs: window_secs(&inflight),
            unit: Some("concurrent-requests"),
            policy: None,
        },
    ];
    let h = allowed_headers(&policies, false);
    assert_eq!(
        header(&h, "RateLimit-Policy"),
        Some(
            r#""burst";q=100;w=60, "monthly";q=1000000, "in-flight";q=20;qu="concurrent-requests""#
        )
    );
    // 30 s left in the minute; the month (January 2026) ends in 31 days.
    assert_eq!(
        header(&h, "RateLimit"),
        Some(r#""burst";r=96;t=30, "monthly";r=999999;t=2678400, "in-flight";r=19;t=30"#)
    );
    assert_eq!(header(&h, "Cache-Control"), Some("private"));
    assert_eq!(parses_as_list(header(&h, "RateLimit").unwrap()).len(), 3);
}

#[test]
fn a_sensitive_rule_answers_a_bare_429() {
    let (limit, sixth) = gcra_sixth();
    let policy = PolicyState {
        name: "login",
        decision: &sixth,
        window_secs: window_secs(&limit),
        unit: None,
        policy: None,
    };
    let response = limited(&[policy], &["login"], 200_000_000, true, true);
    assert_eq!(response.status, 429);
    let names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["retry-after", "cache-control"],
        "nothing that reveals capacity"
    );
    assert!(response.body.is_empty());
}

#[test]
fn legacy_headers_describe_the_policy_closest_to_exhaustion() {
    let (limit, sixth) = gcra_sixth();
    let wide = Limit::from(FixedWindow::new(1000, Duration::from_secs(3600)).unwrap());
    let mut s = Default::default();
    let roomy = wide.decide(&mut s, 0, 1);
    let policies = [
        PolicyState {
            name: "hourly",
            decision: &roomy,
            window_secs: window_secs(&wide),
            unit: None,
            policy: None,
        },
        PolicyState {
            name: "per-key",
            decision: &sixth,
            window_secs: window_secs(&limit),
            unit: None,
            policy: None,
        },
    ];
    let h = allowed_headers(&policies, true);
    assert_eq!(header(&h, "X-RateLimit-Limit"), Some("5"));
    assert_eq!(header(&h, "X-RateLimit-Remaining"), Some("0"));
    assert_eq!(header(&h, "X-RateLimit-Reset"), Some("1"));
}

#[test]
fn a_503_is_the_servers_fault() {
    let response = unavailable(2_500_000_000, "the rate limit store is unavailable");
    assert_eq!(response.status, 503);
    assert_eq!(header(&response.headers, "Retry-After"), Some("3"));
    let body: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["type"], TEMPORARY_REDUCED_CAPACITY);
    assert_eq!(body["status"], 503);
}

#[test]
fn retry_after_rounds_up_and_is_never_zero() {
    let cases = [
        (0, 1),
        (1, 1),
        (999_999_999, 1),
        (1_000_000_000, 1),
        (1_000_000_001, 2),
        (59_500_000_000, 60),
    ];
    for (ns, secs) in cases {
        assert_eq!(retry_after_secs(ns), secs, "{ns} ns");
    }
}

#[test]
fn bucket_windows_are_the_time_to_refill_the_burst() {
    let gcra = Limit::from(Gcra::new(Rate::per_second(50).unwrap(), 100).unwrap());
    assert_eq!(window_secs(&gcra), Some(2));
    let slow = Limit::from(Gcra::new(Rate::new(3, Duration::from_secs(7)).unwrap(), 1).unwrap());
    assert_eq!(window_secs(&slow), Some(3), "7/3 s rounds up");
}
