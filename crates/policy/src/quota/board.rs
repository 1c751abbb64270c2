//! Who holds what of each budget: per stream and bucket, the demand it reported and the
//! share assigned, re-split max-min on every report and stream end.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::fair::max_min_weighted;

/// A budget: `per_period` units every `period` (a rule's rate), with `burst` units at once,
/// split among the streams that report buckets of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// What identifies it (the rule's key for the bucket): buckets of one key share it.
    pub key: String,
    /// Units per period, in all.
    pub per_period: u64,
    /// The period.
    pub period: Duration,
    /// The most units at once, in all.
    pub burst: u64,
}

/// One bucket's usage, as a stream reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The bucket's id: its entries, sorted by key.
    pub bucket: Vec<(String, String)>,
    /// Requests allowed and denied since the stream's last report of it.
    pub requests: u64,
    /// Over how long (zero on the first report of a bucket: demand not known yet).
    pub elapsed: Duration,
    /// The bucket's weight in the split of its budget (1 unless its rule weighs it).
    pub weight: u64,
}

/// An assignment to send: a stream's share of a budget for one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The stream to send it on.
    pub stream: u64,
    /// The bucket it is for.
    pub bucket: Vec<(String, String)>,
    /// Units per period (0: deny all until the next assignment).
    pub per_period: u64,
    /// The period.
    pub period: Duration,
    /// Units at once: the budget's burst in proportion to the share, at least one when the
    /// share is not zero.
    pub burst: u64,
    /// How long the stream may use it without hearing from us again.
    pub ttl: Duration,
}

#[derive(Debug)]
struct Holding {
    want: u64,
    weight: u64,
    assigned: u64,
    /// When it lapses if the stream does not report the bucket again.
    lapses: u64,
    ttl: Duration,
}

#[derive(Debug)]
struct Split {
    budget: Budget,
    /// By stream and bucket.
    holdings: BTreeMap<(u64, BucketEntries), Holding>,
    /// What is split: this board's share of the budget when several boards share it, or
    /// `None` for the budget's whole rate.
    capacity: Option<u64>,
}

/// What one board's streams want of a budget, in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    /// The budget.
    pub budget: Budget,
    /// Units per period, the sum of the streams' wants.
    pub want: u64,
    /// Its weight among the boards sharing the budget: its holdings' weights added up (one
    /// each unless their rule weighs their bucket), so that every stream's share is the
    /// same whichever board serves it.
    pub weight: u64,
    /// The longest time to live of the assignments it sent.
    pub ttl: Duration,
}

/// Every budget's holdings. Invariant: within a budget the assigned shares add up to at
/// most its `per_period`, after every call.
#[derive(Debug, Default)]
pub struct QuotaBoard {
    splits: HashMap<String, Split>,
    /// The holdings of every split, counted as they come and go.
    held: usize,
    /// No sweep of every split for lapsed holdings before this (nanoseconds): when the
    /// board is full, each new bucket would otherwise pay one.
    sweep_after: u64,
}

/// How often a full board may be swept for lapsed holdings to make room.
const SWEEP_EVERY: u64 = 1_000_000_000;

/// A bucket's id: its entries, sorted by key.
pub type BucketEntries = Vec<(String, String)>;

/// The shortest and longest time to live of an assignment.
const MIN_TTL: Duration = Duration::from_secs(1);
const MAX_TTL: Duration = Duration::from_secs(60);

impl QuotaBoard {
    /// Records `stream`'s report of a bucket of `budget` at `now` (nanoseconds) and
    /// re-splits it: the assignments to send, reductions first (shrink before grow), the
    /// reporting stream's own always among them.
    pub fn report(
        &mut self,
        stream: u64,
        budget: &Budget,
        report: Report,
        now: u64,
    ) -> Vec<Assignment> {
        let at = self.record(stream, budget, report, now);
        self.splits
            .get_mut(&budget.key)
            .map_or_else(Vec::new, |split| split.resplit(&[at]))
    }

