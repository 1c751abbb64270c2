//! Adaptive rules with a queue (`[limit.queue]`): past the limit a request waits its turn,
//! fairly across tenants, instead of being refused; a release dispatches the next waiter;
//! past `max_wait`, or with its lanes full, it is shed; a client that goes away leaves.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ratewarden_core::adaptive::{Completion, Criticality};
use ratewarden_core::now_or_panic;
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{
    Engine, Request, RequestError, ShedReason, Timer, Verdict, WAIT_BUCKETS_NS,
};

const NOW: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;

/// A timer on a hand-moved clock: a sleep is over once the clock has reached its end
/// (the tests poll by hand, so nothing needs waking).
#[derive(Clone)]
struct ManualTimer(Arc<AtomicU64>);

impl ManualTimer {
    fn new() -> Self {
        Self(Arc::new(AtomicU64::new(NOW)))
    }

    fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Timer for ManualTimer {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn sleep(&self, ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let clock = Arc::clone(&self.0);
        let end = self.now().saturating_add(ns);
        Box::pin(std::future::poll_fn(move |_| {
            if clock.load(Ordering::SeqCst) >= end {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }))
    }
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Verdict, RequestError>> + 'a>>;

fn poll(future: &mut Pending<'_>) -> Option<Verdict> {
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v.expect("decided")),
        Poll::Pending => None,
    }
}

/// The secret the tests' engines deal lanes with: fixed, so that tenants can be picked for
/// their lanes before an engine is made (a real engine draws a random one).
const SECRET: u64 = 14;

fn engine(toml: &str) -> Engine<MemoryStore> {
    random_engine(toml).with_flow_secret(SECRET)
}

/// An engine as a server makes it: its flow secret drawn at random.
fn random_engine(toml: &str) -> Engine<MemoryStore> {
    Engine::new(
        parse("a.toml", toml).unwrap(),
        MemoryStore::new(StoreConfig::default()),
    )
}

fn request<'a>(path: &'a str, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    common::request("198.51.100.1", path, headers)
}

fn release(engine: &Engine<MemoryStore>, verdict: &Verdict, now: u64) {
    common::release(engine, verdict, Completion::default(), now);
}

/// One place (AIMD pinned at `limit`, no reserve) under one global key, and a queue.
fn queued(limit: u64, queue: &str) -> String {
    format!(
        "[[limit]]\nname = \"up\"\nkey = [\"global\"]\nalgorithm = \"adaptive-concurrency\"\nstrategy = \"aimd\"\n[limit.adaptive]\ninitial = {limit}\nmin = {limit}\nmax = {limit}\nreserve = 0\n[limit.queue]\n{queue}"
    )
}

/// Two tenant names whose flows take lanes 0 and 1 of 2 (with a hand of 1), as the
/// engines of [`engine`] deal them.
fn two_lanes() -> (String, String) {
    let probe = engine(&queued(1, "queues = 2\nhand = 1\n"));
    let lane = |name: &String| probe.queue_hand("up", name).expect("a queue")[0];
    let names: Vec<String> = (0..64).map(|i| format!("tenant-{i}")).collect();
    let zero = names.iter().find(|n| lane(n) == 0).unwrap().clone();
    let one = names.iter().find(|n| lane(n) == 1).unwrap().clone();
    (zero, one)
}

/// FNV-1a, the engine's flow hash before it was keyed: what an attacker could compute.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Kubernetes' shape: 64 lanes, a hand of 8.
const WIDE: &str = "queues = 64\nhand = 8\n";

