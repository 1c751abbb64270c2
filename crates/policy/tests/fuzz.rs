//! Fuzzing the two config readers with proptest (cargo-fuzz needs a nightly compiler): what
//! strangers write into a TOML config or an envoyproxy/ratelimit YAML never panics, never
//! runs away, and every error says where; a valid config reads back as it was generated.
//!
//! Each property runs a few hundred cases in the suite; `RATEWARDEN_FUZZ_CASES=100000 cargo
//! test -p ratewarden-policy --test fuzz --release` runs a long pass.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use ratewarden_core::{AlgorithmKind, CalendarUnit, Limit, Numbers, Rate};
use ratewarden_policy::envoy::{self, Unit};
use ratewarden_policy::{client_ip, config, ClientIpHeader, ConfigErrors, TrustedProxies};

const EXAMPLE: &str = include_str!("../../../examples/ratewarden.toml");
const ENVOY_EXAMPLE: &str = include_str!("../../../fixtures/envoy/example9.yaml");

/// Cases per property: `RATEWARDEN_FUZZ_CASES`, or a number the suite runs in seconds.
fn cases() -> u32 {
    std::env::var("RATEWARDEN_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        // A failure is shrunk, but not for long: the first counterexample is the news.
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

/// Every error names the file and a line and column.
fn located(errors: &ConfigErrors, file: &str) -> Result<(), TestCaseError> {
    prop_assert!(!errors.0.is_empty());
    for e in &errors.0 {
        prop_assert_eq!(&e.file, file);
        prop_assert!(e.position.is_some(), "no position: {}", e);
        let (line, column) = e.position.unwrap_or_default();
        prop_assert!(line >= 1 && column >= 1, "{}", e);
        let prefix = format!("{file}:{line}:{column}: ");
        prop_assert!(e.to_string().starts_with(&prefix), "{}", e);
    }
    Ok(())
}

// ----- TOML -----

/// A TOML value, written by hand (the toml crate is built without its writer).
#[derive(Debug, Clone)]
enum Toml {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Toml>),
    Table(Vec<(String, Toml)>),
}

impl Toml {
    fn write(&self, out: &mut String) {
        match self {
            Toml::Int(n) => out.push_str(&n.to_string()),
            Toml::Float(f) => out.push_str(&format!("{f:?}")),
            Toml::Bool(b) => out.push_str(&b.to_string()),
            Toml::Str(s) => quote(s, out),
            Toml::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Toml::Table(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i > 0 { ", " } else { " " });
                    key(k, out);
                    out.push_str(" = ");
                    v.write(out);
                }
                out.push_str(" }");
            }
        }
    }
}

/// A double-quoted string, control characters escaped.
fn quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn key(k: &str, out: &mut String) {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        out.push_str(k);
    } else {
        quote(k, out);
    }
}

const SERVER_FIELDS: &[&str] = &[
    "listen",
    "admin",
    "api",
    "grpc",
    "upstream",
    "trusted_proxies",
    "client_ip_header",
    "legacy_headers",
    "retry_after_jitter",
    "max_in_flight",
    "queue_timeout",
    "critical_reserve",
    "critical",
    "shutdown_grace",
    "max_body",
];
const STORE_FIELDS: &[&str] = &[
    "kind",
    "max_keys",
    "max_bytes",
    "when_full",
    "url",
    "nodes",
    "deadline",
    "breaker_failures",
    "breaker_cool_down",
    "key_prefix",
    "tls_ca_file",
    "sentinels",
    "master_name",
    "master_username",
    "master_password",
    "master_tls",
    "wait_for_replicas",
];
const KEYS_FIELDS: &[&str] = &["api_key_header", "tenant_header"];
const ENVOY_FIELDS: &[&str] = &[
    "clients",
    "max_descriptors",
    "max_quota_buckets",
    "max_entries",
    "max_message_bytes",
];
const LIMIT_FIELDS: &[&str] = &[
    "name",
    "match",
    "key",
    "algorithm",
    "rate",
    "burst",
    "limit",
    "window",
    "period",
    "timezone",
    "lease",
    "cost",
    "max_cost",
    "settle",
    "settle_from",
    "openai_headers",
    "always_charge",
    "mode",
    "rollout",
    "sensitive",
    "local_first",
    "on_store_failure",
    "local_divide_by",
    "ipv4_prefix",
    "ipv6_prefix",
    "when_key_missing",
    "weights",
];
const MATCH_FIELDS: &[&str] = &[
    "method",
    "path",
    "host",
    "header",
    "header_value",
    "domain",
    "descriptor",
    "bucket",
];