    /// Records `stream`'s report of a bucket of `budget` at `now` without re-splitting
    /// (for [`QuotaBoard::resplit`] once the budget's capacity is known): which holding
    /// it is.
    pub fn record(
        &mut self,
        stream: u64,
        budget: &Budget,
        report: Report,
        now: u64,
    ) -> (u64, BucketEntries) {
        let split = self
            .splits
            .entry(budget.key.clone())
            .or_insert_with(|| Split {
                budget: budget.clone(),
                holdings: BTreeMap::new(),
                capacity: None,
            });
        // A reload may change the numbers: the latest report's win.
        split.budget = budget.clone();
        let elapsed_ns = u128::from(u64::try_from(report.elapsed.as_nanos()).unwrap_or(u64::MAX));
        let period_ns = budget.period.as_nanos();
        let want = if elapsed_ns == 0 {
            // Not known yet: an equal share of what the others leave.
            budget.per_period
        } else {
            let w = (u128::from(report.requests) * period_ns).div_ceil(elapsed_ns);
            u64::try_from(w).unwrap_or(u64::MAX)
        };
        // Assignments live a few reporting intervals.
        let ttl = (report.elapsed * 3).clamp(MIN_TTL, MAX_TTL);
        let at = (stream, report.bucket);
        if !split.holdings.contains_key(&at) {
            self.held += 1;
        }
        let holding = split.holdings.entry(at.clone()).or_insert(Holding {
            want: 0,
            weight: 1,
            assigned: 0,
            lapses: 0,
            ttl,
        });
        // At least one unit: a stream that saw no traffic may see some before it reports.
        holding.want = want.max(1);
        holding.weight = report.weight;
        holding.ttl = ttl;
        holding.lapses = now.saturating_add(u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX));
        self.held -= split.prune(now);
        at
    }

    /// Splits the budget `key` anew within `capacity` (`None`: the budget's whole rate):
    /// the assignments that change, reductions first, and those of `always` whether or
    /// not they change. Holdings whose stream stopped reporting them are dropped first,
    /// and a budget left without holdings is forgotten.
    pub fn resplit(
        &mut self,
        key: &str,
        capacity: Option<u64>,
        always: &[(u64, BucketEntries)],
        now: u64,
    ) -> Vec<Assignment> {
        let Some(split) = self.splits.get_mut(key) else {
            return Vec::new();
        };
        split.capacity = capacity;
        self.held -= split.prune(now);
        let sent = split.resplit(always);
        if split.holdings.is_empty() {
            self.splits.remove(key);
        }
        sent
    }

    /// What this board's streams want of the budget `key` at `now`, in all: for its share
    /// of a budget split among several boards. `None` when none holds any of it.
    pub fn demand(&self, key: &str, now: u64) -> Option<Demand> {
        let split = self.splits.get(key)?;
        let live = split.holdings.values().filter(|h| h.lapses > now);
        let mut demand = Demand {
            budget: split.budget.clone(),
            want: 0,
            weight: 0,
            ttl: Duration::ZERO,
        };
        for h in live {
            demand.want = demand.want.saturating_add(h.want);
            demand.weight = demand.weight.saturating_add(h.weight);
            demand.ttl = demand.ttl.max(h.ttl);
        }
        (demand.weight > 0).then_some(demand)
    }

    /// Whether `stream` holds `bucket` of the budget `key`.
    pub fn holds(&self, stream: u64, key: &str, bucket: &BucketEntries) -> bool {
        self.splits
            .get(key)
            .is_some_and(|s| s.holdings.contains_key(&(stream, bucket.clone())))
    }

    /// Whether one more holding fits at `now` among at most `max`: after dropping, when
    /// there seems to be no room, every holding that lapsed (at most once a second, so a
    /// full board costs a new bucket one comparison, not a sweep).
    pub fn has_room(&mut self, max: usize, now: u64) -> bool {
        if self.held < max {
            return true;
        }
        if now < self.sweep_after {
            return false;
        }
        self.sweep_after = now.saturating_add(SWEEP_EVERY);
        for split in self.splits.values_mut() {
            self.held -= split.prune(now);
        }
        self.splits.retain(|_, s| !s.holdings.is_empty());
        self.held < max
    }

    /// The holdings on the board: one per stream and bucket.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no stream holds anything.
    pub fn is_empty(&self) -> bool {
        self.splits.is_empty()
    }

    /// The budgets some stream holds, by key.
    pub fn keys(&self) -> Vec<String> {
        self.splits.keys().cloned().collect()
    }

    /// Forgets `stream` (it ended: that Envoy is gone) and re-splits what it held among
    /// the rest: their grown assignments.
    pub fn leave(&mut self, stream: u64, now: u64) -> Vec<Assignment> {
        let mut out = Vec::new();
        for split in self.splits.values_mut() {
            let before = split.holdings.len();
            split.holdings.retain(|(s, _), _| *s != stream);
            self.held -= before - split.holdings.len();
            if split.holdings.len() != before {
                self.held -= split.prune(now);
                out.extend(split.resplit(&[]));
            }
        }
        self.splits.retain(|_, s| !s.holdings.is_empty());
        out
    }

    /// The shares assigned now of the budget `key`, by stream and bucket.
    pub fn shares(&self, key: &str) -> Vec<(u64, BucketEntries, u64)> {
        self.splits.get(key).map_or_else(Vec::new, |s| {
            s.holdings
                .iter()
                .map(|((stream, bucket), h)| (*stream, bucket.clone(), h.assigned))
                .collect()
        })
    }
}

