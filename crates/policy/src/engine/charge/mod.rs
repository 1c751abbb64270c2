//! The charging room: the store and everything this process holds beside it (the local
//! fallback and `local_first` buckets, reservations, permits, prefetched allowances), and
//! the one path every decision takes once its rules, keys and costs are known: enforced
//! rules in one store call (all or nothing), `local_first` buckets before it, the failure
//! policy when it fails, shadow and rollout rules charged only for requests that go
//! through, per-rule counters, and the reservation and permit of an allowed request.

mod failure;
mod key_state;
mod ledger;
mod owner;
mod prefetch;
mod settle;

pub(crate) use ledger::{Charge, Grant, MAX_LIVE};
pub use owner::Owner;
pub use prefetch::PrefetchStats;

use std::sync::Arc;

use ratewarden_core::{AsyncStore, Check, Decision, Limit, Outcome, Store};
use ratewarden_memory::{MemoryStore, StoreConfig};

use crate::config::{Cost, OnStoreFailure, Rule};
use crate::engine::rules::{Applying, Counters, RuleSet};
use crate::engine::verdict::{DescriptorVerdict, GrantId, RuleOutcome, Verdict};
use ledger::Ledger;
use prefetch::Allowances;

/// The store the rules decide on, and what this process holds beside it.
pub(crate) struct Charger<S> {
    pub(crate) store: S,
    /// Where rules decide while the store is down: `on_store_failure = "local"` at its
    /// share, `"open"` at the rule's own numbers (so a process stays exact on its own).
    local: MemoryStore,
    /// The in-process buckets of `local_first` rules, asked before the store.
    pub(crate) hybrid: MemoryStore,
    /// Estimated costs waiting for their settle.
    reservations: Ledger,
    /// Concurrency units held until their release.
    permits: Ledger,
    /// The allowances of `prefetch` rules, by key.
    allowances: Allowances,
    /// Where `scope = "global"` rules are counted for every region (`[regions.home]`);
    /// `None` counts them in `store` (a server of one region).
    pub(crate) home: Option<S>,
    /// The allowances of `global` rules, taken from `home` and topped up off the request
    /// path.
    global: Allowances,
}

/// What the path decided.
pub(crate) struct Charged {
    pub(crate) allowed: bool,
    pub(crate) unavailable: bool,
    pub(crate) outcomes: Vec<RuleOutcome>,
    pub(crate) retry_after_ns: Option<u64>,
    pub(crate) reservation: Option<GrantId>,
    pub(crate) permit: Option<GrantId>,
}

impl Charged {
    /// The verdict of rule set `version`'s `rules` (the rules the outcomes index), with a
    /// descriptor call's `descriptors` (empty for an HTTP request).
    pub(crate) fn into_verdict(
        self,
        version: u64,
        rules: Arc<[Rule]>,
        descriptors: Vec<DescriptorVerdict>,
    ) -> Verdict {
        Verdict {
            allowed: self.allowed,
            unavailable: self.unavailable,
            outcomes: self.outcomes,
            retry_after_ns: self.retry_after_ns,
            reservation: self.reservation,
            permit: self.permit,
            version,
            rules,
            descriptors,
        }
    }
}

/// The enforced `prefetch` rules' part: what each allowance said, and the rules that took
/// from theirs (given back when the request is refused after all).
#[derive(Default)]
struct Spent<'a> {
    outcomes: Vec<RuleOutcome>,
    taken: Vec<&'a Applying>,
    unavailable: bool,
}

/// What this process decided before the store is asked.
struct InProcess {
    /// The decisions of the rules that refused here (the store is not asked then).
    refused: Option<Vec<Decision>>,
    /// On a shared store, per enforced rule: whether it was charged here first (`guards`).
    guarded: Vec<bool>,
    /// The guarded rules' decisions here, in order.
    guard: Vec<Decision>,
}

/// The enforced rules without an allowance, decided.
struct Decided {
    outcomes: Vec<RuleOutcome>,
    /// Refused in this process: the store was not asked.
    locally_refused: bool,
    store_failed: bool,
    /// A `closed` rule's store failed.
    unavailable: bool,
}