/// Strings a config holds, right and nearly right, and some of anything.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&[
            "gcra", "token-bucket", "leaky_queue", "quota", "concurrency", "sliding-log",
            "fixed-window", "sliding-window", "leaky-bucket", "gcr", "50/s", "0/s", "1000/15m",
            "5/0s", "18446744073709551615/s", "1m", "0s", "200ms", "1.5s", "99999999999d",
            "-1s", "month", "week", "UTC", "Europe/Paris", "Mars/Olympus", "ip", "api_key",
            "tenant", "route", "global", "descriptor", "header:", "header:x-k", "literal:",
            "enforce", "shadow", "10%", "100.01%", "-1%", "open", "closed", "local", "memory",
            "redis", "redis-cluster", "redis://127.0.0.1:6379", "evict", "reject", "off",
            "127.0.0.1:8080", "[::1]:0", "http://up:80", "https://x", "10.0.0.0/8", "::/129",
            "", " ", "*", "/api/*", "POST", "edge", "k=v,k2", "bucket", "=v,,k", "tier=gold",
        ][..]).prop_map(str::to_owned),
        1 => "\\PC{0,16}",
        1 => any::<String>().prop_map(|s| s.chars().take(16).collect()),
    ]
}

fn toml_value() -> impl Strategy<Value = Toml> {
    let leaf = prop_oneof![
        3 => text().prop_map(Toml::Str),
        2 => prop_oneof![-3i64..300, any::<i64>(), Just(i64::MAX), Just(i64::MIN)].prop_map(Toml::Int),
        1 => any::<bool>().prop_map(Toml::Bool),
        1 => prop::num::f64::NORMAL.prop_map(Toml::Float),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Toml::Array),
            prop::collection::vec((field_name(MATCH_FIELDS), inner), 0..4)
                .prop_map(|f| Toml::Table(dedup(f))),
        ]
    })
}

/// A field of `known` mostly, else any name.
fn field_name(known: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(known).prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
        1 => "\\PC{0,6}",
    ]
}

/// TOML refuses a key given twice; keep the first, so that most documents get past the
/// parser to the validation behind it.
fn dedup(fields: Vec<(String, Toml)>) -> Vec<(String, Toml)> {
    let mut seen = std::collections::HashSet::new();
    fields
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect()
}

fn table(known: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, Toml)>> {
    prop::collection::vec((field_name(known), toml_value()), 0..10).prop_map(dedup)
}

/// A config document: sections and `[[limit]]` tables of mostly known fields with values of
/// any type, the sections sometimes misnamed.
fn toml_document() -> impl Strategy<Value = String> {
    let sections = prop::collection::vec(
        prop_oneof![
            table(SERVER_FIELDS).prop_map(|t| ("server".to_owned(), t)),
            table(STORE_FIELDS).prop_map(|t| ("store".to_owned(), t)),
            table(KEYS_FIELDS).prop_map(|t| ("keys".to_owned(), t)),
            table(ENVOY_FIELDS).prop_map(|t| ("envoy".to_owned(), t)),
            ("[a-z]{1,8}", table(KEYS_FIELDS)),
        ],
        0..3,
    );
    let limits = prop::collection::vec(table(LIMIT_FIELDS), 0..4);
    (sections, limits).prop_map(|(sections, limits)| {
        let mut out = String::new();
        let mut seen = std::collections::HashSet::new();
        for (name, fields) in sections {
            if !seen.insert(name.clone()) {
                continue;
            }
            out.push_str(&format!("[{name}]\n"));
            write_fields(&fields, &mut out);
        }
        for fields in limits {
            out.push_str("[[limit]]\n");
            write_fields(&fields, &mut out);
        }
        out
    })
}

