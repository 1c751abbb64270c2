//! envoyproxy/ratelimit configs: loading, errors with positions, and resolution as its
//! `GetLimit` does, on the README's examples rewritten as fixtures (`fixtures/envoy/`).

use std::path::Path;
use std::time::Duration;

use ratewarden_core::{Algorithm, AlgorithmKind, FixedWindow, Limit};
use ratewarden_policy::envoy::{
    self, apply_replaces, overall, EnvoyConfig, RateLimitOverride, Resolved, Unit,
};

const FIXTURES: &[(&str, &str)] = &[
    (
        "example1.yaml",
        include_str!("../../../fixtures/envoy/example1.yaml"),
    ),
    (
        "example2.yaml",
        include_str!("../../../fixtures/envoy/example2.yaml"),
    ),
    (
        "example3.yaml",
        include_str!("../../../fixtures/envoy/example3.yaml"),
    ),
    (
        "example4_flat.yaml",
        include_str!("../../../fixtures/envoy/example4_flat.yaml"),
    ),
    (
        "example4_nested.yaml",
        include_str!("../../../fixtures/envoy/example4_nested.yaml"),
    ),
    (
        "example5.yaml",
        include_str!("../../../fixtures/envoy/example5.yaml"),
    ),
    (
        "example6.yaml",
        include_str!("../../../fixtures/envoy/example6.yaml"),
    ),
    (
        "example7.yaml",
        include_str!("../../../fixtures/envoy/example7.yaml"),
    ),
    (
        "example8.yaml",
        include_str!("../../../fixtures/envoy/example8.yaml"),
    ),
    (
        "example9.yaml",
        include_str!("../../../fixtures/envoy/example9.yaml"),
    ),
    (
        "modes.yaml",
        include_str!("../../../fixtures/envoy/modes.yaml"),
    ),
];

fn fixtures() -> EnvoyConfig {
    let mut all = EnvoyConfig::default();
    for (name, text) in FIXTURES {
        let one = envoy::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
        all.merge(one).unwrap_or_else(|e| panic!("{e}"));
    }
    all
}

/// `(requests_per_unit, unit)` of the rule `entries` resolve to in `domain`, if any.
fn limit(config: &EnvoyConfig, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, Unit)> {
    let r = config.resolve(domain, entries)?;
    Some((r.requests_per_unit, r.unit.expect("a unit")))
}

fn resolved(config: &EnvoyConfig, domain: &str, entries: &[(&str, &str)]) -> Resolved {
    config
        .resolve(domain, entries)
        .unwrap_or_else(|| panic!("{domain} {entries:?} resolves to no rule"))
}

fn fixed(limit: u64, unit: Unit) -> Option<Limit> {
    Some(
        FixedWindow::new(limit, Duration::from_secs(unit.divider()))
            .unwrap()
            .into(),
    )
}