impl Split {
    /// Drops holdings whose stream stopped reporting them (their assignment lapsed there).
    /// Drops the holdings that lapsed at `now`: how many.
    fn prune(&mut self, now: u64) -> usize {
        let before = self.holdings.len();
        self.holdings.retain(|_, h| h.lapses > now);
        before - self.holdings.len()
    }

    /// Splits the capacity max-min by the wants; returns the changed assignments (and
    /// those of `always`), the reductions before the increases. An increase takes only
    /// what the others do not hold after their reductions, so the total never passes the
    /// capacity.
    fn resplit(&mut self, always: &[(u64, BucketEntries)]) -> Vec<Assignment> {
        let capacity = self.capacity.unwrap_or(self.budget.per_period);
        let wants: Vec<(u64, u64)> = self.holdings.values().map(|h| (h.want, h.weight)).collect();
        let targets = max_min_weighted(capacity, &wants);
        let mut shrunk = Vec::new();
        let mut grown = Vec::new();
        for ((at, h), target) in self.holdings.iter_mut().zip(&targets) {
            if *target < h.assigned {
                h.assigned = *target;
                shrunk.push(at.clone());
            }
        }
        let mut held: u64 = self.holdings.values().map(|h| h.assigned).sum();
        for ((at, h), target) in self.holdings.iter_mut().zip(&targets) {
            if *target > h.assigned {
                let free = capacity.saturating_sub(held);
                let grow = (*target - h.assigned).min(free);
                h.assigned += grow;
                held += grow;
                grown.push(at.clone());
            }
        }
        for at in always {
            if !shrunk.contains(at) && !grown.contains(at) {
                grown.push(at.clone());
            }
        }
        shrunk
            .into_iter()
            .chain(grown)
            .filter_map(|at| {
                let h = self.holdings.get(&at)?;
                Some(self.assignment(&at, h))
            })
            .collect()
    }

    fn assignment(&self, at: &(u64, BucketEntries), h: &Holding) -> Assignment {
        let b = &self.budget;
        let burst = if h.assigned == 0 {
            0
        } else {
            let scaled =
                u128::from(b.burst) * u128::from(h.assigned) / u128::from(b.per_period.max(1));
            u64::try_from(scaled).unwrap_or(u64::MAX).max(1)
        };
        Assignment {
            stream: at.0,
            bucket: at.1.clone(),
            per_period: h.assigned,
            period: b.period,
            burst,
            ttl: h.ttl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn budget() -> Budget {
        Budget {
            key: "api".to_owned(),
            per_period: 600,
            period: Duration::from_secs(1),
            burst: 60,
        }
    }

    fn bucket() -> Vec<(String, String)> {
        vec![("name".to_owned(), "api".to_owned())]
    }

    fn report(requests: u64) -> Report {
        Report {
            bucket: bucket(),
            requests,
            elapsed: Duration::from_secs(1),
            weight: 1,
        }
    }

    fn total(board: &QuotaBoard) -> u64 {
        board.shares("api").iter().map(|s| s.2).sum()
    }

    #[test]
    fn streams_get_max_min_shares_of_their_demand_and_never_more_than_the_budget_in_all() {
        let mut board = QuotaBoard::default();
        let b = budget();
        board.report(1, &b, report(100), 0);
        board.report(2, &b, report(200), 0);
        board.report(3, &b, report(1000), 0);
        let shares: Vec<u64> = board.shares("api").iter().map(|s| s.2).collect();
        assert_eq!(shares, [100, 200, 300]);
        // Demand changes: stream 1 now wants 700, as do the others.
        board.report(1, &b, report(700), SEC);
        board.report(2, &b, report(700), SEC);
        board.report(3, &b, report(700), SEC);
        let shares: Vec<u64> = board.shares("api").iter().map(|s| s.2).collect();
        assert_eq!(shares, [200, 200, 200]);
        // Stream 3 ends: the others grow into what it held.
        let sent = board.leave(3, 2 * SEC);
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|a| a.per_period == 300 && a.stream != 3));
        assert_eq!(total(&board), 600);
    }