fn write_fields(fields: &[(String, Toml)], out: &mut String) {
    for (k, v) in fields {
        key(k, out);
        out.push_str(" = ");
        v.write(out);
        out.push('\n');
    }
}

/// A valid rule, as its fields and the limit they must read as.
#[derive(Debug, Clone)]
struct ValidRule {
    kind: AlgorithmKind,
    fields: Vec<(String, Toml)>,
    numbers: Numbers,
    key: Vec<&'static str>,
}

fn valid_rule() -> impl Strategy<Value = ValidRule> {
    (
        prop::sample::select(&AlgorithmKind::ALL[..]),
        1u64..100_000,
        1u64..86_400,
        1u64..10_000,
        prop::sample::select(&CalendarUnit::ALL[..]),
        prop::sample::select(&["UTC", "Europe/Paris", "America/New_York"][..]),
        prop::sample::subsequence(
            &["ip", "api_key", "tenant", "route", "header:x-k"][..],
            1..4,
        ),
    )
        .prop_map(|(kind, count, seconds, burst, period, zone, key)| {
            let s = |t: String| Toml::Str(t);
            let window = Duration::from_secs(seconds);
            let mut fields = vec![("algorithm".to_owned(), s(kind.as_str().to_owned()))];
            let mut numbers = Numbers::default();
            for field in kind.fields() {
                let value = match *field {
                    "limit" => {
                        numbers.limit = Some(count);
                        Toml::Int(count as i64)
                    }
                    "window" | "lease" => {
                        if *field == "window" {
                            numbers.window = Some(window);
                        } else {
                            numbers.lease = Some(window);
                        }
                        s(format!("{seconds}s"))
                    }
                    "rate" => {
                        numbers.rate = Rate::new(count, window).ok();
                        s(format!("{count}/{seconds}s"))
                    }
                    "burst" => {
                        numbers.burst = Some(burst);
                        Toml::Int(burst as i64)
                    }
                    "period" => {
                        numbers.period = Some(period);
                        s(period.to_string())
                    }
                    "timezone" => {
                        numbers.timezone = Some(zone.to_owned());
                        s(zone.to_owned())
                    }
                    "sub_windows" => {
                        let n = 2 + (burst % 9) as u32;
                        numbers.sub_windows = Some(n);
                        Toml::Int(i64::from(n))
                    }
                    other => unreachable!("{other}"),
                };
                fields.push(((*field).to_owned(), value));
            }
            let parts = key.iter().map(|k| s((*k).to_owned())).collect();
            fields.push(("key".to_owned(), Toml::Array(parts)));
            ValidRule {
                kind,
                fields,
                numbers,
                key,
            }
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn toml_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }

    #[test]
    fn toml_random_text_never_panics(text in "\\PC{0,400}") {
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }

    #[test]
    fn toml_mutated_example_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..6),
    ) {
        let mut text: Vec<char> = EXAMPLE.chars().collect();
        for (at, c) in edits {
            let at = at.index(text.len());
            text[at] = c;
        }
        let text: String = text.into_iter().collect();
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }

    #[test]
    fn toml_structured_documents_never_panic(text in toml_document()) {
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }

    #[test]
    fn toml_valid_rules_read_back_as_written(rules in prop::collection::vec(valid_rule(), 1..5)) {
        let mut text = String::new();
        for (i, rule) in rules.iter().enumerate() {
            text.push_str("[[limit]]\n");
            let mut fields = rule.fields.clone();
            fields.push(("name".to_owned(), Toml::Str(format!("rule-{i}"))));
            write_fields(&fields, &mut text);
        }
        let parsed = config::parse("fuzz.toml", &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(parsed.rules.len(), rules.len());
        for (i, (got, want)) in parsed.rules.iter().zip(&rules).enumerate() {
            prop_assert_eq!(&got.name, &format!("rule-{i}"));
            let limit = Limit::build(want.kind, &want.numbers).unwrap();
            prop_assert_eq!(&got.limit, &limit);
            let key: Vec<String> = got.key.iter().map(ToString::to_string).collect();
            prop_assert_eq!(key, want.key.clone());
        }
    }
}

