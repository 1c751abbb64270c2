//! Fair queueing for what an adaptive limit cannot let in at once: the excess waits in a
//! bounded queue, served fairly across tenants, instead of being refused outright.
//!
//! As Kubernetes' API Priority and Fairness does it: `queues` lanes; each tenant (a flow)
//! is dealt a hand of `hand` distinct lanes from its hash (shuffle sharding) and joins the
//! shortest of them; lanes are served by deficit round robin, each request costing the
//! inverse of its tenant's weight. A heavy tenant fills its own hand of lanes and waits
//! there; a light one almost always finds a lane of its hand empty, and is served within a
//! round. A request that waits past `max_wait` is dropped (a 503), and a full lane refuses
//! the newcomer (the youngest is rejected, not the oldest).
//!
//! The trade-off is the hand: a heavy tenant can occupy up to `hand` lanes, so a light
//! tenant waits up to about `hand + 1` dispatches in a round; a larger hand makes two heavy
//! tenants less likely to share all their lanes with a light one (with 64 lanes, a hand of
//! 8 and 4 heavy tenants, about 5 in 10,000).

use std::collections::VecDeque;

use crate::Error;

/// What one request's place costs at weight 1; the quantum a lane gets per round.
const QUANTUM: u64 = 1_000;

/// A fair queue's shape (Kubernetes' defaults: 64 lanes, a hand of 8, 50 per lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FairQueueConfig {
    /// Lanes in all.
    pub queues: u32,
    /// Lanes a tenant may use, dealt from its hash.
    pub hand: u32,
    /// Requests one lane holds at most.
    pub queue_length: u32,
    /// How long a request may wait, in nanoseconds.
    pub max_wait_ns: u64,
}

impl Default for FairQueueConfig {
    fn default() -> Self {
        Self {
            queues: 64,
            hand: 8,
            queue_length: 50,
            max_wait_ns: 1_000_000_000,
        }
    }
}

impl FairQueueConfig {
    /// The lanes dealt to the tenant whose hash is `flow`: `hand` distinct lanes, read off
    /// the hash as digits of a falling base (Kubernetes' shuffle sharding dealer).
    ///
    /// Whoever can compute a tenant's hash knows its lanes, and can pick names whose hands
    /// cover them: the hash must be keyed with a secret clients cannot learn.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::adaptive::FairQueueConfig;
    ///
    /// let shape = FairQueueConfig { queues: 4, hand: 2, ..FairQueueConfig::default() };
    /// // Two distinct lanes of the four, the same for the same hash.
    /// assert_eq!(shape.hand(6), [2, 0]);
    /// assert_eq!(shape.hand(6), shape.hand(6));
    /// ```
    pub fn hand(&self, flow: u64) -> Vec<usize> {
        let queues = self.queues as usize;
        let mut deck: Vec<usize> = (0..queues).collect();
        let mut rest = flow;
        let mut hand = Vec::with_capacity(self.hand as usize);
        for i in 0..(self.hand as usize).min(queues) {
            let left = (queues - i) as u64;
            let pick = i + (rest % left) as usize;
            rest /= left;
            deck.swap(i, pick);
            hand.push(deck[i]);
        }
        hand
    }
}

/// Why a request could not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every lane of its tenant's hand is full.
    Full,
}

#[derive(Debug)]
struct Waiting<T> {
    item: T,
    since: u64,
    cost: u64,
}

#[derive(Debug)]
struct Lane<T> {
    items: VecDeque<Waiting<T>>,
    deficit: u64,
    /// Whether this visit's quantum was granted.
    granted: bool,
    /// Whether it is in `fresh` or in the round.
    listed: bool,
}

/// Requests waiting for a place, served fairly across tenants.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{FairQueue, FairQueueConfig};
///
/// let mut q = FairQueue::new(FairQueueConfig { queues: 4, hand: 1, ..FairQueueConfig::default() })?;
/// for i in 0..3 {
///     q.push(1, 1, ("heavy", i), 0).unwrap();
/// }
/// q.push(2, 1, ("light", 0), 0).unwrap();
/// // One each per round: the light tenant does not wait behind the heavy one's three.
/// let order: Vec<_> = std::iter::from_fn(|| q.pop(0).map(|(item, _)| item.0)).collect();
/// assert_eq!(order, ["heavy", "light", "heavy", "heavy"]);
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug)]
pub struct FairQueue<T> {
    config: FairQueueConfig,
    lanes: Vec<Lane<T>>,
    /// Lanes that had nothing waiting and were out of the round when a request came: served
    /// before the round, one quantum each (FQ-CoDel's new flows).
    fresh: VecDeque<usize>,
    /// Lanes with a backlog, in round-robin order.
    active: VecDeque<usize>,
    len: usize,
}

