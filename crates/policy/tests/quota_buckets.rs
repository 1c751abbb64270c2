//! Which rule takes an Envoy quota bucket: `match.bucket` (entries in any order, a subset of
//! the id, globs, bare keys), rules written for descriptors taking buckets as they always
//! have, and a bucket rule never taking a descriptor.

mod common;

use ratewarden_core::now_or_panic;
use ratewarden_memory::MemoryStore;
use ratewarden_policy::{Engine, RequestDescriptor};

const NOW: u64 = 1_000_000_000_000;

fn engine(rules: &str) -> Engine<MemoryStore> {
    common::engine(rules)
}

fn rule(name: &str, matches: &str) -> String {
    format!(
        "[[limit]]\nname = \"{name}\"\nmatch = {{ {matches} }}\nkey = [\"bucket\"]\nalgorithm = \"gcra\"\nrate = \"600/s\"\nburst = 60\n"
    )
}

/// The name of the rule taking the bucket `entries` of `domain`, if any.
fn taker(engine: &Engine<MemoryStore>, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    engine.quota_budget(domain, entries).map(|b| b.rule)
}

#[test]
fn a_bucket_rule_takes_ids_holding_its_entries_in_any_order_among_others() {
    let engine = engine(&rule(
        "api",
        r#"domain = "edge", bucket = "tier=gold,name=api""#,
    ));
    let api = Some("api".to_owned());
    // Exactly its entries, in either order: the id is a map.
    assert_eq!(
        taker(&engine, "edge", &[("name", "api"), ("tier", "gold")]),
        api
    );
    assert_eq!(
        taker(&engine, "edge", &[("tier", "gold"), ("name", "api")]),
        api
    );
    // Other entries may be there too.
    assert_eq!(
        taker(
            &engine,
            "edge",
            &[("name", "api"), ("region", "eu"), ("tier", "gold")]
        ),
        api
    );
    // Each entry must be there, with its value; and the domain must be the rule's.
    assert_eq!(taker(&engine, "edge", &[("name", "api")]), None);
    assert_eq!(
        taker(&engine, "edge", &[("name", "api"), ("tier", "free")]),
        None
    );
    assert_eq!(
        taker(&engine, "edge", &[("name", "api"), ("tiers", "gold")]),
        None
    );
    assert_eq!(
        taker(&engine, "mesh", &[("name", "api"), ("tier", "gold")]),
        None
    );
    assert_eq!(taker(&engine, "edge", &[]), None);
}

#[test]
fn bucket_values_may_be_globs_and_a_bare_key_takes_any_value() {
    let engine = engine(&format!(
        "{}{}",
        rule("versions", r#"domain = "edge", bucket = "name=api-*,tier""#),
        rule("anything", r#"domain = "edge", bucket = "name""#)
    ));
    let by = |entries: &[(&str, &str)]| taker(&engine, "edge", entries);
    assert_eq!(
        by(&[("name", "api-v2"), ("tier", "x")]).as_deref(),
        Some("versions")
    );
    assert_eq!(
        by(&[("name", "api-"), ("tier", "")]).as_deref(),
        Some("versions")
    );
    // Without a tier, or another name: the next rule, which takes any name.
    assert_eq!(by(&[("name", "api-v2")]).as_deref(), Some("anything"));
    assert_eq!(
        by(&[("name", "web"), ("tier", "x")]).as_deref(),
        Some("anything")
    );
    assert_eq!(by(&[("tier", "x")]), None);
}

#[test]
fn descriptor_rules_keep_taking_buckets_as_descriptors_and_the_first_rule_wins() {
    let engine = engine(&format!(
        "{}{}{}",
        rule("gold", r#"domain = "edge", bucket = "tier=gold""#),
        "[[limit]]\nname = \"ordered\"\nmatch = { domain = \"edge\", descriptor = \"name=api,tier\" }\nkey = [\"descriptor\"]\nalgorithm = \"gcra\"\nrate = \"10/s\"\nburst = 10\n",
        "[[limit]]\nname = \"domain\"\nmatch = { domain = \"mesh\" }\nkey = [\"descriptor\"]\nalgorithm = \"gcra\"\nrate = \"10/s\"\nburst = 10\n",
    ));
    let by = |domain: &str, entries: &[(&str, &str)]| taker(&engine, domain, entries);
    assert_eq!(
        by("edge", &[("name", "api"), ("tier", "gold")]).as_deref(),
        Some("gold")
    );
    // A descriptor rule: the id's entries in key order, all of them, as before.
    assert_eq!(
        by("edge", &[("name", "api"), ("tier", "free")]).as_deref(),
        Some("ordered")
    );
    assert_eq!(by("edge", &[("name", "api")]), None);
    assert_eq!(
        by(
            "edge",
            &[("name", "api"), ("region", "eu"), ("tier", "free")]
        ),
        None
    );
    // A bare domain takes every bucket of it.
    assert_eq!(
        by("mesh", &[("anything", "at all")]).as_deref(),
        Some("domain")
    );
    // Their budgets are keyed as before: the values in order.
    let ordered = engine
        .quota_budget("edge", &[("name", "api"), ("tier", "free")])
        .unwrap();
    assert!(
        ordered.budget.key.ends_with("|api|free"),
        "{}",
        ordered.budget.key
    );
    assert_eq!(ordered.weight, 1);
}

#[test]
fn a_bucket_rule_never_takes_a_descriptor() {
    let one_a_second = r#"
[[limit]]
name = "api-bucket"
match = { domain = "edge", bucket = "name=api" }
key = ["global"]
algorithm = "gcra"
rate = "1/s"
burst = 1
"#;
    let buckets = engine(one_a_second);
    assert!(buckets.quota_budget("edge", &[("name", "api")]).is_some());
    for _ in 0..3 {
        let d = RequestDescriptor {
            entries: vec![("name", "api")],
            ..Default::default()
        };
        let v = now_or_panic(buckets.decide_descriptors("edge", &[d], 1, NOW)).unwrap();
        assert!(v.allowed, "{v:?}");
        assert!(v.outcomes.is_empty(), "{v:?}");
        assert!(v.descriptors[0].no_rule, "{v:?}");
    }
    // The same rule written for descriptors takes them, and limits the second.
    let descriptors =
        engine(&one_a_second.replace("bucket = \"name=api\"", "descriptor = \"name=api\""));
    let decide = || {
        let d = RequestDescriptor {
            entries: vec![("name", "api")],
            ..Default::default()
        };
        now_or_panic(descriptors.decide_descriptors("edge", &[d], 1, NOW)).unwrap()
    };
    assert!(decide().allowed);
    assert!(!decide().allowed);
}

/// `explain` tells an HTTP request that a bucket rule is for Envoy quota buckets.
#[test]
fn explain_names_a_bucket_rule_for_what_it_takes() {
    let engine = engine(&rule("api", r#"domain = "edge", bucket = "name=api""#));
    let request = ratewarden_policy::Request {
        peer: "192.0.2.7".parse().expect("an address"),
        method: "GET",
        path: "/",
        host: None,
        headers: &[],
        cost: None,
        api_key: None,
        tenant: None,
        body: None,
        client_cert: None,
    };
    let explained = now_or_panic(engine.explain(&request, NOW));
    let said = format!("{:?}", explained.rules);
    assert!(
        said.contains("for Envoy quota buckets of domain `edge`"),
        "{said}"
    );
}