impl<S> Charger<S> {
    /// `store`, with in-process buckets bounded by `buckets`.
    pub(crate) fn new(buckets: StoreConfig, store: S) -> Self {
        Self {
            store,
            local: MemoryStore::new(buckets),
            hybrid: MemoryStore::new(buckets),
            reservations: Ledger::new(MAX_LIVE),
            permits: Ledger::new(MAX_LIVE),
            allowances: Allowances::default(),
            home: None,
            global: Allowances::background(),
        }
    }

    /// The store `global` rules are counted in: the home store, or this one.
    pub(crate) fn home(&self) -> &S {
        self.home.as_ref().unwrap_or(&self.store)
    }

    /// The keys of `global` rules whose allowance runs low, at most `most`.
    pub(crate) fn global_due(&self, most: usize) -> Vec<String> {
        self.global.due(most)
    }

    /// What the `global` rules' allowances did since the start.
    pub(crate) fn global_stats(&self) -> PrefetchStats {
        self.global.stats()
    }

    /// What the `prefetch` rules' allowances did since the start.
    pub(crate) fn prefetch_stats(&self) -> PrefetchStats {
        self.allowances.stats()
    }

    /// Adds adaptive rules' places (`charges`, lapsing at `lease`) to an allowed request's
    /// permit, or makes it one. `false` when no id could be had: the caller gives the
    /// places back rather than hold them until their lease.
    pub(crate) fn hold_places(
        &self,
        permit: &mut Option<GrantId>,
        charges: Vec<Charge>,
        lease: u64,
        issuer: Option<&Arc<RuleSet>>,
        now: u64,
    ) -> bool {
        match *permit {
            Some(id) => self.permits.attach(id, charges, lease, now).is_ok(),
            None => {
                let grant = Grant {
                    charges,
                    expires: lease,
                    issuer: issuer.cloned(),
                };
                *permit = self.permits.insert(grant, now);
                permit.is_some()
            }
        }
    }
}

