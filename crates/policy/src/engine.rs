//! Deciding a request: match the rules, build their keys, and decide every layer at once.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use ratewarden_core::{Algorithm, AsyncStore, Check, Decision, Limit, Outcome};
use ratewarden_memory::{MemoryStore, StoreConfig};

use crate::config::{Config, Cost, KeyPart, KeySources, Match, Mode, OnStoreFailure, Rule};
use crate::{client_ip, TrustedProxies};

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
    /// The cost under every matching rule, when the caller says (the decision API's `cost`);
    /// otherwise each rule's own.
    pub cost: Option<u64>,
    /// The API key, when the caller names it outright (the decision API's `api_key`); it
    /// wins over the request's headers.
    pub api_key: Option<&'a str>,
    /// The tenant, when the caller names it outright; it wins over the tenant header.
    pub tenant: Option<&'a str>,
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
    /// The store failed, and the rule's `on_store_failure` policy decided instead.
    pub store_failed: bool,
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
    /// When an allowed request's cost was an estimate: the id to settle it with.
    pub reservation: Option<u64>,
    /// When an allowed request holds concurrency permits: the id to release them with
    /// when it finishes (or they lapse after their lease).
    pub permit: Option<u64>,
    /// The version of the rule set that decided.
    pub version: u64,
    /// The rules of that set: `outcomes` index them.
    pub rules: Arc<[Rule]>,
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

/// A request the engine cannot decide: it is malformed (a 4xx, not a limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The rule whose cost could not be read.
    pub rule: String,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit `{}`: {}", self.rule, self.message)
    }
}

impl std::error::Error for RequestError {}

/// Why a settle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleError {
    /// No such reservation: never made, settled already, or expired (the estimate stood).
    Unknown,
}

impl fmt::Display for SettleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettleError::Unknown => f.write_str(
                "no such reservation: never made, already settled, or expired (its estimate stands)",
            ),
        }
    }
}

impl std::error::Error for SettleError {}

/// Why a release was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseError {
    /// No such permit: never granted, released already, or lapsed after its lease.
    Unknown,
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::Unknown => f.write_str(
                "no such permit: never granted, already released, or lapsed after its lease",
            ),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// What one rule did since its rule set came into force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Requests it allowed (enforcing).
    pub allowed: u64,
    /// Requests it rejected (enforcing).
    pub rejected: u64,
    /// Requests it would have rejected, in shadow mode or outside its rollout's share.
    pub would_have_rejected: u64,
    /// Decisions its store failed to make (its failure policy answered instead).
    pub store_failures: u64,
}

#[derive(Default)]
struct Counters {
    allowed: AtomicU64,
    rejected: AtomicU64,
    would_have_rejected: AtomicU64,
    store_failures: AtomicU64,
}

/// A rule set in force, with what each rule's keys start with.
struct RuleSet {
    /// The config, its rules moved out into `rules` (one copy, shared with verdicts).
    config: Config,
    rules: Arc<[Rule]>,
    /// Per rule: what it did, carried over a reload by rule name (metrics name rules).
    counters: Vec<Arc<Counters>>,
    /// Per rule: `name@fingerprint`, so that a reload keeps the counters of a rule whose
    /// numbers did not change and starts a changed one afresh.
    prefixes: Vec<String>,
    version: u64,
}

/// Costs charged as estimates, waiting for their real cost.
struct Reservation {
    charges: Vec<(Limit, String, u64)>,
    expires: u64,
}

/// Concurrency units held by an allowed request until it finishes.
struct Held {
    charges: Vec<(Limit, String, u64)>,
    /// The earliest lease among them: past it, the store has let the units go by itself.
    lapses: u64,
}

/// A rule that applies to a request: its index, key, cost, and whether it enforces.
type Applying = (usize, String, u64, bool);

/// The policy engine: rules over a store.
pub struct Engine<S> {
    rules: RwLock<Arc<RuleSet>>,
    store: S,
    /// Where rules with `on_store_failure = "local"` decide while the store is down.
    local: MemoryStore,
    /// The in-process buckets of `local_first` rules, asked before the store.
    hybrid: MemoryStore,
    reservations: Mutex<HashMap<u64, Reservation>>,
    next_reservation: AtomicU64,
    permits: Mutex<HashMap<u64, Held>>,
}

