//! The rule set in force (the TOML rules and the Envoy YAML, swapped together), its
//! reloads, and its counters.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use super::counters::Counters;
use super::descriptors::envoy_rule;
use super::{fingerprint, Engine, Identity, RuleStats};
use crate::envoy::EnvoyConfig;
use crate::{Config, Rule};

/// A rule set in force, with what each rule's keys start with.
pub(super) struct RuleSet {
    /// The config, its rules moved out into `rules` (one copy, shared with verdicts).
    pub(super) config: Config,
    pub(super) rules: Arc<[Rule]>,
    /// envoyproxy/ratelimit configs, decided by [`Engine::decide_descriptors`].
    pub(super) envoy: Arc<EnvoyConfig>,
    /// Per rule: what it did, carried over a reload by rule name (metrics name rules).
    pub(super) counters: Vec<Arc<Counters>>,
    /// Per YAML rule, by its label (see [`Resolved::label`](crate::envoy::Resolved::label)):
    /// what it did (carried over a reload by label), and the rule a descriptor decides by.
    pub(super) envoy_rules: BTreeMap<String, YamlRule>,
    /// Per rule: `name@fingerprint`, so that a reload keeps the counters of a rule whose
    /// numbers did not change and starts a changed one afresh.
    pub(super) prefixes: Vec<String>,
    /// The headers that decide who a request is under these rules, worked out here once
    /// rather than by each request (or each worker after a reload).
    pub(super) identity: Arc<Identity>,
    pub(super) version: u64,
}

/// A YAML rule in force.
pub(super) struct YamlRule {
    /// What it did.
    pub(super) counters: Arc<Counters>,
    /// The rule a request of one descriptor decides by (its verdict carries it), built once
    /// here rather than per call.
    pub(super) alone: Arc<[Rule]>,
}

impl RuleSet {
    pub(super) fn new(mut config: Config, envoy: EnvoyConfig, version: u64) -> Self {
        let prefixes = config
            .rules
            .iter()
            .map(|rule| format!("{}@{}", rule.name, fingerprint(rule)))
            .collect();
        let identity = Arc::new(Identity::of(&config, &config.rules));
        RuleSet {
            counters: config.rules.iter().map(|_| Arc::default()).collect(),
            envoy_rules: envoy
                .deciding_rules()
                .into_iter()
                .map(|rule| {
                    // Unnamed, a YAML rule is named by its place in the tree (`edge/client_id`),
                    // the label its metrics carry: a name logs and `RateLimit-Policy` can
                    // be traced back to the file by.
                    let name = rule.rule.name.clone();
                    let alone = envoy_rule(
                        name.unwrap_or_else(|| rule.label.clone()),
                        rule.domain,
                        rule.limit.clone(),
                        rule.shadow_mode,
                    );
                    let yaml = YamlRule {
                        counters: Arc::default(),
                        alone: Arc::new([alone]),
                    };
                    (rule.label, yaml)
                })
                .collect(),
            identity,
            rules: std::mem::take(&mut config.rules).into(),
            config,
            envoy: Arc::new(envoy),
            prefixes,
            version,
        }
    }
}

impl<S> Engine<S> {
    /// The rules in force, shared (cheap to take per request).
    pub fn rule_list(&self) -> Arc<[Rule]> {
        Arc::clone(&self.current().rules)
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        let set = self.current();
        Config {
            rules: set.rules.to_vec(),
            ..set.config.clone()
        }
    }

    /// The headers that decide who a request is under the rules in force, and the proxies
    /// believed: shared, worked out when the rules came into force (cheap to take per
    /// request).
    pub fn identity(&self) -> Arc<Identity> {
        Arc::clone(&self.current().identity)
    }

    /// The envoyproxy/ratelimit configs in force.
    pub fn envoy(&self) -> Arc<EnvoyConfig> {
        Arc::clone(&self.current().envoy)
    }

    /// The rules in force.
    pub fn rules(&self) -> Vec<Rule> {
        self.current().rules.to_vec()
    }

    /// The version of the rules in force: 1, then one more per reload.
    pub fn version(&self) -> u64 {
        self.current().version
    }

    /// Puts `config` in force, keeping the Envoy configs. A config that failed to load
    /// never gets here, so a bad file leaves the old rules in force. Rules whose name and
    /// numbers did not change keep their counters; changed rules start afresh. Returns the
    /// new version.
    pub fn reload(&self, config: Config) -> u64 {
        let envoy = (*self.envoy()).clone();
        self.reload_with_envoy(config, envoy)
    }

    /// Puts `config` and `envoy` in force together, in one swap: a decision sees both old
    /// or both new. Returns the new version.
    pub fn reload_with_envoy(&self, config: Config, envoy: EnvoyConfig) -> u64 {
        let mut next = RuleSet::new(config, envoy, 0);
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        next.version = rules.version + 1;
        for (rule, counters) in next.rules.iter().zip(&mut next.counters) {
            if let Some(i) = rules.rules.iter().position(|r| r.name == rule.name) {
                *counters = Arc::clone(&rules.counters[i]);
            }
        }
        for (label, yaml) in &mut next.envoy_rules {
            if let Some(old) = rules.envoy_rules.get(label) {
                yaml.counters = Arc::clone(&old.counters);
            }
        }
        let version = next.version;
        *rules = Arc::new(next);
        version
    }

    /// Reads and validates the config at `path`, then puts it in force; a bad file is
    /// rejected with its errors and the old rules stay. Returns the new version.
    ///
    /// This reads a file: call it off the async workers (`spawn_blocking`).
    ///
    /// # Errors
    ///
    /// Every problem in the file.
    pub fn reload_from(&self, path: &std::path::Path) -> Result<u64, crate::ConfigErrors> {
        match crate::config::load(path) {
            Ok(config) => {
                let version = self.reload(config);
                tracing::info!(version, path = %path.display(), "rules reloaded");
                Ok(version)
            }
            Err(errors) => {
                tracing::warn!(path = %path.display(), %errors, "reload rejected; the old rules stay");
                Err(errors)
            }
        }
    }

    /// What each rule in force did since a rule of its name first came into force (a reload
    /// carries the counts of rules it keeps by name).
    pub fn stats(&self) -> Vec<(String, RuleStats)> {
        let set = self.current();
        set.rules
            .iter()
            .zip(&set.counters)
            .map(|(rule, c)| (rule.name.clone(), c.stats()))
            .collect()
    }

    /// What each envoyproxy/ratelimit YAML rule in force did, by its label
    /// (`domain/key=value/key2`, see [`Resolved::label`](crate::envoy::Resolved::label)), in
    /// label order; a reload carries the counts of the labels it keeps. YAML rules fail
    /// closed: a store failure makes the call `UNAVAILABLE`, for Envoy to decide.
    pub fn envoy_stats(&self) -> Vec<(String, RuleStats)> {
        self.current()
            .envoy_rules
            .iter()
            .map(|(label, yaml)| (label.clone(), yaml.counters.stats()))
            .collect()
    }
}
