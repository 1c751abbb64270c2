//! Adaptive concurrency rules: their validation, and the engine holding one limiter per
//! rule and key that sheds past the learnt limit and learns from each release.

use ratewarden_core::adaptive::{Completion, Criticality, Strategy};
use ratewarden_core::now_or_panic;
use ratewarden_policy::config::parse;
use ratewarden_policy::{Owner, ReleaseError, Verdict};

mod common;

use common::{decide, engine, release, request};

const NOW: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;

fn errors(text: &str) -> String {
    match parse("a.toml", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const RULE: &str =
    "[[limit]]\nname = \"up\"\nkey = [\"global\"]\nalgorithm = \"adaptive-concurrency\"\n";

#[test]
fn an_adaptive_rule_takes_its_strategy_and_parameters_with_published_defaults() {
    let config = parse(
        "a.toml",
        &format!("{RULE}strategy = \"vegas\"\n[limit.adaptive]\nmax = 300\nwindow = \"100ms\"\nreserve = 0.2\n"),
    )
    .unwrap();
    let adaptive = config.rules[0].adaptive.clone().unwrap();
    let Strategy::Vegas(vegas) = adaptive.strategy else {
        panic!("{adaptive:?}")
    };
    assert_eq!(
        (vegas.initial, vegas.max, vegas.probe_multiplier),
        (20, 300, 30)
    );
    assert_eq!(adaptive.window.min_time_ns, 100 * MS);
    assert_eq!(adaptive.window.min_samples, 10);
    assert_eq!(adaptive.reserve_permille, 200);
    // The rule reports its ceiling as its limit.
    assert_eq!(
        ratewarden_core::Algorithm::limit(&config.rules[0].limit),
        300
    );

    // No strategy: Gradient2, with defaults for any upstream: from 4, floor 1, ceiling
    // 1,000, the headroom grown with the limit, tolerance 1.
    let config = parse("a.toml", RULE).unwrap();
    let Strategy::Gradient2(g) = config.rules[0].adaptive.clone().unwrap().strategy else {
        panic!()
    };
    assert_eq!(
        (
            g.initial,
            g.min,
            g.max,
            g.smoothing_permille,
            g.queue_size,
            g.long_window,
            g.tolerance_permille
        ),
        (4, 1, 1000, 200, None, 600, 1000)
    );
    // A `queue_size` named fixes the headroom, zero included.
    let config = parse(
        "a.toml",
        &format!("{RULE}[limit.adaptive]\nqueue_size = 0\n"),
    )
    .unwrap();
    let Strategy::Gradient2(g) = config.rules[0].adaptive.clone().unwrap().strategy else {
        panic!()
    };
    assert_eq!(g.queue_size, Some(0));
}

#[test]
fn adaptive_rules_are_validated_with_located_errors() {
    let cases = [
        (
            format!("{RULE}strategy = \"gradiant2\"\n"),
            "a.toml:5:12: limit `up`: `strategy` is one of gradient2, vegas, aimd, gradient, not `gradiant2`; did you mean `gradient2`?",
        ),
        (
            format!("{RULE}rate = \"5/s\"\n"),
            "limit `up`: `rate` does not apply to `adaptive-concurrency`",
        ),
        (
            format!("{RULE}limit = 5\n"),
            "`limit` does not apply to `adaptive-concurrency` (the limit is learnt; bound it with `adaptive.max`)",
        ),
        (
            format!("{RULE}strategy = \"aimd\"\n[limit.adaptive]\nsmoothing = 0.5\n"),
            "`adaptive.smoothing` does not apply to the `aimd` strategy",
        ),
        (
            format!("{RULE}[limit.adaptive]\nsmoothing = 1.5\n"),
            "a.toml:6:13: limit `up`: `adaptive.smoothing` is a ratio above 0, at most 1",
        ),
        (
            format!("{RULE}strategy = \"aimd\"\n[limit.adaptive]\nbackoff = 0.3\n"),
            "a.toml:7:11: limit `up`: `adaptive.backoff` is a ratio from 0.5 up to (not including) 1, not 0.3",
        ),
        (
            format!("{RULE}[limit.adaptive]\nmax = 0\n"),
            "a.toml:6:7: limit `up`: `adaptive.max` must be a whole number above zero, not 0",
        ),
        (
            format!("{RULE}[limit.adaptive]\nmin = 50\nmax = 30\n"),
            "`adaptive.min` (50) is above `adaptive.max` (30)",
        ),
        (
            format!("{RULE}strategy = \"gradient\"\n[limit.adaptive]\ninterval = \"soon\"\n"),
            "a.toml:7:12: limit `up`: `adaptive.interval`: invalid duration `soon`",
        ),
        (
            format!("{RULE}[limit.adaptive]\nspeed = 1\n"),
            "unknown field `speed`",
        ),
        (
            "[[limit]]\nname = \"x\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\nstrategy = \"vegas\"\n".to_owned(),
            "limit `x`: `strategy` applies only to `algorithm = \"adaptive-concurrency\"`",
        ),
        (
            "[[limit]]\nname = \"x\"\nkey = [\"ip\"]\nalgorithm = \"adaptive-concurency\"\n".to_owned(),
            "did you mean `adaptive-concurrency`?",
        ),
    ];
    for (text, want) in cases {
        let got = errors(&text);
        assert!(got.contains(want), "wanted {want}\ngot {got}");
    }
}

/// AIMD pinned at `limit`, no reserve, updated on every sample.
fn pinned(limit: u64, reserve: &str) -> String {
    format!(
        "{RULE}strategy = \"aimd\"\n[limit.adaptive]\ninitial = {limit}\nmin = {limit}\nmax = {limit}\nreserve = {reserve}\n"
    )
}

#[test]
fn past_the_limit_requests_are_shed_and_a_release_lets_the_next_in() {
    let engine = engine(&pinned(2, "0"));
    let r = request("198.51.100.1", "/", &[]);
    let first = decide(&engine, &r, NOW);
    let second = decide(&engine, &r, NOW);
    assert!(first.allowed && second.allowed);
    let shed = decide(&engine, &r, NOW);
    assert!(!shed.allowed);
    assert!(
        shed.shed(),
        "a shed is the server's capacity, not the client's fault"
    );
    assert_eq!(shed.retry_after_ns, Some(1_000_000_000));
    assert!(shed.permit.is_none());
    // The client is not shown the upstream's capacity.
    assert_eq!(first.shown().count(), 0);
    release(&engine, &first, Completion::default(), NOW + 5 * MS);
    assert!(decide(&engine, &r, NOW + 6 * MS).allowed);
    let stats = engine.stats();
    assert_eq!((stats[0].1.allowed, stats[0].1.rejected), (3, 1));
    let states = engine.adaptive_states(10);
    assert_eq!((states[0].limit, states[0].in_flight), (2, 2));
}

#[test]
fn the_limit_learns_from_each_release() {
    let engine = engine(&format!(
        "{RULE}strategy = \"aimd\"\n[limit.adaptive]\ninitial = 4\nmin = 1\nmax = 10\nwindow = \"1ns\"\nwindow_samples = 1\nreserve = 0\n"
    ));
    let r = request("198.51.100.1", "/", &[]);
    let held: Vec<Verdict> = (0..4).map(|_| decide(&engine, &r, NOW)).collect();
    assert!(held.iter().all(|v| v.allowed));
    // Dropped (a 5xx or a timeout from the upstream): ⌊4 · 0.9⌋ = 3.
    release(
        &engine,
        &held[0],
        Completion {
            rtt_ns: Some(20 * MS),
            dropped: true,
        },
        NOW + 20 * MS,
    );
    assert_eq!(engine.adaptive_states(1)[0].limit, 3);
    // Three still in flight: the limit is reached.
    assert!(!decide(&engine, &r, NOW + 21 * MS).allowed);
    // A success with the limit used (in flight 4 at its start, 4·2 ≥ 3): + 1.
    release(&engine, &held[1], Completion::default(), NOW + 22 * MS);
    assert_eq!(engine.adaptive_states(1)[0].limit, 4);
}

#[test]
fn only_the_holder_releases_and_a_plain_release_gives_the_place_back() {
    let toml = "[[limit]]\nname = \"up\"\nkey = [\"tenant\"]\nalgorithm = \"adaptive-concurrency\"\nstrategy = \"aimd\"\n[limit.adaptive]\ninitial = 1\nmin = 1\nmax = 1\nreserve = 0\n";
    let engine = engine(toml);
    let acme = [("x-tenant-id", "acme")];
    let globex = [("x-tenant-id", "globex")];
    let a = request("198.51.100.1", "/", &acme);
    let g = request("198.51.100.1", "/", &globex);
    let held = decide(&engine, &a, NOW);
    let id = held.permit.unwrap();
    // Keyed per tenant: another tenant has its own limiter.
    assert!(decide(&engine, &g, NOW).allowed);
    let stolen =
        now_or_panic(engine.release_with(id, Owner::Request(&g), Completion::default(), NOW));
    assert!(
        matches!(stolen, Err(ReleaseError::NotOwner { .. })),
        "{stolen:?}"
    );
    assert!(!decide(&engine, &a, NOW).allowed);
    now_or_panic(engine.release(id, Owner::Request(&a), NOW)).unwrap();
    assert!(decide(&engine, &a, NOW).allowed);
}

#[test]
fn a_request_refused_by_another_rule_gives_its_place_back() {
    let toml = format!(
        "{}\n[[limit]]\nname = \"rate\"\nkey = [\"global\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1h\"\n",
        pinned(1, "0")
    );
    let engine = engine(&toml);
    let r = request("198.51.100.1", "/", &[]);
    let first = decide(&engine, &r, NOW);
    release(&engine, &first, Completion::default(), NOW + MS);
    let refused = decide(&engine, &r, NOW + 2 * MS);
    assert!(!refused.allowed && !refused.shed());
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 0);
}

#[test]
fn critical_requests_take_the_reserve_and_sheddable_ones_are_shed_first() {
    // Limit 10, reserve 0.1: sheddable up to 8, default 9, critical 10.
    let toml = format!(
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[[server.critical]]\npath = \"/checkout\"\n[[server.sheddable]]\npath = \"/prefetch/*\"\n\n{}",
        pinned(10, "0.1")
    );
    let engine = engine(&toml);
    let sheddable = [("x-criticality", "sheddable")];
    let s = request("198.51.100.1", "/", &sheddable);
    assert_eq!(engine.criticality(&s), Criticality::Sheddable);
    let admitted = (0..20).filter(|_| decide(&engine, &s, NOW).allowed).count();
    assert_eq!(admitted, 8);
    let plain = request("198.51.100.1", "/", &[]);
    assert_eq!(
        (0..5)
            .filter(|_| decide(&engine, &plain, NOW).allowed)
            .count(),
        1
    );
    // A client cannot claim to be critical; a trusted proxy can say so; a critical route
    // is.
    let claims = [("x-criticality", "critical")];
    let claimed = request("198.51.100.1", "/", &claims);
    assert_eq!(engine.criticality(&claimed), Criticality::Default);
    assert!(!decide(&engine, &claimed, NOW).allowed);
    let vouched = request("10.1.2.3", "/", &claims);
    assert_eq!(engine.criticality(&vouched), Criticality::Critical);
    assert!(decide(&engine, &vouched, NOW).allowed);
    let checkout = request("198.51.100.1", "/checkout", &[]);
    assert_eq!(engine.criticality(&checkout), Criticality::Critical);
    assert!(!decide(&engine, &checkout, NOW).allowed, "10 of 10 taken");
    // A sheddable route is sheddable; a client cannot raise it.
    let prefetch = request("198.51.100.1", "/prefetch/feed", &claims);
    assert_eq!(engine.criticality(&prefetch), Criticality::Sheddable);
    // A critical route may still lower itself.
    let lowered = request("198.51.100.1", "/checkout", &sheddable);
    assert_eq!(engine.criticality(&lowered), Criticality::Sheddable);
}

#[test]
fn limiters_per_key_are_bounded_when_clients_make_up_keys() {
    let toml =
        "[[limit]]\nname = \"up\"\nkey = [\"tenant\"]\nalgorithm = \"adaptive-concurrency\"\n";
    let engine = engine(toml);
    for i in 0..20_000 {
        let tenant = format!("t{i}");
        let headers = [("x-tenant-id", tenant.as_str())];
        let v = decide(&engine, &request("198.51.100.1", "/", &headers), NOW + i);
        release(&engine, &v, Completion::default(), NOW + i);
    }
    let kept = engine.adaptive_states(usize::MAX).len();
    assert!(kept <= 10_000, "{kept} limiters kept");
    // A busy limiter is never the one dropped.
    let busy = [("x-tenant-id", "busy")];
    let held = decide(&engine, &request("198.51.100.1", "/", &busy), NOW + 30_000);
    for i in 0..20_000 {
        let tenant = format!("u{i}");
        let headers = [("x-tenant-id", tenant.as_str())];
        let v = decide(
            &engine,
            &request("198.51.100.1", "/", &headers),
            NOW + 40_000 + i,
        );
        release(&engine, &v, Completion::default(), NOW + 40_000 + i);
    }
    assert!(engine
        .adaptive_states(usize::MAX)
        .iter()
        .any(|s| s.key.ends_with("|busy") && s.in_flight == 1));
    release(&engine, &held, Completion::default(), NOW + 70_000);
}