#[test]
fn lanes_cannot_be_computed_outside_the_engine() {
    // With the unkeyed FNV-1a anyone could deal a victim's hand offline and pick tenant
    // names whose hands cover it. Keyed with a random secret per engine (per process),
    // two engines deal the same tenants differently, and neither as FNV-1a would; a hand
    // of 8 out of 64 lanes repeats by chance about once in 10^14.
    let (a, b) = (
        random_engine(&queued(1, WIDE)),
        random_engine(&queued(1, WIDE)),
    );
    let shape = ratewarden_core::adaptive::FairQueueConfig {
        queues: 64,
        hand: 8,
        ..Default::default()
    };
    for i in 0..16 {
        let tenant = format!("tenant-{i}");
        let (in_a, in_b) = (a.queue_hand("up", &tenant), b.queue_hand("up", &tenant));
        let (in_a, in_b) = (in_a.expect("a queue"), in_b.expect("a queue"));
        assert_eq!(in_a.len(), 8);
        assert_eq!(Some(&in_a), a.queue_hand("up", &tenant).as_ref(), "stable");
        assert_ne!(in_a, in_b, "{tenant} dealt alike by two engines");
        assert_ne!(
            in_a,
            shape.hand(fnv(&tenant)),
            "{tenant} dealt as FNV-1a deals"
        );
    }
    assert_eq!(a.queue_hand("nope", "tenant-0"), None);
}

#[test]
fn with_a_fixed_secret_the_lanes_replay() {
    let (a, b) = (engine(&queued(1, WIDE)), engine(&queued(1, WIDE)));
    let other = random_engine(&queued(1, WIDE)).with_flow_secret(SECRET + 1);
    let mut moved = 0;
    for i in 0..16 {
        let tenant = format!("tenant-{i}");
        let in_a = a.queue_hand("up", &tenant).expect("a queue");
        assert_eq!(Some(&in_a), b.queue_hand("up", &tenant).as_ref());
        if Some(&in_a) != other.queue_hand("up", &tenant).as_ref() {
            moved += 1;
        }
    }
    assert_eq!(moved, 16, "another secret deals other hands");
}

#[test]
fn past_the_limit_a_request_waits_and_a_release_lets_it_in() {
    let engine = engine(&queued(1, "max_wait = \"1s\"\n"));
    let timer = ManualTimer::new();
    let r = request("/", &[]);
    let first = now_or_panic(engine.decide_waiting(&r, &timer)).unwrap();
    assert!(first.allowed);
    let mut second: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut second).is_none(), "waits rather than being shed");
    assert_eq!(engine.adaptive_states(1)[0].waiting, 1);
    timer.advance(30 * MS);
    release(&engine, &first, timer.now());
    let let_in = poll(&mut second).expect("dispatched by the release");
    assert!(let_in.allowed && let_in.permit.is_some());
    let queues = engine.adaptive_queues();
    assert_eq!(queues.len(), 1);
    assert_eq!(
        (queues[0].rule.as_str(), queues[0].class),
        ("up", Criticality::Default)
    );
    assert_eq!(queues[0].waiting, 0);
    assert_eq!(
        (queues[0].waits.count, queues[0].waits.sum_ns),
        (1, 30 * MS)
    );
    let bucket = WAIT_BUCKETS_NS.iter().position(|&b| 30 * MS <= b).unwrap();
    assert_eq!(queues[0].waits.buckets[bucket], 1);
    // The one let in holds the place: it is released as any other.
    release(&engine, &let_in, timer.now());
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 0);
}

#[test]
fn without_a_timer_a_queued_rule_refuses_at_once_as_before() {
    // The decision API and forward-auth cannot hold a request: `decide` never waits.
    let engine = engine(&queued(1, ""));
    let r = request("/", &[]);
    assert!(now_or_panic(engine.decide(&r, NOW)).unwrap().allowed);
    let refused = now_or_panic(engine.decide(&r, NOW)).unwrap();
    assert!(!refused.allowed && refused.shed());
    assert_eq!(engine.adaptive_states(1)[0].waiting, 0);
    let limit = engine
        .adaptive_shed_reasons()
        .into_iter()
        .find(|(c, r, _)| *c == Criticality::Default && *r == ShedReason::Limit);
    assert_eq!(limit.map(|(_, _, n)| n), Some(1));
}

