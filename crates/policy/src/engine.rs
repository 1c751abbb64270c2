//! Deciding a request: match the rules, build their keys, and decide every layer at once.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use ratewarden_core::{Check, Decision, Outcome, Store};

use crate::client_ip;
use crate::config::{Config, KeyPart, Match, Mode, OnStoreFailure, Rule};

/// What the engine needs to know of a request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The socket's peer address.
    pub peer: IpAddr,
    /// The method, such as `GET`.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The `Host` (or `:authority`).
    pub host: Option<&'a str>,
    /// Header lines, names in any case, in the order received.
    pub headers: &'a [(&'a str, &'a str)],
}

impl<'a> Request<'a> {
    fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a str> + 's {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    fn header(&self, name: &str) -> Option<&'a str> {
        self.header_values(name).next()
    }
}

/// One rule's part in a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutcome {
    /// The rule's index in the config.
    pub rule: usize,
    /// The key its state is kept under.
    pub key: String,
    /// Its decision (for a rejected request, what it would have said: nothing is charged).
    pub decision: Decision,
    /// Whether this decision could reject: false for shadow mode, and for keys outside a
    /// rollout's share.
    pub enforced: bool,
}

impl RuleOutcome {
    /// Whether the rule said no (enforced or not).
    pub fn said_no(&self) -> bool {
        !self.decision.is_allowed()
    }
}

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The store failed and a `closed` rule applies: answer 503, the server is at fault.
    pub unavailable: bool,
    /// Every matching rule's outcome, in config order.
    pub outcomes: Vec<RuleOutcome>,
    /// The longest retry time among the enforced rules that said no.
    pub retry_after_ns: Option<u64>,
}

impl Verdict {
    /// The enforced rules that rejected the request.
    pub fn violated(&self) -> impl Iterator<Item = &RuleOutcome> {
        self.outcomes.iter().filter(|o| o.enforced && o.said_no())
    }

    /// Rules that would have rejected the request but did not enforce (shadow, rollout).
    pub fn would_have_rejected(&self) -> impl Iterator<Item = &RuleOutcome> {
        self.outcomes.iter().filter(|o| !o.enforced && o.said_no())
    }
}

/// The policy engine: rules over a store.
pub struct Engine<S> {
    config: Config,
    store: S,
}

impl<S: Store> Engine<S> {
    /// An engine deciding `config`'s rules with `store`.
    pub fn new(config: Config, store: S) -> Self {
        Self { config, store }
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.config.rules
    }

    /// Decides `request` at `now` against every matching rule.
    ///
    /// Enforced rules are decided all or nothing: a request rejected by one is charged on
    /// none. Shadow rules (and keys outside a rollout's share) are charged only when the
    /// request goes through, and never reject. A rule whose key cannot be built (its header
    /// is missing, say) does not apply to the request.
    pub fn decide(&self, request: &Request<'_>, now: u64) -> Verdict {
        let client = client_ip(
            request.peer,
            &request.header_values("forwarded").collect::<Vec<_>>(),
            &request.header_values("x-forwarded-for").collect::<Vec<_>>(),
            &self.config.trusted_proxies,
        );
        let applying: Vec<(usize, String, bool)> = self
            .config
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| matches(&rule.matches, request))
            .filter_map(|(i, rule)| {
                let key = build_key(rule, request, client)?;
                let enforced = enforces(rule, &key);
                Some((i, key, enforced))
            })
            .collect();
        let rule = |i: usize| &self.config.rules[i];
        let enforced: Vec<&(usize, String, bool)> = applying.iter().filter(|a| a.2).collect();
        let checks: Vec<Check<'_>> = enforced
            .iter()
            .map(|(i, key, _)| Check {
                limit: &rule(*i).limit,
                key,
                cost: rule(*i).cost,
            })
            .collect();
        let mut outcomes = Vec::with_capacity(applying.len());
        let mut unavailable = false;
        match self.store.decide_all(&checks, now) {
            Ok(decisions) => {
                for ((i, key, _), decision) in enforced.iter().zip(decisions) {
                    outcomes.push(RuleOutcome {
                        rule: *i,
                        key: key.clone(),
                        decision,
                        enforced: true,
                    });
                }
            }
            Err(_) => {
                // Each rule already knows what to do when its store fails.
                for (i, key, _) in &enforced {
                    let r = rule(*i);
                    let decision = match r.on_store_failure {
                        OnStoreFailure::Closed => {
                            unavailable = true;
                            Decision::new(
                                Outcome::Limited {
                                    retry_after_ns: 1_000_000_000,
                                },
                                r.limit_value(),
                                0,
                                0,
                            )
                        }
                        OnStoreFailure::Open | OnStoreFailure::Local { .. } => {
                            Decision::new(Outcome::Allowed, r.limit_value(), r.limit_value(), 0)
                        }
                    };
                    outcomes.push(RuleOutcome {
                        rule: *i,
                        key: key.clone(),
                        decision,
                        enforced: true,
                    });
                }
            }
        }
        let allowed = outcomes.iter().all(|o| o.decision.is_allowed());
        for (i, key, _) in applying.iter().filter(|a| !a.2) {
            let r = rule(*i);
            // As if enforcing: charged only when the request goes through.
            let result = if allowed {
                self.store.decide(&r.limit, key, now, r.cost)
            } else {
                self.store.peek(&r.limit, key, now, r.cost)
            };
            let decision = result.unwrap_or_else(|_| {
                Decision::new(Outcome::Allowed, r.limit_value(), r.limit_value(), 0)
            });
            outcomes.push(RuleOutcome {
                rule: *i,
                key: key.clone(),
                decision,
                enforced: false,
            });
        }
        outcomes.sort_by_key(|o| o.rule);
        let retry_after_ns = outcomes
            .iter()
            .filter(|o| o.enforced)
            .filter_map(|o| match o.decision.outcome {
                Outcome::Limited { retry_after_ns } => Some(retry_after_ns),
                _ => None,
            })
            .max();
        Verdict {
            allowed,
            unavailable,
            outcomes,
            retry_after_ns,
        }
    }
}