    #[test]
    fn a_newcomer_is_given_only_what_is_free_after_the_others_shrink() {
        let mut board = QuotaBoard::default();
        let b = budget();
        let sent = board.report(1, &b, report(1000), 0);
        assert_eq!(sent[0].per_period, 600);
        // A newcomer of unknown demand: the holder shrinks first (sent first), then the
        // newcomer takes what is free.
        let newcomer = Report {
            elapsed: Duration::ZERO,
            ..report(0)
        };
        let sent = board.report(2, &b, newcomer, 0);
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].stream, sent[0].per_period), (1, 300));
        assert_eq!((sent[1].stream, sent[1].per_period), (2, 300));
        assert!(total(&board) <= 600);
        // Bursts in proportion, at least one.
        assert_eq!(sent[1].burst, 30);
    }

    #[test]
    fn room_is_counted_in_holdings_and_lapsed_ones_make_room() {
        let mut board = QuotaBoard::default();
        let b = budget();
        board.report(1, &b, report(100), 0);
        board.report(2, &b, report(100), 0);
        assert!(board.holds(1, "api", &bucket()) && !board.holds(3, "api", &bucket()));
        assert_eq!(board.len(), 2);
        assert!(board.has_room(3, 0) && !board.has_room(2, 0));
        // Stream 2 reports again later; stream 1's holding lapses (3 s) and makes room,
        // found by a sweep, at most one a second (the last at 0, then at 3 s - 1 ns).
        board.report(2, &b, report(100), 2 * SEC);
        assert!(!board.has_room(2, 3 * SEC - 1));
        assert!(!board.has_room(2, 3 * SEC), "swept a nanosecond ago");
        assert!(board.has_room(2, 4 * SEC));
        assert_eq!(board.len(), 1);
        // The count follows every way a holding goes: a report's prune, a stream's end.
        board.report(3, &b, report(100), 4 * SEC);
        board.report(4, &b, report(100), 4 * SEC);
        assert_eq!(board.len(), 3);
        board.leave(3, 4 * SEC);
        assert_eq!(board.len(), 2);
        board.report(4, &b, report(100), 8 * SEC);
        assert_eq!(board.len(), 1, "stream 2's lapsed when stream 4 reported");
    }

    #[test]
    fn a_bucket_not_reported_again_lapses_and_frees_its_share() {
        let mut board = QuotaBoard::default();
        let b = budget();
        board.report(1, &b, report(1000), 0);
        board.report(2, &b, report(1000), 0);
        // Stream 2 stays silent past its assignment's 3 s: stream 1 gets everything.
        let sent = board.report(1, &b, report(1000), 4 * SEC);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].per_period, 600);
    }

    #[test]
    fn weighted_buckets_split_an_over_demanded_budget_in_proportion_to_their_weights() {
        let mut board = QuotaBoard::default();
        let b = budget();
        let weighted = |stream: u64, value: &str, weight: u64| {
            (
                stream,
                Report {
                    bucket: vec![("tier".to_owned(), value.to_owned())],
                    weight,
                    ..report(10_000)
                },
            )
        };
        for (stream, r) in [weighted(1, "gold", 3), weighted(2, "free", 1)] {
            board.report(stream, &b, r, 0);
        }
        let shares: Vec<(u64, u64)> = board.shares("api").iter().map(|s| (s.0, s.2)).collect();
        assert_eq!(shares, [(1, 450), (2, 150)]);
        // A weight does not buy more than the bucket asks for: the rest goes to the other.
        let (stream, mut r) = weighted(1, "gold", 3);
        r.requests = 100;
        let sent = board.report(stream, &b, r, SEC);
        assert_eq!(sent[0].per_period, 100, "{sent:?}");
        let (stream, r) = weighted(2, "free", 1);
        board.report(stream, &b, r, SEC);
        let shares: Vec<u64> = board.shares("api").iter().map(|s| s.2).collect();
        assert_eq!(shares, [100, 500]);
    }
}