#[test]
fn a_waiter_past_max_wait_is_shed() {
    let engine = engine(&queued(1, "max_wait = \"100ms\"\n"));
    let timer = ManualTimer::new();
    let r = request("/", &[]);
    let first = now_or_panic(engine.decide_waiting(&r, &timer)).unwrap();
    let mut waiting: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut waiting).is_none());
    timer.advance(99 * MS);
    assert!(poll(&mut waiting).is_none());
    timer.advance(MS);
    let shed = poll(&mut waiting).expect("its wait is over");
    assert!(!shed.allowed && shed.shed());
    assert_eq!(shed.retry_after_ns, Some(1_000_000_000));
    assert_eq!(engine.adaptive_states(1)[0].waiting, 0);
    let counts = engine.adaptive_shed_reasons();
    let count = |reason| {
        counts
            .iter()
            .find(|(c, r, _)| *c == Criticality::Default && *r == reason)
            .map(|(_, _, n)| *n)
    };
    assert_eq!(count(ShedReason::WaitedTooLong), Some(1));
    assert_eq!(count(ShedReason::Limit), Some(0));
    // The place held all along is still there to release.
    release(&engine, &first, timer.now());
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 0);
}

#[test]
fn a_full_lane_sheds_the_newcomer_at_once() {
    let engine = engine(&queued(
        1,
        "queues = 2\nhand = 1\nqueue_length = 2\nmax_wait = \"1s\"\n",
    ));
    let timer = ManualTimer::new();
    let (heavy, light) = two_lanes();
    let h = [("x-tenant-id", heavy.as_str())];
    let l = [("x-tenant-id", light.as_str())];
    let hr = request("/", &h);
    let lr = request("/", &l);
    let _held = now_or_panic(engine.decide_waiting(&hr, &timer)).unwrap();
    let mut w1: Pending<'_> = Box::pin(engine.decide_waiting(&hr, &timer));
    let mut w2: Pending<'_> = Box::pin(engine.decide_waiting(&hr, &timer));
    assert!(poll(&mut w1).is_none() && poll(&mut w2).is_none());
    let mut w3: Pending<'_> = Box::pin(engine.decide_waiting(&hr, &timer));
    let full = poll(&mut w3).expect("refused at once");
    assert!(!full.allowed && full.shed());
    // The other tenant's lane is its own: it still waits.
    let mut other: Pending<'_> = Box::pin(engine.decide_waiting(&lr, &timer));
    assert!(poll(&mut other).is_none());
    let full_count = engine
        .adaptive_shed_reasons()
        .into_iter()
        .find(|(c, r, _)| *c == Criticality::Default && *r == ShedReason::QueueFull)
        .map(|(_, _, n)| n);
    assert_eq!(full_count, Some(1));
}