impl Rule {
    fn limit_value(&self) -> u64 {
        use ratewarden_core::Algorithm;
        self.limit.limit()
    }
}

fn matches(m: &Match, request: &Request<'_>) -> bool {
    if let Some(method) = &m.method {
        if !request.method.eq_ignore_ascii_case(method) {
            return false;
        }
    }
    if let Some(path) = &m.path {
        let hit = match path.strip_suffix('*') {
            Some(prefix) => request.path.starts_with(prefix),
            None => request.path == path,
        };
        if !hit {
            return false;
        }
    }
    if let Some(host) = &m.host {
        let given = request.host.map(|h| h.split(':').next().unwrap_or(h));
        if !given.is_some_and(|h| h.eq_ignore_ascii_case(host)) {
            return false;
        }
    }
    if let Some((name, value)) = &m.header {
        match (request.header(name), value) {
            (None, _) => return false,
            (Some(given), Some(want)) if given != want => return false,
            _ => {}
        }
    }
    true
}

/// `rule|part|part`; `None` when a part is missing from the request.
fn build_key(rule: &Rule, request: &Request<'_>, client: IpAddr) -> Option<String> {
    let mut key = rule.name.clone();
    for part in &rule.key {
        key.push('|');
        match part {
            KeyPart::Ip(grouping) => key.push_str(&grouping.key(client).to_string()),
            KeyPart::Header(name) => key.push_str(request.header(name).filter(|v| !v.is_empty())?),
            KeyPart::ApiKey => {
                let auth = request.header("authorization")?;
                let token = auth
                    .strip_prefix("Bearer ")
                    .or_else(|| auth.strip_prefix("bearer "))?
                    .trim();
                if token.is_empty() {
                    return None;
                }
                key.push_str(token);
            }
            KeyPart::Tenant => {
                key.push_str(request.header("x-tenant-id").filter(|v| !v.is_empty())?)
            }
            KeyPart::Route => {
                key.push_str(&request.method.to_ascii_uppercase());
                key.push(' ');
                key.push_str(request.path);
            }
            KeyPart::Global => key.push('*'),
            KeyPart::Literal(text) => key.push_str(text),
        }
    }
    Some(key)
}

/// Whether `rule` enforces for `key`: always, never (shadow), or for a stable share of keys.
fn enforces(rule: &Rule, key: &str) -> bool {
    match rule.mode {
        Mode::Enforce => true,
        Mode::Shadow => false,
        Mode::Rollout { basis_points } => {
            // A hash with fixed keys (not the per-process random one), so the same keys are
            // in the share on every instance and after every restart built by one compiler.
            let mut h = DefaultHasher::new();
            key.hash(&mut h);
            (h.finish() % 10_000) < u64::from(basis_points)
        }
    }
}