impl<T> FairQueue<T> {
    /// An empty queue of `config`'s shape.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when a count or the wait is zero; [`Error::TooLarge`] when the hand
    /// is larger than the lanes.
    pub fn new(config: FairQueueConfig) -> Result<Self, Error> {
        for (field, value) in [
            ("queues", u64::from(config.queues)),
            ("hand", u64::from(config.hand)),
            ("queue_length", u64::from(config.queue_length)),
            ("max_wait", config.max_wait_ns),
        ] {
            if value == 0 {
                return Err(Error::Zero { field });
            }
        }
        if config.hand > config.queues {
            return Err(Error::TooLarge {
                field: "hand",
                reason: format!("{} is more than the {} queues", config.hand, config.queues),
            });
        }
        Ok(Self {
            lanes: (0..config.queues)
                .map(|_| Lane {
                    items: VecDeque::new(),
                    deficit: 0,
                    granted: false,
                    listed: false,
                })
                .collect(),
            config,
            fresh: VecDeque::new(),
            active: VecDeque::new(),
            len: 0,
        })
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lanes dealt to the tenant whose hash is `flow` (see [`FairQueueConfig::hand`]).
    pub fn hand(&self, flow: u64) -> Vec<usize> {
        self.config.hand(flow)
    }

    /// Queues `item` of the tenant `flow` (a hash of its key) with `weight` at `now`, in
    /// the shortest lane of its hand.
    ///
    /// # Errors
    ///
    /// The item back, with [`Refused::Full`], when every lane of the hand is full.
    pub fn push(&mut self, flow: u64, weight: u64, item: T, now: u64) -> Result<(), (T, Refused)> {
        let lane = self
            .hand(flow)
            .into_iter()
            .min_by_key(|&l| self.lanes[l].items.len());
        let Some(lane) = lane else {
            return Err((item, Refused::Full));
        };
        if self.lanes[lane].items.len() >= self.config.queue_length as usize {
            return Err((item, Refused::Full));
        }
        if !self.lanes[lane].listed {
            // A lane out of the round goes first: a light tenant is let in at the next
            // place given back, not after a round of the heavy tenant's lanes.
            self.lanes[lane].listed = true;
            self.fresh.push_back(lane);
        }
        // A weight of w costs 1/w of a place: w times the share of a round.
        let cost = (QUANTUM / weight.max(1)).max(1);
        self.lanes[lane].items.push_back(Waiting {
            item,
            since: now,
            cost,
        });
        self.len += 1;
        Ok(())
    }

    /// The next request to let in, with how long it waited; `None` when nothing waits.
    ///
    /// Fresh lanes first (a lane that had nothing waiting when a request came), each for
    /// one quantum; one that still has requests after it joins the back of the round, one
    /// that emptied leaves. Then the round, by deficit round robin. So a tenant whose lanes
    /// never build a backlog (it sends less than they are served) is let in at the next
    /// place given back, and one that builds a backlog takes its turns in the round. (FQ-
    /// CoDel sends an emptied new flow to the round too, so that it cannot come back new at
    /// once; here that made a light tenant wait a whole round of the heavy tenant's `hand`
    /// lanes for every other request: 1.16x its p99 alone with a hand of 8.)
    pub fn pop(&mut self, now: u64) -> Option<(T, u64)> {
        while let Some(&lane) = self.fresh.front() {
            let l = &mut self.lanes[lane];
            if !l.granted {
                l.deficit += QUANTUM;
                l.granted = true;
            }
            match l.items.front().map(|w| w.cost) {
                Some(cost) if cost <= l.deficit => {
                    l.deficit -= cost;
                    let waiting = l.items.pop_front()?;
                    let next = l.items.front().map(|w| w.cost);
                    match next {
                        None => {
                            l.deficit = 0;
                            l.granted = false;
                            l.listed = false;
                            self.fresh.pop_front();
                        }
                        Some(cost) if cost > l.deficit => {
                            l.granted = false;
                            self.fresh.pop_front();
                            self.active.push_back(lane);
                        }
                        Some(_) => {}
                    }
                    self.len -= 1;
                    return Some((waiting.item, now.saturating_sub(waiting.since)));
                }
                Some(_) => {
                    // Its quantum is spent: to the back of the round.
                    l.granted = false;
                    self.fresh.pop_front();
                    self.active.push_back(lane);
                }
                None => {
                    l.deficit = 0;
                    l.granted = false;
                    l.listed = false;
                    self.fresh.pop_front();
                }
            }
        }
        while let Some(&lane) = self.active.front() {
            let l = &mut self.lanes[lane];
            let Some(cost) = l.items.front().map(|w| w.cost) else {
                // An idle lane keeps no credit (DRR's rule: no saving up while away).
                l.deficit = 0;
                l.granted = false;
                l.listed = false;
                self.active.pop_front();
                continue;
            };
            if !l.granted {
                l.deficit += QUANTUM;
                l.granted = true;
            }
            if cost > l.deficit {
                // This visit is spent: the lane goes to the back of the round.
                l.granted = false;
                self.active.rotate_left(1);
                continue;
            }
            l.deficit -= cost;
            let waiting = l.items.pop_front()?;
            if l.items.is_empty() {
                // An idle lane keeps no credit (DRR's rule: no saving up while away).
                l.deficit = 0;
                l.granted = false;
                l.listed = false;
                self.active.pop_front();
            }
            self.len -= 1;
            return Some((waiting.item, now.saturating_sub(waiting.since)));
        }
        None
    }

    /// The shape it was made with.
    pub fn config(&self) -> FairQueueConfig {
        self.config
    }

    /// Takes out every request `gone` says is gone (its client went away), keeping the
    /// order of the rest; returns how many were taken out.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&T) -> bool) -> usize {
        let mut removed = 0;
        for lane in &mut self.lanes {
            let before = lane.items.len();
            lane.items.retain(|w| !gone(&w.item));
            removed += before - lane.items.len();
            if before > 0 && lane.items.is_empty() {
                lane.deficit = 0;
                lane.granted = false;
                lane.listed = false;
            }
        }
        self.len -= removed;
        self.unlist_empty();
        removed
    }