/// The errors of `text` (file `t.yaml`), each as `t.yaml:line:col: …`.
fn errors(text: &str) -> Vec<String> {
    match envoy::parse("t.yaml", text) {
        Ok(_) => panic!("no error in:\n{text}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

// ----- README examples -----

#[test]
fn example1_exact_values() {
    let c = fixtures();
    assert_eq!(
        limit(&c, "catalog_db", &[("database", "orders")]),
        Some((800, Unit::Second))
    );
    assert_eq!(
        limit(&c, "catalog_db", &[("database", "default")]),
        Some((300, Unit::Second))
    );
    // No key-only rule: another value has no limit.
    assert_eq!(limit(&c, "catalog_db", &[("database", "users")]), None);
    let r = resolved(&c, "catalog_db", &[("database", "orders")]);
    assert_eq!(r.key, "catalog_db_database_orders_");
    assert_eq!(r.stats_key, "catalog_db.database_orders");
    assert_eq!(r.limit, fixed(800, Unit::Second));
}

#[test]
fn example2_nested_and_key_only() {
    let c = fixtures();
    let promo = [("message_type", "promo"), ("to_number", "2065550101")];
    assert_eq!(limit(&c, "notifications", &promo), Some((3, Unit::Day)));
    let r = resolved(&c, "notifications", &promo);
    assert_eq!(
        r.key,
        "notifications_message_type_promo_to_number_2065550101_"
    );
    assert_eq!(r.stats_key, "notifications.message_type_promo.to_number");
    // Each number its own counter.
    let other = resolved(
        &c,
        "notifications",
        &[("message_type", "promo"), ("to_number", "2065550102")],
    );
    assert_ne!(other.key, r.key);
    assert_eq!(
        limit(&c, "notifications", &[("to_number", "2065550101")]),
        Some((50, Unit::Day))
    );
    // The placeholder alone has no limit, and an unlisted message type has no subtree.
    assert_eq!(
        limit(&c, "notifications", &[("message_type", "promo")]),
        None
    );
    assert_eq!(
        limit(
            &c,
            "notifications",
            &[("message_type", "receipt"), ("to_number", "2065550101")]
        ),
        None
    );
}

#[test]
fn example3_exact_beats_key_only_in_any_file_order() {
    let c = fixtures();
    assert_eq!(
        limit(&c, "edge_per_ip", &[("remote_address", "198.51.100.7")]),
        Some((20, Unit::Second))
    );
    let blocked = resolved(&c, "edge_per_ip", &[("remote_address", "203.0.113.9")]);
    assert_eq!(blocked.requests_per_unit, 0);
    assert_eq!(blocked.limit, None, "0 requests: always over the limit");
    assert!(!blocked.unlimited);
    assert_eq!(blocked.key, "edge_per_ip_remote_address_203.0.113.9_");
}

#[test]
fn example4_request_depth_must_equal_config_depth() {
    let c = fixtures();
    let two = [("tenant", "acme"), ("project", "alpha")];
    assert_eq!(limit(&c, "depth_flat", &two), None);
    assert_eq!(
        limit(&c, "depth_flat", &[("tenant", "acme")]),
        Some((150, Unit::Second))
    );
    assert_eq!(limit(&c, "depth_nested", &two), Some((150, Unit::Second)));
    // One entry short of the config's depth: no limit either.
    assert_eq!(limit(&c, "depth_nested", &[("tenant", "acme")]), None);
    // One entry more than the config's depth.
    let three = [("tenant", "acme"), ("project", "alpha"), ("env", "prod")];
    assert_eq!(limit(&c, "depth_nested", &three), None);
}

#[test]
fn example5_unlimited() {
    let c = fixtures();
    let r = resolved(&c, "backoffice", &[("ldap", "uid=ada")]);
    assert!(r.unlimited);
    assert_eq!(r.unit, None);
    assert_eq!(r.limit, None);
    assert_eq!(r.cache_key("", 1_700_000_123), None, "no counter");
    assert_eq!(
        limit(&c, "backoffice", &[("billing", "invoices")]),
        Some((120, Unit::Minute))
    );
}

#[test]
fn example6_shadow_mode_carried() {
    let c = fixtures();
    let x = resolved(
        &c,
        "soft_launch",
        &[("service", "auth"), ("user", "user-x")],
    );
    assert!(x.shadow_mode);
    assert_eq!((x.requests_per_unit, x.unit), (15, Some(Unit::Second)));
    let y = resolved(
        &c,
        "soft_launch",
        &[("service", "auth"), ("user", "user-y")],
    );
    assert!(!y.shadow_mode);
    assert_eq!(y.requests_per_unit, 25);
    assert_eq!(
        limit(
            &c,
            "soft_launch",
            &[("service", "auth"), ("user", "user-z")]
        ),
        None
    );
}

#[test]
fn example7_replaces() {
    let c = fixtures();
    let gold = [("tier", "gold"), ("user", "ada")];
    let eu = [("region", "eu"), ("user", "ada")];
    // Alone, each rule applies.
    let mut only_gold = vec![c.resolve("replacing", &gold)];
    apply_replaces(&mut only_gold);
    assert_eq!(only_gold[0].as_ref().map(|r| r.requests_per_unit), Some(4));
    assert_eq!(
        only_gold[0].as_ref().unwrap().name.as_deref(),
        Some("gold_user")
    );
    // Together, the EU rule replaces the gold one.
    let mut both = vec![c.resolve("replacing", &gold), c.resolve("replacing", &eu)];
    assert_eq!(both[1].as_ref().unwrap().replaces, ["gold_user"]);
    apply_replaces(&mut both);
    assert!(both[0].is_none());
    assert_eq!(both[1].as_ref().map(|r| r.requests_per_unit), Some(12));
    // Order does not matter, and unmatched descriptors stay None.
    let mut reversed = vec![
        c.resolve("replacing", &eu),
        None,
        c.resolve("replacing", &gold),
    ];
    apply_replaces(&mut reversed);
    assert!(reversed[0].is_some() && reversed[1].is_none() && reversed[2].is_none());
}

#[test]
fn example8_detailed_metric() {
    let c = fixtures();
    let a = resolved(&c, "metrics", &[("account", "acct-17")]);
    assert!(a.detailed_metric);
    assert_eq!(a.stats_key, "metrics.account_acct-17");
    assert_eq!(a.key, "metrics_account_acct-17_");
    let vip = resolved(&c, "metrics", &[("account", "vip")]);
    assert!(!vip.detailed_metric);
    assert_eq!(vip.stats_key, "metrics.account_vip");
    assert_eq!(vip.requests_per_unit, 60);
}

#[test]
fn example9_wildcards() {
    let c = fixtures();
    let w = |path: &str| limit(&c, "wildcards", &[("path", path)]);
    // Prefix: `*` matches zero or more characters.
    assert_eq!(
        limit(&c, "wildcards", &[("route", "v1")]),
        Some((40, Unit::Minute))
    );
    assert_eq!(
        limit(&c, "wildcards", &[("route", "v1/users")]),
        Some((40, Unit::Minute))
    );
    assert_eq!(limit(&c, "wildcards", &[("route", "v2")]), None);
    // Infix.
    assert_eq!(w("/api/reports/export"), Some((10, Unit::Hour)));
    assert_eq!(w("/api//export"), Some((10, Unit::Hour)));
    assert_eq!(w("/api/a/b/export"), Some((10, Unit::Hour)));
    assert_eq!(w("/api/reports/export/now"), Some((100, Unit::Second)));
    // Several `*`.
    assert_eq!(w("/api/shop/items/42/edit"), Some((5, Unit::Minute)));
    assert_eq!(w("/api/shop/items/42/view"), Some((100, Unit::Second)));
    // Exact beats wildcards; the first matching pattern in file order wins; bare key last.
    assert_eq!(w("/shop/checkout"), Some((2, Unit::Second)));
    assert_eq!(w("/shop/cart/9"), Some((7, Unit::Second)));
    assert_eq!(w("/elsewhere"), Some((100, Unit::Second)));
    // The counter: per value normally; shared by all values with `share_threshold`.
    let export = resolved(&c, "wildcards", &[("path", "/api/reports/export")]);
    assert_eq!(export.key, "wildcards_path_/api/reports/export_");
    assert_eq!(export.stats_key, "wildcards.path_/api/*/export");
    let cart = resolved(&c, "wildcards", &[("path", "/shop/cart/9")]);
    let shoes = resolved(&c, "wildcards", &[("path", "/shop/shoes")]);
    assert_eq!(cart.key, "wildcards_path_/shop/*_");
    assert_eq!(cart.key, shoes.key);
    // value_to_metric: the request's value in the statistics key.
    let host = resolved(
        &c,
        "wildcards",
        &[("host", "docs.example.org"), ("user", "u1")],
    );
    assert!(!host.value_to_metric, "the flag is on the parent node");
    assert_eq!(host.stats_key, "wildcards.host_docs.example.org.user");
    assert_eq!(host.key, "wildcards_host_docs.example.org_user_u1_");
    assert_eq!(host.requests_per_unit, 1000);
}

// ----- Modes, units, whitelist, extension -----

#[test]
fn quota_mode_and_long_units() {
    let c = fixtures();
    let free = resolved(&c, "plans", &[("plan", "free"), ("user", "u9")]);
    assert!(free.quota_mode && !free.shadow_mode);
    assert_eq!(free.unit, Some(Unit::Month));
    // envoyproxy/ratelimit's month: a fixed window of 30 days, aligned on the epoch.
    assert_eq!(free.limit, fixed(10_000, Unit::Month));
    assert_eq!(Unit::Month.divider(), 2_592_000);
    assert_eq!(
        free.cache_key("rl_", 1_700_000_123).unwrap(),
        "rl_plans_plan_free_user_u9_1697760000"
    );
    let week = resolved(&c, "plans", &[("user", "u9")]);
    assert_eq!(week.limit, fixed(2500, Unit::Week));
    assert_eq!(
        resolved(&c, "plans", &[("yearly", "x")]).unit,
        Some(Unit::Year),
        "units in any case"
    );
}

#[test]
fn node_without_limit_or_children_whitelists() {
    let c = fixtures();
    assert_eq!(c.resolve("plans", &[("health", "probe")]), None);
    assert_eq!(c.resolve("plans", &[]), None);
    assert_eq!(c.resolve("no_such_domain", &[("user", "u9")]), None);
}

#[test]
fn extension_chooses_the_algorithm() {
    let c = fixtures();
    let gcra = resolved(&c, "plans", &[("api_key", "k1")]);
    let Some(Limit::Gcra(g)) = &gcra.limit else {
        panic!("{:?}", gcra.limit)
    };
    assert_eq!(g.burst(), 20);
    assert_eq!(g.rate().count(), 50);
    assert_eq!(g.rate().period(), Duration::from_secs(1));
    // The counter key and the reported rule stay envoyproxy/ratelimit's.
    assert_eq!(gcra.key, "plans_api_key_k1_");
    assert_eq!(
        (gcra.requests_per_unit, gcra.unit),
        (50, Some(Unit::Second))
    );
    let search = resolved(&c, "plans", &[("search", "q")]);
    assert_eq!(
        search.limit.as_ref().map(Limit::kind),
        Some(AlgorithmKind::SlidingWindow)
    );
    assert_eq!(search.limit.as_ref().map(Algorithm::limit), Some(600));
    let export = resolved(&c, "plans", &[("export", "csv")]);
    let Some(Limit::Quota(q)) = &export.limit else {
        panic!("{:?}", export.limit)
    };
    assert_eq!(q.timezone(), "Europe/Paris");
    assert_eq!(q.unit(), ratewarden_core::CalendarUnit::Month);
}

#[test]
fn default_limit_decides_like_envoyproxy_fixed_window() {
    let c = fixtures();
    let r = resolved(&c, "backoffice", &[("billing", "x")]);
    let limit = r.limit.unwrap();
    let mut state = Default::default();
    let t0 = 1_700_000_100 * 1_000_000_000u64; // a minute boundary
    for _ in 0..120 {
        assert!(limit
            .decide(&mut state, t0 + 59_000_000_000, 1)
            .is_allowed());
    }
    assert!(!limit
        .decide(&mut state, t0 + 59_000_000_000, 1)
        .is_allowed());
    assert!(limit
        .decide(&mut state, t0 + 60_000_000_000, 1)
        .is_allowed());
}

#[test]
fn request_override_bypasses_config() {
    let c = fixtures();
    let over = RateLimitOverride {
        requests_per_unit: 7,
        unit: Unit::Hour,
    };
    let entries = [("tenant", "acme"), ("project", "beta"), ("route", "")];
    let r = c.resolve_override("depth_flat", &entries, over).unwrap();
    assert_eq!((r.requests_per_unit, r.unit), (7, Some(Unit::Hour)));
    assert!(!r.shadow_mode && !r.quota_mode && r.name.is_none());
    assert_eq!(r.key, "depth_flat_tenant_acme_project_beta_route__");
    assert_eq!(r.stats_key, "depth_flat.tenant_acme.project_beta.route");
    assert_eq!(r.limit, fixed(7, Unit::Hour));
    // Even over a shadow rule: the override has no shadow mode.
    let shadowed = [("service", "auth"), ("user", "user-x")];
    assert!(
        !c.resolve_override("soft_launch", &shadowed, over)
            .unwrap()
            .shadow_mode
    );
    // An unknown domain: no limit, as envoyproxy/ratelimit checks the domain first.
    assert_eq!(c.resolve_override("nope", &entries, over), None);
    assert_eq!(Unit::from_override_number(5), Some(Unit::Month));
    assert_eq!(Unit::from_override_number(0), None);
    assert_eq!(
        Unit::from_override_number(7),
        None,
        "no WEEK in RateLimitUnit"
    );
    assert_eq!(Unit::Week.response_number(), 7);
}

#[test]
fn overall_code() {
    let c = fixtures();
    let plain = resolved(&c, "backoffice", &[("billing", "x")]);
    let shadow = resolved(&c, "soft_launch", &[("service", "a"), ("user", "user-x")]);
    let quota_a = resolved(&c, "plans", &[("plan", "free"), ("user", "u")]);
    let quota_b = resolved(&c, "plans", &[("user", "u")]);
    let unlimited = resolved(&c, "backoffice", &[("ldap", "x")]);
    assert!(!overall([]));
    assert!(!overall([(None, true)]));
    assert!(overall([(Some(&plain), true)]));
    assert!(!overall([(Some(&plain), false)]));
    assert!(!overall([(Some(&shadow), true)]), "shadow rules answer OK");
    assert!(!overall([(Some(&unlimited), true)]));
    // Quota rules: over only when every one of them is over.
    assert!(!overall([(Some(&quota_a), true), (Some(&quota_b), false)]));
    assert!(overall([(Some(&quota_a), true), (Some(&quota_b), true)]));
    assert!(overall([(Some(&quota_a), true)]));
    // Any other rule over is enough.
    assert!(overall([(Some(&quota_a), false), (Some(&plain), true)]));
    assert!(!overall([(Some(&quota_a), false), (Some(&plain), false)]));
}

// ----- Loading -----

#[test]
fn directory_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/envoy");
    let c = envoy::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let parts = |c: &EnvoyConfig| -> Vec<(String, Vec<envoy::Descriptor>)> {
        c.domains()
            .map(|(name, d)| (name.to_owned(), d.descriptors.clone()))
            .collect()
    };
    assert_eq!(parts(&c), parts(&fixtures()));
    assert_eq!(c.domains().count(), FIXTURES.len());
    assert!(c.domain("plans").unwrap().file.ends_with("modes.yaml"));
    // One file.
    let one = envoy::load(&dir.join("example1.yaml")).unwrap();
    assert_eq!(
        one.domains().map(|(d, _)| d).collect::<Vec<_>>(),
        ["catalog_db"]
    );
}

#[test]
fn directory_with_a_domain_twice_and_other_files() {
    let dir = std::env::temp_dir().join(format!("ratewarden-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body = "domain: twice\ndescriptors:\n  - key: a\n";
    std::fs::write(dir.join("a.yaml"), body).unwrap();
    std::fs::write(dir.join("b.yml"), format!("# again\n{body}")).unwrap();
    std::fs::write(dir.join("c.txt"), "not: [yaml").unwrap();
    let e = envoy::load(&dir).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    let a = dir.join("a.yaml").display().to_string();
    let b = dir.join("b.yml").display().to_string();
    assert_eq!(
        e.to_string(),
        format!("{b}:2:9: duplicate domain `twice`: already defined in {a}:1:9")
    );
    let missing = envoy::load(Path::new("/no/such/file.yaml")).unwrap_err();
    assert!(missing.0[0].message.starts_with("cannot read"), "{missing}");
}

#[test]
fn yaml_features_go_accepts() {
    let c = envoy::parse(
        "t.yaml",
        "domain: 'quoted'\n\
         descriptors:\n\
         \x20 - &base\n\
         \x20   key: ip\n\
         \x20   value: 10.0.0.1\n\
         \x20   shadow_mode: yes\n\
         \x20   metadata: {team: edge, tags: [a, b]}\n\
         \x20   rate_limit: {unit: Minute, requests_per_unit: 9}\n\
         \x20 - <<: *base\n\
         \x20   value: 10.0.0.2\n\
         \x20 - key: port\n\
         \x20   value: 8080\n\
         \x20   rate_limit: {unit: second}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let one = resolved(&c, "quoted", &[("ip", "10.0.0.1")]);
    assert!(one.shadow_mode);
    assert_eq!((one.requests_per_unit, one.unit), (9, Some(Unit::Minute)));
    let merged = resolved(&c, "quoted", &[("ip", "10.0.0.2")]);
    assert_eq!(merged.requests_per_unit, 9);
    // A missing requests_per_unit is 0, as Go's zero value.
    let port = resolved(&c, "quoted", &[("port", "8080")]);
    assert_eq!((port.requests_per_unit, port.limit), (0, None));
}

// ----- Errors, each with its position -----

#[test]
fn error_unknown_keys_with_hints() {
    assert_eq!(
        errors("domain: d\ndescriptor:\n  - key: a\n"),
        ["t.yaml:2:1: unknown key `descriptor` in the file; expected one of `domain`, `descriptors`; did you mean `descriptors`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      request_per_unit: 5\n"),
        ["t.yaml:6:7: limit `d.a`: unknown key `request_per_unit` in `rate_limit`; expected one of `unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`; did you mean `requests_per_unit`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    shadowmode: true\n"),
        ["t.yaml:4:5: limit `d`: unknown key `shadowmode` in a descriptor; expected one of `key`, `value`, `rate_limit`, `descriptors`, `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata`, `ratewarden`; did you mean `shadow_mode`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces:\n        - nme: x\n"),
        ["t.yaml:7:11: limit `d.a`: unknown key `nme` in a `replaces` entry; expected one of `name`; did you mean `name`?"]
    );
}

#[test]
fn error_domain_and_key() {
    assert_eq!(
        errors("descriptors:\n  - key: a\n"),
        ["t.yaml:1:1: `domain` is missing"]
    );
    assert_eq!(
        errors("domain: ''\n"),
        ["t.yaml:1:9: `domain` must not be empty"]
    );
    assert_eq!(
        errors(""),
        ["t.yaml:1:1: the file is empty: it needs a `domain`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - value: v\n"),
        ["t.yaml:3:5: limit `d`: a descriptor needs a `key`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: \"\"\n    value: v\n"),
        ["t.yaml:3:10: limit `d`: `key` must not be empty"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: [a]\n"),
        ["t.yaml:3:10: limit `d`: `key` must be a string"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors: {key: a}\n"),
        ["t.yaml:2:14: limit `d`: `descriptors` must be a list of descriptors"]
    );
    assert_eq!(
        errors("domain: d\ndomain: e\n"),
        ["t.yaml:2:1: `domain` is given twice in the file (first at line 1, column 1)"]
    );
}

#[test]
fn error_units() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 5\n"),
        ["t.yaml:5:13: limit `d.a`: unknown `unit` `minutes`: use second, minute, hour, day, week, month or year; did you mean `minute`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n"),
        ["t.yaml:5:7: limit `d.a`: `rate_limit` needs a `unit` (second, minute, hour, day, week, month or year), or `unlimited: true`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n"),
        ["t.yaml:6:13: limit `d.a`: `unit: second` must not be given with `unlimited: true`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: maybe}\n"),
        ["t.yaml:4:43: limit `d.a`: `unlimited` must be true or false, not `maybe`"]
    );
}

#[test]
fn error_numbers() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n"),
        ["t.yaml:4:51: limit `d.a`: `requests_per_unit` must be a whole number from 0 to 4294967295, not -1"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n"),
        ["t.yaml:4:51: limit `d.a`: `requests_per_unit` must be a whole number from 0 to 4294967295, not 4294967296"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2.5}\n"),
        ["t.yaml:4:51: limit `d.a`: `requests_per_unit` must be a whole number from 0 to 4294967295, not 2.5"]
    );
}

#[test]
fn error_duplicate_siblings() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: b\n  - key: a\n    value: x\n"),
        ["t.yaml:6:5: limit `d.a_x`: duplicate descriptor: another one with key `a` and value `x` is at line 3, column 5"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: p\n    descriptors:\n      - key: a\n      - key: a\n"),
        ["t.yaml:6:9: limit `d.p.a`: duplicate descriptor: another one with key `a` and no value is at line 5, column 9"]
    );
    // Compared by envoyproxy/ratelimit's composite key: (a_b, c) and (a, b_c) collide.
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a_b\n    value: c\n  - key: a\n    value: b_c\n"),
        ["t.yaml:5:5: limit `d.a_b_c`: duplicate descriptor: another one with key `a` and value `b_c` is at line 3, column 5"]
    );
    // The same key with and without a value is fine.
    envoy::parse(
        "t.yaml",
        "domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: x\n",
    )
    .unwrap();
}

#[test]
fn error_replaces() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: mine\n      unit: second\n      replaces:\n        - name: mine\n"),
        ["t.yaml:8:17: limit `d.a`: `replaces` names this rule's own name `mine`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces:\n        - name: ''\n"),
        ["t.yaml:7:11: limit `d.a`: a `replaces` entry needs a non-empty `name`"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: other\n"),
        ["t.yaml:6:17: limit `d.a`: `replaces` must be a list of `- name: …` entries"]
    );
}

#[test]
fn error_extension() {
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: gcr}\n"),
        ["t.yaml:5:29: limit `d.a`: unknown `algorithm` `gcr`: use fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket, leaky-queue, gcra, quota; did you mean `gcra`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: token_bucket}\n"),
        ["t.yaml:5:29: limit `d.a`: unknown `algorithm` `token_bucket`: use fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket, leaky-queue, gcra, quota; did you mean `token-bucket`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: concurrency}\n"),
        ["t.yaml:5:29: limit `d.a`: `algorithm: concurrency` is not a rate; use it in the native TOML config"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: sliding-window, burst: 3}\n"),
        ["t.yaml:5:52: limit `d.a`: `burst` does not apply to `sliding-window`; only to token-bucket, leaky-bucket, leaky-queue and gcra"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: gcra, brst: 3}\n"),
        ["t.yaml:5:35: limit `d.a`: unknown key `brst` in `ratewarden`; expected one of `algorithm`, `burst`, `timezone`, `always_charge`; did you mean `burst`?"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    ratewarden: {algorithm: gcra}\n"),
        ["t.yaml:4:17: limit `d.a`: `ratewarden` needs a `rate_limit` on the same descriptor"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true}\n    ratewarden: {algorithm: gcra}\n"),
        ["t.yaml:5:17: limit `d.a`: `ratewarden` cannot choose an algorithm for an unlimited rule"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 5}\n    ratewarden: {algorithm: quota, timezone: Mars/Olympus}\n").len(),
        1
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {algorithm: leaky-queue, always_charge: yes}\n"),
        ["t.yaml:5:57: limit `d.a`: `always_charge` does not apply to `leaky-queue`: its units are queued per request, not spent"]
    );
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    ratewarden: {always_charge: 1}\n"),
        ["t.yaml:5:33: limit `d.a`: `always_charge` must be true or false, not `1`"]
    );
}

