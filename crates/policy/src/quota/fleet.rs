//! One budget split across a fleet: each process's [`QuotaBoard`] splits among its own
//! streams the share of the budget it leases from the store, and the store splits the
//! budget among the processes ([`ratewarden_core::lease`]) by what their streams want.
//!
//! With an in-process store the board splits each budget's whole rate, as the only
//! process there is. With a shared store a process asks for its share whenever its
//! streams report, and every [`RENEW_EVERY`] besides, so that a process told to shrink
//! does so within that time and the others may grow; what it is granted is split among
//! its streams, reductions first. The shares granted add up to at most the budget, so the
//! streams' assignments across the fleet do too.
//!
//! When the store fails, the share in hand holds until its lease lapses (no assignment is
//! renewed meanwhile: the streams keep theirs until their time to live); after that each
//! budget's rule decides, by its `on_store_failure`, what this process hands out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ratewarden_core::lease::Ask;
use ratewarden_core::AsyncStore;

use super::board::{Assignment, BucketEntries, Budget, QuotaBoard, Report};

/// How often a process asks again for its share of every budget its streams hold: well
/// within the shortest assignment's time to live (a second).
pub const RENEW_EVERY: Duration = Duration::from_millis(250);

/// One bucket's report, with the budget it draws on.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The budget (the rule's, for the bucket).
    pub budget: Budget,
    /// Units per period this process may hand out of it once its lease lapsed and the
    /// store cannot renew it (the rule's `on_store_failure`).
    pub fallback: u64,
    /// What the stream reported.
    pub report: Report,
}

/// A process's side of the fleet's budgets: its board, and the shares it holds.
#[derive(Debug)]
pub struct FleetBoard {
    member: String,
    board: Mutex<QuotaBoard>,
    /// The share held of each budget, behind a lock of its own held across the budget's
    /// renewal: one renewal of a budget at a time, so its shares are applied in the order
    /// the store granted them (a late answer never overwrites a newer one), while other
    /// budgets renew meanwhile.
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Held>>>>>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    /// The share granted.
    capacity: u64,
    /// When its lease lapses (nanoseconds).
    lapses: u64,
    /// What to hand out when it has lapsed and the store cannot renew it.
    fallback: u64,
}

impl FleetBoard {
    /// A board for the fleet member `member` (a name no other process of the fleet uses
    /// while this one runs).
    pub fn new(member: impl Into<String>) -> Self {
        Self {
            member: member.into(),
            board: Mutex::default(),
            held: Mutex::default(),
        }
    }

    /// This process's name in the fleet.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Whether `stream` holds `bucket` of the budget `key` ([`QuotaBoard::holds`]).
    pub fn holds(&self, stream: u64, key: &str, bucket: &BucketEntries) -> bool {
        lock(&self.board).holds(stream, key, bucket)
    }

    /// Whether one more holding fits at `now` among at most `max`
    /// ([`QuotaBoard::has_room`]).
    pub fn has_room(&self, max: usize, now: u64) -> bool {
        lock(&self.board).has_room(max, now)
    }

    /// Records one message of `stream`'s reports at `now` and answers it: the assignments
    /// that change (to this stream and to the others sharing its budgets), reductions
    /// first, with the reporting stream's own always among them.
    pub async fn report<S: AsyncStore>(
        &self,
        store: &S,
        stream: u64,
        usages: Vec<Usage>,
        now: u64,
    ) -> Vec<Assignment> {
        if !store.is_shared() {
            let mut board = lock(&self.board);
            return usages
                .into_iter()
                .flat_map(|u| board.report(stream, &u.budget, u.report, now))
                .collect();
        }
        // Per budget touched: its key, its fallback and the holdings reported.
        let mut touched: Vec<(String, u64, Vec<Holding>)> = Vec::new();
        {
            let mut board = lock(&self.board);
            for u in usages {
                let at = board.record(stream, &u.budget, u.report, now);
                match touched.iter_mut().find(|t| t.0 == u.budget.key) {
                    Some(t) => {
                        t.1 = u.fallback;
                        t.2.push(at);
                    }
                    None => touched.push((u.budget.key, u.fallback, vec![at])),
                }
            }
        }
        let mut sent = Vec::new();
        for (key, fallback, always) in touched {
            sent.extend(self.renew(store, &key, Some(fallback), &always, now).await);
        }
        sent
    }

