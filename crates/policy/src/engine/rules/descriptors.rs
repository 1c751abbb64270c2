//! Envoy's descriptors under the rules: envoyproxy/ratelimit YAML rules and native rules
//! addressed by domain and descriptor, resolved to rules and keys for the one charging path
//! HTTP requests take, and each descriptor's status read back from what it decided. The
//! front doors (gRPC `ShouldRateLimit`, `POST /json`) only translate.
//!
//! What differs from envoyproxy/ratelimit, on purpose: the descriptors of one request are
//! decided all or nothing (a request over one limit is charged on none), and any of our
//! algorithms can stand behind a descriptor (`ratewarden:` in the YAML).

use std::sync::Arc;

use ratewarden_core::Limit;

use super::{Applying, Counters, RuleSet};
use crate::config::{Cost, KeyPart, Match, Mode, OnStoreFailure, Rule, WhenKeyMissing};
use crate::engine::error::RequestError;
use crate::engine::request::{bounded_part, enforces, RequestDescriptor};
use crate::engine::verdict::{DescriptorStatus, DescriptorVerdict, RuleOutcome};
use crate::envoy::{self, Resolved, Unit};

/// Where a descriptor's rule came from.
enum Source {
    /// The Envoy YAML (or the request's own limit).
    Envoy,
    /// The TOML rule at this index.
    Native(usize),
}

/// A descriptor call resolved under a rule set: one rule per decided descriptor, for the
/// verdict to carry, and what each applies with.
pub(crate) struct DescriptorPlan<'s> {
    /// The rules `applying` indexes.
    pub(crate) rules: Arc<[Rule]>,
    pub(crate) applying: Vec<Applying>,
    /// Per decided descriptor's rule: its counters (a request's own limit has none).
    owners: Vec<Option<&'s Counters>>,
    /// Per descriptor, in request order: its rule, when one resolved.
    resolved: Vec<Option<Resolved>>,
    /// Per descriptor: its index in `rules`, when it was decided.
    rule_of: Vec<Option<usize>>,
}

