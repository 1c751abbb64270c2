//! One quota budget split across a fleet: several `FleetBoard`s (one per process) on one
//! shared store, each splitting among its own streams the share it leases, on exact
//! injected time. The assignments across the fleet never add up past the budget, the
//! split converges to max-min per stream within two renewals, a process whose streams
//! leave gives its share back, and a store failure holds the share in hand until its
//! lease lapses, then follows the rule's `on_store_failure`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratewarden_core::lease::Ask;
use ratewarden_core::{now_or_panic, AsyncStore, Check, Decision, Limit, Store};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::quota::{Assignment, Budget, FleetBoard, Report, Usage, RENEW_EVERY};

const SEC: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * SEC;

#[derive(Debug, thiserror::Error)]
#[error("the store is down")]
struct Down;

/// A shared store (as Redis is) over memory, that can be taken down.
#[derive(Clone)]
struct Shared {
    state: Arc<MemoryStore>,
    down: Arc<AtomicBool>,
    /// Holds every lease call for a budget whose key starts with `slow` until notified.
    gate: Arc<tokio::sync::Notify>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            state: Arc::new(MemoryStore::new(StoreConfig::default())),
            down: Arc::default(),
            gate: Arc::default(),
        }
    }
}

impl Shared {
    fn up(&self) -> Result<(), Down> {
        if self.down.load(Ordering::Relaxed) {
            Err(Down)
        } else {
            Ok(())
        }
    }
}

impl AsyncStore for Shared {
    type Error = Down;
    fn is_shared(&self) -> bool {
        true
    }
    async fn decide(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Down> {
        self.up()?;
        Ok(self.state.decide(l, k, now, c))
    }
    async fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Down> {
        self.up()?;
        Ok(Store::decide_all(&*self.state, checks, now).unwrap_or_else(|n| match n {}))
    }
    async fn peek(&self, l: &Limit, k: &str, now: u64, c: u64) -> Result<Decision, Down> {
        self.up()?;
        Ok(self.state.peek(l, k, now, c))
    }
    async fn settle(&self, l: &Limit, k: &str, now: u64, d: i64) -> Result<(), Down> {
        self.up()?;
        self.state.settle(l, k, now, d);
        Ok(())
    }
    async fn clear(&self, k: &str) -> Result<bool, Down> {
        self.up()?;
        Ok(self.state.clear(k))
    }
    async fn lease(&self, k: &str, ask: Ask<'_>, now: u64) -> Result<u64, Down> {
        self.up()?;
        if k.starts_with("slow") {
            self.gate.notified().await;
        }
        Ok(self.state.lease(k, ask, now))
    }
}

fn budget() -> Budget {
    Budget {
        key: "api@1|*".to_owned(),
        per_period: 600,
        period: Duration::from_secs(1),
        burst: 60,
    }
}

fn usage(requests: u64, fallback: u64) -> Usage {
    weighted(requests, fallback, 1)
}

fn weighted(requests: u64, fallback: u64, weight: u64) -> Usage {
    Usage {
        budget: budget(),
        fallback,
        report: Report {
            bucket: vec![("name".to_owned(), "api".to_owned())],
            requests,
            elapsed: Duration::from_secs(1),
            weight,
        },
    }
}

/// What every stream of the fleet was last assigned, by (process, stream).
#[derive(Default)]
struct Heard(BTreeMap<(usize, u64), u64>);

impl Heard {
    fn hear(&mut self, process: usize, sent: Vec<Assignment>) {
        for a in sent {
            self.0.insert((process, a.stream), a.per_period);
        }
        let total: u64 = self.0.values().sum();
        assert!(total <= 600, "assigned {total} of 600: {:?}", self.0);
    }
    fn of(&self, process: usize, stream: u64) -> u64 {
        self.0[&(process, stream)]
    }
}

struct Fleet {
    store: Shared,
    boards: Vec<FleetBoard>,
    heard: Heard,
    now: u64,
}

impl Fleet {
    fn new(processes: usize) -> Self {
        Self {
            store: Shared::default(),
            boards: (0..processes)
                .map(|i| FleetBoard::new(format!("p{i}")))
                .collect(),
            heard: Heard::default(),
            now: T0,
        }
    }
    /// Two processes with a stream each, both wanting more than the budget, settled at
    /// half each.
    fn even_pair() -> Self {
        let mut fleet = Self::new(2);
        fleet.report(0, 1, 1000);
        fleet.report(1, 1, 1000);
        fleet.renew();
        fleet.renew();
        assert_eq!((fleet.heard.of(0, 1), fleet.heard.of(1, 1)), (300, 300));
        fleet
    }