// ----- YAML -----

/// A YAML node, written in flow or block style, with anchors and aliases.
#[derive(Debug, Clone)]
enum Yaml {
    Scalar(String),
    List(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
    /// `&aN` before the node.
    Anchor(u8, Box<Yaml>),
    /// `*aN`.
    Alias(u8),
}

impl Yaml {
    fn flow(&self, out: &mut String) {
        match self {
            Yaml::Scalar(s) => yaml_quote(s, out),
            Yaml::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.flow(out);
                }
                out.push(']');
            }
            Yaml::Map(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    yaml_quote(k, out);
                    out.push_str(": ");
                    v.flow(out);
                }
                out.push('}');
            }
            Yaml::Anchor(n, node) => {
                out.push_str(&format!("&a{n} "));
                node.flow(out);
            }
            Yaml::Alias(n) => out.push_str(&format!("*a{n}")),
        }
    }

    /// Block style, `indent` spaces deep, for a value that starts on a line of its own.
    fn block(&self, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match self {
            Yaml::List(items) if !items.is_empty() => {
                for item in items {
                    out.push_str(&format!("{pad}-\n"));
                    item.block(indent + 2, out);
                }
            }
            Yaml::Map(pairs) if !pairs.is_empty() => {
                for (k, v) in pairs {
                    out.push_str(&pad);
                    yaml_quote(k, out);
                    out.push_str(":\n");
                    v.block(indent + 2, out);
                }
            }
            other => {
                out.push_str(&pad);
                other.flow(out);
                out.push('\n');
            }
        }
    }
}

/// Plain when safe, else double-quoted: YAML's double-quoted escapes are TOML's.
fn yaml_quote(s: &str, out: &mut String) {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
    if plain {
        out.push_str(s);
    } else {
        quote(s, out);
    }
}

const ENVOY_KEYS: &[&str] = &[
    "domain",
    "descriptors",
    "key",
    "value",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "ratewarden",
    "algorithm",
    "burst",
    "timezone",
    "<<",
];

fn yaml_scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&[
            "edge", "client_id", "minute", "second", "HOUR", "weeks", "10", "0", "-1",
            "4294967296", "true", "no", "~", "", "*", "/api/*", "gcra", "quota", "concurrency",
            "UTC", "Mars/Olympus", "1_000", "+5",
        ][..]).prop_map(str::to_owned),
        1 => "\\PC{0,12}",
    ]
}

fn yaml_tree() -> impl Strategy<Value = Yaml> {
    let leaf = prop_oneof![
        4 => yaml_scalar().prop_map(Yaml::Scalar),
        1 => (0u8..6).prop_map(Yaml::Alias),
    ];
    leaf.prop_recursive(6, 64, 5, |inner| {
        prop_oneof![
            3 => prop::collection::vec(inner.clone(), 0..5).prop_map(Yaml::List),
            4 => prop::collection::vec(
                (prop::sample::select(ENVOY_KEYS).prop_map(str::to_owned), inner.clone()),
                0..5,
            )
            .prop_map(Yaml::Map),
            1 => (0u8..6, inner).prop_map(|(n, node)| Yaml::Anchor(n, Box::new(node))),
        ]
    })
}

/// `levels` anchors, each a list of `fanout` aliases of the one before ("billion laughs").
fn laughs(levels: usize, fanout: usize) -> String {
    let mut text = String::from("l0: &l0 [lol]\n");
    for i in 1..=levels {
        let aliases = vec![format!("*l{}", i - 1); fanout].join(", ");
        text.push_str(&format!("l{i}: &l{i} [{aliases}]\n"));
    }
    text.push_str("domain: d\n");
    text
}

/// A valid envoyproxy/ratelimit file: descriptors two levels deep, every key distinct, as
/// the file and as the (entries, unit, requests) each leaf resolves to.
type Leaf = (Vec<(String, String)>, Unit, u32);

