//! A loaded envoyproxy/ratelimit config: domains, descriptor trees and their rules, and
//! what a request descriptor resolves to.

use std::collections::{BTreeMap, HashMap};

use ratewarden_core::Limit;

use super::Unit;
use crate::config::{ConfigError, ConfigErrors};

/// A `rate_limit` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyRule {
    /// `name`, for `replaces`.
    pub name: Option<String>,
    /// `unit`; `None` only when `unlimited`.
    pub unit: Option<Unit>,
    /// `requests_per_unit` (0 when not given).
    pub requests_per_unit: u32,
    /// `unlimited: true`: always OK, no counter.
    pub unlimited: bool,
    /// The names in `replaces`.
    pub replaces: Vec<String>,
    /// What to decide with: `None` when `unlimited`, or when `requests_per_unit` is 0 (every
    /// request is over the limit).
    pub limit: Option<Limit>,
    /// `ratewarden: {always_charge: true}`: a refused call's hits are counted all the same,
    /// as envoyproxy/ratelimit counts past its limit (for reports of what was spent, such as
    /// Envoy's `hits_addend` at a stream's end).
    pub always_charge: bool,
}

/// One descriptor node of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `key`.
    pub key: String,
    /// `value`, empty when not given (any value matches, one counter per value).
    pub value: String,
    /// `rate_limit`.
    pub rule: Option<EnvoyRule>,
    /// `descriptors`: the next level.
    pub descriptors: Vec<Descriptor>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`.
    pub share_threshold: bool,
    /// Line and column of the node in its file.
    pub position: (usize, usize),
    /// The next level indexed: composite `key_value` (or `key`) to index in `descriptors`.
    pub(super) exact: HashMap<String, usize>,
    /// Indexes in `descriptors` of wildcard values, in file order.
    pub(super) wildcards: Vec<usize>,
}

impl Descriptor {
    /// envoyproxy/ratelimit's map key for the node: `key`, or `key_value`.
    pub fn composite(&self) -> String {
        composite(&self.key, &self.value)
    }

    /// Whether `value` holds a `*`.
    pub fn is_wildcard(&self) -> bool {
        self.value.contains('*')
    }

    /// The node's step in a rule's label: `key=value`, or `key` (see [`Resolved::label`]).
    pub fn label_step(&self) -> String {
        let mut step = String::with_capacity(self.key.len() + 1 + self.value.len());
        self.push_label_step(&mut step);
        step
    }

    /// Appends [`label_step`](Descriptor::label_step) to `out` (per request, without a
    /// string of its own).
    pub(super) fn push_label_step(&self, out: &mut String) {
        out.push_str(&self.key);
        if !self.value.is_empty() {
            out.push('=');
            out.push_str(&self.value);
        }
    }
}

/// envoyproxy/ratelimit's map key for a descriptor entry: `key`, or `key_value`.
pub(super) fn composite(key: &str, value: &str) -> String {
    let mut out = String::with_capacity(key.len() + 1 + value.len());
    push_composite(&mut out, key, value);
    out
}

/// Appends [`composite`] to `out` (per request, without a string of its own).
pub(super) fn push_composite(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    if !value.is_empty() {
        out.push('_');
        out.push_str(value);
    }
}

/// One domain: its file and its top-level descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// The file that defined it.
    pub file: String,
    /// Line and column of its `domain` value.
    pub position: (usize, usize),
    /// The top-level descriptors.
    pub descriptors: Vec<Descriptor>,
    pub(super) exact: HashMap<String, usize>,
    pub(super) wildcards: Vec<usize>,
}

/// Every domain of one or more envoyproxy/ratelimit config files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvoyConfig {
    pub(super) domains: BTreeMap<String, Domain>,
}

/// A request descriptor's `limit` field: a limit given by the request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitOverride {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit` (see [`Unit::from_override_number`]).
    pub unit: Unit,
}

