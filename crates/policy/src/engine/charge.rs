//! The one path every decision takes once its rules, keys and costs are known: enforced
//! rules in one store call (all or nothing), `local_first` buckets before it, the failure
//! policy when it fails, shadow and rollout rules charged only for requests that go
//! through, per-rule counters, and the reservation and permit of an allowed request.

use ratewarden_core::{AsyncStore, Check, Decision, Limit, Outcome, Store};

use std::sync::Arc;

use super::counters::Counters;
use super::reservations::{Charge, Grant, GrantId};
use super::rules::RuleSet;
use super::{Engine, RuleOutcome};
use crate::config::{Cost, OnStoreFailure};
use crate::Rule;

/// A rule that applies to a request.
#[derive(Debug)]
pub(super) struct Applying {
    /// Its index in the rules the verdict carries.
    pub(super) rule: usize,
    /// The key its state is kept under.
    pub(super) key: String,
    /// What the request costs under it.
    pub(super) cost: u64,
    /// Whether it may reject (not shadow, and the key inside a rollout's share).
    pub(super) enforced: bool,
    /// For an adaptive rule with a queue: the value of the queue's key part (`tenant`),
    /// whose flow the request waits in ("" without it).
    pub(super) flow: Option<String>,
}

/// What the path decided.
pub(super) struct Charged {
    pub(super) allowed: bool,
    pub(super) unavailable: bool,
    pub(super) outcomes: Vec<RuleOutcome>,
    pub(super) retry_after_ns: Option<u64>,
    pub(super) reservation: Option<GrantId>,
    pub(super) permit: Option<GrantId>,
}