impl<S: AsyncStore> Charger<S> {
    /// Decides `applying` (rules indexing `rules`) at `now`; `counters` gives a rule's
    /// counters, when it has some (rules of the TOML file do). `issuer` is the rule set
    /// `rules` are, when a request decided them: its grants can be claimed by the request's
    /// attributes.
    pub(crate) async fn charge<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: &[Applying],
        version: u64,
        now: u64,
    ) -> Charged {
        let charged = self
            .decide_and_charge(issuer, rules, counters, applying, version, now)
            .await;
        if !charged.allowed && !charged.unavailable {
            self.charge_regardless(rules, applying, &charged.outcomes, now)
                .await;
        }
        charged
    }

    /// A refused request's cost charged all the same under its `always_charge` rules, into
    /// debt: a report of what was spent (Envoy's usage at a stream's end), not an ask.
    async fn charge_regardless(
        &self,
        rules: &[Rule],
        applying: &[Applying],
        outcomes: &[RuleOutcome],
        now: u64,
    ) {
        for a in applying {
            if !a.enforced || !rules[a.rule].always_charge || a.cost == 0 {
                continue;
            }
            // A store that failed for this rule charged nothing, and is not asked again.
            if outcomes.iter().any(|o| o.rule == a.rule && o.store_failed) {
                continue;
            }
            let delta = i64::try_from(a.cost).unwrap_or(i64::MAX);
            let _ = self
                .store
                .settle(&rules[a.rule].limit, &a.key, now, delta)
                .await;
        }
    }

    /// [`charge`](Self::charge) before `always_charge`: the all-or-nothing decision.
    async fn decide_and_charge<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: &[Applying],
        version: u64,
        now: u64,
    ) -> Charged {
        if let [a] = applying {
            if a.enforced && self.alone(&rules[a.rule]) {
                return self
                    .charge_one(issuer, rules, counters, a, version, now)
                    .await;
            }
        }
        let mut enforced: Vec<&Applying> = applying.iter().filter(|a| a.enforced).collect();
        // `prefetch` rules first, from their allowances: no store call for most requests.
        let spent = self
            .spend_allowances(rules, &counters, &mut enforced, now)
            .await;
        if spent.outcomes.iter().any(|o| !o.decision.is_allowed()) {
            // All or nothing: what the others took from their allowances goes back.
            self.put_back(rules, &spent.taken);
            let unavailable = spent.unavailable;
            return self.finish(
                issuer,
                rules,
                counters,
                applying,
                spent.outcomes,
                false,
                unavailable,
                version,
                now,
            );
        }
        let decided = self
            .decide_enforced(rules, &counters, &mut enforced, now)
            .await;
        let mut outcomes = decided.outcomes;
        let allowed = outcomes.iter().all(|o| o.decision.is_allowed());
        if !allowed {
            self.put_back(rules, &spent.taken);
        }
        outcomes.extend(spent.outcomes);
        if allowed {
            self.record_allowed(rules, &enforced, decided.store_failed, now);
        }
        // A request refused in this process is not shown to shadow rules: that would cost
        // the round trips hybrid rules exist to save.
        if !decided.locally_refused {
            self.charge_shadow(rules, &counters, applying, allowed, &mut outcomes, now)
                .await;
        }
        self.finish(
            issuer,
            rules,
            counters,
            applying,
            outcomes,
            allowed,
            spent.unavailable || decided.unavailable,
            version,
            now,
        )
    }

    /// Whether enforced rule `rule` alone is decided by the store alone: no in-process
    /// bucket before it, no guard beside it, no allowance.
    fn alone(&self, rule: &Rule) -> bool {
        !rule.local_first && rule.prefetch.is_none() && !(self.store.is_shared() && guards(rule))
    }

    /// The enforced `prefetch` rules, taken out of `enforced`, each from its allowance, up
    /// to the first that refuses.
    async fn spend_allowances<'a, 'c>(
        &self,
        rules: &[Rule],
        counters: &impl Fn(usize) -> Option<&'c Counters>,
        enforced: &mut Vec<&'a Applying>,
        now: u64,
    ) -> Spent<'a> {
        let mut spent = Spent::default();
        if !enforced.iter().any(|a| rules[a.rule].prefetch.is_some()) {
            return spent;
        }
        let (with, without): (Vec<&Applying>, Vec<&Applying>) = std::mem::take(enforced)
            .into_iter()
            .partition(|a| rules[a.rule].prefetch.is_some());
        *enforced = without;
        for a in with {
            let rule = &rules[a.rule];
            let spend = if rule.global {
                self.global.spend(self.home(), rule, &a.key, a.cost, now)
            } else {
                self.allowances
                    .spend(&self.store, rule, &a.key, a.cost, now)
            };
            let (decision, store_failed) = match spend.await {
                Ok(decision) => (decision, false),
                Err(error) => {
                    let (decision, closed) = self.store_failed(rules, counters, a, &error, now);
                    spent.unavailable |= closed;
                    (decision, true)
                }
            };
            let allowed = decision.is_allowed();
            if allowed && !store_failed {
                spent.taken.push(a);
            }
            spent.outcomes.push(RuleOutcome {
                rule: a.rule,
                key: a.key.clone(),
                decision,
                enforced: true,
                store_failed,
            });
            if !allowed {
                break;
            }
        }
        spent
    }

    /// Gives back to their allowances what `taken` (of `rules`) took.
    fn put_back(&self, rules: &[Rule], taken: &[&Applying]) {
        for a in taken {
            if rules[a.rule].global {
                self.global.put_back(&a.key, a.cost);
            } else {
                self.allowances.put_back(&a.key, a.cost);
            }
        }
    }

    /// What this process decides before the store is asked. A `local_first` bucket that
    /// says no first (it has seen a subset of what the store has, so the store would say
    /// no too, and the round trip is saved); then, on a shared store, the `open` rules
    /// charged here first at their own numbers, all or nothing, so that what this process
    /// admits, whether the store answers or not, is never more than one limiter's worth.
    /// When either refuses, `enforced` keeps just the rules that decided.
    fn in_process(&self, rules: &[Rule], enforced: &mut Vec<&Applying>, now: u64) -> InProcess {
        let hybrid: Vec<Decision> = enforced
            .iter()
            .filter(|a| rules[a.rule].local_first)
            .map(|a| self.hybrid.peek(&rules[a.rule].limit, &a.key, now, a.cost))
            .collect();
        if hybrid.iter().any(|d| !d.is_allowed()) {
            enforced.retain(|a| rules[a.rule].local_first);
            return InProcess {
                refused: Some(hybrid),
                guarded: Vec::new(),
                guard: Vec::new(),
            };
        }
        // Empty (no allocation) unless the store is shared: in memory nothing is guarded.
        let guarded: Vec<bool> = if self.store.is_shared() {
            enforced.iter().map(|a| guards(&rules[a.rule])).collect()
        } else {
            Vec::new()
        };
        let checks: Vec<Check<'_>> = enforced
            .iter()
            .zip(&guarded)
            .filter(|(_, g)| **g)
            .map(|(a, _)| check(rules, a))
            .collect();
        let guard = if checks.is_empty() {
            Vec::new()
        } else {
            Store::decide_all(&self.local, &checks, now).unwrap_or_else(|never| match never {})
        };
        if guard.iter().any(|d| !d.is_allowed()) {
            // All or nothing: nothing was charged here, and the store is not asked.
            let mut g = guarded.iter();
            enforced.retain(|_| *g.next().unwrap_or(&false));
            return InProcess {
                refused: Some(guard),
                guarded: Vec::new(),
                guard: Vec::new(),
            };
        }
        InProcess {
            refused: None,
            guarded,
            guard,
        }
    }

    /// The enforced rules without an allowance, all or nothing: in this process first,
    /// then in one store call; each by its failure policy when the store fails.
    async fn decide_enforced<'c>(
        &self,
        rules: &[Rule],
        counters: &impl Fn(usize) -> Option<&'c Counters>,
        enforced: &mut Vec<&Applying>,
        now: u64,
    ) -> Decided {
        let here = self.in_process(rules, enforced, now);
        let locally_refused = here.refused.is_some();
        let mut store_failed = false;
        let mut unavailable = false;
        let decisions = match here.refused {
            Some(refused) => refused,
            None => {
                let checks: Vec<Check<'_>> = enforced.iter().map(|a| check(rules, a)).collect();
                // One call for all: it waits for as many replicas as the most careful rule.
                let replicas = enforced
                    .iter()
                    .map(|a| rules[a.rule].wait_for_replicas)
                    .max()
                    .unwrap_or(0);
                let result = if checks.is_empty() {
                    Ok(Vec::new())
                } else if replicas > 0 {
                    self.store.decide_replicated(&checks, now, replicas).await
                } else {
                    self.store.decide_all(&checks, now).await
                };
                match result {
                    Ok(decisions) => {
                        if decisions.iter().any(|d| !d.is_allowed()) {
                            // The store said no: give back what was charged here.
                            self.refund_guards(rules, enforced, &here.guarded, now);
                        }
                        decisions
                    }
                    // Each rule already knows what to do when its store fails.
                    Err(error) => {
                        store_failed = true;
                        let mut guard = here.guard.into_iter();
                        enforced
                            .iter()
                            .enumerate()
                            .map(|(i, a)| {
                                if here.guarded.get(i).copied().unwrap_or(false) {
                                    // Decided (and charged) here already.
                                    if let Some(decision) = guard.next() {
                                        failed(&rules[a.rule], counters(a.rule), &error);
                                        return decision;
                                    }
                                }
                                let (decision, closed) =
                                    self.store_failed(rules, counters, a, &error, now);
                                unavailable |= closed;
                                decision
                            })
                            .collect()
                    }
                }
            }
        };
        let outcomes = enforced
            .iter()
            .zip(decisions)
            .map(|(a, decision)| RuleOutcome {
                rule: a.rule,
                key: a.key.clone(),
                decision,
                enforced: true,
                store_failed,
            })
            .collect();
        Decided {
            outcomes,
            locally_refused,
            store_failed,
            unavailable,
        }
    }

    /// Gives back to the in-process guard what the `guarded` rules of `enforced` were
    /// charged there.
    fn refund_guards(&self, rules: &[Rule], enforced: &[&Applying], guarded: &[bool], now: u64) {
        for (a, _) in enforced.iter().zip(guarded).filter(|(_, g)| **g) {
            let refund = -i64::try_from(a.cost).unwrap_or(i64::MAX);
            Store::settle(&self.local, &rules[a.rule].limit, &a.key, now, refund)
                .unwrap_or_else(|never| match never {});
        }
    }

    /// What an allowed request leaves in this process: its `local_first` buckets charged,
    /// and, on a shared store that answered, the local fallback kept in step.
    fn record_allowed(&self, rules: &[Rule], enforced: &[&Applying], store_failed: bool, now: u64) {
        for a in enforced.iter().filter(|a| rules[a.rule].local_first) {
            self.hybrid
                .decide(&rules[a.rule].limit, &a.key, now, a.cost);
        }
        if !store_failed && self.store.is_shared() {
            self.record_locally(rules, enforced, now);
        }
    }

    /// The rules of `applying` that do not enforce (shadow, or a key outside a rollout's
    /// share), as if enforcing: charged only when the request goes through, peeked when
    /// it does not. Their outcomes go to `outcomes`.
    async fn charge_shadow<'c>(
        &self,
        rules: &[Rule],
        counters: &impl Fn(usize) -> Option<&'c Counters>,
        applying: &[Applying],
        allowed: bool,
        outcomes: &mut Vec<RuleOutcome>,
        now: u64,
    ) {
        for a in applying.iter().filter(|a| !a.enforced) {
            let rule = &rules[a.rule];
            let result = if allowed {
                self.store.decide(&rule.limit, &a.key, now, a.cost).await
            } else {
                self.store.peek(&rule.limit, &a.key, now, a.cost).await
            };
            let size = ratewarden_core::Algorithm::limit(&rule.limit);
            let failed = result.is_err();
            if failed {
                if let Some(c) = counters(a.rule) {
                    Counters::bump(&c.store_failures);
                }
            }
            let decision =
                result.unwrap_or_else(|_| Decision::new(Outcome::Allowed, size, size, 0));
            outcomes.push(RuleOutcome {
                rule: a.rule,
                key: a.key.clone(),
                decision,
                enforced: false,
                store_failed: failed,
            });
        }
    }

    /// [`charge`](Self::charge) for the common case: one enforced rule, decided by the
    /// store alone (no in-process bucket before it, no guard beside it). The same decision
    /// in one store call, without the vectors the general path sorts its rules into (four
    /// allocations a request, a tenth of the tower layer's cost).
    async fn charge_one<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        a: &Applying,
        version: u64,
        now: u64,
    ) -> Charged {
        let rule = &rules[a.rule];
        let decided = if rule.wait_for_replicas > 0 {
            let check = [check(rules, a)];
            let replicated = self
                .store
                .decide_replicated(&check, now, rule.wait_for_replicas);
            replicated.await.map(|mut decisions| {
                // One decision a check; a store that answered none has admitted nothing.
                decisions.pop().unwrap_or_else(|| {
                    let retry_after_ns = 1_000_000_000;
                    let size = ratewarden_core::Algorithm::limit(&rule.limit);
                    Decision::new(Outcome::Limited { retry_after_ns }, size, 0, 0)
                })
            })
        } else {
            self.store.decide(&rule.limit, &a.key, now, a.cost).await
        };
        let (decision, store_failed, unavailable) = match decided {
            Ok(decision) => (decision, false, false),
            Err(error) => {
                let (decision, closed) = self.store_failed(rules, &counters, a, &error, now);
                (decision, true, closed)
            }
        };
        let allowed = decision.is_allowed();
        if allowed && !store_failed && self.store.is_shared() {
            self.record_locally(rules, &[a], now);
        }
        let outcomes = vec![RuleOutcome {
            rule: a.rule,
            key: a.key.clone(),
            decision,
            enforced: true,
            store_failed,
        }];
        self.finish(
            issuer,
            rules,
            counters,
            std::slice::from_ref(a),
            outcomes,
            allowed,
            unavailable,
            version,
            now,
        )
    }

    /// The decision of enforced rule `a` when its store failed: by the rule's failure
    /// policy, and whether that closed it (a 503). Counted and logged.
    fn store_failed<'c, E: std::fmt::Display>(
        &self,
        rules: &[Rule],
        counters: &impl Fn(usize) -> Option<&'c Counters>,
        a: &Applying,
        error: &E,
        now: u64,
    ) -> (Decision, bool) {
        let rule = &rules[a.rule];
        failed(rule, counters(a.rule), error);
        self.on_store_failure(rule, &a.key, a.cost, now)
    }

    /// What every decision ends with: the outcomes in rule order, the per-rule counters,
    /// the retry time, and an allowed request's reservation and permit.
    #[allow(clippy::too_many_arguments)]
    fn finish<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: &[Applying],
        mut outcomes: Vec<RuleOutcome>,
        allowed: bool,
        unavailable: bool,
        version: u64,
        now: u64,
    ) -> Charged {
        outcomes.sort_by_key(|o| o.rule);
        for o in &outcomes {
            let Some(c) = counters(o.rule) else { continue };
            let counter = match (o.enforced, o.said_no()) {
                (true, false) if allowed => &c.allowed,
                // Not charged: another rule rejected the request.
                (true, false) => &c.skipped,
                (true, true) => {
                    c.top_limited.record(&o.key, now);
                    &c.rejected
                }
                (false, true) => {
                    c.top_shadow.record(&o.key, now);
                    tracing::info!(
                        rule = %rules[o.rule].name,
                        key = %o.key,
                        version,
                        "would have rejected"
                    );
                    &c.would_have_rejected
                }
                (false, false) => &c.shadow_allowed,
            };
            Counters::bump(counter);
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
                self.reserve(issuer, rules, applying, now),
                self.hold(issuer, rules, &outcomes, applying, now),
            )
        } else {
            (None, None)
        };
        Charged {
            allowed,
            unavailable,
            outcomes,
            retry_after_ns,
            reservation,
            permit,
        }
    }

    /// Records the concurrency units an allowed request took, if any, for its release.
    fn hold(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        outcomes: &[RuleOutcome],
        applying: &[Applying],
        now: u64,
    ) -> Option<GrantId> {
        let mut charges = Vec::new();
        let mut lapses = u64::MAX;
        for a in applying {
            let Limit::Concurrency(c) = &rules[a.rule].limit else {
                continue;
            };
            // Units are held only where the store charged them (a failed store held none,
            // and neither did a shadow rule that said no).
            // The outcomes are sorted by rule: its own are found by halving, not by a walk
            // per rule (quadratic in a call of many concurrency descriptors).
            let from = outcomes.partition_point(|o| o.rule < a.rule);
            let charged = outcomes[from..]
                .iter()
                .take_while(|o| o.rule == a.rule)
                .any(|o| o.decision.is_allowed() && !o.store_failed);
            if charged && a.cost > 0 {
                charges.push(charge_of(&rules[a.rule], a));
                let lease = u64::try_from(c.lease().as_nanos()).unwrap_or(u64::MAX);
                lapses = lapses.min(now.saturating_add(lease));
            }
        }
        if charges.is_empty() {
            return None;
        }
        self.permits.insert(
            Grant {
                charges,
                expires: lapses,
                issuer: issuer.cloned(),
            },
            now,
        )
    }

    /// Records the estimated costs of an allowed request, if any, for a later settle.
    fn reserve(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        applying: &[Applying],
        now: u64,
    ) -> Option<GrantId> {
        let mut charges = Vec::new();
        let mut lease = u64::MAX;
        for a in applying {
            if let Some(within) = rules[a.rule].settle_within {
                charges.push(charge_of(&rules[a.rule], a));
                lease = lease.min(u64::try_from(within.as_nanos()).unwrap_or(u64::MAX));
            }
        }
        if charges.is_empty() {
            return None;
        }
        // Reservations past their time settle at their estimate: nothing is left to do.
        self.reservations.insert(
            Grant {
                charges,
                expires: now.saturating_add(lease),
                issuer: issuer.cloned(),
            },
            now,
        )
    }
}