impl<S: AsyncStore> Engine<S> {
    /// An engine deciding `config`'s rules with `store`.
    pub fn new(config: Config, store: S) -> Self {
        Self {
            rules: RwLock::new(Arc::new(rule_set(config, 1))),
            store,
            local: MemoryStore::new(StoreConfig::default()),
            hybrid: MemoryStore::new(StoreConfig::default()),
            reservations: Mutex::new(HashMap::new()),
            next_reservation: AtomicU64::new(1),
            permits: Mutex::new(HashMap::new()),
        }
    }

    /// The rules in force, shared (cheap to take per request).
    pub fn rule_list(&self) -> Arc<[Rule]> {
        Arc::clone(&self.current().rules)
    }

    /// The store the rules decide on.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        let set = self.current();
        Config {
            rules: set.rules.to_vec(),
            ..set.config.clone()
        }
    }

    fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.rules.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The rules in force.
    pub fn rules(&self) -> Vec<Rule> {
        self.current().rules.to_vec()
    }

    /// The version of the rules in force: 1, then one more per reload.
    pub fn version(&self) -> u64 {
        self.current().version
    }

    /// Puts `config` in force. A config that failed to load never gets here, so a bad file
    /// leaves the old rules in force. Rules whose name and numbers did not change keep their
    /// counters; changed rules start afresh. Returns the new version.
    pub fn reload(&self, config: Config) -> u64 {
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let version = rules.version + 1;
        let mut next = rule_set(config, version);
        for (rule, counters) in next.rules.iter().zip(&mut next.counters) {
            if let Some(i) = rules.rules.iter().position(|r| r.name == rule.name) {
                *counters = Arc::clone(&rules.counters[i]);
            }
        }
        *rules = Arc::new(next);
        version
    }

    /// Reads and validates the config at `path`, then puts it in force; a bad file is
    /// rejected with its errors and the old rules stay. Returns the new version.
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
            .map(|(rule, c)| {
                let stats = RuleStats {
                    allowed: c.allowed.load(Ordering::Relaxed),
                    rejected: c.rejected.load(Ordering::Relaxed),
                    would_have_rejected: c.would_have_rejected.load(Ordering::Relaxed),
                    store_failures: c.store_failures.load(Ordering::Relaxed),
                };
                (rule.name.clone(), stats)
            })
            .collect()
    }

    /// Settles reservation `id` with the request's `actual` cost: the difference from the
    /// estimate is charged (the balance may go past the limit, and later requests wait the
    /// debt out) or refunded.
    ///
    /// # Errors
    ///
    /// [`SettleError::Unknown`] for a reservation never made, settled or expired: one not
    /// settled in time settles at its estimate, which was charged up front.
    pub async fn settle(&self, id: u64, actual: u64, now: u64) -> Result<(), SettleError> {
        let reservation = {
            let mut all = self
                .reservations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            all.retain(|_, r| r.expires > now);
            all.remove(&id).ok_or(SettleError::Unknown)?
        };
        for (limit, key, estimate) in &reservation.charges {
            let delta = i128::from(actual) - i128::from(*estimate);
            let delta = i64::try_from(delta).unwrap_or(if delta < 0 { i64::MIN } else { i64::MAX });
            if delta != 0 {
                // A failing store loses the correction, as it would have lost the charge.
                let _ = self.store.settle(limit, key, now, delta).await;
            }
        }
        Ok(())
    }

    /// Releases permit `id`: the concurrency units an allowed request held go back.
    ///
    /// # Errors
    ///
    /// [`ReleaseError::Unknown`] for a permit never granted, released, or lapsed: a permit
    /// not released within its lease was let go by the store already.
    pub async fn release(&self, id: u64, now: u64) -> Result<(), ReleaseError> {
        let held = {
            let mut all = self.permits.lock().unwrap_or_else(PoisonError::into_inner);
            all.retain(|_, h| h.lapses > now);
            all.remove(&id).ok_or(ReleaseError::Unknown)?
        };
        for (limit, key, cost) in &held.charges {
            let delta = i64::try_from(*cost).unwrap_or(i64::MAX);
            // A failing store loses the release; the lease lets the units go in the end.
            let _ = self.store.settle(limit, key, now, -delta).await;
        }
        Ok(())
    }

    /// Decides `request` at `now` against every matching rule.
    ///
    /// Enforced rules are decided all or nothing: a request rejected by one is charged on
    /// none. Shadow rules (and keys outside a rollout's share) are charged only when the
    /// request goes through, and never reject. A rule whose key cannot be built (its header
    /// is missing, say) does not apply to the request.
    ///
    /// # Errors
    ///
    /// A cost header that is not a whole number, or claims more than the rule's `max_cost`.
    pub async fn decide(&self, request: &Request<'_>, now: u64) -> Result<Verdict, RequestError> {
        let set = self.current();
        let rules = &set.rules;
        let client = client_of(request, &set.config.trusted_proxies);
        let mut applying: Vec<Applying> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            if !rule.matches.matches(request) {
                continue;
            }
            let Some(key) = build_key(&set.prefixes[i], rule, &set.config.keys, request, client)
            else {
                continue;
            };
            let cost = match request.cost {
                Some(cost) => cost,
                None => cost_of(rule, request)?,
            };
            let enforced = enforces(rule, &key);
            applying.push((i, key, cost, enforced));
        }
        let mut enforced: Vec<&Applying> = applying.iter().filter(|a| a.3).collect();
        // Hybrid rules first: their in-process bucket has seen a subset of what the store
        // has, so when it says no the store would too, and the round trip is saved.
        let refused_here: Vec<Decision> = enforced
            .iter()
            .filter(|(i, ..)| rules[*i].local_first)
            .map(|(i, key, cost, _)| self.hybrid.peek(&rules[*i].limit, key, now, *cost))
            .collect();
        let locally_refused = refused_here.iter().any(|d| !d.is_allowed());
        if locally_refused {
            enforced.retain(|(i, ..)| rules[*i].local_first);
        }
        let checks: Vec<Check<'_>> = enforced
            .iter()
            .map(|(i, key, cost, _)| Check {
                limit: &rules[*i].limit,
                key,
                cost: *cost,
            })
            .collect();
        let mut unavailable = false;
        let mut store_failed = false;
        let result = if locally_refused {
            Ok(refused_here)
        } else {
            self.store.decide_all(&checks, now).await
        };
        let decisions: Vec<Decision> = match result {
            Ok(decisions) => decisions,
            // Each rule already knows what to do when its store fails.
            Err(error) => {
                store_failed = true;
                enforced
                .iter()
                .map(|(i, key, cost, _)| {
                    let rule = &rules[*i];
                    set.counters[*i].store_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(rule = %rule.name, %error, policy = ?rule.on_store_failure, "store failed");
                    let size = rule.limit.limit();
                    match (&rule.on_store_failure, &rule.local) {
                        (OnStoreFailure::Closed, _) => {
                            unavailable = true;
                            let retry_after_ns = 1_000_000_000;
                            Decision::new(Outcome::Limited { retry_after_ns }, size, 0, 0)
                        }
                        (OnStoreFailure::Local { .. }, Some(local)) => {
                            self.local.decide(local, key, now, *cost)
                        }
                        _ => Decision::new(Outcome::Allowed, size, size, 0),
                    }
                })
                .collect()
            }
        };
        let mut outcomes: Vec<RuleOutcome> = enforced
            .iter()
            .zip(decisions)
            .map(|((i, key, _, _), decision)| RuleOutcome {
                rule: *i,
                key: key.clone(),
                decision,
                enforced: true,
                store_failed,
            })
            .collect();
        let allowed = outcomes.iter().all(|o| o.decision.is_allowed());
        if allowed {
            for (i, key, cost, _) in enforced.iter().filter(|(i, ..)| rules[*i].local_first) {
                self.hybrid.decide(&rules[*i].limit, key, now, *cost);
            }
        }
        // A request refused in this process is not shown to shadow rules: that would cost
        // the round trips hybrid rules exist to save.
        for (i, key, cost, _) in applying
            .iter()
            .filter(|a| !a.3)
            .filter(|_| !locally_refused)
        {
            let rule = &rules[*i];
            // As if enforcing: charged only when the request goes through.
            let result = if allowed {
                self.store.decide(&rule.limit, key, now, *cost).await
            } else {
                self.store.peek(&rule.limit, key, now, *cost).await
            };
            let size = rule.limit.limit();
            let failed = result.is_err();
            if failed {
                set.counters[*i]
                    .store_failures
                    .fetch_add(1, Ordering::Relaxed);
            }
            let decision =
                result.unwrap_or_else(|_| Decision::new(Outcome::Allowed, size, size, 0));
            outcomes.push(RuleOutcome {
                rule: *i,
                key: key.clone(),
                decision,
                enforced: false,
                store_failed: failed,
            });
        }
        outcomes.sort_by_key(|o| o.rule);
        for o in &outcomes {
            let counters = &set.counters[o.rule];
            let counter = match (o.enforced, o.said_no()) {
                (true, false) => &counters.allowed,
                (true, true) => &counters.rejected,
                (false, true) => {
                    tracing::info!(
                        rule = %rules[o.rule].name,
                        key = %o.key,
                        version = set.version,
                        "would have rejected"
                    );
                    &counters.would_have_rejected
                }
                (false, false) => continue,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let retry_after_ns = outcomes
            .iter()
            .filter(|o| o.enforced)
            .filter_map(|o| match o.decision.outcome {
                Outcome::Limited { retry_after_ns } => Some(retry_after_ns),
                _ => None,
            })
            .max();
        let (reservation, permit) = if allowed {
            (
                self.reserve(rules, &applying, now),
                self.hold(rules, &outcomes, &applying, now),
            )
        } else {
            (None, None)
        };
        Ok(Verdict {
            allowed,
            unavailable,
            outcomes,
            retry_after_ns,
            reservation,
            permit,
            version: set.version,
            rules: Arc::clone(&set.rules),
        })
    }

    /// Records the concurrency units an allowed request took, if any, for its release.
    fn hold(
        &self,
        rules: &[Rule],
        outcomes: &[RuleOutcome],
        applying: &[Applying],
        now: u64,
    ) -> Option<u64> {
        let mut charges = Vec::new();
        let mut lapses = u64::MAX;
        for (i, key, cost, _) in applying {
            let Limit::Concurrency(c) = &rules[*i].limit else {
                continue;
            };
            // Units are held only where the store charged them (a failed store held none,
            // and neither did a shadow rule that said no).
            let charged = outcomes
                .iter()
                .any(|o| o.rule == *i && o.decision.is_allowed() && !o.store_failed);
            if charged && *cost > 0 {
                charges.push((rules[*i].limit.clone(), key.clone(), *cost));
                let lease = u64::try_from(c.lease().as_nanos()).unwrap_or(u64::MAX);
                lapses = lapses.min(now.saturating_add(lease));
            }
        }
        if charges.is_empty() {
            return None;
        }
        let id = self.next_reservation.fetch_add(1, Ordering::Relaxed);
        let mut all = self.permits.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|_, h| h.lapses > now);
        all.insert(id, Held { charges, lapses });
        Some(id)
    }

    /// Records the estimated costs of an allowed request, if any, for a later settle.
    fn reserve(&self, rules: &[Rule], applying: &[Applying], now: u64) -> Option<u64> {
        let mut charges = Vec::new();
        let mut lease = u64::MAX;
        for (i, key, cost, _) in applying {
            if let Some(within) = rules[*i].settle_within {
                charges.push((rules[*i].limit.clone(), key.clone(), *cost));
                lease = lease.min(u64::try_from(within.as_nanos()).unwrap_or(u64::MAX));
            }
        }
        if charges.is_empty() {
            return None;
        }
        let id = self.next_reservation.fetch_add(1, Ordering::Relaxed);
        let mut all = self
            .reservations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Reservations past their time settle at their estimate: nothing is left to do.
        all.retain(|_, r| r.expires > now);
        all.insert(
            id,
            Reservation {
                charges,
                expires: now.saturating_add(lease),
            },
        );
        Some(id)
    }
}