impl<S: AsyncStore> Engine<S> {
    /// Decides `applying` (rules indexing `rules`) at `now`; `counters` gives a rule's
    /// counters, when it has some (rules of the TOML file do). `issuer` is the rule set
    /// `rules` are, when a request decided them: its grants can be claimed by the request's
    /// attributes.
    pub(super) async fn charge<'c>(
        &self,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: &[Applying],
        version: u64,
        now: u64,
    ) -> Charged {
        if let [a] = applying {
            if a.enforced
                && !rules[a.rule].local_first
                && rules[a.rule].prefetch.is_none()
                && !(self.store.is_shared() && guards(&rules[a.rule]))
            {
                return self
                    .charge_one(issuer, rules, counters, a, version, now)
                    .await;
            }
        }
        let mut enforced: Vec<&Applying> = applying.iter().filter(|a| a.enforced).collect();
        let mut unavailable = false;
        // `prefetch` rules first, from their allowances: no store call for most requests.
        let mut prefetched: Vec<RuleOutcome> = Vec::new();
        let mut spent: Vec<&Applying> = Vec::new();
        if enforced.iter().any(|a| rules[a.rule].prefetch.is_some()) {
            let (with, without): (Vec<&Applying>, Vec<&Applying>) = enforced
                .into_iter()
                .partition(|a| rules[a.rule].prefetch.is_some());
            enforced = without;
            for a in with {
                let rule = &rules[a.rule];
                let spend = self
                    .allowances
                    .spend(&self.store, rule, &a.key, a.cost, now);
                let (decision, store_failed) = match spend.await {
                    Ok(decision) => (decision, false),
                    Err(error) => {
                        let (decision, closed) =
                            self.store_failed(rules, &counters, a, &error, now);
                        unavailable |= closed;
                        (decision, true)
                    }
                };
                let allowed = decision.is_allowed();
                if allowed && !store_failed {
                    spent.push(a);
                }
                prefetched.push(RuleOutcome {
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
            if prefetched.iter().any(|o| !o.decision.is_allowed()) {
                // All or nothing: what the others took from their allowances goes back.
                for a in &spent {
                    self.allowances.put_back(&a.key, a.cost);
                }
                return self.finish(
                    issuer,
                    rules,
                    counters,
                    applying,
                    prefetched,
                    false,
                    unavailable,
                    version,
                    now,
                );
            }
        }
        // Hybrid rules first: their in-process bucket has seen a subset of what the store
        // has, so when it says no the store would too, and the round trip is saved.
        let refused_here: Vec<Decision> = enforced
            .iter()
            .filter(|a| rules[a.rule].local_first)
            .map(|a| self.hybrid.peek(&rules[a.rule].limit, &a.key, now, a.cost))
            .collect();
        let mut locally_refused = refused_here.iter().any(|d| !d.is_allowed());
        let mut refused_here = refused_here;
        if locally_refused {
            enforced.retain(|a| rules[a.rule].local_first);
        }
        // `open` rules on a shared store are charged here first, at their own numbers, all
        // or nothing: what this process admits, whether the store answered or not, is never
        // more than one limiter's worth.
        // Empty (no allocation) unless the store is shared: in memory nothing is guarded.
        let guarded: Vec<bool> = if !locally_refused && self.store.is_shared() {
            enforced.iter().map(|a| guards(&rules[a.rule])).collect()
        } else {
            Vec::new()
        };
        let guard_checks: Vec<Check<'_>> = enforced
            .iter()
            .zip(&guarded)
            .filter(|(_, g)| **g)
            .map(|(a, _)| check(rules, a))
            .collect();
        let mut guard = if guard_checks.is_empty() {
            Vec::new()
        } else {
            Store::decide_all(&self.local, &guard_checks, now)
                .unwrap_or_else(|never| match never {})
        };
        if guard.iter().any(|d| !d.is_allowed()) {
            // All or nothing: nothing was charged here, and the store is not asked.
            locally_refused = true;
            let mut g = guarded.iter();
            enforced.retain(|_| *g.next().unwrap_or(&false));
            refused_here = std::mem::take(&mut guard);
        }
        let checks: Vec<Check<'_>> = enforced.iter().map(|a| check(rules, a)).collect();
        let mut store_failed = false;
        let result = if locally_refused {
            Ok(refused_here)
        } else if checks.is_empty() {
            Ok(Vec::new())
        } else {
            self.store.decide_all(&checks, now).await
        };
        let decisions: Vec<Decision> = match result {
            Ok(decisions) => {
                if !locally_refused && decisions.iter().any(|d| !d.is_allowed()) {
                    // The store said no: give back what was charged here.
                    for c in &guard_checks {
                        let refund = -i64::try_from(c.cost).unwrap_or(i64::MAX);
                        Store::settle(&self.local, c.limit, c.key, now, refund)
                            .unwrap_or_else(|never| match never {});
                    }
                }
                decisions
            }
            // Each rule already knows what to do when its store fails.
            Err(error) => {
                store_failed = true;
                let mut guard = guard.into_iter();
                enforced
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if guarded.get(i).copied().unwrap_or(false) {
                            // Decided (and charged) here already.
                            if let Some(decision) = guard.next() {
                                failed(&rules[a.rule], counters(a.rule), &error);
                                return decision;
                            }
                        }
                        let (decision, closed) =
                            self.store_failed(rules, &counters, a, &error, now);
                        unavailable |= closed;
                        decision
                    })
                    .collect()
            }
        };
        let mut outcomes: Vec<RuleOutcome> = enforced
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
        let allowed = outcomes.iter().all(|o| o.decision.is_allowed());
        if !allowed {
            for a in &spent {
                self.allowances.put_back(&a.key, a.cost);
            }
        }
        outcomes.append(&mut prefetched);
        if allowed {
            for a in enforced.iter().filter(|a| rules[a.rule].local_first) {
                self.hybrid
                    .decide(&rules[a.rule].limit, &a.key, now, a.cost);
            }
            if !store_failed && self.store.is_shared() {
                self.record_locally(rules, &enforced, now);
            }
        }
        // A request refused in this process is not shown to shadow rules: that would cost
        // the round trips hybrid rules exist to save.
        for a in applying
            .iter()
            .filter(|a| !a.enforced)
            .filter(|_| !locally_refused)
        {
            let rule = &rules[a.rule];
            // As if enforcing: charged only when the request goes through.
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
        self.finish(
            issuer,
            rules,
            counters,
            applying,
            outcomes,
            allowed,
            unavailable,
            version,
            now,
        )
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
        let (decision, store_failed, unavailable) =
            match self.store.decide(&rule.limit, &a.key, now, a.cost).await {
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
        Cost::Header { max, .. } => (*max).min(burst),
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
