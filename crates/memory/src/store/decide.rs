//! The decide path: one key, several keys all or nothing, and what a new key is answered.

use std::hash::BuildHasher;

use ratewarden_core::algorithm::HeapSize;
use ratewarden_core::{Algorithm, Decision, Outcome};

use super::room::Room;
use super::{MemoryStore, ShardOf, SWEEP_STEPS};
use crate::cell::{HeapBytes, StateCell, Stored};
use crate::shard::Slot;
use crate::WhenFull;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Decides a request of `cost` for `key` at `now` under `limit`, charging it if allowed.
    pub fn decide(&self, limit: &A, key: &str, now: u64, cost: u64) -> Decision {
        let hash = self.hash(key);
        let at = self.shard_of(hash);
        // A state held in one word is decided under the read lock, so threads on one hot
        // key race a compare-and-swap instead of queueing for the shard. A new key, a key
        // past the word, or any other state takes the write lock.
        if <A::Cell as StateCell<A>>::SHARED {
            let shard = self.read(at);
            if let Some(i) = shard.find(hash, key) {
                if let Some(decision) = self.decide_in_word(shard.slot(i), limit, now, cost) {
                    return decision;
                }
            }
        }
        let mut shard = self.lock(at);
        self.update(&mut shard, limit, key, hash, now, true, cost, |state| {
            limit.decide(state, now, cost)
        })
    }

    /// Decides on a slot found under the read lock, in one word: `None` when its cell
    /// cannot (the caller takes the write lock).
    // Always inlined: with `check` calling it too, the compiler would otherwise make it a
    // call on `decide`'s every decision.
    #[inline(always)]
    pub(super) fn decide_in_word(
        &self,
        slot: &Slot<A::Cell>,
        limit: &A,
        now: u64,
        cost: u64,
    ) -> Option<Decision> {
        let (decision, state) = slot.state.decide_shared(limit, now, cost)?;
        let limited = refuses_one(limit, &state, now, cost, &decision);
        let expires = now.saturating_add(decision.reset_after_ns);
        slot.touch_shared(expires, limited, <A::Cell as StateCell<A>>::word_of(&state));
        Some(decision)
    }

    /// What [`decide`](Self::decide) would answer, without charging.
    pub fn peek(&self, limit: &A, key: &str, now: u64, cost: u64) -> Decision {
        let hash = self.hash(key);
        let shard = self.read(self.shard_of(hash));
        match shard.find(hash, key) {
            Some(i) => shard
                .slot(i)
                .state
                .with(|state| limit.peek(state, now, cost)),
            None => match shard.traced(hash, now) {
                Some(until) => still_limited(limit, now, until),
                None => limit.peek(&A::State::default(), now, cost),
            },
        }
    }

    /// Charges `delta` units to `key` (a refund when negative) without a decision: settles
    /// a reservation once its real cost is known. The balance may go past the limit.
    pub fn settle(&self, limit: &A, key: &str, now: u64, delta: i64) {
        let hash = self.hash(key);
        let mut shard = self.lock(self.shard_of(hash));
        // Not a decision of cost 1: `update` must not read a refusal of it as one.
        self.update(&mut shard, limit, key, hash, now, true, 0, |state| {
            limit.settle(state, now, delta);
            limit.peek(state, now, 0)
        });
    }

    /// Decides one request against several limits at once, all or nothing: if any limit
    /// rejects, none is charged. Returns each limit's decision in order (for a rejected
    /// request, what each would have said), so callers can name the violated limits.
    ///
    /// The shards involved are locked in index order (so concurrent layered calls cannot
    /// deadlock), every limit is checked, and only then is each charged. Keys within one
    /// call should be distinct.
    pub fn decide_all(&self, layers: &[(&A, &str, u64)], now: u64) -> Vec<Decision> {
        // One layer is one decision: no lock ordering, and the state visited once (check
        // and charge in one step) rather than peeked and then charged.
        if let [(limit, key, cost)] = *layers {
            return vec![self.decide(limit, key, now, cost)];
        }
        let hashes: Vec<u64> = layers.iter().map(|(_, key, _)| self.hash(key)).collect();
        let mut order: Vec<usize> = hashes.iter().map(|&h| self.shard_of(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<_> = order.iter().map(|&i| self.lock(i)).collect();
        let guard_of = |hash: u64| {
            order
                .binary_search(&self.shard_of(hash))
                .unwrap_or_default()
        };

        let mut decisions = Vec::with_capacity(layers.len());
        let mut all = true;
        // New keys already checked per shard (count, bytes): two new keys of one call in a
        // shard with room for one must not both pass the check.
        let mut pending = vec![(0, 0); order.len()];
        for (&(limit, key, cost), &hash) in layers.iter().zip(&hashes) {
            let g = guard_of(hash);
            let shard = &mut guards[g];
            let decision = match shard.find(hash, key) {
                Some(i) => {
                    let slot = shard.slot(i);
                    if slot.sweepable(now) {
                        // Fresh: the sweep making room for another layer's new key may
                        // drop it, and then it is a new key of this call too. Counted as
                        // one, so that room is made for it as well (a full store held one
                        // key more than its bound when it was not).
                        pending[g].0 += 1;
                        pending[g].1 += ShardOf::<A>::cost_of(key);
                    }
                    slot.state.with(|state| limit.peek(state, now, cost))
                }
                None => match shard.traced(hash, now) {
                    Some(until) => still_limited(limit, now, until),
                    None => {
                        let d = self.new_key_peek(shard, limit, key, now, cost, pending[g]);
                        pending[g].0 += 1;
                        pending[g].1 += ShardOf::<A>::cost_of(key);
                        d
                    }
                },
            };
            all &= decision.is_allowed();
            decisions.push(decision);
        }
        if all {
            for (k, (&(limit, key, cost), &hash)) in layers.iter().zip(&hashes).enumerate() {
                let shard = &mut guards[guard_of(hash)];
                // Room was made (or the request refused) above: charging cannot fail now.
                decisions[k] = self.update(shard, limit, key, hash, now, false, cost, |state| {
                    limit.decide(state, now, cost)
                });
            }
        }
        decisions
    }

    /// A new key's answer in the first phase of a layered decision: refused if its full
    /// shard could make no room for it, so that charging cannot fail once every layer has
    /// allowed; but nothing is evicted yet, as another layer may still refuse.
    fn new_key_peek(
        &self,
        shard: &mut ShardOf<A>,
        limit: &A,
        key: &str,
        now: u64,
        cost: u64,
        pending: (usize, usize),
    ) -> Decision {
        let decision = limit.peek(&A::State::default(), now, cost);
        if !decision.is_allowed() {
            return decision;
        }
        self.refuse_new_key(shard, limit, key, 0, now, Room::Check(pending))
            .unwrap_or(decision)
    }

    /// Runs `op` on `key`'s state and keeps the result, until the state is fresh again.
    ///
    /// A key not held starts from a fresh state and is stored only if `op` changed that
    /// (a rejected request of a new key stores nothing). A key evicted while limited is
    /// answered as limited until its time, and a full shard that can make no room refuses,
    /// unless `may_refuse` is false (the charge of a layered decision already checked).
    /// `cost` is the cost `op` decides (0 when it decides none): a refused request of cost 1
    /// then tells whether the key is limited without asking the algorithm again.
    // Nine arguments, all of one decision: a struct for them would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn update(
        &self,
        shard: &mut ShardOf<A>,
        limit: &A,
        key: &str,
        hash: u64,
        now: u64,
        may_refuse: bool,
        cost: u64,
        op: impl FnOnce(&mut A::State) -> Decision,
    ) -> Decision {
        if let Some(i) = shard.find(hash, key) {
            let before = shard.slot(i).state.heap_bytes();
            // A store keeping its keys cannot make room for a state that grows: near its
            // bound it keeps the state as it was, to put back if the decision grows it past.
            let saved = (may_refuse
                && self.config.when_full == WhenFull::RejectNewKeys
                && shard.bytes() + before.max(GROWTH_FLOOR) > self.per_shard_bytes)
                .then(|| shard.slot(i).state.with(Clone::clone));
            let slot = shard.slot_mut(i);
            let (decision, limited) = slot.state.with_mut(|state| {
                let decision = op(state);
                (decision, refuses_one(limit, state, now, cost, &decision))
            });
            slot.touch(now.saturating_add(decision.reset_after_ns), limited);
            let after = slot.state.heap_bytes();
            if after != before {
                shard.restate(before, after);
                if after > before && !self.trim(shard, now) {
                    if let Some(saved) = saved {
                        return self.undo_growth(shard, limit, key, hash, saved);
                    }
                }
            }
            return decision;
        }
        if may_refuse {
            if let Some(until) = shard.traced(hash, now) {
                return still_limited(limit, now, until);
            }
        }
        let mut state = A::State::default();
        let decision = op(&mut state);
        if limit.is_fresh(&state, now) {
            return decision;
        }
        let room = if may_refuse {
            Room::Make
        } else {
            Room::MakeAnyway
        };
        if let Some(refused) = self.refuse_new_key(shard, limit, key, state.heap_bytes(), now, room)
        {
            return refused;
        }
        // Expiry keeps pace with insertion: each new key looks at a couple of slots and drops
        // the fresh ones. A known key's decision pays nothing for it; a store that stops
        // getting new keys stops growing, and `sweep` can empty it on a timer.
        let rehash = |k: &str| self.hash(k);
        let dropped = shard.sweep(now, SWEEP_STEPS, &rehash);
        shard.counts.evicted_fresh += dropped;
        let expires = now.saturating_add(decision.reset_after_ns);
        let limited = refuses_one(limit, &state, now, cost, &decision);
        let i = shard.insert(hash, key, A::Cell::new(state), self.per_shard);
        shard.slot_mut(i).touch(expires, limited);
        decision
    }
}

