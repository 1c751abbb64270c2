//! The budget an Envoy quota bucket draws on: the first native rule that takes the bucket
//! (by `match.bucket`, or by `match.domain` and `match.descriptor` as a descriptor's
//! entries are taken), its key for the bucket, and the bucket's weight in the split.

use std::time::Duration;

use super::descriptors::native_key;
use super::RuleSet;
use crate::config::{split_rate, OnStoreFailure};
use crate::quota::{Budget, QuotaBucket};

impl RuleSet {
    /// The budget of a quota bucket of `domain` whose id is `entries` (sorted by key);
    /// `None` when no rule takes it or the rule has no rate to split.
    pub(crate) fn quota_bucket(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
    ) -> Option<QuotaBucket> {
        let set = self;
        let i = set
            .rules
            .iter()
            .position(|r| r.matches.matches_bucket(domain, entries))?;
        let rule = &set.rules[i];
        if rule.adaptive.is_some() {
            return None;
        }
        let (per_period, period, burst) = split_rate(&rule.limit)?;
        // Keyed by the rule's name, not its fingerprint as its counters are: a reload that
        // changes the rate moves the budget's numbers, not its holdings (nor, across a
        // fleet, its leases) to a budget of their own.
        let key = native_key(&rule.name, rule, entries);
        let weight = rule
            .matches
            .bucket
            .as_ref()
            .map_or(1, |b| b.weight(entries));
        let fallback = match rule.on_store_failure {
            OnStoreFailure::Open => per_period,
            OnStoreFailure::Local { divide_by } => per_period / u64::from(divide_by.max(1)),
            OnStoreFailure::Closed => 0,
        };
        Some(QuotaBucket {
            rule: rule.name.clone(),
            budget: Budget {
                key,
                per_period,
                period: Duration::max(period, Duration::from_nanos(1)),
                burst,
            },
            weight,
            fallback,
        })
    }
}

#[cfg(test)]
mod tests {
    use ratewarden_memory::{MemoryStore, StoreConfig};

    use super::*;
    use crate::engine::Engine;

    const GOLD: &[(&str, &str)] = &[("name", "api"), ("tier", "gold")];
    const FREE: &[(&str, &str)] = &[("name", "api"), ("tier", "free")];

    fn engine(key: &str, weights: &str) -> Engine<MemoryStore> {
        let toml = format!(
            "[[limit]]\nname = \"api\"\nmatch = {{ domain = \"edge\", bucket = \"name=api\" }}\nkey = {key}\n{weights}\nalgorithm = \"gcra\"\nrate = \"600/s\"\nburst = 60\n"
        );
        let config = crate::config::parse("t.toml", &toml).expect("a valid config");
        Engine::new(config, MemoryStore::new(StoreConfig::default()))
    }

    fn key(engine: &Engine<MemoryStore>, entries: &[(&str, &str)]) -> String {
        engine
            .quota_budget("edge", entries)
            .expect("taken")
            .budget
            .key
    }

    #[test]
    fn the_bucket_key_part_is_the_ids_entries_sorted_by_key() {
        let e = engine(r#"["bucket"]"#, "");
        let gold = key(&e, GOLD);
        let prefix = "api";
        assert_eq!(gold, format!("{prefix}|name=api|tier=gold"));
        // The id is a map: any order is one key; another value is another key.
        assert_eq!(key(&e, &[("tier", "gold"), ("name", "api")]), gold);
        assert_ne!(key(&e, FREE), gold);
        // A key's `=` or `%` cannot pass for the boundary of its value; a `|` is escaped.
        let split = |k: &'static str, v: &'static str| key(&e, &[("name", "api"), (k, v)]);
        assert_ne!(split("a=b", "c"), split("a", "b=c"));
        assert_ne!(split("a%3Db", "c"), split("a=b", "c"));
        assert_eq!(split("x", "a|b"), format!("{prefix}|name=api|x=a%7Cb"));
        // A long value is kept as a digest: the key stays short.
        let long = "v".repeat(10_000);
        let digested = key(&e, &[("name", "api"), ("x", &long)]);
        assert!(digested.len() < prefix.len() + 64, "{digested}");
        // Beside other parts, as `descriptor` is.
        let e = engine(r#"["literal:edge", "bucket"]"#, "");
        assert_eq!(key(&e, GOLD), format!("{prefix}|edge|name=api|tier=gold"));
    }

    #[test]
    fn a_rule_keyed_without_bucket_puts_every_bucket_it_takes_in_one_budget() {
        for part in [r#"["global"]"#, r#"["literal:x"]"#] {
            let e = engine(part, "");
            let gold = e.quota_budget("edge", GOLD).expect("taken");
            let free = e.quota_budget("edge", FREE).expect("taken");
            assert_eq!(gold.budget, free.budget, "{part}");
            assert_eq!(gold.rule, "api");
            assert_eq!(
                (gold.budget.per_period, gold.budget.burst),
                (600, 60),
                "the rule's rate and burst, to split"
            );
            assert_eq!(gold.budget.period, Duration::from_secs(1));
        }
    }

    #[test]
    fn weights_are_the_largest_of_the_exact_entries_an_id_holds_and_one_otherwise() {
        let e = engine(
            r#"["global"]"#,
            r#"weights = { "tier=gold" = 3, "tier=silver" = 2, "region=eu" = 5, "tier=g*" = 7 }"#,
        );
        let weight =
            |entries: &[(&str, &str)]| e.quota_budget("edge", entries).expect("taken").weight;
        assert_eq!(weight(GOLD), 3);
        assert_eq!(weight(&[("name", "api"), ("tier", "silver")]), 2);
        assert_eq!(weight(FREE), 1);
        assert_eq!(weight(&[("name", "api")]), 1);
        // Several match: the largest.
        assert_eq!(
            weight(&[("name", "api"), ("region", "eu"), ("tier", "gold")]),
            5
        );
        // Exact values: a `*` is no glob there.
        assert_eq!(weight(&[("name", "api"), ("tier", "g*")]), 7);
        assert_eq!(weight(&[("name", "api"), ("tier", "gx")]), 1);
        // Without weights, every bucket weighs one.
        let plain = engine(r#"["global"]"#, "");
        assert_eq!(plain.quota_budget("edge", GOLD).expect("taken").weight, 1);
    }

    #[test]
    fn a_reload_that_changes_the_rate_keeps_the_budget_and_moves_its_numbers() {
        let e = engine(r#"["global"]"#, "");
        let before = e.quota_budget("edge", GOLD).expect("taken").budget;
        let toml = "[[limit]]\nname = \"api\"\nmatch = { domain = \"edge\", bucket = \"name=api\" }\nkey = [\"global\"]\nalgorithm = \"gcra\"\nrate = \"300/s\"\nburst = 30\n";
        e.reload(crate::config::parse("t.toml", toml).expect("a valid config"));
        let after = e.quota_budget("edge", GOLD).expect("taken").budget;
        assert_eq!(after.key, before.key);
        assert_eq!((before.per_period, after.per_period), (600, 300));
        assert_eq!(after.burst, 30);
    }

    #[test]
    fn the_fallback_is_what_the_rules_failure_policy_hands_out() {
        for (policy, fallback) in [
            ("on_store_failure = \"open\"", 600),
            ("on_store_failure = \"closed\"", 0),
            ("on_store_failure = \"local\"\nlocal_divide_by = 4", 150),
        ] {
            let e = engine(r#"["global"]"#, policy);
            let found = e.quota_budget("edge", GOLD).expect("taken");
            assert_eq!(found.fallback, fallback, "{policy}");
        }
    }
}
