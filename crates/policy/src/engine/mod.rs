//! Deciding a request: match the rules, build their keys, and decide every layer at once.
//!
//! The engine is rooms that own their state, composed here:
//!
//! - `request/`: what the engine reads from a request (client address, headers,
//!   credentials, keys, costs, hashes). No state.
//! - `verdict/`: the answer (outcomes, descriptor statuses, grant ids, the HTTP contract).
//! - `rules/`: the rule set in force, swapped by reloads, with each rule's counters and top
//!   offenders; it says which rules a request, a descriptor call, a caller's keys or a
//!   quota bucket come to.
//! - `charge/`: the store and what this process holds beside it (in-process buckets,
//!   reservations, permits, prefetched allowances); the one path every decision takes.
//! - `adaptive/`: adaptive concurrency's limiters, their queues and their reports.
//!
//! Every front door ends here: an HTTP request through [`Engine::decide`], an Envoy
//! `ShouldRateLimit` call through [`Engine::decide_descriptors`], a caller's own keys
//! through [`Engine::decide_keyed`]. Each asks the rule set what applies, then the
//! adaptive limiters and the charging room decide. Rooms import only the rooms above them
//! in that list (`tests/layout.rs` holds it).

mod adaptive;
mod charge;
mod error;
mod explain;
mod request;
mod rules;
mod verdict;

pub use adaptive::{AdaptiveState, QueueState, ShedReason, Timer, WaitStats, WAIT_BUCKETS_NS};
pub use charge::{Owner, PrefetchStats};
pub use error::{ReleaseError, RequestError, SettleError};
pub use explain::{outcome_words, Explanation, Finding, RuleExplanation};
pub use request::{
    api_key_digest, fingerprint, rollout_bucket, Identity, Request, RequestDescriptor,
    CRITICALITY_HEADER,
};
pub use rules::{KeyState, KeyStateError, Offender, RuleStats, RuleTop, TopKeys, TopReport};
pub use verdict::{
    Answer, DescriptorStatus, DescriptorVerdict, GrantId, Jitter, RuleOutcome, Verdict,
};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ratewarden_core::adaptive::{Completion, Criticality};
use ratewarden_core::AsyncStore;
use ratewarden_memory::WhenFull;

use crate::config::{Config, ConfigErrors, Rule};
use crate::envoy::EnvoyConfig;
use crate::quota::QuotaBucket;
use adaptive::Limiters;
use charge::Charger;
use request::FlowHash;
use rules::Rules;

/// The policy engine: rules over a store.
pub struct Engine<S> {
    /// The rule set in force.
    rules: Rules,
    /// The store, and what this process holds beside it.
    charger: Charger<S>,
    /// The limiters of adaptive concurrency rules, by key.
    adaptive: Limiters,
}

impl<S> Engine<S> {
    /// An engine deciding `config`'s rules with `store` (and no Envoy configs).
    pub fn new(config: Config, store: S) -> Self {
        Self::with_envoy(config, EnvoyConfig::default(), store)
    }

    /// An engine deciding `config`'s rules and the envoyproxy/ratelimit configs `envoy`.
    ///
    /// The in-process buckets (the local fallback and fail-open guard, the `local_first`
    /// buckets) are bounded by `[store] max_keys` and `max_bytes` as the store is, and
    /// evict the least recently used key when full: refusing a new key there would refuse
    /// requests the store allows.
    pub fn with_envoy(config: Config, envoy: EnvoyConfig, store: S) -> Self {
        let buckets = config.store.memory_config(WhenFull::EvictLeastRecentlyUsed);
        Self {
            rules: Rules::new(config, envoy),
            charger: Charger::new(buckets, store),
            adaptive: Limiters::new(adaptive::MAX_LIMITERS),
        }
    }

    /// The engine with the secret that deals tenants their queue lanes fixed to `secret`,
    /// so that the lanes are the same in every run: for tests and reproducible
    /// simulations only.
    ///
    /// By default the secret is random, drawn when the engine is made, so that no client
    /// can work out which lanes a tenant falls in and choose names whose lanes cover
    /// another tenant's (see `docs/adaptive.md`). Anyone who knows a fixed secret can.
    #[must_use]
    pub fn with_flow_secret(mut self, secret: u64) -> Self {
        self.adaptive.flow = FlowHash::Fixed(secret);
        self
    }