/// The rule a descriptor resolved to, with the counter key to decide it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The rule's `name`.
    pub name: Option<String>,
    /// Its `unit` (`None` for an unlimited rule).
    pub unit: Option<Unit>,
    /// Its `requests_per_unit`.
    pub requests_per_unit: u32,
    /// Always OK, no counter (answer `limit_remaining = u32::MAX`).
    pub unlimited: bool,
    /// Decide and count, but answer OK for this rule.
    pub shadow_mode: bool,
    /// A soft limit: see [`overall`](super::overall).
    pub quota_mode: bool,
    /// The rule names this rule replaces (see [`apply_replaces`](super::apply_replaces)).
    pub replaces: Vec<String>,
    /// `detailed_metric` of the matched node.
    pub detailed_metric: bool,
    /// `value_to_metric` of the matched node.
    pub value_to_metric: bool,
    /// What to decide with: `None` when `unlimited` (always OK) or when `requests_per_unit`
    /// is 0 (always over the limit, as `hits > 0` is).
    pub limit: Option<Limit>,
    /// The rule's `always_charge` (see [`EnvoyRule::always_charge`]).
    pub always_charge: bool,
    /// The counter key as envoyproxy/ratelimit builds it, without its prefix and window:
    /// `domain_` then `key_value_` for each entry, the wildcard pattern standing for the
    /// value where a matched node has `share_threshold` (`edge_path_/api/*_client_id_abc_`).
    /// See [`Resolved::cache_key`].
    pub key: String,
    /// The statistics key (`domain.key_value.key`): the matched nodes' composite keys joined
    /// by dots, a node with `value_to_metric` giving the request's value instead, and
    /// `_value` of the last entry appended when the rule's node has `detailed_metric` and no
    /// nested descriptors (README Example 8).
    pub stats_key: String,
    /// The rule's label in per-rule metrics: the domain, then each node on the path to the
    /// rule as the file writes it (`key=value`, or `key` for any value), joined by `/`
    /// (`edge/path=/api/*/export/client_id`). One per rule of the file, whatever the
    /// request's values, so the labels are as many as the rules. `None` for a limit the
    /// request gave itself, and for a native rule (its name is its label).
    pub label: Option<String>,
}

/// A YAML rule that decides (not `unlimited`, not a limit of 0), where it is in the file.
#[derive(Debug, Clone)]
pub struct DecidingRule<'a> {
    /// Its label (see [`Resolved::label`]).
    pub label: String,
    /// Its domain.
    pub domain: &'a str,
    /// The rule.
    pub rule: &'a EnvoyRule,
    /// Its limit.
    pub limit: &'a Limit,
    /// Its node's `shadow_mode`.
    pub shadow_mode: bool,
}

impl Resolved {
    /// envoyproxy/ratelimit's full counter key at `now_secs` (Unix seconds): `prefix`, then
    /// [`key`](Resolved::key), then the window start `now_secs / divider * divider`. `None`
    /// for an unlimited rule, which has no counter.
    pub fn cache_key(&self, prefix: &str, now_secs: u64) -> Option<String> {
        let divider = self.unit?.divider();
        Some(format!(
            "{prefix}{}{}",
            self.key,
            now_secs / divider * divider
        ))
    }
}

impl EnvoyConfig {
    /// The domains, in name order.
    pub fn domains(&self) -> impl Iterator<Item = (&str, &Domain)> {
        self.domains.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// One domain.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// The label of every rule that decides (not `unlimited`, not a limit of 0), in file
    /// order within each domain: what [`Resolved::label`] can be.
    pub fn rule_labels(&self) -> Vec<String> {
        self.deciding_rules()
            .into_iter()
            .map(|rule| rule.label)
            .collect()
    }

    /// Every rule that decides, with its label, domain and node, in the order of
    /// [`rule_labels`](EnvoyConfig::rule_labels).
    pub fn deciding_rules(&self) -> Vec<DecidingRule<'_>> {
        fn walk<'a>(
            domain: &'a str,
            nodes: &'a [Descriptor],
            path: &str,
            rules: &mut Vec<DecidingRule<'a>>,
        ) {
            for node in nodes {
                let path = format!("{path}/{}", node.label_step());
                if let Some(rule) = &node.rule {
                    if let Some(limit) = &rule.limit {
                        rules.push(DecidingRule {
                            label: path.clone(),
                            domain,
                            rule,
                            limit,
                            shadow_mode: node.shadow_mode,
                        });
                    }
                }
                walk(domain, &node.descriptors, &path, rules);
            }
        }
        let mut rules = Vec::new();
        for (name, domain) in &self.domains {
            walk(name, &domain.descriptors, name, &mut rules);
        }
        rules
    }

    /// Adds `other`'s domains.
    ///
    /// # Errors
    ///
    /// A domain both define, naming both files (nothing is added then).
    pub fn merge(&mut self, other: EnvoyConfig) -> Result<(), ConfigErrors> {
        let clashes: Vec<ConfigError> = other
            .domains
            .iter()
            .filter_map(|(name, d)| {
                let first = self.domains.get(name)?;
                Some(ConfigError {
                    file: d.file.clone(),
                    position: Some(d.position),
                    rule: None,
                    message: format!(
                        "duplicate domain `{name}`: already defined in {}:{}:{}",
                        first.file, first.position.0, first.position.1
                    ),
                })
            })
            .collect();
        if !clashes.is_empty() {
            return Err(ConfigErrors(clashes));
        }
        self.domains.extend(other.domains);
        Ok(())
    }
}