fn rule_set(mut config: Config, version: u64) -> RuleSet {
    let prefixes = config
        .rules
        .iter()
        .map(|rule| {
            let mut h = DefaultHasher::new();
            format!("{:?}|{:?}", rule.limit, rule.cost).hash(&mut h);
            format!("{}@{:08x}", rule.name, h.finish() as u32)
        })
        .collect();
    RuleSet {
        counters: config.rules.iter().map(|_| Arc::default()).collect(),
        rules: std::mem::take(&mut config.rules).into(),
        config,
        prefixes,
        version,
    }
}

/// The client's address. Forwarding headers are gathered only when the peer is one of our
/// proxies: for every other request (most of them, without a proxy) they cannot matter.
fn client_of(request: &Request<'_>, trusted: &TrustedProxies) -> IpAddr {
    if !trusted.contains(request.peer) {
        return client_ip(request.peer, &[], &[], trusted);
    }
    let forwarded: Vec<&str> = request.header_values("forwarded").collect();
    let x_forwarded_for: Vec<&str> = request.header_values("x-forwarded-for").collect();
    client_ip(request.peer, &forwarded, &x_forwarded_for, trusted)
}

/// What `request` costs under `rule`.
fn cost_of(rule: &Rule, request: &Request<'_>) -> Result<u64, RequestError> {
    match &rule.cost {
        Cost::Fixed(n) => Ok(*n),
        Cost::Header { name, max } => {
            let Some(text) = request.header(name) else {
                return Ok(1);
            };
            let error = |message: String| RequestError {
                rule: rule.name.clone(),
                message,
            };
            let n: u64 = text.parse().map_err(|_| {
                error(format!(
                    "header `{name}` must be a whole number, not `{text}`"
                ))
            })?;
            if n > *max {
                return Err(error(format!(
                    "header `{name}` claims {n}, over the most of {max}"
                )));
            }
            Ok(n)
        }
    }
}

