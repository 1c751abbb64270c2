//! Shares of one capacity leased to the members of a fleet: max-min fair by what each wants,
//! never more than the capacity in all, and shrinking before growing.
//!
//! A member (a process serving Envoy's quota service, say) asks for its share of a budget
//! every so often: it says how much it wants, and holds what it is granted until its lease
//! lapses or it asks again. A grant is the member's max-min target when that is less than
//! it holds (a member shrinks at once), and otherwise only what the others leave free: a
//! member that should grow waits for the others to shrink, which they do when they next
//! ask. So the grants held add up to at most the capacity at every moment, and the split
//! is max-min once every member has asked twice (once to shrink, once to grow) with the
//! same wants.
//!
//! [`Leases`] is the table of one budget, for a store to keep; the Redis store keeps the
//! same table in a hash and runs the same steps in its script.

use std::collections::BTreeMap;

/// Splits `capacity` among `wants` max-min fairly ("water filling"), in whole units: the
/// grants, in the order of `wants`. Whoever wants less than an equal share gets what it
/// wants; what is left is shared equally among the rest. Every grant is at most its want,
/// and they add up to at most `capacity` (a remainder that does not divide evenly stays
/// unassigned).
///
/// # Examples
///
/// ```
/// use ratewarden_core::lease::max_min;
///
/// assert_eq!(max_min(120, &[1000, 50, 10]), [60, 50, 10]);
/// assert_eq!(max_min(600, &[50, 60]), [50, 60]);
/// ```
pub fn max_min(capacity: u64, wants: &[u64]) -> Vec<u64> {
    max_min_weighted(capacity, &wants.iter().map(|&w| (w, 1)).collect::<Vec<_>>())
}

/// [`max_min`] with weights: `(want, weight)` pairs, each fair share proportional to its
/// weight (`capacity_left · weight / Σ weights` of those still unsatisfied). A weight of
/// zero gets nothing.
///
/// # Examples
///
/// ```
/// use ratewarden_core::lease::max_min_weighted;
///
/// // Weights 2 and 1 of 300: 200 and 100, unless one wants less.
/// assert_eq!(max_min_weighted(300, &[(1000, 2), (1000, 1)]), [200, 100]);
/// assert_eq!(max_min_weighted(300, &[(50, 2), (1000, 1)]), [50, 250]);
/// ```
pub fn max_min_weighted(capacity: u64, wants: &[(u64, u64)]) -> Vec<u64> {
    let mut grants = vec![0u64; wants.len()];
    // Those still unsatisfied, in the order of their want per unit of weight (smallest
    // first: they are the ones an equal share may satisfy), then of their weight. Only
    // equal pairs are left tied, and they are granted alike: the grants do not depend on
    // the order of `wants`.
    let mut open: Vec<usize> = (0..wants.len()).filter(|&i| wants[i].1 > 0).collect();
    open.sort_by(|&a, &b| {
        let (wa, ka) = (u128::from(wants[a].0), u128::from(wants[a].1));
        let (wb, kb) = (u128::from(wants[b].0), u128::from(wants[b].1));
        (wa * kb).cmp(&(wb * ka)).then(ka.cmp(&kb))
    });
    let mut left = capacity;
    let mut from = 0;
    while from < open.len() {
        let weights: u128 = open[from..].iter().map(|&i| u128::from(wants[i].1)).sum();
        let (want, weight) = wants[open[from]];
        let share = u128::from(left) * u128::from(weight) / weights;
        if u128::from(want) <= share {
            // Satisfied: what it does not take is shared by the rest.
            grants[open[from]] = want;
            left -= want;
            from += 1;
            continue;
        }
        // Every remaining want exceeds its share: each gets the share.
        for &i in &open[from..] {
            let share = u128::from(left) * u128::from(wants[i].1) / weights;
            grants[i] = u64::try_from(share).unwrap_or(u64::MAX).min(wants[i].0);
        }
        break;
    }
    grants
}

/// The most units a want or a capacity may be: larger ones are taken as this. It keeps
/// every product the split forms below 2^53, so the Redis script, which counts in
/// doubles, computes exactly what [`Leases::lease`] does.
pub const MAX_UNITS: u64 = 1 << 40;

/// The largest weight a member may have (larger ones are taken as this; zero as one).
pub const MAX_WEIGHT: u64 = 1 << 12;

/// What a member asks for when it leases its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask<'a> {
    /// Who asks: one name per member of the fleet, stable while it runs.
    pub member: &'a str,
    /// The units it wants (its demand); zero gives back what it holds and leaves.
    pub want: u64,
    /// Its weight in the split, 1 for an equal share.
    pub weight: u64,
    /// The budget's capacity, as the asker's rule says (the latest ask's wins).
    pub capacity: u64,
    /// How long the grant holds if the member does not ask again, in milliseconds: the
    /// longest it may go on handing out what it holds.
    pub ttl_ms: u64,
}

