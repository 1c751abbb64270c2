//! The rules: the set in force (the TOML rules and the Envoy YAML, swapped together by a
//! reload), each rule's counters and top offenders, and what a request, a descriptor, a
//! key the caller built or a quota bucket comes to under them (the rules that apply, with
//! their keys and costs) for the charging room to decide.

mod applying;
mod counters;
mod descriptors;
mod key_state;
mod keyed;
mod quota;
mod top;

pub(crate) use applying::Applying;
pub(crate) use counters::Counters;
pub use counters::RuleStats;
pub use key_state::{KeyState, KeyStateError};
pub use top::{Offender, RuleTop, TopKeys, TopReport};

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use descriptors::envoy_rule;

use crate::config::{Config, ConfigErrors, Rule};
use crate::engine::request::{fingerprint, Identity};
use crate::envoy::EnvoyConfig;

/// The rule set in force, swapped whole: a decision sees one set from start to end.
pub(crate) struct Rules(RwLock<Arc<RuleSet>>);

/// A rule set in force, with what each rule's keys start with.
pub(crate) struct RuleSet {
    /// The config, its rules moved out into `rules` (one copy, shared with verdicts).
    pub(crate) config: Config,
    pub(crate) rules: Arc<[Rule]>,
    /// envoyproxy/ratelimit configs, decided by [`Engine::decide_descriptors`](crate::engine::Engine::decide_descriptors).
    pub(crate) envoy: Arc<EnvoyConfig>,
    /// Per rule: what it did, carried over a reload by rule name (metrics name rules).
    pub(crate) counters: Vec<Arc<Counters>>,
    /// Per YAML rule, by its label (see [`Resolved::label`](crate::envoy::Resolved::label)):
    /// what it did (carried over a reload by label), and the rule a descriptor decides by.
    pub(crate) envoy_rules: BTreeMap<String, YamlRule>,
    /// Per rule: `name@fingerprint`, so that a reload keeps the counters of a rule whose
    /// numbers did not change and starts a changed one afresh.
    pub(crate) prefixes: Vec<String>,
    /// The headers that decide who a request is under these rules, worked out here once
    /// rather than by each request (or each worker after a reload).
    pub(crate) identity: Arc<Identity>,
    pub(crate) version: u64,
}

/// A YAML rule in force.
pub(crate) struct YamlRule {
    /// What it did.
    pub(crate) counters: Arc<Counters>,
    /// The rule a request of one descriptor decides by (its verdict carries it), built once
    /// here rather than per call.
    pub(crate) alone: Arc<[Rule]>,
}

impl RuleSet {
    pub(crate) fn new(mut config: Config, envoy: EnvoyConfig, version: u64) -> Self {
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
                        rule.rule.always_charge,
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

impl Rules {
    /// `config`'s rules and the Envoy configs `envoy`, as version 1.
    pub(crate) fn new(config: Config, envoy: EnvoyConfig) -> Self {
        Rules(RwLock::new(Arc::new(RuleSet::new(config, envoy, 1))))
    }

    /// The set in force, shared (cheap to take per request).
    pub(crate) fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `config` and `envoy` in force together, in one swap: a decision sees both old
    /// or both new. Rules whose name did not change keep their counters (and YAML rules
    /// whose label did not). Returns the new version.
    pub(crate) fn reload(&self, config: Config, envoy: EnvoyConfig) -> u64 {
        let mut next = RuleSet::new(config, envoy, 0);
        let mut rules = self.0.write().unwrap_or_else(PoisonError::into_inner);
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

    /// Reads and validates the config at `path`, then puts it in force with the Envoy
    /// configs in force; a bad file is rejected with its errors and the old rules stay.
    pub(crate) fn reload_from(&self, path: &std::path::Path) -> Result<u64, ConfigErrors> {
        match crate::config::load(path) {
            Ok(config) => {
                let envoy = (*self.current().envoy).clone();
                let version = self.reload(config, envoy);
                tracing::info!(version, path = %path.display(), "rules reloaded");
                Ok(version)
            }
            Err(errors) => {
                tracing::warn!(path = %path.display(), %errors, "reload rejected; the old rules stay");
                Err(errors)
            }
        }
    }
}

impl RuleSet {
    /// The config in force, its rules put back in.
    pub(crate) fn config(&self) -> Config {
        Config {
            rules: self.rules.to_vec(),
            ..self.config.clone()
        }
    }

    /// What each rule did since a rule of its name first came into force.
    pub(crate) fn stats(&self) -> Vec<(String, RuleStats)> {
        self.rules
            .iter()
            .zip(&self.counters)
            .map(|(rule, c)| (rule.name.clone(), c.stats()))
            .collect()
    }

    /// What each envoyproxy/ratelimit YAML rule did, by its label, in label order.
    pub(crate) fn envoy_stats(&self) -> Vec<(String, RuleStats)> {
        self.envoy_rules
            .iter()
            .map(|(label, yaml)| (label.clone(), yaml.counters.stats()))
            .collect()
    }

    /// Rule `i`'s counters: every rule of the set has some.
    pub(crate) fn counters_of(&self, i: usize) -> Option<&Counters> {
        self.counters.get(i).map(|c| &**c)
    }
}