impl Match {
    /// Whether `request` meets every condition given.
    pub fn matches(&self, request: &Request<'_>) -> bool {
        matches(self, request)
    }
}

fn matches(m: &Match, request: &Request<'_>) -> bool {
    // Rules of an Envoy domain are for descriptors, not HTTP requests.
    if m.domain.is_some() {
        return false;
    }
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

/// `rule@fingerprint|part|part`; `None` when a part is missing from the request.
fn build_key(
    prefix: &str,
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'_>,
    client: IpAddr,
) -> Option<String> {
    let mut key = prefix.to_owned();
    for part in &rule.key {
        key.push('|');
        match part {
            KeyPart::Ip(grouping) => key.push_str(&grouping.key(client).to_string()),
            KeyPart::Header(name) => key.push_str(request.header(name).filter(|v| !v.is_empty())?),
            KeyPart::ApiKey => {
                let bearer = request.header("authorization").and_then(|auth| {
                    auth.strip_prefix("Bearer ")
                        .or_else(|| auth.strip_prefix("bearer "))
                        .map(str::trim)
                });
                let configured = sources
                    .api_key_header
                    .as_deref()
                    .and_then(|h| request.header(h));
                let token = request
                    .api_key
                    .or(bearer)
                    .or(configured)
                    .filter(|t| !t.is_empty())?;
                // Keys show up in logs and metrics: keep a digest, not the secret.
                let mut h = DefaultHasher::new();
                token.hash(&mut h);
                key.push_str(&format!("key:{:016x}", h.finish()));
            }
            KeyPart::Tenant => key.push_str(
                request
                    .tenant
                    .or_else(|| request.header(&sources.tenant_header))
                    .filter(|v| !v.is_empty())?,
            ),
            KeyPart::Route => {
                key.push_str(&request.method.to_ascii_uppercase());
                key.push(' ');
                key.push_str(request.path);
            }
            KeyPart::Global => key.push('*'),
            // Descriptors come over Envoy's protocol, never with an HTTP request.
            KeyPart::Descriptor => return None,
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