fn valid_envoy() -> impl Strategy<Value = (String, Vec<Leaf>)> {
    let rule = (prop::sample::select(&Unit::ALL[..]), 0u32..=u32::MAX);
    let child = (prop::option::of("[a-z]{1,6}"), rule.clone());
    let top = (
        prop::option::of("[a-z]{1,6}"),
        rule,
        prop::collection::vec(child, 0..3),
    );
    prop::collection::vec(top, 1..5).prop_map(|tops| {
        let mut text = String::from("domain: fuzz\ndescriptors:\n");
        let mut leaves = Vec::new();
        for (i, (value, (unit, rpu), children)) in tops.into_iter().enumerate() {
            let key = format!("k{i}");
            text.push_str(&format!("  - key: {key}\n"));
            let value = value.unwrap_or_default();
            if !value.is_empty() {
                text.push_str(&format!("    value: {value}\n"));
            }
            text.push_str(&format!(
                "    rate_limit: {{unit: {unit}, requests_per_unit: {rpu}}}\n"
            ));
            let asked = if value.is_empty() {
                "any".to_owned()
            } else {
                value.clone()
            };
            leaves.push((vec![(key.clone(), asked.clone())], unit, rpu));
            if !children.is_empty() {
                text.push_str("    descriptors:\n");
            }
            for (j, (v, (unit, rpu))) in children.into_iter().enumerate() {
                let child = format!("c{j}");
                text.push_str(&format!("      - key: {child}\n"));
                let v = v.unwrap_or_default();
                if !v.is_empty() {
                    text.push_str(&format!("        value: {v}\n"));
                }
                text.push_str(&format!(
                    "        rate_limit: {{unit: {}, requests_per_unit: {rpu}}}\n",
                    unit.as_str().to_uppercase()
                ));
                let v = if v.is_empty() { "any".to_owned() } else { v };
                leaves.push((vec![(key.clone(), asked.clone()), (child, v)], unit, rpu));
            }
        }
        (text, leaves)
    })
}

fn envoy_checked(text: &str) -> Result<(), TestCaseError> {
    if let Err(errors) = envoy::parse("fuzz.yaml", text) {
        located(&errors, "fuzz.yaml")?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn yaml_random_text_never_panics(text in "\\PC{0,400}") {
        envoy_checked(&text)?;
    }

    #[test]
    fn yaml_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        envoy_checked(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn yaml_mutated_example_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..6),
    ) {
        let mut text: Vec<char> = ENVOY_EXAMPLE.chars().collect();
        for (at, c) in edits {
            let at = at.index(text.len());
            text[at] = c;
        }
        envoy_checked(&text.into_iter().collect::<String>())?;
    }

    #[test]
    fn yaml_structured_documents_with_aliases_never_panic(
        tree in yaml_tree(),
        block in any::<bool>(),
    ) {
        let mut text = String::new();
        if block {
            tree.block(0, &mut text);
        } else {
            tree.flow(&mut text);
        }
        envoy_checked(&text)?;
    }

}