impl RuleSet {
    /// The `descriptors` of one rate limit request of `domain`, each costing `hits` unless
    /// it says otherwise, resolved: a descriptor resolves to an envoyproxy/ratelimit rule
    /// of the YAML in force (or to the limit it carries itself), else to the first native
    /// rule whose `match.domain` and `match.descriptor` take it.
    ///
    /// # Errors
    ///
    /// An empty domain or no descriptors.
    pub(crate) fn descriptors(
        &self,
        domain: &str,
        descriptors: &[RequestDescriptor<'_>],
        hits: u64,
    ) -> Result<DescriptorPlan<'_>, RequestError> {
        if domain.is_empty() {
            return Err(RequestError::Descriptors(
                "rate limit domain must not be empty".to_owned(),
            ));
        }
        if descriptors.is_empty() {
            return Err(RequestError::Descriptors(
                "rate limit descriptor list must not be empty".to_owned(),
            ));
        }
        let set = self;
        let mut sources = Vec::with_capacity(descriptors.len());
        let mut resolved: Vec<Option<Resolved>> = descriptors
            .iter()
            .map(|d| {
                let yaml = match d.limit {
                    Some(o) => set.envoy.resolve_override(domain, &d.entries, o),
                    None => set.envoy.resolve(domain, &d.entries),
                };
                if yaml.is_some() || d.limit.is_some() {
                    sources.push(Source::Envoy);
                    return yaml;
                }
                // No YAML rule: a native rule of this domain may address the descriptor.
                match set
                    .rules
                    .iter()
                    .position(|r| r.matches.matches_descriptor(domain, &d.entries))
                {
                    Some(i) => {
                        sources.push(Source::Native(i));
                        Some(native(&set.rules[i]))
                    }
                    None => {
                        sources.push(Source::Envoy);
                        None
                    }
                }
            })
            .collect();
        envoy::apply_replaces(&mut resolved);

        // One rule per decided descriptor, for the verdict to carry, and its counters. A
        // request of one descriptor of a YAML rule (Envoy's usual call) takes the rule built
        // when the YAML came into force instead.
        let mut rules: Vec<Rule> = Vec::new();
        let mut alone: Option<Arc<[Rule]>> = None;
        let mut owners: Vec<Option<&Counters>> = Vec::new();
        let mut applying = Vec::new();
        let mut rule_of = vec![None; descriptors.len()];
        for (i, (d, r)) in descriptors.iter().zip(&mut resolved).enumerate() {
            let Some(r) = r else { continue };
            let Some(limit) = &r.limit else { continue };
            let cost = d.hits.unwrap_or(hits);
            let (rule, key, enforced, owner) = match sources[i] {
                Source::Native(n) => {
                    let rule = &set.rules[n];
                    let key = native_key(&set.prefixes[n], rule, &d.entries);
                    let enforced = enforces(rule, &key);
                    (Some(rule.clone()), key, enforced, Some(&*set.counters[n]))
                }
                Source::Envoy => {
                    // Counted by its label, as native rules are by name (a request's own
                    // limit has none, and no counter).
                    let yaml = r
                        .label
                        .as_ref()
                        .and_then(|label| set.envoy_rules.get(label));
                    let rule = match yaml {
                        Some(yaml) if descriptors.len() == 1 => {
                            alone = Some(Arc::clone(&yaml.alone));
                            None
                        }
                        _ => {
                            // Its place in the tree, as when it comes alone; a request's own
                            // limit (no YAML rule) by its place in the request.
                            let name = r
                                .name
                                .clone()
                                .or_else(|| r.label.clone())
                                .unwrap_or_else(|| format!("{domain}/descriptor-{i}"));
                            Some(envoy_rule(
                                name,
                                domain,
                                limit.clone(),
                                r.shadow_mode,
                                r.always_charge,
                            ))
                        }
                    };
                    let mut key = String::with_capacity(ENVOY_PREFIX.len() + r.key.len());
                    key.push_str(ENVOY_PREFIX);
                    key.push_str(&r.key);
                    (rule, key, !r.shadow_mode, yaml.map(|y| &*y.counters))
                }
            };
            // A rollout's key outside the share reports as shadow: never over.
            r.shadow_mode = !enforced;
            let index = owners.len();
            rule_of[i] = Some(index);
            applying.push(Applying {
                rule: index,
                key,
                cost,
                enforced,
                flow: None,
            });
            rules.extend(rule);
            owners.push(owner);
        }
        Ok(DescriptorPlan {
            rules: alone.unwrap_or_else(|| rules.into()),
            applying,
            owners,
            resolved,
            rule_of,
        })
    }
}

impl DescriptorPlan<'_> {
    /// The counters of decided rule `k`, if it has some.
    pub(crate) fn counters(&self, k: usize) -> Option<&Counters> {
        self.owners.get(k).copied().flatten()
    }

    /// Whether the call is over (envoyproxy/ratelimit's overall code: quota mode, shadow
    /// mode, `replaces`) and each descriptor's status in request order, from `outcomes`
    /// (what the plan's rules decided, sorted by rule).
    pub(crate) fn verdicts(&self, outcomes: &[RuleOutcome]) -> (bool, Vec<DescriptorVerdict>) {
        // Each decided descriptor has a rule of its own, with at most one outcome: found
        // in one pass: a search of the outcomes per descriptor would make a call of n
        // descriptors cost n².
        let mut outcome_of: Vec<Option<usize>> = vec![None; self.owners.len()];
        for (n, o) in outcomes.iter().enumerate() {
            if let Some(slot) = outcome_of.get_mut(o.rule) {
                slot.get_or_insert(n);
            }
        }
        let outcome_of = |k: usize| outcome_of.get(k).copied().flatten();
        let over: Vec<bool> = self
            .resolved
            .iter()
            .zip(&self.rule_of)
            .map(|(r, k)| match (r, k) {
                (Some(_), Some(k)) => outcome_of(*k).is_some_and(|n| outcomes[n].said_no()),
                // A rule of 0 requests is always over; an unlimited one never.
                (Some(r), None) => r.limit.is_none() && !r.unlimited,
                (None, _) => false,
            })
            .collect();
        let overall_over = envoy::overall(
            self.resolved
                .iter()
                .map(Option::as_ref)
                .zip(over.iter().copied()),
        );
        let verdicts = self
            .resolved
            .iter()
            .zip(&self.rule_of)
            .zip(&over)
            .map(|((r, k), &over)| {
                let outcome = k.and_then(outcome_of);
                match r {
                    None => DescriptorVerdict {
                        status: DescriptorStatus::Ok,
                        no_rule: true,
                        unlimited: false,
                        shadow: false,
                        name: None,
                        unit: None,
                        requests_per_unit: 0,
                        outcome: None,
                    },
                    Some(r) => DescriptorVerdict {
                        status: if over && !r.shadow_mode && !r.unlimited {
                            DescriptorStatus::OverLimit
                        } else {
                            DescriptorStatus::Ok
                        },
                        no_rule: false,
                        unlimited: r.unlimited,
                        shadow: r.shadow_mode,
                        name: r.name.clone(),
                        unit: r.unit,
                        requests_per_unit: r.requests_per_unit,
                        outcome,
                    },
                }
            })
            .collect();
        (overall_over, verdicts)
    }
}