#[test]
fn waiters_are_served_fairly_across_tenants() {
    let engine = engine(&queued(
        1,
        "queues = 2\nhand = 1\nqueue_length = 10\nmax_wait = \"1s\"\n",
    ));
    let timer = ManualTimer::new();
    let (heavy, light) = two_lanes();
    let h = [("x-tenant-id", heavy.as_str())];
    let l = [("x-tenant-id", light.as_str())];
    let hr = request("/", &h);
    let lr = request("/", &l);
    let mut holder = now_or_panic(engine.decide_waiting(&hr, &timer)).unwrap();
    // The heavy tenant queues four, then the light one two.
    let mut waiters: Vec<(&str, Pending<'_>)> = Vec::new();
    for _ in 0..4 {
        waiters.push(("heavy", Box::pin(engine.decide_waiting(&hr, &timer))));
    }
    for _ in 0..2 {
        waiters.push(("light", Box::pin(engine.decide_waiting(&lr, &timer))));
    }
    for (_, w) in &mut waiters {
        assert!(poll(w).is_none());
    }
    let mut order = Vec::new();
    for _ in 0..6 {
        release(&engine, &holder, timer.now());
        let mut next = None;
        for (i, (who, w)) in waiters.iter_mut().enumerate() {
            if let Some(v) = poll(w) {
                assert!(v.allowed);
                next = Some((i, *who, v));
                break;
            }
        }
        let (i, who, v) = next.expect("each release lets one in");
        drop(waiters.remove(i));
        order.push(who);
        holder = v;
    }
    // Round robin over the two lanes: the light tenant does not wait behind all four.
    assert_eq!(
        order,
        ["heavy", "light", "heavy", "light", "heavy", "heavy"]
    );
}

#[test]
fn weights_give_a_tenant_more_turns() {
    let (a, b) = two_lanes();
    let engine = engine(&queued(
        1,
        &format!("queues = 2\nhand = 1\nmax_wait = \"1s\"\n[limit.queue.weights]\n\"{b}\" = 2\n"),
    ));
    let config = parse(
        "a.toml",
        &queued(1, &format!("[limit.queue.weights]\n\"{b}\" = 2\n")),
    )
    .unwrap();
    let queue = config.rules[0].adaptive.clone().unwrap().queue.unwrap();
    assert_eq!((queue.weight(&b), queue.weight(&a)), (2, 1));
    let timer = ManualTimer::new();
    let ha = [("x-tenant-id", a.as_str())];
    let hb = [("x-tenant-id", b.as_str())];
    let ra = request("/", &ha);
    let rb = request("/", &hb);
    let mut holder = now_or_panic(engine.decide_waiting(&ra, &timer)).unwrap();
    let mut waiters: Vec<(&str, Pending<'_>)> = Vec::new();
    for _ in 0..4 {
        waiters.push(("a", Box::pin(engine.decide_waiting(&ra, &timer))));
        waiters.push(("b", Box::pin(engine.decide_waiting(&rb, &timer))));
    }
    for (_, w) in &mut waiters {
        assert!(poll(w).is_none());
    }
    let mut order = Vec::new();
    for _ in 0..6 {
        release(&engine, &holder, timer.now());
        let i = waiters
            .iter_mut()
            .position(|(_, w)| {
                poll(w).is_some_and(|v| {
                    holder = v;
                    true
                })
            })
            .expect("each release lets one in");
        order.push(waiters.remove(i).0);
    }
    // Weight 2: two of b's for one of a's.
    assert_eq!(order, ["a", "b", "b", "a", "b", "b"]);
}

#[test]
fn a_client_that_goes_away_leaves_the_queue() {
    let engine = engine(&queued(1, "max_wait = \"1s\"\n"));
    let timer = ManualTimer::new();
    let r = request("/", &[]);
    let first = now_or_panic(engine.decide_waiting(&r, &timer)).unwrap();
    let mut gone: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    let mut stays: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut gone).is_none() && poll(&mut stays).is_none());
    assert_eq!(engine.adaptive_states(1)[0].waiting, 2);
    // Its client disconnects: the server drops the future.
    drop(gone);
    assert_eq!(engine.adaptive_states(1)[0].waiting, 1);
    // The place goes to the one still waiting, not to the one that left.
    release(&engine, &first, timer.now());
    let second = poll(&mut stays).expect("next in line");
    assert!(second.allowed);

    // Granted a place but gone before it woke: the place is given back, not leaked.
    let mut granted_then_gone: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut granted_then_gone).is_none());
    release(&engine, &second, timer.now());
    assert_eq!(
        engine.adaptive_states(1)[0].in_flight,
        1,
        "granted to the waiter"
    );
    drop(granted_then_gone);
    let state = &engine.adaptive_states(1)[0];
    assert_eq!((state.in_flight, state.waiting), (0, 0));
    assert!(
        now_or_panic(engine.decide_waiting(&r, &timer))
            .unwrap()
            .allowed
    );
}

