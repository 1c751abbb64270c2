//! `explain`: every rule's finding for one request (matched or not and why, its key, its
//! state, what it would decide), charging nothing; and a key's state and reset.

mod common;

use std::net::IpAddr;

use ratewarden_core::{now_or_panic, Decision, Outcome};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{api_key_digest, Engine, Explanation, Finding, KeyStateError, Request};

const NOW: u64 = 1_000_000_000_000;

/// One rule of every algorithm, every match field and every key part, a shadow rule and a
/// rollout.
const RULES: &str = r#"
[keys]
api_key_header = "x-api-key"
tenant_header = "x-tenant-id"

[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "sliding-window"
limit = 3
window = "1m"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "gcra"
rate = "1/s"
burst = 2

[[limit]]
name = "monthly"
key = ["api_key"]
algorithm = "quota"
limit = 100
period = "month"
timezone = "UTC"

[[limit]]
name = "exports"
match = { method = "POST", path = "/reports/export" }
key = ["tenant"]
algorithm = "concurrency"
limit = 2
lease = "5m"

[[limit]]
name = "login"
match = { method = "POST", path = "/login" }
key = ["ip"]
algorithm = "sliding-log"
limit = 2
window = "1m"

[[limit]]
name = "per-team"
match = { host = "api.example.com" }
key = ["header:x-team"]
algorithm = "token-bucket"
rate = "1/s"
burst = 3

[[limit]]
name = "beta"
match = { header = "x-beta" }
key = ["route", "literal:beta"]
algorithm = "leaky-bucket"
rate = "1/s"
burst = 2

[[limit]]
name = "uploads"
match = { path = "/upload*" }
key = ["ip"]
algorithm = "leaky-queue"
rate = "1/s"
burst = 2

[[limit]]
name = "global"
key = ["global"]
algorithm = "fixed-window"
limit = 1
window = "1h"
mode = "shadow"

[[limit]]
name = "half"
key = ["ip"]
algorithm = "fixed-window"
limit = 1000
window = "1h"
rollout = "0%"
"#;

fn engine() -> Engine<MemoryStore> {
    common::engine(RULES)
}

fn request<'a>(method: &'a str, path: &'a str, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    Request {
        method,
        host: Some("api.example.com"),
        ..common::request("203.0.113.9", path, headers)
    }
}

fn finding<'e>(explained: &'e Explanation, rule: &str) -> &'e Finding {
    &explained
        .rules
        .iter()
        .find(|r| r.rule == rule)
        .unwrap_or_else(|| panic!("no rule {rule} in {explained:?}"))
        .finding
}

fn applies(explained: &Explanation, rule: &str) -> (String, bool, Decision) {
    match finding(explained, rule) {
        Finding::Applies {
            key,
            enforced,
            decision: Ok(decision),
            ..
        } => (key.clone(), *enforced, *decision),
        other => panic!("{rule}: {other:?}"),
    }
}