/// The least a state's heap may grow by in one decision (a sliding log's first entries, a
/// concurrency limit's first permits): what a shard must have left before a store keeping
/// its keys decides without keeping the state to put back.
const GROWTH_FLOOR: usize = 128;

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Puts back `key`'s state as it was before a decision grew it past its shard's share,
    /// in a store keeping its keys, and refuses the request as a full store refuses a new
    /// key: its callers wait for the store's logs to age out, rather than another key being
    /// dropped or the bound passed.
    fn undo_growth(
        &self,
        shard: &mut ShardOf<A>,
        limit: &A,
        key: &str,
        hash: u64,
        saved: A::State,
    ) -> Decision {
        // Trimming may have moved the slot (a sweep moves the last slot into a gap).
        if let Some(i) = shard.find(hash, key) {
            let slot = shard.slot_mut(i);
            let grown = slot.state.heap_bytes();
            slot.state.with_mut(|state| *state = saved);
            let back = slot.state.heap_bytes();
            shard.restate(grown, back);
        }
        shard.counts.rejected_new_keys += 1;
        let retry_after_ns =
            u64::try_from(self.config.full_retry_after.as_nanos()).unwrap_or(u64::MAX);
        Decision::new(
            Outcome::Limited { retry_after_ns },
            limit.limit(),
            0,
            retry_after_ns,
        )
    }
}