#[test]
fn critical_waiters_go_first_and_sheddable_ones_are_refused_past_their_share() {
    let toml = format!(
        "[server]\ntrusted_proxies = [\"198.51.100.0/24\"]\n\n{}",
        queued(1, "queue_length = 2\nmax_wait = \"1s\"\n")
    );
    let engine = engine(&toml);
    let timer = ManualTimer::new();
    let critical = [("x-criticality", "critical")];
    let sheddable = [("x-criticality", "sheddable")];
    let c = request("/", &critical);
    let d = request("/", &[]);
    let s = request("/", &sheddable);
    let first = now_or_panic(engine.decide_waiting(&d, &timer)).unwrap();
    let mut shed_waiter: Pending<'_> = Box::pin(engine.decide_waiting(&s, &timer));
    let mut default_waiter: Pending<'_> = Box::pin(engine.decide_waiting(&d, &timer));
    let mut critical_waiter: Pending<'_> = Box::pin(engine.decide_waiting(&c, &timer));
    assert!(poll(&mut shed_waiter).is_none());
    assert!(poll(&mut default_waiter).is_none());
    assert!(poll(&mut critical_waiter).is_none());
    // Three wait, past one lane's worth (2): a sheddable newcomer is refused at once.
    let mut late: Pending<'_> = Box::pin(engine.decide_waiting(&s, &timer));
    assert!(poll(&mut late).is_some_and(|v| !v.allowed && v.shed()));
    // Critical first, then default, then sheddable, whatever the order they came in.
    release(&engine, &first, timer.now());
    assert!(poll(&mut shed_waiter).is_none() && poll(&mut default_waiter).is_none());
    let v = poll(&mut critical_waiter).expect("critical first");
    release(&engine, &v, timer.now());
    assert!(poll(&mut shed_waiter).is_none());
    let v = poll(&mut default_waiter).expect("then default");
    release(&engine, &v, timer.now());
    assert!(poll(&mut shed_waiter).expect("then sheddable").allowed);
}

#[test]
fn made_up_tenants_cannot_grow_the_queue_without_bound() {
    // Tenants come from a header: each new one is only a hash onto the lanes, so what is
    // held is the lanes' room at most, whatever the number of tenants.
    let engine = engine(&queued(
        1,
        "queues = 4\nhand = 2\nqueue_length = 3\nmax_wait = \"1s\"\n",
    ));
    let timer = ManualTimer::new();
    let _held = now_or_panic(engine.decide_waiting(&request("/", &[]), &timer)).unwrap();
    let tenants: Vec<String> = (0..2_000).map(|i| format!("t{i}")).collect();
    let headers: Vec<[(&str, &str); 1]> = tenants
        .iter()
        .map(|t| [("x-tenant-id", t.as_str())])
        .collect();
    let requests: Vec<Request<'_>> = headers.iter().map(|h| request("/", h)).collect();
    let mut waiting = Vec::new();
    let mut shed = 0;
    for r in &requests {
        let mut w: Pending<'_> = Box::pin(engine.decide_waiting(r, &timer));
        match poll(&mut w) {
            None => waiting.push(w),
            Some(v) => {
                assert!(v.shed());
                shed += 1;
            }
        }
    }
    assert_eq!(waiting.len(), 12, "4 lanes of 3");
    assert_eq!(shed, 2_000 - 12);
    assert_eq!(engine.adaptive_states(1)[0].waiting, 12);
}