    /// The engine counting its `scope = "global"` rules in `home`, the store every
    /// region's servers share (`[regions.home]`), rather than in its own store.
    #[must_use]
    pub fn with_home(mut self, home: S) -> Self {
        self.charger.home = Some(home);
        self
    }

    /// Whether `global` rules are counted in a home store of their own
    /// ([`with_home`](Engine::with_home)).
    pub fn has_home(&self) -> bool {
        self.charger.home.is_some()
    }

    /// The store the rules decide on.
    pub fn store(&self) -> &S {
        &self.charger.store
    }

    /// The store `global` rules are counted in: the home store, or the rules' own store
    /// when there is none.
    pub fn home(&self) -> &S {
        self.charger.home()
    }

    /// What the `prefetch` rules' allowances did since the engine started.
    pub fn prefetch_stats(&self) -> PrefetchStats {
        self.charger.prefetch_stats()
    }

    /// What the `global` rules' allowances did since the engine started: units taken from
    /// the home store, and decisions made here from them.
    pub fn global_stats(&self) -> PrefetchStats {
        self.charger.global_stats()
    }

    /// The keys of `global` rules whose allowance is running low, at most `most`: each
    /// wants a [`top_up_global`](Engine::top_up_global), which a server runs off the
    /// request path (the home store is a WAN away).
    pub fn global_due(&self, most: usize) -> Vec<String> {
        self.charger.global_due(most)
    }

    /// The rules in force, shared (cheap to take per request).
    pub fn rule_list(&self) -> Arc<[Rule]> {
        Arc::clone(&self.rules.current().rules)
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.rules.current().config()
    }

    /// The headers that decide who a request is under the rules in force, and the proxies
    /// believed: shared, worked out when the rules came into force (cheap to take per
    /// request).
    pub fn identity(&self) -> Arc<Identity> {
        Arc::clone(&self.rules.current().identity)
    }

    /// The envoyproxy/ratelimit configs in force.
    pub fn envoy(&self) -> Arc<EnvoyConfig> {
        Arc::clone(&self.rules.current().envoy)
    }

    /// The rules in force.
    pub fn rules(&self) -> Vec<Rule> {
        self.rules.current().rules.to_vec()
    }

    /// The version of the rules in force: 1, then one more per reload.
    pub fn version(&self) -> u64 {
        self.rules.current().version
    }

    /// Puts `config` in force, keeping the Envoy configs. A config that failed to load
    /// never gets here, so a bad file leaves the old rules in force. Rules whose name and
    /// numbers did not change keep their counters; changed rules start afresh. Returns the
    /// new version.
    pub fn reload(&self, config: Config) -> u64 {
        let envoy = (*self.envoy()).clone();
        self.rules.reload(config, envoy)
    }

    /// Puts `config` and `envoy` in force together, in one swap: a decision sees both old
    /// or both new. Returns the new version.
    pub fn reload_with_envoy(&self, config: Config, envoy: EnvoyConfig) -> u64 {
        self.rules.reload(config, envoy)
    }

    /// Reads and validates the config at `path`, then puts it in force; a bad file is
    /// rejected with its errors and the old rules stay. Returns the new version.
    ///
    /// This reads a file: call it off the async workers (`spawn_blocking`).
    ///
    /// # Errors
    ///
    /// Every problem in the file.
    pub fn reload_from(&self, path: &std::path::Path) -> Result<u64, ConfigErrors> {
        self.rules.reload_from(path)
    }

    /// What each rule in force did since a rule of its name first came into force (a reload
    /// carries the counts of rules it keeps by name).
    pub fn stats(&self) -> Vec<(String, RuleStats)> {
        self.rules.current().stats()
    }

    /// What each envoyproxy/ratelimit YAML rule in force did, by its label
    /// (`domain/key=value/key2`, see [`Resolved::label`](crate::envoy::Resolved::label)), in
    /// label order; a reload carries the counts of the labels it keeps. YAML rules fail
    /// closed: a store failure makes the call `UNAVAILABLE`, for Envoy to decide.
    pub fn envoy_stats(&self) -> Vec<(String, RuleStats)> {
        self.rules.current().envoy_stats()
    }

    /// The top offenders of the rule in force named `rule` (or of the envoyproxy/ratelimit
    /// rule labelled so) at `now`; `None` when there is no such rule. Keys are their parts
    /// as stored (what follows `name@fingerprint|`, as [`Engine::key_state`] takes them):
    /// API keys as their digest, never the secret.
    pub fn top(&self, rule: &str, now: u64) -> Option<RuleTop> {
        self.rules.current().top(rule, now)
    }