impl Ask<'_> {
    /// The ask with its numbers in range: wants and capacity at most [`MAX_UNITS`], the
    /// weight from 1 to [`MAX_WEIGHT`], a time to live of at least a millisecond.
    #[must_use]
    pub fn bounded(self) -> Self {
        Self {
            want: self.want.min(MAX_UNITS),
            weight: self.weight.clamp(1, MAX_WEIGHT),
            capacity: self.capacity.min(MAX_UNITS),
            ttl_ms: self.ttl_ms.max(1),
            ..self
        }
    }

    /// What the only member of a fleet is granted: what it wants, up to the capacity.
    #[must_use]
    pub fn alone(self) -> u64 {
        let ask = self.bounded();
        ask.want.min(ask.capacity)
    }
}

/// What one member holds of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// What it said it wants.
    pub want: u64,
    /// Its weight.
    pub weight: u64,
    /// What it was granted and holds.
    pub held: u64,
    /// When the lease lapses (milliseconds on the store's clock).
    pub expires_ms: u64,
}

/// One budget's leases, by member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leases {
    members: BTreeMap<String, Lease>,
}

impl Leases {
    /// Records `ask` at `now_ms` and grants the asker its share: its max-min target of the
    /// capacity among every member whose lease has not lapsed, when that is no more than
    /// it holds; otherwise what it holds plus as much of the rest of its target as the
    /// others leave free. A want of zero gives back what it holds and forgets the member.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::lease::{Ask, Leases};
    ///
    /// let mut budget = Leases::default();
    /// let ask = |member, want| Ask { member, want, weight: 1, capacity: 600, ttl_ms: 3_000 };
    /// assert_eq!(budget.lease(ask("a", 1000), 0), 600);
    /// // A newcomer gets only what is free until `a` shrinks (at its next ask).
    /// assert_eq!(budget.lease(ask("b", 1000), 0), 0);
    /// assert_eq!(budget.lease(ask("a", 1000), 10), 300);
    /// assert_eq!(budget.lease(ask("b", 1000), 20), 300);
    /// ```
    pub fn lease(&mut self, ask: Ask<'_>, now_ms: u64) -> u64 {
        let ask = ask.bounded();
        self.members.retain(|_, l| l.expires_ms > now_ms);
        if ask.want == 0 {
            self.members.remove(ask.member);
            return 0;
        }
        let held = self.members.get(ask.member).map_or(0, |l| l.held);
        let mut wants: Vec<(u64, u64)> = Vec::with_capacity(self.members.len() + 1);
        let mut mine = None;
        let mut others_held: u64 = 0;
        let mut placed = false;
        for (name, l) in &self.members {
            if !placed && name.as_str() >= ask.member {
                mine = Some(wants.len());
                wants.push((ask.want, ask.weight));
                placed = true;
                if name == ask.member {
                    continue;
                }
            }
            others_held = others_held.saturating_add(l.held);
            wants.push((l.want, l.weight));
        }
        let mine = mine.unwrap_or_else(|| {
            wants.push((ask.want, ask.weight));
            wants.len() - 1
        });
        let target = max_min_weighted(ask.capacity, &wants)[mine];
        let granted = if target <= held {
            target
        } else {
            let free = ask
                .capacity
                .saturating_sub(others_held)
                .saturating_sub(held);
            held + (target - held).min(free)
        };
        self.members.insert(
            ask.member.to_owned(),
            Lease {
                want: ask.want,
                weight: ask.weight,
                held: granted,
                expires_ms: now_ms.saturating_add(ask.ttl_ms),
            },
        );
        granted
    }

    /// The leases that have not lapsed at `now_ms`, by member.
    pub fn held(&self, now_ms: u64) -> impl Iterator<Item = (&str, &Lease)> {
        self.members
            .iter()
            .filter(move |(_, l)| l.expires_ms > now_ms)
            .map(|(m, l)| (m.as_str(), l))
    }

    /// Whether no lease is left at `now_ms`.
    pub fn is_empty(&self, now_ms: u64) -> bool {
        self.held(now_ms).next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference vectors of max-min fairness.
    #[test]
    fn the_reference_vectors() {
        assert_eq!(max_min(120, &[1000, 50, 10]), [60, 50, 10]);
        assert_eq!(max_min(600, &[100, 200, 1000]), [100, 200, 300]);
        assert_eq!(max_min(600, &[700, 700, 700]), [200, 200, 200]);
        assert_eq!(max_min(600, &[50, 60]), [50, 60]);
        assert_eq!(max_min(0, &[5, 5]), [0, 0]);
        assert_eq!(max_min(10, &[]), Vec::<u64>::new());
        // Weighted: shares in proportion to the weights.
        assert_eq!(max_min_weighted(600, &[(700, 1), (700, 2)]), [200, 400]);
        assert_eq!(
            max_min_weighted(600, &[(100, 1), (700, 2), (700, 0)]),
            [100, 500, 0]
        );
    }

    fn ask(member: &str, want: u64) -> Ask<'_> {
        Ask {
            member,
            want,
            weight: 1,
            capacity: 600,
            ttl_ms: 3_000,
        }
    }