proptest! {
    // Each case may expand up to the bound (200,000 nodes, a tenth of a second unoptimized):
    // fewer of them in the suite, the long pass runs more.
    #![proptest_config(ProptestConfig { cases: cases().div_ceil(16), ..config() })]

    #[test]
    fn yaml_alias_bombs_are_bounded(levels in 1usize..12, fanout in 1usize..16) {
        let text = laughs(levels, fanout);
        let expanded = (0..=levels as u32).map(|l| (fanout as f64).powi(l as i32)).sum::<f64>();
        match envoy::parse("fuzz.yaml", &text) {
            Ok(_) => prop_assert!(expanded < 250_000.0, "{} nodes accepted", expanded),
            Err(errors) => located(&errors, "fuzz.yaml")?,
        }
    }

    #[test]
    fn yaml_deep_nesting_is_bounded(depth in 1usize..2_000, flow in any::<bool>()) {
        let text = if flow {
            format!("domain: d\nx: {}1{}\n", "[".repeat(depth), "]".repeat(depth))
        } else {
            format!("domain: d\nx:\n  {}1\n", "- ".repeat(depth))
        };
        match envoy::parse("fuzz.yaml", &text) {
            // `x` is an unknown key: the file is refused either way, but only a deep one for
            // its depth.
            Ok(_) => prop_assert!(false, "accepted an unknown key"),
            Err(errors) => {
                located(&errors, "fuzz.yaml")?;
                let deep = errors.0.iter().any(|e| e.message.contains("nest deeper"));
                // The parser itself stops flow nesting at 255 levels, which may come first.
                let parser = errors.0.iter().any(|e| e.message.contains("recursion limit"));
                if depth < 64 {
                    prop_assert!(!deep && !parser, "{}", errors);
                } else {
                    prop_assert!(deep || (flow && parser), "{}", errors);
                }
            }
        }
    }

}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn yaml_valid_configs_resolve_as_written((text, leaves) in valid_envoy()) {
        let parsed = envoy::parse("fuzz.yaml", &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        for (entries, unit, rpu) in leaves {
            let entries: Vec<(&str, &str)> =
                entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let got = parsed.resolve("fuzz", &entries);
            let got = got.ok_or_else(|| TestCaseError::fail(format!("{entries:?}\n{text}")))?;
            prop_assert_eq!(got.unit, Some(unit));
            prop_assert_eq!(got.requests_per_unit, rpu);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases().div_ceil(16), ..config() })]

    /// TOML's reader recurses into arrays and inline tables, and serde after it: deep
    /// nesting must be an error, not a stack overflow.
    #[test]
    fn toml_deep_nesting_never_overflows(depth in 1usize..5_000, kind in 0u8..4) {
        let text = match kind {
            0 => format!("[[limit]]\nname = {}1{}\n", "[".repeat(depth), "]".repeat(depth)),
            1 => format!("[[limit]]\nmatch = {}1{}\n", "{a = ".repeat(depth), "}".repeat(depth)),
            2 => format!("[[limit]]\nmatch.{} = 1\n", vec!["a"; depth].join(".")),
            _ => format!("[limit.{}]\nx = 1\n", vec!["a"; depth].join(".")),
        };
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }
}

// ----- Hosts and credentials -----

/// A host as clients spell hosts, and as they should not.
fn host_spelling() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("api".to_owned()),
        Just("EXAMPLE".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just(":".to_owned()),
        Just(":8080".to_owned()),
        Just("[::1]".to_owned()),
        Just("[0:0::1]".to_owned()),
        Just("[".to_owned()),
        Just("@".to_owned()),
        Just("%".to_owned()),
        "[a-zA-Z0-9_-]{1,8}",
        "\\PC{1,3}",
    ];
    prop::collection::vec(piece, 0..7).prop_map(|p| p.concat())
}

fn engine(rules: &str) -> ratewarden_policy::Engine<ratewarden_memory::MemoryStore> {
    common::engine(rules)
}

fn request<'a>(
    host: Option<&'a str>,
    headers: &'a [(&'a str, &'a str)],
) -> ratewarden_policy::Request<'a> {
    ratewarden_policy::Request {
        host,
        ..common::request("198.51.100.1", "/", headers)
    }
}

const KEYED_HOST: &str = "[[limit]]\nname = \"k\"\nmatch = { host = \"api.example\" }\n\
    key = [\"api_key\"]\nalgorithm = \"gcra\"\nrate = \"1000/s\"\nburst = 1000\n";