    /// The top offenders of every rule in force (TOML rules, then envoyproxy/ratelimit
    /// rules by label).
    pub fn top_all(&self, now: u64) -> Vec<RuleTop> {
        self.rules.current().top_all(now)
    }

    /// The budget of a quota bucket of `domain` whose id is `entries` (sorted by key): the
    /// first rule taking it, its key for them, its rate, and the bucket's weight. `None`
    /// when no rule takes it, or the rule has no rate to split (a sliding log, a quota, a
    /// concurrency limit, adaptive concurrency).
    pub fn quota_budget(&self, domain: &str, entries: &[(&str, &str)]) -> Option<QuotaBucket> {
        self.rules.current().quota_bucket(domain, entries)
    }

    /// The lanes of rule `rule`'s queue that the flow `value` (its value of the queue's
    /// key: a tenant, an API key...) is dealt; `None` when no rule of that name has a
    /// queue. The lanes are the same for the engine's life, and differ from one engine to
    /// the next unless the secret is fixed ([`with_flow_secret`](Engine::with_flow_secret)).
    pub fn queue_hand(&self, rule: &str, value: &str) -> Option<Vec<usize>> {
        let set = self.rules.current();
        let queue = set
            .rules
            .iter()
            .filter(|r| r.name == rule)
            .find_map(|r| r.adaptive.as_ref()?.queue.as_ref())?;
        Some(queue.shape.hand(self.adaptive.flow.hash(value)))
    }

    /// The adaptive limiters' current limits and in-flight counts, the busiest first, at
    /// most `max` of them (keys come from clients: a metrics page shows a bounded set).
    pub fn adaptive_states(&self, max: usize) -> Vec<AdaptiveState> {
        self.adaptive.states(max)
    }

    /// Requests adaptive rules shed since the start, per class, lowest class first.
    pub fn adaptive_shed(&self) -> [(Criticality, u64); 3] {
        Criticality::ALL.map(|c| {
            let by_reason = &self.adaptive.shed[c as usize];
            (c, by_reason.iter().map(|n| n.load(Ordering::Relaxed)).sum())
        })
    }

    /// Requests adaptive rules shed since the start, per class and reason.
    pub fn adaptive_shed_reasons(&self) -> Vec<(Criticality, ShedReason, u64)> {
        Criticality::ALL
            .into_iter()
            .flat_map(|c| {
                ShedReason::ALL.into_iter().enumerate().map(move |(i, r)| {
                    (
                        c,
                        r,
                        self.adaptive.shed[c as usize][i].load(Ordering::Relaxed),
                    )
                })
            })
            .collect()
    }

    /// The requests waiting in adaptive rules' queues and how long those let in waited,
    /// per rule and class (rules that never queued are left out).
    pub fn adaptive_queues(&self) -> Vec<QueueState> {
        self.adaptive.queues()
    }

    /// The class the engine gives `request` under the rules in force (see
    /// [`CRITICALITY_HEADER`]).
    pub fn criticality(&self, request: &Request<'_>) -> Criticality {
        self.rules.current().criticality(request)
    }
}

impl<S: AsyncStore> Engine<S> {
    /// Decides `request` at `now` against every matching rule.
    ///
    /// Enforced rules are decided all or nothing: a request rejected by one is charged on
    /// none. Shadow rules (and keys outside a rollout's share) are charged only when the
    /// request goes through, and never reject. A rule whose key lacks a part (its header is
    /// missing, say) does what its `when_key_missing` says: counts the request under the
    /// client's address in the part's place, refuses it, or does not apply.
    ///
    /// # Errors
    ///
    /// A cost header that is not a whole number, or claims more than the rule's `max_cost`;
    /// a header a matching rule keys on (or reads its cost from) sent more than once; a
    /// bearer token and the configured API-key header that disagree; an `Authorization`
    /// that cannot be read one way; a host that is not a host; a missing key part under a
    /// rule with `when_key_missing = "refuse"`.
    pub async fn decide(&self, request: &Request<'_>, now: u64) -> Result<Verdict, RequestError> {
        self.decide_at(request, now, None).await
    }