    fn report(&mut self, process: usize, stream: u64, requests: u64) {
        let sent = now_or_panic(self.boards[process].report(
            &self.store,
            stream,
            vec![usage(requests, 0)],
            self.now,
        ));
        self.heard.hear(process, sent);
    }
    /// One renewal of every process, in order, RENEW_EVERY apart.
    fn renew(&mut self) {
        for p in 0..self.boards.len() {
            self.now += u64::try_from(RENEW_EVERY.as_nanos()).unwrap();
            let sent = now_or_panic(self.boards[p].renew_all(&self.store, self.now));
            self.heard.hear(p, sent);
        }
    }
    fn leave(&mut self, process: usize, stream: u64) {
        let sent = now_or_panic(self.boards[process].leave(&self.store, stream, self.now));
        self.heard.0.remove(&(process, stream));
        self.heard.hear(process, sent);
    }
}

#[test]
fn a_newcomer_waits_for_the_others_to_shrink_and_the_fleet_never_assigns_past_the_budget() {
    let mut fleet = Fleet::new(2);
    fleet.report(0, 1, 1000);
    assert_eq!(fleet.heard.of(0, 1), 600);
    // Process 1's stream arrives: nothing is free until process 0 shrinks.
    fleet.report(1, 1, 1000);
    assert_eq!(fleet.heard.of(1, 1), 0);
    fleet.renew();
    assert_eq!((fleet.heard.of(0, 1), fleet.heard.of(1, 1)), (300, 300));
    // Demand falls on process 0: it shrinks at once, process 1 grows at its renewal.
    fleet.report(0, 1, 100);
    assert_eq!(fleet.heard.of(0, 1), 100);
    fleet.renew();
    assert_eq!(fleet.heard.of(1, 1), 500);
}

#[test]
fn every_stream_gets_the_same_share_whichever_process_serves_it() {
    // Three streams on process 0, one on process 1, all wanting far more than 600.
    let mut fleet = Fleet::new(2);
    for stream in 1..=3 {
        fleet.report(0, stream, 5000);
    }
    fleet.report(1, 1, 5000);
    fleet.renew();
    fleet.renew();
    let shares: Vec<u64> = fleet.heard.0.values().copied().collect();
    assert_eq!(shares, [150, 150, 150, 150]);
}

#[test]
fn a_weighted_bucket_weighs_the_same_whichever_process_serves_it() {
    // A bucket of weight 3 on process 0, one of weight 1 on process 1, both wanting far
    // more than 600: 3:1 across the fleet, as on one board.
    let mut fleet = Fleet::new(2);
    for (process, weight) in [(0, 3), (1, 1)] {
        let sent = now_or_panic(fleet.boards[process].report(
            &fleet.store,
            1,
            vec![weighted(5000, 0, weight)],
            fleet.now,
        ));
        fleet.heard.hear(process, sent);
    }
    fleet.renew();
    fleet.renew();
    assert_eq!((fleet.heard.of(0, 1), fleet.heard.of(1, 1)), (450, 150));
}

#[test]
fn a_process_whose_streams_leave_gives_its_share_back() {
    let mut fleet = Fleet::even_pair();
    fleet.leave(1, 1);
    assert_eq!(now_or_panic(fleet.boards[1].held(&budget().key)), None);
    fleet.renew();
    assert_eq!(fleet.heard.of(0, 1), 600);
}

#[test]
fn a_store_failure_holds_the_share_in_hand_until_its_lease_lapses_then_the_rule_decides() {
    for (fallback, after) in [(0, 0), (600, 600), (200, 200)] {
        let fleet = Fleet::new(1);
        let board = &fleet.boards[0];
        let sent = now_or_panic(board.report(&fleet.store, 1, vec![usage(100, fallback)], T0));
        assert_eq!(sent[0].per_period, 100);
        fleet.store.down.store(true, Ordering::Relaxed);
        // Within the lease (3 s, from the 1 s reports): nothing is sent, the Envoy keeps
        // its assignment.
        let sent =
            now_or_panic(board.report(&fleet.store, 1, vec![usage(100, fallback)], T0 + 2 * SEC));
        assert!(sent.is_empty(), "{sent:?}");
        // Past it: the rule's on_store_failure (closed: none; open: the rate; local: a
        // share of it), capped by what the stream wants.
        let sent =
            now_or_panic(board.report(&fleet.store, 1, vec![usage(1000, fallback)], T0 + 4 * SEC));
        assert_eq!(sent[0].per_period, after, "fallback {fallback}");
        // Back up: the lease again.
        fleet.store.down.store(false, Ordering::Relaxed);
        let sent =
            now_or_panic(board.report(&fleet.store, 1, vec![usage(1000, fallback)], T0 + 5 * SEC));
        assert_eq!(sent[0].per_period, 600);
    }
}

#[test]
fn with_a_store_in_this_process_the_board_splits_the_whole_rate() {
    let store: MemoryStore = MemoryStore::new(StoreConfig::default());
    let board = FleetBoard::new("only");
    let sent = now_or_panic(board.report(&store, 1, vec![usage(1000, 0)], T0));
    assert_eq!(sent[0].per_period, 600);
    let sent = now_or_panic(board.report(&store, 2, vec![usage(1000, 0)], T0));
    let shares: Vec<u64> = sent.iter().map(|a| a.per_period).collect();
    assert_eq!(shares, [300, 300]);
    assert!(now_or_panic(board.renew_all(&store, T0 + SEC)).is_empty());
}

#[test]
fn a_process_that_stops_asking_frees_its_share_once_its_lease_lapses() {
    let mut fleet = Fleet::even_pair();
    // Process 1 dies: it neither asks again nor says its stream ended. Its lease holds as
    // long as the assignments it gave (3 s, from reports a second apart) and a renewal more.
    let died = fleet.now;
    fleet.heard.0.remove(&(1, 1));
    let renewal = u64::try_from(RENEW_EVERY.as_nanos()).unwrap();
    // Process 0's Envoy goes on reporting (each report a renewal of its lease).
    while fleet.now < died + 3 * SEC {
        fleet.now += renewal;
        fleet.report(0, 1, 1000);
        assert_eq!(fleet.heard.of(0, 1), 300, "at {} ns", fleet.now - died);
    }
    fleet.now += renewal;
    fleet.report(0, 1, 1000);
    assert_eq!(fleet.heard.of(0, 1), 600);
}

#[test]
fn a_slow_store_call_for_one_budget_holds_up_no_other_budget() {
    let store = Shared::default();
    let board = FleetBoard::new("p0");
    let on = |key: &str| Usage {
        budget: Budget {
            key: key.to_owned(),
            ..budget()
        },
        ..usage(100, 0)
    };
    let mut slow = std::pin::pin!(board.report(&store, 1, vec![on("slow|*")], T0));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        slow.as_mut().poll(&mut cx).is_pending(),
        "held at the store"
    );
    // Another budget's report is answered meanwhile (a ready future: nothing waits).
    let sent = now_or_panic(board.report(&store, 2, vec![on("fast|*")], T0));
    assert_eq!(sent[0].per_period, 100);
    store.gate.notify_one();
    let std::task::Poll::Ready(sent) = slow.as_mut().poll(&mut cx) else {
        panic!("the slow call was let through");
    };
    assert_eq!(sent[0].per_period, 100);
}
