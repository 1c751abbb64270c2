//! The cheap check: "go now, or not", with the numbers of a "not" computed when asked.
//!
//! Under a flood most decisions are refusals, and most callers of a refusal drop the request
//! without reading its numbers (remaining, reset, retry). [`MemoryStore::check`] answers
//! like governor's `check_key`: `Ok` or a [`NotNow`] that keeps what the refusal was decided
//! on and computes its [`Decision`] only if asked. The decision is the one
//! [`decide`](MemoryStore::decide) would have answered: a refusal leaves the state as it
//! was, so peeking at the same state, time and cost gives the same answer.

use std::fmt;
use std::hash::BuildHasher;

use ratewarden_core::{Algorithm, Decision, Outcome};

use super::MemoryStore;
use crate::cell::{StateCell, Stored};

/// Every answer of [`MemoryStore::check`] but "go now": limited or too costly (nothing was
/// charged), or, for a leaky-bucket queue, delayed (charged: hold the request for the
/// decision's [`delay`](Decision::delay)). [`decision`](Self::decision) gives what
/// [`decide`](MemoryStore::decide) would have answered.
pub struct NotNow<'a, A: Algorithm> {
    why: Why<'a, A>,
}

/// What a [`NotNow`] keeps: the decision itself, or what a refusal was decided on.
enum Why<'a, A: Algorithm> {
    /// Decided in full (a state not decided in one word, a new key, a delay).
    Decided(Decision),
    /// Refused in one word: the state it was refused on, and the request.
    Refused {
        limit: &'a A,
        state: A::State,
        now: u64,
        cost: u64,
    },
}

impl<A: Algorithm> NotNow<'_, A> {
    /// The decision [`decide`](MemoryStore::decide) would have answered: its outcome, the
    /// limit, what remains, when it resets and (when limited) when to retry. Computed here,
    /// from the state the refusal was decided on, when the check did not need it.
    pub fn decision(&self) -> Decision {
        match &self.why {
            Why::Decided(decision) => *decision,
            Why::Refused {
                limit,
                state,
                now,
                cost,
            } => limit.peek(state, *now, *cost),
        }
    }

    /// The exact wait before the same request would be allowed, in nanoseconds, when it was
    /// limited (`None` when delayed or too costly ever to be allowed).
    pub fn retry_after_ns(&self) -> Option<u64> {
        self.decision().retry_after_ns()
    }
}

impl<A: Algorithm> fmt::Debug for NotNow<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NotNow").field(&self.decision()).finish()
    }
}

impl<A: Stored, S: BuildHasher> MemoryStore<A, S> {
    /// Decides a request of `cost` for `key` at `now` under `limit`, charging it if allowed,
    /// as [`decide`](Self::decide) does, but answers only `Ok(())` when it may go now, or
    /// [`NotNow`], whose [`decision`](NotNow::decision) is the one `decide` would have
    /// answered. For a key decided in one word (GCRA), a refusal is not turned into numbers
    /// until someone asks: the cheap path of a flood, where most requests are refused and
    /// dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{Gcra, Rate};
    /// use ratewarden_memory::{MemoryStore, StoreConfig};
    ///
    /// let store: MemoryStore<Gcra> = MemoryStore::new(StoreConfig::default());
    /// let gcra = Gcra::new(Rate::per_second(5)?, 1)?;
    /// assert!(store.check(&gcra, "k", 0, 1).is_ok());
    /// let refused = store.check(&gcra, "k", 0, 1).unwrap_err();
    /// assert_eq!(refused.retry_after_ns(), Some(200_000_000));
    /// assert_eq!(refused.decision(), store.decide(&gcra, "k", 0, 1));
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    #[inline]
    pub fn check<'a>(
        &self,
        limit: &'a A,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<(), NotNow<'a, A>> {
        let hash = self.hash(key);
        let at = self.shard_of(hash);
        if <A::Cell as StateCell<A>>::SHARED {
            let shard = self.read(at);
            if let Some(i) = shard.find(hash, key) {
                let slot = shard.slot(i);
                if let Some((conformance, state)) = slot.state.check_shared(limit, now, cost) {
                    // What `decide_in_word` records: fresh at the arrival time (now, if that
                    // is past), limited when one more cell would be refused.
                    let expires = conformance.tat.max(now);
                    slot.touch_shared(expires, conformance.limited, Some(conformance.tat));
                    return if conformance.conforms {
                        Ok(())
                    } else {
                        Err(NotNow {
                            why: Why::Refused {
                                limit,
                                state,
                                now,
                                cost,
                            },
                        })
                    };
                }
                // The word could not say (a cost above the burst, a tick not a nanosecond):
                // decided in full, as `decide` does, still under the read lock.
                if let Some(decision) = self.decide_in_word(slot, limit, now, cost) {
                    return answer(decision);
                }
            }
        }
        let mut shard = self.lock(at);
        answer(
            self.update(&mut shard, limit, key, hash, now, true, cost, |state| {
                limit.decide(state, now, cost)
            }),
        )
    }
}

/// A decision made in full, as [`MemoryStore::check`] answers it.
fn answer<'a, A: Algorithm>(decision: Decision) -> Result<(), NotNow<'a, A>> {
    match decision.outcome {
        Outcome::Allowed => Ok(()),
        _ => Err(NotNow {
            why: Why::Decided(decision),
        }),
    }
}