/// `ratewarden: {always_charge: true}` alone keeps envoyproxy/ratelimit's fixed window and
/// marks the rule; without it a rule charges refused calls nothing.
#[test]
fn extension_always_charge_keeps_the_fixed_window() {
    let c = envoy::parse(
        "t.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    ratewarden: {always_charge: on}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .unwrap();
    let a = resolved(&c, "d", &[("a", "x")]);
    assert!(a.always_charge);
    assert_eq!(
        a.limit.as_ref().map(Limit::kind),
        Some(AlgorithmKind::FixedWindow)
    );
    assert!(!resolved(&c, "d", &[("b", "x")]).always_charge);
}

#[test]
fn error_yaml_syntax_and_several_errors_in_file_order() {
    let e = errors("domain: d\ndescriptors:\n  - key: [a\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("t.yaml:4:1: invalid YAML: "), "{e:?}");
    assert_eq!(
        errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: weeks}\n  - key: b\n    valu: x\n"),
        [
            "t.yaml:4:24: limit `d.a`: unknown `unit` `weeks`: use second, minute, hour, day, week, month or year; did you mean `week`?",
            "t.yaml:6:5: limit `d`: unknown key `valu` in a descriptor; expected one of `key`, `value`, `rate_limit`, `descriptors`, `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata`, `ratewarden`; did you mean `value`?",
        ]
    );
}

/// Issue 11/12 item 9: the reader copied every alias, so nine levels of ten aliases each (a
/// few hundred bytes, "billion laughs") asked for 10^9 nodes and took the process down at
/// load or reload. Now the expansion is bounded and the error points at the alias.
#[test]
fn an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str("domain: bomb\n");
    assert!(text.len() < 700, "{}", text.len());
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("t.yaml:6:")
            && found[0]
                .contains("invalid YAML: aliases copy more than 200000 nodes, the most they may"),
        "{found:?}"
    );

    // Copies of one long scalar are bounded in bytes, not only in nodes.
    let long = "y".repeat(1 << 20);
    let mut text = format!("s: &s {long}\nl: [");
    text.push_str(&"*s, ".repeat(40));
    text.push_str("]\ndomain: d\n");
    let found = errors(&text);
    assert!(
        found[0].contains("aliases copy more than 16 MiB of text, the most they may"),
        "{found:?}"
    );
}