fn charge_of(rule: &Rule, a: &Applying) -> Charge {
    let burst = ratewarden_core::Algorithm::limit(&rule.limit);
    let max_cost = match &rule.cost {
        Cost::Header { max, .. } | Cost::Body { max, .. } => (*max).min(burst),
        Cost::Fixed(_) => burst,
    };
    Charge {
        rule: rule.name.clone(),
        index: a.rule,
        limit: rule.limit.clone(),
        key: a.key.clone(),
        cost: a.cost,
        max_cost,
        ticket: None,
    }
}

/// Counts and logs a store failure under `rule`.
fn failed<E: std::fmt::Display>(rule: &Rule, counters: Option<&Counters>, error: &E) {
    if let Some(c) = counters {
        Counters::bump(&c.store_failures);
    }
    tracing::warn!(rule = %rule.name, %error, policy = %rule.on_store_failure, "store failed");
}

fn check<'r>(rules: &'r [Rule], a: &'r Applying) -> Check<'r> {
    Check {
        limit: &rules[a.rule].limit,
        key: &a.key,
        cost: a.cost,
    }
}

/// Whether `rule`, on a shared store, is charged in process before the store is asked: an
/// `open` rule (not a concurrency limit, whose units the store holds and releases).
fn guards(rule: &Rule) -> bool {
    matches!(rule.on_store_failure, OnStoreFailure::Open)
        && !matches!(rule.limit, Limit::Concurrency(_))
}