proptest! {
    #![proptest_config(config())]

    /// What is a host has one spelling: normalizing is idempotent, every case, a trailing
    /// dot and a port name the same host, and deciding never panics on anything.
    #[test]
    fn hosts_have_one_spelling_and_never_panic(given in host_spelling()) {
        use ratewarden_policy::host;
        match host::normalize(&given) {
            Ok(normal) => {
                prop_assert_eq!(host::normalize(&normal).unwrap(), normal.clone());
                prop_assert!(host::names(&given, &normal));
                prop_assert!(host::names(&given.to_ascii_uppercase(), &normal));
                if !normal.starts_with('[') {
                    let dotted = format!("{normal}.");
                    let with_port = format!("{normal}.:443");
                    prop_assert!(host::names(&dotted, &normal));
                    prop_assert!(host::names(&with_port, &normal));
                }
            }
            Err(error) => {
                prop_assert!(host::name(&given).is_err());
                prop_assert!(!error.to_string().is_empty());
            }
        }
        let engine = engine(KEYED_HOST);
        let decided = ratewarden_core::now_or_panic(engine.decide(&request(Some(&given), &[]), 0));
        prop_assert_eq!(decided.is_err(), host::name(&given).is_err(), "{:?}", decided);
    }

    /// One bearer token has one key however its scheme is spelled; anything else in
    /// `Authorization` is a key, no key or a request error, never a panic.
    #[test]
    fn credentials_have_one_spelling_and_never_panic(
        scheme in "[bB][eE][aA][rR][eE][rR]",
        spaces in 1usize..5,
        token in "[A-Za-z0-9._~+/-]{1,12}=?",
        value in "\\PC{0,24}",
    ) {
        let engine = engine(KEYED_HOST);
        let key_of = |authorization: &str| {
            let headers = [("authorization", authorization)];
            ratewarden_core::now_or_panic(engine.decide(&request(Some("api.example"), &headers), 0))
                .map(|v| v.outcomes[0].key.clone())
        };
        let canonical = key_of(&format!("Bearer {token}")).unwrap();
        let spelled = key_of(&format!("{scheme}{}{token}", " ".repeat(spaces))).unwrap();
        prop_assert_eq!(&spelled, &canonical);
        prop_assert!(canonical.ends_with(&ratewarden_policy::api_key_digest(&token)));
        let _ = key_of(&value);
    }
}

/// One piece of a forwarding header's value: what proxies write, and what clients try.
fn forwarding_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("203.0.113.9".to_owned()),
        Just("10.0.0.7".to_owned()),
        Just("[2001:db8::1]:443".to_owned()),
        Just("\"[2001:db8::1]\"".to_owned()),
        Just("unknown".to_owned()),
        Just("_hidden".to_owned()),
        Just("for=".to_owned()),
        Just("FOR=".to_owned()),
        Just(";proto=https".to_owned()),
        Just(",".to_owned()),
        Just(" ".to_owned()),
        Just("\"".to_owned()),
        "\\PC{0,8}",
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A `client_ip_header` of any text is a header or a located error, never a panic, and
    /// an accepted name reads back the same.
    #[test]
    fn client_ip_header_names_never_panic(name in "\\PC{0,24}") {
        if let Ok(header) = ClientIpHeader::parse(&name) {
            prop_assert_eq!(ClientIpHeader::parse(header.name()), Ok(header.clone()));
        }
        let text = format!("[server]\nclient_ip_header = {}\n", toml_string(&name));
        if let Err(errors) = config::parse("fuzz.toml", &text) {
            located(&errors, "fuzz.toml")?;
        }
    }

    /// Whatever a proxy's lines hold, the walk answers: an address, or the value that is
    /// not one (which a trusted proxy wrote: never the peer when that is not trusted).
    #[test]
    fn the_client_ip_walk_never_panics(
        header in prop_oneof![Just("X-Forwarded-For"), Just("Forwarded"), Just("X-Real-IP")],
        lines in prop::collection::vec(prop::collection::vec(forwarding_piece(), 0..6), 0..3),
        trusted_peer in any::<bool>(),
    ) {
        let trusted = TrustedProxies::parse(["10.0.0.0/8"])
            .unwrap()
            .with_header(ClientIpHeader::parse(header).unwrap());
        let lines: Vec<String> = lines.into_iter().map(|l| l.concat()).collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let peer = if trusted_peer { "10.0.0.2" } else { "198.51.100.4" }.parse().unwrap();
        match client_ip(peer, &lines, &trusted) {
            Ok(ip) if !trusted_peer => prop_assert_eq!(ip, peer),
            Ok(_) => {}
            Err(error) => {
                prop_assert!(trusted_peer);
                prop_assert!(trusted.contains(error.proxy));
                prop_assert!(!error.value.is_empty());
            }
        }
    }
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::new();
    quote(s, &mut out);
    out
}