/// The reader and the validator recurse a level of nesting at a time: a deeply nested file
/// would overflow the stack, directly or through aliases that each add a level.
#[test]
fn deep_nesting_is_refused_with_its_position() {
    let depth = 100_000;
    let text = format!("domain: deep\ndescriptors:\n{}", nested_block(depth));
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("lists and maps nest deeper than 64 levels, the most a file may"),
        "{found:?}"
    );
    assert!(found[0].starts_with("t.yaml:"), "{found:?}");

    // A chain of anchors, each a list holding the previous one: shallow as written.
    let mut text = String::from("c0: &c0 [x]\n");
    for i in 1..200 {
        text.push_str(&format!("c{i}: &c{i} [*c{}]\n", i - 1));
    }
    text.push_str("domain: d\n");
    let found = errors(&text);
    assert!(
        found[0].contains("nest deeper than 64 levels") && found[0].starts_with("t.yaml:63:"),
        "{found:?}"
    );

    // Within the bound, a deep descriptor tree still loads.
    let ok = format!("domain: ok\ndescriptors:\n{}", nested_descriptors(20));
    envoy::parse("ok.yaml", &ok).unwrap();
}

/// `depth` block lists, each the only item of the one before, on one line (`- - - x`).
fn nested_block(depth: usize) -> String {
    format!("{}x\n", "- ".repeat(depth))
}

/// A chain of `levels` descriptors, each nested in the one before.
fn nested_descriptors(levels: usize) -> String {
    let mut text = String::new();
    for i in 0..levels {
        let pad = "  ".repeat(2 * i);
        text.push_str(&format!("{pad}- key: k{i}\n"));
        text.push_str(&format!(
            "{pad}  rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        ));
        if i + 1 < levels {
            text.push_str(&format!("{pad}  descriptors:\n"));
        }
    }
    text
}