    /// Decides `request` as [`decide`](Engine::decide) does, except that a request an
    /// adaptive rule with a queue (`[limit.queue]`) has no place for waits its turn, fairly
    /// across the queue's key, for up to the queue's `max_wait`, on `timer`'s clock; past
    /// it, or with its lanes full, it is shed as without a queue. For front doors that can
    /// hold a request (the gateway, the tower layer). Dropping the future while it waits
    /// takes the request out of the queue.
    ///
    /// # Errors
    ///
    /// As [`decide`](Engine::decide).
    pub async fn decide_waiting(
        &self,
        request: &Request<'_>,
        timer: &dyn Timer,
    ) -> Result<Verdict, RequestError> {
        self.decide_waiting_at(request, timer.now(), timer).await
    }

    /// Decides `request` as [`decide_waiting`](Engine::decide_waiting) does, at `now` on
    /// `timer`'s clock: for a caller that has just read that clock for its own use (the
    /// gateway times the decision), where a second reading would be the same instant
    /// bar a few nanoseconds.
    ///
    /// # Errors
    ///
    /// As [`decide`](Engine::decide).
    pub async fn decide_waiting_at(
        &self,
        request: &Request<'_>,
        now: u64,
        timer: &dyn Timer,
    ) -> Result<Verdict, RequestError> {
        self.decide_at(request, now, Some(timer)).await
    }

    /// The rules `request` comes to, decided: the adaptive ones in this process first,
    /// then the rest in the charging room.
    async fn decide_at(
        &self,
        request: &Request<'_>,
        now: u64,
        timer: Option<&dyn Timer>,
    ) -> Result<Verdict, RequestError> {
        let set = self.rules.current();
        let applying = set.applying(request, timer.is_some())?;
        let class = set.criticality(request);
        let charged = self
            .adaptive
            .charge(
                &self.charger,
                Some(&set),
                &set.rules,
                |i| set.counters_of(i),
                applying,
                class,
                set.version,
                now,
                timer,
            )
            .await;
        Ok(charged.into_verdict(set.version, Arc::clone(&set.rules), Vec::new()))
    }

    /// Decides `keyed` at `now`: for each, the index of a rule in force (as in
    /// [`Engine::rule_list`]), the key's value (a `&str` or a `String`), and the cost. Each key is the rule's own
    /// (`name@fingerprint|value`, the value bounded as every key part is), and the lot is
    /// decided as [`Engine::decide`] decides a request's rules: all or nothing, with
    /// reservations, permits, the failure policy and the counters.
    ///
    /// It skips the matching and key building of an HTTP request and the descriptor
    /// resolution of Envoy's protocol: for a caller that knows its rules (an engine it
    /// built and never reloads) and its keys. An index past the rules is skipped.
    pub async fn decide_keyed<K: AsRef<str> + Sync>(
        &self,
        keyed: &[(usize, K, u64)],
        now: u64,
    ) -> Verdict {
        let set = self.rules.current();
        let applying = set.keyed(keyed);
        let charged = self
            .adaptive
            .charge(
                &self.charger,
                None,
                &set.rules,
                |i| set.counters_of(i),
                applying,
                Criticality::Default,
                set.version,
                now,
                None,
            )
            .await;
        charged.into_verdict(set.version, Arc::clone(&set.rules), Vec::new())
    }

