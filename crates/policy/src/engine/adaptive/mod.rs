//! Adaptive concurrency rules: decided in this process (the limit is learnt from this
//! process's own traffic), before the store is asked, and given back with how the request
//! went, which is what the limit learns from.
//!
//! The limiters (`limiters.rs`) hold a place per request in flight and queue those that
//! may wait (`turn.rs`, `waiting.rs`); `reports.rs` is what they tell metrics. Here the
//! adaptive rules of a request are decided before the charging room decides the rest.

mod limiters;
mod reports;
mod turn;
mod waiting;

pub(crate) use limiters::{Limiters, MAX_LIMITERS};
pub use reports::{AdaptiveState, QueueState, ShedReason, WaitStats, WAIT_BUCKETS_NS};
pub use waiting::Timer;

use std::sync::Arc;

use ratewarden_core::adaptive::{Criticality, Ticket};
use ratewarden_core::{AsyncStore, Decision, Outcome};

use limiters::{Entered, SHED_RETRY_NS};
use waiting::Wait;

use crate::config::Rule;
use crate::engine::charge::{Charge, Charged, Charger};
use crate::engine::rules::{Applying, Counters, RuleSet};
use crate::engine::verdict::RuleOutcome;

impl Limiters {
    /// Decides `applying` as the charging room does, with its adaptive rules first: in
    /// this process, a request its class may not fit into is shed before the store is
    /// asked (or, with a `timer` and a rule with a queue, waits its turn); one let in holds
    /// a place that its permit gives back.
    // The charging room's arguments, the request's class and the timer: a struct would
    // only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn charge<'c, S: AsyncStore>(
        &self,
        charger: &Charger<S>,
        issuer: Option<&Arc<RuleSet>>,
        rules: &[Rule],
        counters: impl Fn(usize) -> Option<&'c Counters>,
        applying: Vec<Applying>,
        class: Criticality,
        version: u64,
        mut now: u64,
        timer: Option<&dyn Timer>,
    ) -> Charged {
        if !applying.iter().any(|a| rules[a.rule].adaptive.is_some()) {
            return charger
                .charge(issuer, rules, counters, &applying, version, now)
                .await;
        }
        let (adaptive, rest): (Vec<Applying>, Vec<Applying>) = applying
            .into_iter()
            .partition(|a| rules[a.rule].adaptive.is_some());
        let mut outcomes = Vec::with_capacity(adaptive.len());
        let mut taken: Vec<(&Applying, Ticket)> = Vec::new();
        let mut shed = false;
        for a in &adaptive {
            let Some(config) = &rules[a.rule].adaptive else {
                continue;
            };
            // Only an enforced rule, at a front door that can hold the request, queues it.
            // Once another rule has shed the request, waiting here would be in vain.
            let flow = match (timer, &config.queue, &a.flow) {
                (Some(_), Some(queue), Some(flow)) if a.enforced && !shed => {
                    Some((self.flow.hash(flow), queue.weight(flow)))
                }
                _ => None,
            };
            let (cap, entered) = self.enter(&a.key, config, class, now, flow);
            let result = match (entered, timer, &config.queue) {
                (Entered::Let(ticket), _, _) => Ok(ticket),
                (Entered::Wait(turn), Some(timer), Some(queue)) => {
                    let waited = Wait {
                        limiters: self,
                        key: &a.key,
                        class,
                        turn,
                        timer,
                        deadline: timer.sleep(queue.shape.max_wait_ns),
                        deadline_at: now.saturating_add(queue.shape.max_wait_ns),
                        lapse: None,
                        done: false,
                    }
                    .await;
                    // The store's rules are decided when the wait is over.
                    now = timer.now();
                    waited.map_err(|_| ())
                }
                // A queue without a timer cannot happen: `flow` needs one.
                (Entered::Wait(_), _, _) => Err(()),
                (Entered::Shed(reason), _, _) => {
                    if a.enforced {
                        self.shed(class, reason);
                    }
                    Err(())
                }
            };
            let decision = match result {
                Ok(ticket) => {
                    taken.push((a, ticket));
                    let remaining = cap.saturating_sub(ticket.in_flight);
                    Decision::new(Outcome::Allowed, cap, remaining, 0)
                }
                Err(()) => {
                    if a.enforced {
                        shed = true;
                    }
                    let outcome = Outcome::Limited {
                        retry_after_ns: SHED_RETRY_NS,
                    };
                    Decision::new(outcome, cap, 0, SHED_RETRY_NS)
                }
            };
            outcomes.push(RuleOutcome {
                rule: a.rule,
                key: a.key.clone(),
                decision,
                enforced: a.enforced,
                store_failed: false,
            });
        }
        let mut charged = if shed {
            Charged {
                allowed: false,
                unavailable: false,
                outcomes: Vec::new(),
                retry_after_ns: Some(SHED_RETRY_NS),
                reservation: None,
                permit: None,
            }
        } else {
            charger
                .charge(issuer, rules, &counters, &rest, version, now)
                .await
        };
        for o in &outcomes {
            let Some(c) = counters(o.rule) else { continue };
            let counter = match (o.enforced, o.said_no()) {
                (true, true) => &c.rejected,
                (true, false) if charged.allowed => &c.allowed,
                (true, false) => &c.skipped,
                (false, true) => &c.would_have_rejected,
                (false, false) => &c.shadow_allowed,
            };
            Counters::bump(counter);
        }
        if !charged.allowed {
            for (a, ticket) in taken {
                self.release(&a.key, ticket, now, None);
            }
        } else if !taken.is_empty() {
            let mut lease = u64::MAX;
            let charges: Vec<Charge> = taken
                .iter()
                .map(|(a, ticket)| {
                    lease = lease.min(ticket.expires);
                    Charge {
                        rule: rules[a.rule].name.clone(),
                        index: a.rule,
                        limit: rules[a.rule].limit.clone(),
                        key: a.key.clone(),
                        cost: 1,
                        max_cost: 1,
                        ticket: Some(*ticket),
                    }
                })
                .collect();
            let held = charger.hold_places(&mut charged.permit, charges, lease, issuer, now);
            if !held {
                // No id to release them by: give the places back now rather than hold
                // them until their lease.
                for (a, ticket) in taken {
                    self.release(&a.key, ticket, now, None);
                }
            }
        }
        charged.outcomes.extend(outcomes);
        charged.outcomes.sort_by_key(|o| o.rule);
        charged
    }
}