/// A native rule as a resolved descriptor rule (its name can be `replaces`d).
fn native(rule: &Rule) -> Resolved {
    let window = ratewarden_core::window_secs(&rule.limit);
    Resolved {
        name: Some(rule.name.clone()),
        unit: Unit::ALL.into_iter().find(|u| Some(u.divider()) == window),
        requests_per_unit: u32::try_from(ratewarden_core::Algorithm::limit(&rule.limit))
            .unwrap_or(u32::MAX),
        unlimited: false,
        shadow_mode: rule.mode == Mode::Shadow,
        quota_mode: false,
        replaces: Vec::new(),
        detailed_metric: false,
        value_to_metric: false,
        limit: Some(rule.limit.clone()),
        always_charge: rule.always_charge,
        key: String::new(),
        stats_key: String::new(),
        label: None,
    }
}

/// `name@fingerprint|values`: a native rule's key for a descriptor (or a quota bucket), as
/// for HTTP requests, the `descriptor` part standing for the entries' values in order, the
/// `bucket` part for the entries sorted by key, each `key=value`.
pub(crate) fn native_key(prefix: &str, rule: &Rule, entries: &[(&str, &str)]) -> String {
    let mut key = prefix.to_owned();
    for part in &rule.key {
        key.push('|');
        match part {
            KeyPart::Descriptor => {
                for (n, (_, value)) in entries.iter().enumerate() {
                    if n > 0 {
                        key.push('|');
                    }
                    key.push_str(&bounded_part(value));
                }
            }
            KeyPart::Bucket => {
                let mut sorted: Vec<&(&str, &str)> = entries.iter().collect();
                sorted.sort_unstable_by_key(|(name, _)| *name);
                for (n, (name, value)) in sorted.into_iter().enumerate() {
                    if n > 0 {
                        key.push('|');
                    }
                    // The key's own `%` and `=` escaped, so the part's first `=` ends the
                    // key: no two ids make one key (bounded_part keeps that for the parts).
                    let mut entry = name.replace('%', "%25").replace('=', "%3D");
                    entry.push('=');
                    entry.push_str(value);
                    key.push_str(&bounded_part(&entry));
                }
            }
            KeyPart::Literal(text) => key.push_str(text),
            // Request attributes (ip, headers, …) do not come with a descriptor: the part
            // stands for everyone.
            _ => key.push('*'),
        }
    }
    key
}

/// What a YAML rule's keys start with (a native rule's start with its name).
const ENVOY_PREFIX: &str = "envoy:";

/// A YAML rule as a rule: enforced or shadow, failing closed (Envoy decides then), charging
/// refused calls when its `ratewarden` map says `always_charge`.
pub(crate) fn envoy_rule(
    name: String,
    domain: &str,
    limit: Limit,
    shadow: bool,
    always_charge: bool,
) -> Rule {
    Rule {
        name,
        matches: Match {
            domain: Some(domain.to_owned()),
            ..Match::default()
        },
        key: Vec::new(),
        // A descriptor carries every entry its rule keys on, or does not match it.
        when_key_missing: WhenKeyMissing::Skip,
        limit,
        cost: Cost::Fixed(1),
        settle_within: None,
        settle_from: None,
        local: None,
        mode: if shadow { Mode::Shadow } else { Mode::Enforce },
        on_store_failure: OnStoreFailure::Closed,
        // Envoy's own service waits for no replica either.
        wait_for_replicas: 0,
        sensitive: false,
        openai_headers: None,
        always_charge,
        local_first: false,
        prefetch: None,
        global: false,
        adaptive: None,
        rendered: Default::default(),
    }
}