    /// Takes out every request that has waited `max_wait` by `now` (to be answered 503).
    pub fn expire(&mut self, now: u64) -> Vec<T> {
        let mut expired = Vec::new();
        let max = self.config.max_wait_ns;
        for lane in &mut self.lanes {
            let before = lane.items.len();
            // Each lane is first come, first served: the oldest are at the front.
            while lane
                .items
                .front()
                .is_some_and(|w| now.saturating_sub(w.since) >= max)
            {
                if let Some(w) = lane.items.pop_front() {
                    expired.push(w.item);
                }
            }
            if before > 0 && lane.items.is_empty() {
                lane.deficit = 0;
                lane.granted = false;
                lane.listed = false;
            }
        }
        self.len -= expired.len();
        self.unlist_empty();
        expired
    }

    /// Takes the lanes left empty out of the round and the fresh lanes.
    fn unlist_empty(&mut self) {
        let lanes = &self.lanes;
        self.fresh.retain(|&l| lanes[l].listed);
        self.active.retain(|&l| lanes[l].listed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(queues: u32, hand: u32, queue_length: u32) -> FairQueue<(u64, u32)> {
        FairQueue::new(FairQueueConfig {
            queues,
            hand,
            queue_length,
            max_wait_ns: 100,
        })
        .unwrap()
    }

    #[test]
    fn a_hand_is_distinct_lanes_read_off_the_hash() {
        let q = queue(64, 8, 50);
        let hand = q.hand(0xDEAD_BEEF_CAFE);
        let mut sorted = hand.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8);
        assert!(hand.iter().all(|&l| l < 64));
        assert_eq!(q.hand(0xDEAD_BEEF_CAFE), hand);
        // Worked by hand, 4 lanes and a hand of 2, hash 7: 7 % 4 = 3 → lane 3 (the deck is
        // now 3,1,2,0); 7 / 4 = 1, 1 % 3 = 1 → position 1 + 1 = 2 → lane 2.
        assert_eq!(queue(4, 2, 1).hand(7), [3, 2]);
    }

    #[test]
    fn weights_share_the_rounds() {
        // Flows 0 and 1 with a hand of 1 of 2 lanes: 0 % 2 = 0 → lane 0, 1 % 2 = 1 → lane 1.
        let mut q = queue(2, 1, 50);
        for i in 0..6 {
            q.push(0, 1, (0, i), 0).unwrap();
            q.push(1, 2, (1, i), 0).unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0).map(|((flow, _), _)| flow))
            .take(9)
            .collect();
        // Weight 2 costs half a quantum: two of flow 1 per one of flow 0.
        assert_eq!(order, [0, 1, 1, 0, 1, 1, 0, 1, 1]);
    }

    #[test]
    fn a_full_hand_refuses_the_youngest_and_the_old_expire() {
        let mut q = queue(2, 1, 2);
        q.push(0, 1, (0, 0), 0).unwrap();
        q.push(0, 1, (0, 1), 10).unwrap();
        assert_eq!(q.push(0, 1, (0, 2), 20), Err(((0, 2), Refused::Full)));
        // Another flow has a lane of its own.
        q.push(1, 1, (1, 0), 20).unwrap();
        assert_eq!(q.expire(105), vec![(0, 0)]);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(106), Some(((0, 1), 96)));
        assert_eq!(q.pop(106), Some(((1, 0), 86)));
        assert!(q.is_empty() && q.pop(106).is_none());
    }

    #[test]
    fn a_request_taken_out_leaves_its_lane_and_the_round() {
        let mut q = queue(2, 1, 5);
        q.push(0, 1, (0, 0), 0).unwrap();
        q.push(1, 1, (1, 0), 0).unwrap();
        q.push(1, 1, (1, 1), 0).unwrap();
        assert_eq!(q.remove_where(|&(flow, _)| flow == 0), 1);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(1).map(|(item, _)| item), Some((1, 0)));
        assert_eq!(q.remove_where(|_| true), 1);
        assert!(q.is_empty() && q.pop(1).is_none());
    }

    #[test]
    fn bad_shapes_are_refused() {
        let bad = |queues, hand| {
            FairQueue::<()>::new(FairQueueConfig {
                queues,
                hand,
                ..FairQueueConfig::default()
            })
        };
        assert_eq!(bad(0, 0).unwrap_err(), Error::Zero { field: "queues" });
        assert!(matches!(
            bad(4, 5),
            Err(Error::TooLarge { field: "hand", .. })
        ));
    }
}
