//! Calls coalesced into batches against real `redis-server` processes: a trace decided
//! through batches is the trace decided one call at a time (the in-memory store), on one
//! Redis and on a Cluster; a batch at its bound splits; a batch reads `TIME` once; a batch
//! whose connection drops fails each of its calls and is never applied twice.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    AsyncStore, CalendarUnit, Check, Concurrency, Decision, FixedWindow, Gcra, LeakyBucket,
    LeakyQueue, Limit, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_redis::testing::{Cluster, Cut, Server};
use ratewarden_redis::{RedisConfig, RedisError, RedisStore, Target, TimeSource};

const SEC: u64 = 1_000_000_000;
/// 2026-12-02T00:00:00Z: real epoch times, near 2^61 ns, as production sees them.
const T0: u64 = 1_796_169_600 * SEC;

fn config(target: Target, time: TimeSource) -> RedisConfig {
    RedisConfig {
        target,
        // Generous for a shared CI machine.
        deadline: Duration::from_secs(2),
        time,
        ..RedisConfig::default()
    }
}

fn store(config: RedisConfig) -> RedisStore {
    RedisStore::new(config).expect("a valid config")
}

/// Polls every call in order, each first up to where it is sent or joins the batch waiting
/// for the call in flight, so the calls reach the store in this order: the first goes at
/// once, the others together after it.
async fn together<'a, T>(calls: Vec<Pin<Box<dyn Future<Output = T> + 'a>>>) -> Vec<T> {
    let mut calls: Vec<_> = calls.into_iter().map(Some).collect();
    let mut done: Vec<Option<T>> = calls.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (call, out) in calls.iter_mut().zip(done.iter_mut()) {
            if let Some(future) = call {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *out = Some(value);
                        *call = None;
                    }
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// One limit of every algorithm, with rates whose ticks are not whole nanoseconds.
fn limits() -> Vec<Limit> {
    let rate = |count, ms| Rate::new(count, Duration::from_millis(ms)).unwrap();
    vec![
        Limit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(SlidingLog::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(SlidingWindow::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(TokenBucket::new(rate(3, 1000), 5).unwrap()),
        Limit::from(LeakyBucket::new(rate(7, 11_000), 4).unwrap()),
        Limit::from(LeakyQueue::new(rate(5, 1000), 3).unwrap()),
        Limit::from(Gcra::new(rate(3, 1000), 5).unwrap()),
        Limit::from(Quota::new(20, CalendarUnit::Minute, "UTC").unwrap()),
        Limit::from(Concurrency::new(3, Duration::from_secs(2)).unwrap()),
        Limit::from(Gcra::new(rate(50, 1000), 100).unwrap()),
    ]
}

/// One step of a trace, at its own time.
#[derive(Debug)]
enum Op {
    Decide(usize, String, u64),
    Peek(usize, String, u64),
    Settle(usize, String, i64),
    /// Layered checks of one request (their keys share their parts, so a Cluster slot).
    Layered(Vec<(usize, String, u64)>),
    Take(usize, String, u64),
}

#[derive(Debug, PartialEq)]
enum Out {
    One(Decision),
    All(Vec<Decision>),
    Settled,
    Took(u64, Decision),
}

fn random_op(rng: &mut Rng, limits: &[Limit]) -> Op {
    let key = |rng: &mut Rng, i: usize| {
        format!("trace{i}{}|k{}", limits[i].kind().as_str(), rng.below(3))
    };
    let cost = |rng: &mut Rng| match rng.below(8) {
        0 => 0,
        1 => 1 + rng.below(8),
        _ => 1,
    };
    let i = rng.below(limits.len() as u64) as usize;
    match rng.below(12) {
        0 => Op::Settle(i, key(rng, i), rng.below(7) as i64 - 3),
        1 => Op::Peek(i, key(rng, i), cost(rng)),
        2 => {
            let parts = rng.below(3);
            let n = 2 + rng.below(2) as usize;
            Op::Layered(
                (0..n)
                    .map(|_| {
                        let j = rng.below(limits.len() as u64) as usize;
                        let key = format!("trace{j}{}|k{parts}", limits[j].kind().as_str());
                        (j, key, cost(rng))
                    })
                    .collect(),
            )
        }
        // A prefetch takes from the algorithms whose remaining is what fits.
        3 if !matches!(limits[i], Limit::SlidingLog(_) | Limit::Concurrency(_)) => {
            Op::Take(i, key(rng, i), 1 + rng.below(6))
        }
        _ => Op::Decide(i, key(rng, i), cost(rng)),
    }
}

async fn apply<S: AsyncStore>(
    store: &S,
    limits: &[Limit],
    op: &Op,
    now: u64,
) -> Result<Out, S::Error> {
    Ok(match op {
        Op::Decide(i, key, cost) => Out::One(store.decide(&limits[*i], key, now, *cost).await?),
        Op::Peek(i, key, cost) => Out::One(store.peek(&limits[*i], key, now, *cost).await?),
        Op::Settle(i, key, delta) => {
            store.settle(&limits[*i], key, now, *delta).await?;
            Out::Settled
        }
        Op::Layered(checks) => {
            let checks: Vec<Check<'_>> = checks
                .iter()
                .map(|(i, key, cost)| Check {
                    limit: &limits[*i],
                    key,
                    cost: *cost,
                })
                .collect();
            Out::All(store.decide_all(&checks, now).await?)
        }
        Op::Take(i, key, want) => {
            let (granted, d) = store.take(&limits[*i], key, now, *want).await?;
            Out::Took(granted, d)
        }
    })
}

/// `FCALL`s the servers ran since their counts were reset.
fn fcalls(servers: &[&Server]) -> u64 {
    servers.iter().map(|s| calls_of(s, "fcall")).sum()
}

/// Calls of `command` in `server`'s `INFO commandstats` (scripts' own calls included).
fn calls_of(server: &Server, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let line = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.trim().strip_prefix(line.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Decides a random trace in groups of calls made together (coalesced: the first of a group
/// goes at once, the others in batches after it) and the same trace one call at a time on
/// the in-memory store: every answer is the same. Returns how many calls were made.
async fn trace_matches_one_by_one(redis: &RedisStore, seed: u64, steps: usize) -> u64 {
    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    let limits = limits();
    let mut rng = Rng(seed);
    let mut now = T0;
    let mut calls = 0;
    let mut done = 0;
    while done < steps {
        let size = 1 + rng.below(24) as usize;
        let mut group: Vec<(Op, u64)> = Vec::new();
        for _ in 0..size {
            now += match rng.below(10) {
                0..=5 => rng.below(300_000_000),
                6..=8 => 0,
                _ => rng.below(5 * SEC),
            };
            group.push((random_op(&mut rng, &limits), now));
        }
        let limits = &limits;
        let got = together(
            group
                .iter()
                .map(|(op, now)| {
                    Box::pin(apply(redis, limits, op, *now))
                        as Pin<Box<dyn Future<Output = Result<Out, RedisError>>>>
                })
                .collect(),
        )
        .await;
        for (step, ((op, now), got)) in group.iter().zip(got).enumerate() {
            let want = apply(&memory, limits, op, *now)
                .await
                .expect("memory decides");
            let got = got.unwrap_or_else(|e| panic!("call {} ({op:?}): {e}", done + step));
            assert_eq!(got, want, "call {} ({op:?}) at {now}", done + step);
            calls += match op {
                Op::Layered(checks) => checks.len() as u64,
                _ => 1,
            };
        }
        done += size;
    }
    calls
}

#[tokio::test]
async fn a_random_trace_through_batches_decides_as_one_call_at_a_time_on_one_redis() {
    let server = Server::start();
    let redis = store(config(Target::Single(server.url()), TimeSource::Caller));
    // Connected and the library loaded, so that the counts are the trace's.
    redis.peek(&limits()[0], "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let calls = trace_matches_one_by_one(&redis, 0x5eed_ba7c_0001, 3000).await;
    let fcalls = fcalls(&[&server]);
    assert!(
        fcalls * 3 < calls,
        "{calls} calls went in {fcalls} FCALLs: too few were batched"
    );
}

#[tokio::test]
async fn a_random_trace_through_batches_decides_as_one_call_at_a_time_on_a_cluster() {
    let cluster = Cluster::start();
    let redis = store(config(Target::Cluster(cluster.urls()), TimeSource::Caller));
    redis.peek(&limits()[0], "warm|k", T0, 0).await.unwrap();
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "RESETSTAT"]);
    }
    let calls = trace_matches_one_by_one(&redis, 0x5eed_ba7c_0002, 2000).await;
    let nodes: Vec<&Server> = cluster.nodes.iter().collect();
    let fcalls = fcalls(&nodes);
    // Batches by slot: the trace's keys fall in three.
    assert!(
        fcalls * 2 < calls,
        "{calls} calls went in {fcalls} FCALLs: too few were batched"
    );
}

/// A limit that never refuses in these tests.
fn roomy() -> Limit {
    Limit::from(Gcra::new(Rate::per_second(1_000_000).unwrap(), 1_000_000).unwrap())
}

/// `n` decisions made together on distinct keys, each answered.
async fn decide_together(redis: &RedisStore, limit: &Limit, n: usize) {
    let keys: Vec<String> = (0..n).map(|i| format!("bound|k{i}")).collect();
    let got = together(
        keys.iter()
            .map(|key| {
                Box::pin(redis.decide(limit, key, T0, 1))
                    as Pin<Box<dyn Future<Output = Result<Decision, RedisError>>>>
            })
            .collect(),
    )
    .await;
    for (key, d) in keys.iter().zip(got) {
        let d = d.unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(d.is_allowed(), "{key}: {d:?}");
    }
}

#[tokio::test]
async fn a_batch_at_its_bound_of_calls_splits() {
    let server = Server::start();
    let redis = store(RedisConfig {
        batch_calls: 4,
        ..config(Target::Single(server.url()), TimeSource::Redis)
    });
    let limit = roomy();
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    // The first alone, then the nine that waited for it: 4, 4 and 1.
    decide_together(&redis, &limit, 10).await;
    assert_eq!(fcalls(&[&server]), 4);
    // Each batch read TIME once, as each call alone does.
    assert_eq!(calls_of(&server, "time"), 4);
    // Two in flight before calls wait: the first two alone, then the eight that waited.
    let two = store(RedisConfig {
        batch_in_flight: 2,
        ..config(Target::Single(server.url()), TimeSource::Redis)
    });
    two.peek(&limit, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    decide_together(&two, &limit, 10).await;
    assert_eq!(fcalls(&[&server]), 3);
}

#[tokio::test]
async fn a_batch_at_its_bound_of_bytes_splits_and_a_call_over_it_goes_alone() {
    let server = Server::start();
    let limit = roomy();
    // The bytes of one call, as the store sends it on Redis's clock.
    let probe = store(config(Target::Single(server.url()), TimeSource::Redis));
    let (key, args) = probe.one_check_command(&limit, "bound|k0", 1, T0);
    let (function, _) = RedisStore::script();
    let one = "FCALL".len()
        + function.len()
        + "1".len()
        + key.len()
        + args.iter().map(String::len).sum::<usize>();
    let redis = store(RedisConfig {
        batch_bytes: 2 * one + one / 2,
        ..config(Target::Single(server.url()), TimeSource::Redis)
    });
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    // The first alone, then the nine that waited for it, two by two: 1 + 5.
    decide_together(&redis, &limit, 10).await;
    assert_eq!(fcalls(&[&server]), 6);
    // Under a bound smaller than any call, each goes alone: 1 + 9.
    let redis = store(RedisConfig {
        batch_bytes: 1,
        ..config(Target::Single(server.url()), TimeSource::Redis)
    });
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    decide_together(&redis, &limit, 10).await;
    assert_eq!(fcalls(&[&server]), 10);
}

#[tokio::test]
async fn without_batching_every_call_is_its_own_fcall() {
    let server = Server::start();
    let redis = store(RedisConfig {
        batch_calls: 1,
        ..config(Target::Single(server.url()), TimeSource::Redis)
    });
    let limit = roomy();
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    decide_together(&redis, &limit, 10).await;
    assert_eq!(fcalls(&[&server]), 10);
}

#[tokio::test]
async fn a_call_that_fails_in_a_batch_fails_alone() {
    let server = Server::start();
    let redis = store(config(Target::Single(server.url()), TimeSource::Caller));
    let limit = Limit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    // Not a state the store wrote: its decision is an error, in a batch as alone.
    server.cli(&["SET", "rw:bad|{k}", "garbage"]);
    let keys = ["first|k", "a|k", "bad|k", "b|k"];
    let got = together(
        keys.iter()
            .map(|key| {
                Box::pin(redis.decide(&limit, key, T0, 1))
                    as Pin<Box<dyn Future<Output = Result<Decision, RedisError>>>>
            })
            .collect(),
    )
    .await;
    for (key, d) in keys.iter().zip(got) {
        match (*key, d) {
            ("bad|k", Err(e)) => assert!(e.to_string().contains("not a ratewarden state"), "{e}"),
            (key, Ok(d)) if key != "bad|k" => assert_eq!(d.remaining, 4, "{key}"),
            (key, other) => panic!("{key}: {other:?}"),
        }
    }
}

/// A batch whose connection drops after Redis ran it and before its reply arrived: each of
/// its calls fails (so each rule's failure policy answers), none is sent again, and each
/// was charged once, by the one run.
#[tokio::test]
async fn a_batch_cut_by_a_dropped_connection_fails_each_call_and_is_never_applied_twice() {
    let server = Server::start();
    let relay = Cut::start(server.port);
    // Eight failures at once: the breaker stays closed for the call after them.
    let redis = store(RedisConfig {
        breaker_failures: 100,
        ..config(Target::Single(relay.url()), TimeSource::Caller)
    });
    let limit = Limit::from(FixedWindow::new(100, Duration::from_secs(1)).unwrap());
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    let got = together(
        (0..9)
            .map(|_| {
                Box::pin(redis.decide(&limit, "cut|k", T0, 1))
                    as Pin<Box<dyn Future<Output = Result<Decision, RedisError>>>>
            })
            .collect(),
    )
    .await;
    assert!(relay.cut(), "the batch's connection was cut");
    // The first went alone and was answered; the eight after it were one batch.
    let mut got = got.into_iter();
    assert_eq!(got.next().unwrap().unwrap().remaining, 99);
    for d in got {
        let e = d.expect_err("a call whose reply was lost fails");
        assert!(!matches!(e, RedisError::Timeout(_)), "failed at once: {e}");
    }
    // Redis ran the batch once: nine units charged, not one (it did not run) nor seventeen
    // (it ran again).
    let state = server.cli(&["GET", "rw:cut|{k}"]);
    assert!(state.ends_with(",9"), "{state}");
    // The next call goes on a new connection, and nothing before it is sent again.
    let mut next = redis.decide(&limit, "cut|k", T0, 1).await;
    for _ in 0..100 {
        if next.is_ok() {
            break;
        }
        tokio::task::yield_now().await;
        next = redis.decide(&limit, "cut|k", T0, 1).await;
    }
    assert_eq!(next.expect("reconnected").remaining, 90);
    assert!(server.cli(&["GET", "rw:cut|{k}"]).ends_with(",10"));
}

/// On Redis's clock, the calls of one batch see each other in order at one `TIME`: of ten
/// calls on one key under a burst of five (and a rate too slow to refill within the test),
/// the first five are admitted and the last five refused.
#[tokio::test]
async fn on_redis_time_a_batch_decides_in_order_at_one_time() {
    let server = Server::start();
    let redis = store(config(Target::Single(server.url()), TimeSource::Redis));
    let five = Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), 5).unwrap());
    redis.peek(&five, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let got = together(
        (0..10)
            .map(|_| {
                Box::pin(redis.decide(&five, "order|k", T0, 1))
                    as Pin<Box<dyn Future<Output = Result<Decision, RedisError>>>>
            })
            .collect(),
    )
    .await;
    let admitted: Vec<bool> = got.into_iter().map(|d| d.unwrap().is_allowed()).collect();
    assert_eq!(
        admitted,
        [true, true, true, true, true, false, false, false, false, false]
    );
    // The first alone, the nine after it in one batch.
    assert_eq!(fcalls(&[&server]), 2);
}

/// Permits and leased shares coalesce as decisions do, each answered as alone in order:
/// of six permits asked together under a limit of three, the first three are granted; of
/// six releases together, the three held are given back; six members' asks for a share of
/// one budget together are granted as the in-memory store grants them one at a time.
#[tokio::test]
async fn permits_and_leases_in_a_batch_are_answered_in_order() {
    use ratewarden_core::lease::Ask;
    let server = Server::start();
    let redis = store(config(Target::Single(server.url()), TimeSource::Caller));
    let three = Limit::from(Concurrency::new(3, Duration::from_secs(10)).unwrap());
    redis.peek(&three, "warm|k", T0, 0).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let ids: Vec<u64> = (1..=6).collect();
    let acquired = together(
        ids.iter()
            .map(|&id| {
                Box::pin(redis.acquire(&three, "permits|k", T0, 1, id))
                    as Pin<Box<dyn Future<Output = Result<Result<(), Decision>, RedisError>>>>
            })
            .collect(),
    )
    .await;
    let granted: Vec<bool> = acquired.into_iter().map(|a| a.unwrap().is_ok()).collect();
    assert_eq!(granted, [true, true, true, false, false, false]);
    let released = together(
        ids.iter()
            .rev()
            .map(|&id| {
                Box::pin(redis.release(&three, "permits|k", T0, id))
                    as Pin<Box<dyn Future<Output = Result<bool, RedisError>>>>
            })
            .collect(),
    )
    .await;
    let released: Vec<bool> = released.into_iter().map(Result::unwrap).collect();
    assert_eq!(released, [false, false, false, true, true, true]);
    assert_eq!(fcalls(&[&server]), 4, "each group: one alone, one batch");

    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    let members = ["a", "b", "c", "d", "e", "f"];
    let asks: Vec<Ask<'_>> = members
        .iter()
        .enumerate()
        .map(|(i, member)| Ask {
            member,
            want: 50 + 40 * i as u64,
            weight: 1 + i as u64 % 3,
            capacity: 600,
            ttl_ms: 1_000,
        })
        .collect();
    let got = together(
        asks.iter()
            .map(|ask| {
                Box::pin(redis.lease("api|budget", *ask, T0))
                    as Pin<Box<dyn Future<Output = Result<u64, RedisError>>>>
            })
            .collect(),
    )
    .await;
    for (ask, got) in asks.iter().zip(got) {
        let want = AsyncStore::lease(&memory, "api|budget", *ask, T0)
            .await
            .unwrap();
        assert_eq!(got.unwrap(), want, "{ask:?}");
    }
}

/// A batch the script cannot read is refused whole, saying why, before any entry runs; an
/// entry that is itself a batch fails alone.
#[tokio::test]
async fn a_malformed_batch_is_refused_with_a_clear_error() {
    let server = Server::start();
    let redis = store(config(Target::Single(server.url()), TimeSource::Redis));
    let limit = roomy();
    redis.peek(&limit, "warm|k", T0, 0).await.unwrap();
    let (function, _) = RedisStore::script();
    let (_, args) = redis.one_check_command(&limit, "bad|k", 1, T0);
    let spec = args[0].as_str();
    let mut con = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connecting");
    let fcall = |keys: &[&str], args: &[&str]| {
        redis::cmd("FCALL")
            .arg(function)
            .arg(keys.len())
            .arg(keys)
            .arg("batch")
            .arg(args)
            .clone()
    };
    for (keys, args, says) in [
        (&["rw:m|{a}"][..], &[""][..], "two counts per entry"),
        (&["rw:m|{a}"], &["1", spec], "two counts per entry"),
        (&["rw:m|{a}"], &["1 x", spec], "holds 'x', not a count"),
        (&["rw:m|{a}"], &["0 1", spec], "without keys or arguments"),
        (
            &["rw:m|{a}"],
            &["1 2", spec],
            "names 1 keys and 2 arguments",
        ),
        (
            &["rw:m|{a}", "rw:m|{b}"],
            &["1 1", spec],
            "the call has 2 and 1",
        ),
    ] {
        let got: redis::RedisResult<redis::Value> = fcall(keys, args).query(&mut con);
        let e = got.expect_err("refused");
        assert!(e.to_string().contains(says), "{args:?}: {e}");
    }
    // Nothing ran: no key was written.
    assert_eq!(server.cli(&["EXISTS", "rw:m|{a}"]), "0");
    // A batch within a batch: that entry fails (a status of its error), the next decides.
    let got: Vec<redis::Value> = fcall(
        &["rw:m|{a}", "rw:m|{b}"],
        &["1 2 1 1", "batch", "1 1", spec],
    )
    .query(&mut con)
    .expect("answered");
    assert!(
        matches!(&got[0], redis::Value::SimpleString(e) if e.contains("may not be a batch")),
        "{got:?}"
    );
    assert!(
        matches!(&got[1], redis::Value::BulkString(reply) if reply.starts_with(b"+")),
        "{got:?}"
    );
}