#[test]
fn queues_are_validated_with_located_errors() {
    let rule = "[[limit]]\nname = \"up\"\nkey = [\"global\"]\nalgorithm = \"adaptive-concurrency\"\n[limit.queue]\n";
    let cases = [
        (
            format!("{rule}hand = 9\nqueues = 8\n"),
            "a.toml:6:8: limit `up`: `queue.hand` (9) is more than the 8 `queue.queues`",
        ),
        (
            format!("{rule}key = \"tenat\"\n"),
            "a.toml:6:7: limit `up`: `queue.key` is one key part (tenant, api_key, ip, header:NAME, route, global or literal:TEXT), not `tenat`; did you mean `tenant`?",
        ),
        (
            format!("{rule}max_wait = \"0s\"\n"),
            "a.toml:6:12: limit `up`: `queue.max_wait` must be longer than zero",
        ),
        (
            format!("{rule}queue_length = 0\n"),
            "a.toml:6:16: limit `up`: `queue.queue_length` must be a whole number above zero, not 0",
        ),
        (
            format!("{rule}[limit.queue.weights]\n\"acme\" = 0\n"),
            "a.toml:7:10: limit `up`: the weight of `acme` in `queue.weights` must be a whole number above zero, not 0",
        ),
        (
            format!("{rule}[limit.queue.weights]\n\"acme\" = 5000\n"),
            "a.toml:7:10: limit `up`: the weight of `acme` in `queue.weights` is at most 1000, not 5000",
        ),
        (
            format!("{rule}lanes = 3\n"),
            "unknown field `lanes`",
        ),
        (
            "[[limit]]\nname = \"r\"\nkey = [\"global\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n[limit.queue]\nhand = 1\n".to_owned(),
            "limit `r`: `queue` applies only to `algorithm = \"adaptive-concurrency\"`",
        ),
    ];
    for (text, want) in cases {
        let got = match parse("a.toml", &text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(want), "wanted {want}\ngot {got}");
    }
    // The defaults: Kubernetes' shape, one second, keyed by tenant.
    let config = parse("a.toml", rule).unwrap();
    let queue = config.rules[0].adaptive.clone().unwrap().queue.unwrap();
    assert_eq!(queue.key, ratewarden_policy::KeyPart::Tenant);
    assert_eq!(
        (
            queue.shape.queues,
            queue.shape.hand,
            queue.shape.queue_length,
            queue.shape.max_wait_ns
        ),
        (64, 8, 50, 1_000_000_000)
    );
}

/// One place with a lease of 100 ms, and a queue waiting up to a second.
fn leased() -> String {
    queued(1, "max_wait = \"1s\"\n")
        .replace("[limit.adaptive]", "lease = \"100ms\"\n[limit.adaptive]")
}

#[test]
fn a_place_whose_holder_is_gone_goes_to_a_waiter_when_its_lease_lapses() {
    // The place was freed only by the next event (a release, a newcomer): with none, the
    // waiter waited out its whole `max_wait` and was shed, the place free for 900 ms.
    let engine = engine(&leased());
    let timer = ManualTimer::new();
    let r = request("/", &[]);
    // Taken through the decision API, whose caller never releases it.
    let gone = now_or_panic(engine.decide(&r, timer.now())).unwrap();
    assert!(gone.allowed);
    let mut waiting: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut waiting).is_none());
    timer.advance(99 * MS);
    assert!(poll(&mut waiting).is_none(), "the lease still runs");
    timer.advance(MS);
    let let_in = poll(&mut waiting).expect("let in as the lease lapses");
    assert!(let_in.allowed);
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 1);
    assert_eq!(engine.adaptive_queues()[0].waits.sum_ns, 100 * MS);
}

#[test]
fn a_waiter_past_its_max_wait_does_not_take_a_place_from_one_within_it() {
    let engine = engine(&queued(1, "max_wait = \"1s\"\n"));
    let timer = ManualTimer::new();
    let r = request("/", &[]);
    let holder = now_or_panic(engine.decide_waiting(&r, &timer)).unwrap();
    let mut late: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut late).is_none());
    timer.advance(500 * MS);
    let mut in_time: Pending<'_> = Box::pin(engine.decide_waiting(&r, &timer));
    assert!(poll(&mut in_time).is_none());
    // The first waiter's second is up, but its future has not run yet (a busy worker)
    // when the place comes free: the place goes to the one still within its wait.
    timer.advance(600 * MS);
    release(&engine, &holder, timer.now());
    let let_in = poll(&mut in_time).expect("dispatched by the release");
    assert!(let_in.allowed);
    let shed = poll(&mut late).expect("past its deadline");
    assert!(!shed.allowed && shed.shed());
    let waited_too_long = engine
        .adaptive_shed_reasons()
        .into_iter()
        .find(|(c, r, _)| *c == Criticality::Default && *r == ShedReason::WaitedTooLong);
    assert_eq!(waited_too_long.map(|(_, _, n)| n), Some(1));
}