    #[test]
    fn a_member_shrinks_at_once_and_grows_only_into_what_the_others_left() {
        let mut b = Leases::default();
        assert_eq!(b.lease(ask("a", 1000), 0), 600);
        // The newcomer: its target is 300, but a holds everything.
        assert_eq!(b.lease(ask("b", 1000), 0), 0);
        // a learns its target and shrinks; b then grows into what a left.
        assert_eq!(b.lease(ask("a", 1000), 100), 300);
        assert_eq!(b.lease(ask("b", 1000), 200), 300);
        // a's demand falls: it shrinks, and b may take the rest at its next ask.
        assert_eq!(b.lease(ask("a", 100), 300), 100);
        assert_eq!(b.lease(ask("b", 1000), 400), 500);
        // a wants more again: it gets only what is free (nothing) until b shrinks.
        assert_eq!(b.lease(ask("a", 1000), 500), 100);
        assert_eq!(b.lease(ask("b", 1000), 600), 300);
        assert_eq!(b.lease(ask("a", 1000), 700), 300);
    }

    #[test]
    fn a_lapsed_lease_frees_its_share_and_a_want_of_zero_leaves() {
        let mut b = Leases::default();
        b.lease(ask("a", 1000), 0);
        assert_eq!(b.lease(ask("b", 1000), 0), 0);
        // a stays silent past its 3 s: b takes everything.
        assert_eq!(b.lease(ask("b", 1000), 3_000), 600);
        assert_eq!(b.held(3_000).count(), 1);
        assert_eq!(b.lease(ask("b", 0), 3_001), 0);
        assert!(b.is_empty(3_001));
    }

    #[test]
    fn weights_and_a_capacity_that_shrinks() {
        let mut b = Leases::default();
        let gold = Ask {
            weight: 3,
            ..ask("gold", 10_000)
        };
        assert_eq!(b.lease(gold, 0), 600);
        assert_eq!(b.lease(ask("free", 10_000), 0), 0);
        assert_eq!(b.lease(gold, 1), 450);
        assert_eq!(b.lease(ask("free", 10_000), 2), 150);
        // A reload halves the capacity: whoever asks shrinks to its new target at once,
        // and nobody grows while the others hold more than the new capacity allows.
        let halved = Ask {
            capacity: 300,
            ..gold
        };
        assert_eq!(b.lease(halved, 3), 225);
        let free = Ask {
            capacity: 300,
            ..ask("free", 10_000)
        };
        assert_eq!(b.lease(free, 4), 75);
    }

    proptest! {
        /// Never over the capacity, never over a want, nothing wasted when wants exceed the
        /// capacity (but for the remainder of a division), and no one below the smallest
        /// unsatisfied grant unless it wanted less (that is max-min).
        #[test]
        fn grants_are_max_min(capacity in 0u64..10_000, wants in proptest::collection::vec(0u64..5_000, 0..12)) {
            let grants = max_min(capacity, &wants);
            let total: u64 = grants.iter().sum();
            prop_assert!(total <= capacity);
            for (g, w) in grants.iter().zip(&wants) {
                prop_assert!(g <= w);
            }
            let wanted: u64 = wants.iter().sum();
            if wanted <= capacity {
                prop_assert_eq!(total, wanted);
            } else {
                prop_assert!(capacity - total < wants.len() as u64);
                let least_capped = grants.iter().zip(&wants).filter(|(g, w)| g < w).map(|(g, _)| *g).min();
                if let Some(least) = least_capped {
                    for (g, w) in grants.iter().zip(&wants) {
                        prop_assert!(g + 1 >= least.min(*w), "{grants:?} of {wants:?}");
                    }
                }
            }
        }

        /// Whatever the members ask, in whatever order, the leases held never add up past
        /// the capacity, and a round of asks in which nothing changes reaches max-min.
        #[test]
        fn leases_never_add_up_past_the_capacity_and_converge(
            capacity in 0u64..5_000,
            asks in proptest::collection::vec((0usize..5, 0u64..3_000), 1..40),
        ) {
            let names = ["a", "b", "c", "d", "e"];
            let mut b = Leases::default();
            let mut wants = [0u64; 5];
            for (t, (who, want)) in asks.iter().enumerate() {
                let a = Ask { member: names[*who], want: *want, weight: 1, capacity, ttl_ms: 1_000_000 };
                b.lease(a, t as u64);
                wants[*who] = *want;
                let held: u64 = b.held(t as u64).map(|(_, l)| l.held).sum();
                prop_assert!(held <= capacity);
            }
            // Two rounds in which every member present asks for what it wants again.
            for round in 0..2u64 {
                for (i, name) in names.iter().enumerate() {
                    if wants[i] > 0 {
                        let a = Ask { member: name, want: wants[i], weight: 1, capacity, ttl_ms: 1_000_000 };
                        b.lease(a, 100 + round);
                    }
                }
            }
            let present: Vec<u64> = wants.iter().copied().filter(|&w| w > 0).collect();
            let held: Vec<u64> = b.held(200).map(|(_, l)| l.held).collect();
            prop_assert_eq!(held, max_min(capacity, &present));
        }
    }
}