    /// Decides the `descriptors` of one rate limit request of `domain` at `now`, each
    /// costing `hits` unless it says otherwise.
    ///
    /// A descriptor resolves to an envoyproxy/ratelimit rule of the YAML in force (or to
    /// the limit it carries itself), else to the first native rule whose `match.domain`
    /// and `match.descriptor` take it. Then it is decided exactly as [`Engine::decide`]
    /// decides a request's rules; YAML rules fail closed (the verdict is `unavailable`,
    /// for Envoy's `failure_mode_deny` to decide), native ones by their own policy.
    /// `allowed` is envoyproxy/ratelimit's overall code (quota mode, shadow mode,
    /// `replaces`), and `descriptors` holds each descriptor's status in request order.
    ///
    /// # Errors
    ///
    /// An empty domain or no descriptors.
    pub async fn decide_descriptors(
        &self,
        domain: &str,
        descriptors: &[RequestDescriptor<'_>],
        hits: u64,
        now: u64,
    ) -> Result<Verdict, RequestError> {
        let set = self.rules.current();
        let plan = set.descriptors(domain, descriptors, hits)?;
        let charged = self
            .charger
            .charge(
                None,
                &plan.rules,
                |k| plan.counters(k),
                &plan.applying,
                set.version,
                now,
            )
            .await;
        let (over, statuses) = plan.verdicts(&charged.outcomes);
        let mut verdict = charged.into_verdict(set.version, Arc::clone(&plan.rules), statuses);
        verdict.allowed = !over && !verdict.unavailable;
        Ok(verdict)
    }

    /// Explains `request` at `now` against every rule in force: matched or not and why,
    /// the key built, the cost, and the decision its state would give, charging nothing
    /// (each applying rule's store is only peeked).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::now_or_panic;
    /// use ratewarden_memory::{MemoryStore, StoreConfig};
    /// use ratewarden_policy::{config, Engine, Finding, Request};
    ///
    /// let rules = "[[limit]]\nname = \"login\"\nmatch = { method = \"POST\" }\nkey = [\"ip\"]\n\
    ///              algorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1m\"\n";
    /// let engine = Engine::new(
    ///     config::parse("r.toml", rules).unwrap(),
    ///     MemoryStore::new(StoreConfig::default()),
    /// );
    /// let request = Request {
    ///     peer: "203.0.113.7".parse().unwrap(),
    ///     method: "GET",
    ///     path: "/",
    ///     host: None,
    ///     headers: &[],
    ///     cost: None,
    ///     api_key: None,
    ///     tenant: None,
    ///     body: None,
    ///     client_cert: None,
    /// };
    /// let explained = now_or_panic(engine.explain(&request, 0));
    /// assert!(matches!(
    ///     explained.rules[0].finding,
    ///     Finding::NotMatched { field: "method", .. }
    /// ));
    /// ```
    pub async fn explain(&self, request: &Request<'_>, now: u64) -> Explanation {
        let set = self.rules.current();
        explain::explain(&set, &self.charger.store, &self.adaptive, request, now).await
    }

    /// The state of key `parts` under the rule named `rule` at `now`, charging nothing.
    ///
    /// # Errors
    ///
    /// No such rule, empty parts, or the store failed.
    pub async fn key_state(
        &self,
        rule: &str,
        parts: &str,
        now: u64,
    ) -> Result<KeyState, KeyStateError> {
        let set = self.rules.current();
        let (i, stored_key) = set.stored_key(rule, parts)?;
        let decision = self
            .charger
            .peek_key(&set.rules[i].limit, &stored_key, now)
            .await?;
        Ok(KeyState {
            stored_key,
            decision,
        })
    }

    /// Forgets the state of key `parts` under the rule named `rule`: its next request is
    /// decided as a new key's. Returns whether there was a state to forget. Not logged here:
    /// the caller logs it once, with who asked (the admin listener names the peer).
    /// The key's in-process buckets (a `local_first` rule's, the store-failure fallback's)
    /// are cleared with it.
    ///
    /// # Errors
    ///
    /// No such rule, empty parts, or the store failed.
    pub async fn reset_key(&self, rule: &str, parts: &str) -> Result<bool, KeyStateError> {
        let (_, stored_key) = self.rules.current().stored_key(rule, parts)?;
        self.charger.forget_key(&stored_key).await
    }

    /// Settles reservation `id`, held by `owner`, with the request's `actual` cost: the
    /// difference from the estimate is charged (the balance may go past the limit, and later
    /// requests wait the debt out) or refunded.
    ///
    /// # Errors
    ///
    /// [`SettleError::Unknown`] for a reservation never made, settled or expired: one not
    /// settled in time settles at its estimate, which was charged up front.
    /// [`SettleError::NotOwner`] when `owner` is not the client the reservation was issued
    /// for (its key under one of the rules differs): nothing is charged, and the
    /// reservation stands for its owner. [`SettleError::TooCostly`] for a cost over what one
    /// request may take under one of its rules, as a request's own cost would be refused:
    /// nothing is charged, and the reservation stands.
    pub async fn settle(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        actual: u64,
        now: u64,
    ) -> Result<(), SettleError> {
        self.charger.settle(id, owner, actual, now).await
    }

    /// Settles reservation `id`, held by `owner`, with what the upstream's answer said each
    /// rule's cost was (`actuals`: a rule's name and its cost; a rule not named keeps its
    /// estimate). Unlike [`settle`](Engine::settle), whose cost a client claims, the
    /// answer's cost is charged even past what one request may take under a rule: the
    /// balance goes into debt that later requests wait out.
    ///
    /// # Errors
    ///
    /// [`SettleError::Unknown`] and [`SettleError::NotOwner`], as for
    /// [`settle`](Engine::settle).
    pub async fn settle_answered(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        actuals: &[(&str, u64)],
        now: u64,
    ) -> Result<(), SettleError> {
        self.charger.settle_answered(id, owner, actuals, now).await
    }

    /// Releases permit `id`, held by `owner`: the concurrency units an allowed request held
    /// go back.
    ///
    /// # Errors
    ///
    /// [`ReleaseError::Unknown`] for a permit never granted, released, or lapsed: a permit
    /// not released within its lease was let go by the store already.
    /// [`ReleaseError::NotOwner`] when `owner` is not the client the permit was granted to:
    /// nothing goes back, and the permit stays its owner's.
    pub async fn release(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        now: u64,
    ) -> Result<(), ReleaseError> {
        self.give_back(id, owner, None, now).await
    }

    /// Releases permit `id`, held by `owner`, as [`release`](Engine::release) does, and
    /// tells its adaptive rules how the request went: its round trip and whether it was
    /// dropped (a timeout, a 5xx), which is what their limits learn from.
    ///
    /// # Errors
    ///
    /// As [`release`](Engine::release).
    pub async fn release_with(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        completion: Completion,
        now: u64,
    ) -> Result<(), ReleaseError> {
        self.give_back(id, owner, Some(completion), now).await
    }

    /// The permit's holder checked, its units given back: to the store, and to the
    /// adaptive limiters with `completion`.
    async fn give_back(
        &self,
        id: GrantId,
        owner: Owner<'_>,
        completion: Option<Completion>,
        now: u64,
    ) -> Result<(), ReleaseError> {
        for (key, ticket) in self.charger.release(id, owner, now).await? {
            self.adaptive.release(&key, ticket, now, completion);
        }
        Ok(())
    }

    /// Gives back the unspent units of every `prefetch` allowance that has lapsed at `now`
    /// (and forgets idle keys): what a server runs a few times per horizon. Returns the
    /// units given back.
    pub async fn sweep_allowances(&self, now: u64) -> u64 {
        self.charger.sweep_allowances(now, false).await
    }

    /// Takes `key`'s next `global` allowance from the home store ahead of demand (a key
    /// [`global_due`](Engine::global_due) named); whether one was taken. `clock` gives the
    /// time, read as the call is made and as its answer lands (the units are spent for a
    /// horizon after they land).
    ///
    /// # Errors
    ///
    /// The home store's: the units in hand are still spent, and the key stays due.
    pub async fn top_up_global(
        &self,
        key: &str,
        clock: impl Fn() -> u64,
    ) -> Result<bool, S::Error> {
        self.charger.top_up_global(key, clock).await
    }

    /// Gives back the unspent units of every `prefetch` allowance, lapsed or not: what a
    /// stopping process runs last. Returns the units given back.
    pub async fn return_allowances(&self, now: u64) -> u64 {
        self.charger.sweep_allowances(now, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewarden_memory::{MemoryStore, StoreConfig};

    /// Keys come from clients: `[store] max_keys` bounds the engine's in-process buckets
    /// too, not only the store.
    #[test]
    fn store_bounds_hold_for_the_in_process_buckets() {
        let config = crate::config::parse(
            "t.toml",
            r#"
[store]
max_keys = 256

[[limit]]
name = "per-key"
key = ["header:x-key"]
algorithm = "gcra"
rate = "1/s"
burst = 2
local_first = true
"#,
        )
        .expect("a valid config");
        let engine = Engine::new(config, MemoryStore::new(StoreConfig::default()));
        for i in 0..5_000 {
            let key = format!("k{i}");
            let headers = [("x-key", key.as_str())];
            let request = Request {
                peer: "192.0.2.1".parse().expect("an address"),
                method: "GET",
                path: "/",
                host: None,
                headers: &headers,
                cost: None,
                api_key: None,
                tenant: None,
                body: None,
                client_cert: None,
            };
            let verdict = ratewarden_core::now_or_panic(engine.decide(&request, 1));
            assert!(verdict.expect("decided").allowed);
        }
        let held = engine.charger.hybrid.stats().keys;
        assert!(held > 0 && held <= 256, "{held} keys held");
    }
}