#[test]
fn every_kind_of_rule_is_explained_and_nothing_is_charged() {
    let engine = engine();
    let headers = [
        ("authorization", "Bearer secret-1"),
        ("x-team", "blue"),
        ("x-beta", "1"),
    ];
    let get = request("GET", "/orders", &headers);
    for _ in 0..5 {
        let explained = now_or_panic(engine.explain(&get, NOW));
        assert!(explained.allowed, "{explained:?}");
        assert_eq!(explained.rules.len(), 10);
        assert_eq!(explained.client, "203.0.113.9".parse::<IpAddr>().unwrap());
        // Charging nothing: every applying rule still has its whole budget.
        let (key, enforced, d) = applies(&explained, "per-ip");
        assert!(
            key.starts_with("per-ip@") && key.ends_with("|203.0.113.9/32"),
            "{key}"
        );
        assert!(enforced);
        assert_eq!((d.outcome, d.limit, d.remaining), (Outcome::Allowed, 3, 2));
        let (key, _, d) = applies(&explained, "per-key");
        assert!(
            key.ends_with(&format!("|{}", api_key_digest("secret-1"))),
            "{key}"
        );
        assert!(!key.contains("secret-1"), "an API key in the clear: {key}");
        assert_eq!(d.remaining, 1);
        assert_eq!(applies(&explained, "monthly").2.remaining, 99);
        let (key, _, d) = applies(&explained, "per-team");
        assert!(key.ends_with("|blue"), "{key}");
        assert_eq!(d.remaining, 2);
        let (key, _, _) = applies(&explained, "beta");
        assert!(key.ends_with("|GET /orders|beta"), "{key}");
        // A shadow rule applies without enforcing; a rollout of 0% enforces for no key.
        let (key, enforced, _) = applies(&explained, "global");
        assert!(key.ends_with("|*") && !enforced, "{key}");
        assert!(!applies(&explained, "half").1);
    }
    // Which match field failed, and why.
    let explained = now_or_panic(engine.explain(&get, NOW));
    match finding(&explained, "exports") {
        Finding::NotMatched { field, reason } => {
            assert_eq!(*field, "method");
            assert_eq!(reason, "the rule takes POST, the request is GET");
        }
        other => panic!("{other:?}"),
    }
    let post = request("POST", "/orders", &headers);
    let explained = now_or_panic(engine.explain(&post, NOW));
    match finding(&explained, "login") {
        Finding::NotMatched { field, reason } => {
            assert_eq!(*field, "path");
            assert!(
                reason.contains("`/login`") && reason.contains("`/orders`"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        finding(&explained, "uploads"),
        Finding::NotMatched { field: "path", .. }
    ));
    let mut other_host = request("GET", "/orders", &headers);
    other_host.host = Some("www.example.com:443");
    let explained = now_or_panic(engine.explain(&other_host, NOW));
    match finding(&explained, "per-team") {
        Finding::NotMatched { field, reason } => {
            assert_eq!(*field, "host");
            assert!(reason.contains("`www.example.com:443`"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let plain = request("GET", "/orders", &headers[..2]);
    let explained = now_or_panic(engine.explain(&plain, NOW));
    assert!(matches!(
        finding(&explained, "beta"),
        Finding::NotMatched {
            field: "header",
            ..
        }
    ));
    // The concurrency rule and the queue, when they match.
    let export_headers = [("x-tenant-id", "acme")];
    let export = request("POST", "/reports/export", &export_headers);
    let explained = now_or_panic(engine.explain(&export, NOW));
    let (key, _, d) = applies(&explained, "exports");
    assert!(key.ends_with("|acme"), "{key}");
    assert_eq!((d.limit, d.remaining), (2, 1));
    let upload = request("PUT", "/upload/1", &[]);
    let explained = now_or_panic(engine.explain(&upload, NOW));
    let (key, _, d) = applies(&explained, "uploads");
    assert!(
        key.ends_with("|203.0.113.9/32") && d.is_allowed(),
        "{key} {d:?}"
    );
}

#[test]
fn a_missing_key_part_is_stood_in_for_by_the_client_or_named_when_the_rule_skips() {
    let engine = engine();
    let export = request("POST", "/reports/export", &[]);
    let explained = now_or_panic(engine.explain(&export, NOW));
    for rule in ["per-key", "exports", "per-team"] {
        let (key, _, _) = applies(&explained, rule);
        assert!(key.ends_with("~client|203.0.113.9/32"), "{rule}: {key}");
    }
    let skipping = RULES
        .replace(
            "key = [\"api_key\"]\n",
            "key = [\"api_key\"]\nwhen_key_missing = \"skip\"\n",
        )
        .replace(
            "key = [\"tenant\"]\n",
            "key = [\"tenant\"]\nwhen_key_missing = \"skip\"\n",
        )
        .replace(
            "key = [\"header:x-team\"]\n",
            "key = [\"header:x-team\"]\nwhen_key_missing = \"skip\"\n",
        );
    let engine = Engine::new(
        parse("explain.toml", &skipping).unwrap(),
        MemoryStore::new(StoreConfig::default()),
    );
    let explained = now_or_panic(engine.explain(&export, NOW));
    let missing = |rule: &str| match finding(&explained, rule) {
        Finding::MissingKeyPart { part } => part.clone(),
        other => panic!("{rule}: {other:?}"),
    };
    assert_eq!(
        missing("per-key"),
        "api_key (an `Authorization` credential such as `Bearer TOKEN`, or `x-api-key`)"
    );
    assert_eq!(missing("exports"), "tenant (the `x-tenant-id` header)");
    assert_eq!(missing("per-team"), "header:x-team");
    // A missing part keeps a skipping rule out of the request, as deciding does.
    assert!(explained.allowed);
}

#[test]
fn a_limited_key_and_a_shadow_rule_that_would_reject_are_told_apart() {
    let engine = engine();
    let headers = [("authorization", "Bearer secret-2")];
    let get = request("GET", "/orders", &headers);
    // Spend per-key's burst of 2 and the shadow rule's 1.
    for _ in 0..2 {
        assert!(now_or_panic(engine.decide(&get, NOW)).unwrap().allowed);
    }
    let explained = now_or_panic(engine.explain(&get, NOW));
    assert!(!explained.allowed, "per-key is spent: {explained:?}");
    let (_, enforced, d) = applies(&explained, "per-key");
    assert!(enforced);
    assert_eq!(
        d.outcome,
        Outcome::Limited {
            retry_after_ns: 1_000_000_000
        }
    );
    let (_, enforced, d) = applies(&explained, "global");
    assert!(
        !enforced && !d.is_allowed(),
        "the shadow rule would reject: {d:?}"
    );
    assert!(finding(&explained, "global").says_no());
    // Explaining did not charge: a second later per-key allows again, as it would have.
    let later = now_or_panic(engine.explain(&get, NOW + 1_000_000_000));
    assert!(later.allowed, "{later:?}");
}

#[test]
fn a_bad_cost_is_refused_as_deciding_would_refuse_it() {
    let engine = Engine::new(
        parse(
            "c.toml",
            "[[limit]]\nname = \"tokens\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"10/s\"\nburst = 10\ncost = \"header:x-cost\"\nmax_cost = 5\n",
        )
        .unwrap(),
        MemoryStore::new(StoreConfig::default()),
    );
    let headers = [("x-cost", "lots")];
    let explained = now_or_panic(engine.explain(&request("GET", "/", &headers), NOW));
    assert!(!explained.allowed);
    match finding(&explained, "tokens") {
        Finding::Refused { error } => assert!(error.contains("`lots`"), "{error}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_keys_state_is_read_and_reset_by_its_parts() {
    let engine = engine();
    let headers = [("authorization", "Bearer secret-3")];
    let get = request("GET", "/orders", &headers);
    for _ in 0..3 {
        now_or_panic(engine.decide(&get, NOW)).unwrap();
    }
    let digest = api_key_digest("secret-3");
    let state = now_or_panic(engine.key_state("per-key", &digest, NOW)).unwrap();
    assert!(!state.decision.is_allowed(), "{state:?}");
    assert!(state.stored_key.starts_with("per-key@"));
    // The top offenders show the same parts the key state takes.
    let top = engine.top("per-key", NOW).unwrap();
    assert_eq!(top.limited.keys[0].key, digest);

    assert!(now_or_panic(engine.reset_key("per-key", &digest)).unwrap());
    let state = now_or_panic(engine.key_state("per-key", &digest, NOW)).unwrap();
    assert_eq!(
        state.decision.remaining, 1,
        "a reset key is a new key: {state:?}"
    );
    assert!(now_or_panic(engine.decide(&get, NOW)).unwrap().allowed);
    assert!(!now_or_panic(engine.reset_key("per-key", "key:0000000000000000")).unwrap());

    let unknown = now_or_panic(engine.key_state("per-kye", &digest, NOW)).unwrap_err();
    assert!(matches!(unknown, KeyStateError::UnknownRule { .. }));
    assert!(
        unknown.to_string().contains("per-key, monthly"),
        "{unknown}"
    );
    assert_eq!(
        now_or_panic(engine.reset_key("per-key", " ")).unwrap_err(),
        KeyStateError::EmptyKey
    );
}

/// An adaptive rule is decided on its limiter in this process, not on the store: `explain`
/// reads the limiter (a new key as a new limiter would start), and takes nothing.
#[test]
fn an_adaptive_rule_is_explained_from_its_limiter() {
    let config = parse(
        "t.toml",
        r#"
[[limit]]
name = "upstream"
key = ["global"]
algorithm = "adaptive-concurrency"
strategy = "aimd"

[limit.adaptive]
min = 2
max = 50
"#,
    )
    .unwrap();
    let engine = Engine::new(config, MemoryStore::new(StoreConfig::default()));
    let get = request("GET", "/", &[]);
    let first = now_or_panic(engine.explain(&get, NOW));
    let (_, enforced, decision) = applies(&first, "upstream");
    assert!(enforced && decision.is_allowed(), "{decision:?}");
    assert!(
        decision.limit >= 2 && decision.limit <= 50,
        "the limiter's limit, not the store's placeholder: {decision:?}"
    );
    assert_eq!(decision.remaining, decision.limit - 1);
    // Holding the whole limit: the next request would be shed.
    let mut held = Vec::new();
    for _ in 0..decision.limit {
        let verdict = now_or_panic(engine.decide(&get, NOW)).unwrap();
        assert!(verdict.allowed);
        held.push(verdict);
    }
    let full = now_or_panic(engine.explain(&get, NOW));
    let (_, _, decision) = applies(&full, "upstream");
    assert!(!decision.is_allowed(), "{decision:?}");
    assert!(!full.allowed);
    // Explaining took nothing: the limiter still holds exactly what the requests took.
    let states = engine.adaptive_states(10);
    assert_eq!(states[0].in_flight, decision.limit, "{states:?}");
}

#[test]
fn a_key_where_the_client_stood_in_is_shown_and_reset_by_its_parts() {
    let engine = engine();
    let export = request("POST", "/reports/export", &[]);
    let verdict = now_or_panic(engine.decide(&export, NOW)).unwrap();
    let stored = verdict
        .outcomes
        .iter()
        .find(|o| o.key.starts_with("exports@"))
        .unwrap()
        .key
        .clone();
    assert!(stored.contains("~client|"), "{stored}");
    let state = now_or_panic(engine.key_state("exports", "~client|203.0.113.9/32", NOW)).unwrap();
    assert_eq!(state.stored_key, stored);
    // The state of the key the decision charged: its permit is held.
    let fresh = now_or_panic(engine.key_state("exports", "~client|198.51.100.1/32", NOW)).unwrap();
    assert!(state.decision.remaining < fresh.decision.remaining);
}