/// Whether a request of cost 1 is refused after `decision` (of a request of `cost`) left
/// `state` so at `now`. Costs a peek only when the decision left nothing to spend and was not
/// itself a refusal of cost 1, so the allowed path pays one comparison and a flood of
/// rejections none: a rejected request leaves the state unchanged, so asking again about
/// the same cost at the same time would get the same refusal.
fn refuses_one<A: Algorithm>(
    limit: &A,
    state: &A::State,
    now: u64,
    cost: u64,
    decision: &Decision,
) -> bool {
    if decision.is_allowed() && decision.remaining > 0 {
        return false;
    }
    if cost == 1 && matches!(decision.outcome, Outcome::Limited { .. }) {
        return true;
    }
    // Allowed, delayed, or a limit no request fits (a fresh key fares no better): not limited.
    matches!(limit.peek(state, now, 1).outcome, Outcome::Limited { .. })
}

/// The answer to a key evicted while limited, until its state would have been fresh.
fn still_limited<A: Algorithm>(limit: &A, now: u64, until: u64) -> Decision {
    let wait = until.saturating_sub(now);
    Decision::new(
        Outcome::Limited {
            retry_after_ns: wait,
        },
        limit.limit(),
        0,
        wait,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ratewarden_core::algorithm::{
        FixedWindow, LeakyBucket, LeakyQueue, SlidingLog, SlidingWindow, TokenBucket,
    };
    use ratewarden_core::{Gcra, Limit, Rate};
    use std::time::Duration;

    /// Whether a request of cost 1 is refused, as the store asked before rejections of
    /// cost 1 were read as the answer: always the algorithm's own peek.
    fn peeked<A: Algorithm>(limit: &A, state: &A::State, now: u64, decision: &Decision) -> bool {
        if decision.is_allowed() && decision.remaining > 0 {
            return false;
        }
        matches!(limit.peek(state, now, 1).outcome, Outcome::Limited { .. })
    }

    fn limits() -> Vec<Limit> {
        let rate = Rate::new(5, Duration::from_secs(1)).unwrap();
        let window = Duration::from_millis(700);
        vec![
            FixedWindow::new(3, window).unwrap().into(),
            SlidingLog::new(3, window).unwrap().into(),
            SlidingWindow::new(3, window).unwrap().into(),
            TokenBucket::new(rate, 3).unwrap().into(),
            LeakyBucket::new(rate, 3).unwrap().into(),
            LeakyQueue::new(rate, 2).unwrap().into(),
            Gcra::new(rate, 3).unwrap().into(),
        ]
    }

    proptest! {
        /// On random decisions of every rate algorithm, the store's answer to "is this key
        /// limited now" is the one the algorithm's peek gives, with or without the shortcut.
        #[test]
        fn a_rejection_of_cost_one_marks_the_key_limited_as_the_peek_did(
            which in 0usize..7,
            steps in prop::collection::vec((0u64..300_000_000, 0u64..5), 1..60),
        ) {
            let limit = &limits()[which];
            let mut state = Default::default();
            let mut now = 0;
            for (dt, cost) in steps {
                now += dt;
                let decision = limit.decide(&mut state, now, cost);
                prop_assert_eq!(
                    refuses_one(limit, &state, now, cost, &decision),
                    peeked(limit, &state, now, &decision),
                    "{:?} cost {} at {}", limit, cost, now
                );
            }
        }
    }
}