    /// Forgets `stream` (it ended) at `now`: the grown assignments of the others, and
    /// with a shared store this process's shares asked for again (a smaller want gives
    /// back what the stream held, for the fleet).
    pub async fn leave<S: AsyncStore>(&self, store: &S, stream: u64, now: u64) -> Vec<Assignment> {
        let mut sent = lock(&self.board).leave(stream, now);
        if store.is_shared() {
            sent.extend(self.renew_all(store, now).await);
        }
        sent
    }

    /// Asks again for this process's share of every budget it holds or its streams hold,
    /// at `now`: the assignments that change. For a timer, every [`RENEW_EVERY`]; nothing
    /// with an in-process store.
    pub async fn renew_all<S: AsyncStore>(&self, store: &S, now: u64) -> Vec<Assignment> {
        if !store.is_shared() {
            return Vec::new();
        }
        let mut keys = lock(&self.board).keys();
        for key in lock(&self.held).keys() {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        let mut sent = Vec::new();
        for key in keys {
            sent.extend(self.renew(store, &key, None, &[], now).await);
        }
        sent
    }

    /// Asks the store for this process's share of `key` and splits it among the streams:
    /// the assignments that change, and those of `always`.
    async fn renew<S: AsyncStore>(
        &self,
        store: &S,
        key: &str,
        fallback: Option<u64>,
        always: &[Holding],
        now: u64,
    ) -> Vec<Assignment> {
        let slot = Arc::clone(lock(&self.held).entry(key.to_owned()).or_default());
        let mut held = slot.lock().await;
        let demand = lock(&self.board).demand(key, now);
        let Some(demand) = demand else {
            // No stream holds any of it now: give the share back.
            if held.take().is_some() {
                let ask = Ask {
                    member: &self.member,
                    want: 0,
                    weight: 1,
                    capacity: 0,
                    ttl_ms: 1,
                };
                if let Err(e) = store.lease(key, ask, now).await {
                    // It lapses on its own.
                    tracing::debug!(budget = key, error = %e, "could not give back a quota share");
                }
            }
            self.forget(key, &slot);
            return lock(&self.board).resplit(key, Some(0), &[], now);
        };
        let fallback = fallback
            .or_else(|| held.as_ref().map(|h| h.fallback))
            .unwrap_or(0);
        // The lease outlives every assignment made from it, and the next renewal.
        let ttl = demand.ttl + RENEW_EVERY;
        let ask = Ask {
            member: &self.member,
            want: demand.want,
            weight: demand.weight,
            capacity: demand.budget.per_period,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let capacity = match store.lease(key, ask, now).await {
            Ok(granted) => {
                *held = Some(Held {
                    capacity: granted,
                    lapses: now.saturating_add(duration_ns(demand.ttl)),
                    fallback,
                });
                granted
            }
            Err(e) => match held.as_ref() {
                // The share in hand holds until its lease lapses: no assignment is renewed
                // past it meanwhile, the streams keep theirs.
                Some(h) if h.lapses > now => {
                    tracing::warn!(
                        budget = key,
                        error = %e,
                        "the store could not renew a quota share; the share in hand holds \
                         until its lease lapses"
                    );
                    return Vec::new();
                }
                _ => {
                    tracing::warn!(
                        budget = key,
                        error = %e,
                        fallback,
                        "the store could not renew a quota share; the rule's \
                         on_store_failure decides"
                    );
                    // Remembered, so a later renewal without a report knows it too.
                    *held = Some(Held {
                        capacity: fallback,
                        lapses: 0,
                        fallback,
                    });
                    fallback
                }
            },
        };
        lock(&self.board).resplit(key, Some(capacity), always, now)
    }

    /// Drops the slot of a budget no longer held, unless a renewal of it is on its way
    /// (which holds the slot too, and keeps it).
    fn forget(&self, key: &str, slot: &Arc<tokio::sync::Mutex<Option<Held>>>) {
        let mut all = lock(&self.held);
        if Arc::strong_count(slot) == 2 && all.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            all.remove(key);
        }
    }

    /// The share this process holds of `key`, when it holds one (for tests and metrics).
    pub async fn held(&self, key: &str) -> Option<u64> {
        let slot = lock(&self.held).get(key).map(Arc::clone)?;
        let held = slot.lock().await;
        held.as_ref().map(|h| h.capacity)
    }
}

/// A stream's holding of a bucket, as the board names it.
type Holding = (u64, BucketEntries);

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
