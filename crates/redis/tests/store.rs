//! The Redis store against real `redis-server` processes: the same decisions as the
//! in-memory store, Redis's own clock, deadlines and the circuit breaker when Redis is
//! slow or down, and layered decisions across Redis Cluster slots.

use std::time::Duration;

use ratewarden_core::conformance::Rng;
use ratewarden_core::{
    AlgorithmKind, AsyncStore, CalendarUnit, Check, Concurrency, Decision, FixedWindow, Gcra,
    LeakyBucket, LeakyQueue, Limit, Quota, Rate, SlidingLog, SlidingWindow, Store, TokenBucket,
};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_redis::testing::{Cluster, Server};
use ratewarden_redis::{BreakerState, RedisConfig, RedisError, RedisStore, Target, TimeSource};

const SEC: u64 = 1_000_000_000;
/// 2026-12-02T00:00:00Z: real epoch times, near 2^61 ns, as production sees them.
const T0: u64 = 1_796_169_600 * SEC;

fn store(target: Target, time: TimeSource) -> RedisStore {
    RedisStore::new(RedisConfig {
        target,
        // Generous for a shared CI machine; the fault tests set their own.
        deadline: Duration::from_secs(2),
        time,
        ..RedisConfig::default()
    })
    .expect("a valid config")
}

/// One limit of every algorithm, with rates whose ticks are not whole nanoseconds.
fn limits() -> Vec<Limit> {
    let rate = |count, ms| Rate::new(count, Duration::from_millis(ms)).unwrap();
    let mut all = vec![
        Limit::from(FixedWindow::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(SlidingLog::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(SlidingWindow::new(5, Duration::from_secs(1)).unwrap()),
        Limit::from(TokenBucket::new(rate(3, 1000), 5).unwrap()),
        Limit::from(LeakyBucket::new(rate(7, 11_000), 4).unwrap()),
        Limit::from(LeakyQueue::new(rate(5, 1000), 3).unwrap()),
        Limit::from(Gcra::new(rate(3, 1000), 5).unwrap()),
        Limit::from(Quota::new(20, CalendarUnit::Minute, "UTC").unwrap()),
        Limit::from(Concurrency::new(3, Duration::from_secs(2)).unwrap()),
    ];
    all.push(Limit::from(Gcra::new(rate(50, 1000), 100).unwrap()));
    for (l, k) in all
        .iter()
        .zip(AlgorithmKind::ALL.iter().chain([&AlgorithmKind::Gcra]))
    {
        assert_eq!(l.kind(), *k, "one of every algorithm");
    }
    all
}

#[tokio::test]
async fn redis_decides_exactly_as_the_memory_store_on_random_traces() {
    let server = Server::start();
    let redis = store(Target::Single(server.url()), TimeSource::Caller);
    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    let limits = limits();
    let mut random = Rng(0x5eed_1234_abcd_0001);
    let mut now = T0;
    for step in 0..3000 {
        now += match random.below(10) {
            0..=5 => random.below(300_000_000),
            6..=8 => 0,
            _ => random.below(5 * SEC),
        };
        // Keys name their limit, as the engine's do (a rule name and fingerprint).
        let i = random.below(limits.len() as u64) as usize;
        let limit = &limits[i];
        let key = format!("diff{i}{}|k{}", limit.kind().as_str(), random.below(3));
        let cost = match random.below(8) {
            0 => 0,
            1 => 1 + random.below(8),
            _ => 1,
        };
        match random.below(10) {
            0 => {
                let delta = random.below(7) as i64 - 3;
                Store::settle(&memory, limit, &key, now, delta).unwrap();
                AsyncStore::settle(&redis, limit, &key, now, delta)
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: settle: {e}"));
            }
            1 => {
                let want = Store::peek(&memory, limit, &key, now, cost).unwrap();
                let got = AsyncStore::peek(&redis, limit, &key, now, cost)
                    .await
                    .unwrap();
                assert_eq!(got, want, "step {step}: peek {key} cost {cost} at {now}");
            }
            _ => {
                let want = Store::decide(&memory, limit, &key, now, cost).unwrap();
                let got = AsyncStore::decide(&redis, limit, &key, now, cost)
                    .await
                    .unwrap_or_else(|e| panic!("step {step}: decide: {e}"));
                assert_eq!(got, want, "step {step}: decide {key} cost {cost} at {now}");
            }
        }
    }
}

/// The conformance suite's 1-in-7 flake: with the caller's time, a key's TTL was exactly
/// its reset, counted on Redis's clock. A test's clock stands still while Redis's runs, so
/// a window ending a microsecond later (a TTL of 2 ms) was dropped by Redis between two
/// calls at the same instant, and the second call decided on a fresh key.
#[tokio::test]
async fn a_live_key_is_not_dropped_while_the_callers_clock_stands_still() {
    let server = Server::start_with(&["--enable-debug-command", "yes"]);
    let redis = store(Target::Single(server.url()), TimeSource::Caller);
    let once = Limit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
    // A microsecond before the window ends.
    let now = T0 + SEC - 1_000;
    let first = AsyncStore::decide(&redis, &once, "still|a", now, 1)
        .await
        .unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.reset_after_ns, 1_000);
    // Redis's clock moves on 30 ms (Redis sleeps, not this test); the caller's does not.
    assert_eq!(server.cli(&["DEBUG", "SLEEP", "0.03"]), "OK");
    let second = AsyncStore::decide(&redis, &once, "still|a", now, 1)
        .await
        .unwrap();
    assert!(
        !second.is_allowed(),
        "the window's one request was spent a caller's instant ago: {second:?}"
    );
    // And once the caller's clock passes the reset, the key decides as fresh, TTL or not.
    let later = AsyncStore::decide(&redis, &once, "still|a", now + 1_000, 1)
        .await
        .unwrap();
    assert!(later.is_allowed());
}

#[tokio::test]
async fn a_layered_decision_is_all_or_nothing_in_one_script() {
    let server = Server::start();
    let redis = store(Target::Single(server.url()), TimeSource::Caller);
    let per_ip = Limit::from(FixedWindow::new(10, Duration::from_secs(60)).unwrap());
    let per_key = Limit::from(Gcra::new(Rate::per_second(1).unwrap(), 2).unwrap());
    let checks = |ip: &'static str| {
        [
            Check {
                limit: &per_ip,
                key: ip,
                cost: 1,
            },
            Check {
                limit: &per_key,
                key: "per-key|k1",
                cost: 1,
            },
        ]
    };
    for _ in 0..2 {
        let d = redis.decide_all(&checks("per-ip|a"), T0).await.unwrap();
        assert!(d.iter().all(Decision::is_allowed));
    }
    let d = redis.decide_all(&checks("per-ip|b"), T0).await.unwrap();
    assert!(d[0].is_allowed() && !d[1].is_allowed());
    // The per-IP window of b was not charged by the rejected request.
    let b = redis.peek(&per_ip, "per-ip|b", T0, 0).await.unwrap();
    assert_eq!(b.remaining, 10);
}

#[tokio::test]
async fn time_comes_from_redis_when_asked() {
    let server = Server::start();
    let redis = store(Target::Single(server.url()), TimeSource::Redis);
    let once_a_minute =
        Limit::from(Gcra::new(Rate::new(1, Duration::from_secs(60)).unwrap(), 1).unwrap());
    // The caller's clock is nonsense (0): Redis's own decides.
    assert!(redis
        .decide(&once_a_minute, "time|k", 0, 1)
        .await
        .unwrap()
        .is_allowed());
    let d = redis.decide(&once_a_minute, "time|k", 0, 1).await.unwrap();
    let retry = d.retry_after().expect("limited");
    assert!(
        retry <= Duration::from_secs(60) && retry > Duration::from_secs(50),
        "{retry:?}"
    );
}

#[tokio::test]
async fn a_stopped_redis_costs_the_deadline_then_nothing_and_recovery_is_automatic() {
    let server = Server::start();
    let deadline = Duration::from_millis(50);
    let redis = RedisStore::new(RedisConfig {
        target: Target::Single(server.url()),
        deadline,
        breaker_failures: 3,
        breaker_cool_down: Duration::from_millis(300),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .unwrap();
    let limit = Limit::from(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
    assert!(redis
        .decide(&limit, "fault|k", T0, 1)
        .await
        .unwrap()
        .is_allowed());

    // Slow: the process is paused. Each call gives up at the deadline...
    server.signal("STOP");
    for _ in 0..3 {
        let start = tokio::time::Instant::now();
        let e = redis.decide(&limit, "fault|k", T0, 1).await.unwrap_err();
        assert!(matches!(e, RedisError::Timeout(_)), "{e}");
        let took = start.elapsed();
        eprintln!("paused redis: a call gave up after {took:?} (deadline {deadline:?})");
        assert!(took < deadline + Duration::from_millis(250), "{took:?}");
    }
    // ...and after three the breaker opens: calls fail at once.
    assert_eq!(redis.breaker(), BreakerState::Open);
    let start = tokio::time::Instant::now();
    assert!(matches!(
        redis.decide(&limit, "fault|k", T0, 1).await.unwrap_err(),
        RedisError::BreakerOpen
    ));
    eprintln!("breaker open: a call failed after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_millis(20));

    // Back: after the cool-down one call probes, succeeds, and counting resumes where it was.
    server.signal("CONT");
    let back = tokio::time::Instant::now();
    let mut resumed = None;
    for _ in 0..100 {
        match redis.decide(&limit, "fault|k", T0, 1).await {
            Ok(d) => {
                resumed = Some(d);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let d = resumed.expect("recovered after the cool-down");
    eprintln!(
        "resumed: decisions again {:?} after SIGCONT (cool-down 300ms)",
        back.elapsed()
    );
    assert_eq!(redis.breaker(), BreakerState::Closed);
    assert!(d.remaining <= 98, "the count survived: {d:?}");
}

/// The conformance suite's other flake, "Redis(timed out)": the Redis client's own 500 ms
/// reply timeout ended calls a longer configured deadline (5 s there) would have waited
/// out, and its error counted against Redis.
#[tokio::test]
async fn a_deadline_longer_than_the_clients_default_is_waited_out() {
    let server = Server::start();
    // A deadline of 2 s.
    let redis = store(Target::Single(server.url()), TimeSource::Caller);
    let limit = Limit::from(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
    assert!(redis
        .decide(&limit, "long|k", T0, 1)
        .await
        .unwrap()
        .is_allowed());
    // Redis stalls for 800 ms (a fork, a slow command, a loaded machine), well within the
    // deadline; this test waits on Redis, not for a refill.
    server.signal("STOP");
    let call = tokio::spawn(async move {
        let d = redis.decide(&limit, "long|k", T0, 1).await;
        (d, redis)
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.signal("CONT");
    let (d, redis) = call.await.unwrap();
    let d = d.expect("answered within the deadline");
    assert_eq!(d.remaining, 98);
    assert_eq!(redis.breaker(), BreakerState::Closed);
}

/// Blocks the calling thread, as a request handler doing CPU work under overload does.
// The test saturates its own runtime on purpose: that is the condition under test, not a
// wait for a refill.
#[allow(clippy::disallowed_methods)]
fn hog(duration: Duration) {
    std::thread::sleep(duration);
}

#[tokio::test]
async fn calls_that_time_out_while_the_store_connects_do_not_open_its_breaker() {
    // A breaker that opens at the first failure, and a Redis stopped before the store's
    // first call: the kernel accepts the connection, but the handshake (HELLO, then
    // FUNCTION LOAD) waits on a server that answers nothing, so every call times out while
    // the store connects. (Relying on FUNCTION LOAD outlasting a short deadline, about
    // 12 ms against 5 ms on one machine, failed on a faster one.) The handshake goes on
    // without them, and a call after Redis resumes finds it done. The deadline is long
    // enough that a call after the resume, on a machine busy with the rest of the suite,
    // does not time out for real (which would rightly count, and open this breaker).
    let server = Server::start();
    let redis = RedisStore::new(RedisConfig {
        target: Target::Single(server.url()),
        deadline: Duration::from_millis(250),
        breaker_failures: 1,
        breaker_cool_down: Duration::from_secs(60),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .unwrap();
    let limit = Limit::from(FixedWindow::new(1_000, Duration::from_secs(60)).unwrap());
    server.signal("STOP");
    for call in 0..3 {
        match redis.peek(&limit, "connecting|k", T0, 0).await {
            Err(RedisError::Timeout(_)) => {}
            other => panic!("call {call} to a stopped Redis while connecting: {other:?}"),
        }
        assert_eq!(redis.breaker(), BreakerState::Closed, "after call {call}");
    }
    server.signal("CONT");
    let mut answered = None;
    for _ in 0..40 {
        match redis.peek(&limit, "connecting|k", T0, 0).await {
            Ok(d) => {
                answered = Some(d);
                break;
            }
            Err(RedisError::Timeout(_)) => {}
            Err(e) => panic!("while the store connects to a resumed Redis: {e}"),
        }
    }
    let d = answered.expect("the handshake finished once Redis resumed");
    assert_eq!(d.remaining, 1_000);
    assert_eq!(redis.breaker(), BreakerState::Closed);
}

#[test]
fn a_saturated_caller_does_not_open_the_breaker_on_a_healthy_redis() {
    // One thread, kept busy by a task that blocks it three deadlines at a time: every timer
    // fires late, while Redis answers each call in well under a millisecond.
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let deadline = Duration::from_millis(10);
        let redis = RedisStore::new(RedisConfig {
            target: Target::Single(server.url()),
            deadline,
            breaker_failures: 3,
            breaker_cool_down: Duration::from_secs(60),
            time: TimeSource::Caller,
            ..RedisConfig::default()
        })
        .unwrap();
        let limit = Limit::from(FixedWindow::new(1_000, Duration::from_secs(60)).unwrap());
        // Connected, and the library loaded (which may take longer than the deadline).
        let mut before = None;
        for _ in 0..50 {
            if let Ok(d) = redis.peek(&limit, "busy|k", T0, 0).await {
                before = Some(d.remaining);
                break;
            }
        }
        let before = before.expect("redis answers an idle caller");
        assert_eq!(redis.breaker(), BreakerState::Closed);

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hogging = tokio::spawn({
            let stop = stop.clone();
            async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    hog(3 * deadline);
                    tokio::task::yield_now().await;
                }
            }
        });
        let (mut answered, mut timed_out) = (0, 0);
        for _ in 0..30 {
            match redis.decide(&limit, "busy|k", T0, 1).await {
                Ok(_) => answered += 1,
                Err(RedisError::Timeout(_)) => timed_out += 1,
                Err(e) => panic!("a healthy redis behind a busy caller: {e}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        hogging.await.unwrap();
        eprintln!(
            "saturated caller: {answered} answered, {timed_out} timed out, {} late timeouts",
            redis.late_timeouts()
        );
        assert_eq!(redis.breaker(), BreakerState::Closed);
        assert_eq!(answered, 30, "the replies were there, only read late");
        // The count is exact: every answered call was charged once.
        let d = redis.decide(&limit, "busy|k", T0, 1).await.unwrap();
        assert_eq!(d.remaining, before - 31);
    });
}

#[tokio::test]
async fn a_killed_redis_fails_fast_and_a_restarted_one_is_used_again() {
    let server = Server::start();
    let port = server.port;
    let redis = RedisStore::new(RedisConfig {
        target: Target::Single(server.url()),
        deadline: Duration::from_millis(200),
        breaker_failures: 2,
        breaker_cool_down: Duration::from_millis(200),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .unwrap();
    let limit = Limit::from(FixedWindow::new(100, Duration::from_secs(60)).unwrap());
    assert!(redis.decide(&limit, "kill|k", T0, 1).await.is_ok());
    drop(server);
    for _ in 0..2 {
        let start = tokio::time::Instant::now();
        assert!(redis.decide(&limit, "kill|k", T0, 1).await.is_err());
        eprintln!("killed redis: a call failed after {:?}", start.elapsed());
        assert!(start.elapsed() < Duration::from_millis(200 + 250));
    }
    assert_eq!(redis.breaker(), BreakerState::Open);
    let _again = Server::start_on(port, &[]);
    let restarted = tokio::time::Instant::now();
    let mut ok = false;
    for _ in 0..100 {
        if redis.decide(&limit, "kill|k", T0, 1).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the store reconnected to the restarted server");
    eprintln!(
        "restarted redis: decisions again after {:?}",
        restarted.elapsed()
    );
}

#[tokio::test]
async fn a_cluster_decides_as_memory_does_and_refunds_layers_across_slots() {
    let cluster = Cluster::start();
    let redis = store(Target::Cluster(cluster.urls()), TimeSource::Caller);
    let memory: MemoryStore = MemoryStore::new(StoreConfig::default());
    // Keys spread over the three masters decide exactly as in memory.
    let limits = limits();
    let mut random = Rng(0xc1a5_7e12);
    let mut now = T0;
    for step in 0..600 {
        now += random.below(400_000_000);
        let i = random.below(limits.len() as u64) as usize;
        let limit = &limits[i];
        let key = format!("cl{i}{}|k{}", limit.kind().as_str(), random.below(8));
        let want = Store::decide(&memory, limit, &key, now, 1).unwrap();
        let got = AsyncStore::decide(&redis, limit, &key, now, 1)
            .await
            .unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(got, want, "step {step}: {key}");
    }

    // Two layers whose keys live in different slots: reserve in each, refund on a no.
    let per_ip = Limit::from(FixedWindow::new(10, Duration::from_secs(60)).unwrap());
    let per_key = Limit::from(Gcra::new(Rate::per_second(1).unwrap(), 1).unwrap());
    let ip_key = "per-ip@1|203.0.113.9/32";
    let api_key = "per-key@2|key:0123456789abcdef";
    let layers = [
        Check {
            limit: &per_ip,
            key: ip_key,
            cost: 1,
        },
        Check {
            limit: &per_key,
            key: api_key,
            cost: 1,
        },
    ];
    let first = redis.decide_all(&layers, T0).await.unwrap();
    assert!(first.iter().all(Decision::is_allowed));
    let second = redis.decide_all(&layers, T0).await.unwrap();
    assert!(second[0].is_allowed() && !second[1].is_allowed());
    let ip = redis.peek(&per_ip, ip_key, T0, 0).await.unwrap();
    assert_eq!(
        ip.remaining, 9,
        "the per-IP charge of the rejected request was refunded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_failing_over_to_its_replica_loses_no_count() {
    let cluster = Cluster::start_with(1);
    let deadline = Duration::from_millis(300);
    let redis = RedisStore::new(RedisConfig {
        target: Target::Cluster(cluster.urls()),
        deadline,
        breaker_failures: 3,
        breaker_cool_down: Duration::from_millis(200),
        time: TimeSource::Caller,
        ..RedisConfig::default()
    })
    .unwrap();
    let limit = Limit::from(FixedWindow::new(1000, Duration::from_secs(3600)).unwrap());
    for _ in 0..10 {
        assert!(redis
            .decide(&limit, "fo|k1", T0, 1)
            .await
            .unwrap()
            .is_allowed());
    }
    let key = "rw:fo|{k1}";
    let master = cluster.master_of(key).expect("a master holds the key");
    // Every write is on the replica before the master dies (the replica may still be
    // finishing its first sync).
    let mut synced = false;
    for _ in 0..50 {
        synced = master.cli(&["WAIT", "1", "200"]) == "1";
        if synced {
            break;
        }
    }
    assert!(synced, "the replica caught up");
    master.signal("KILL");
    let killed = tokio::time::Instant::now();
    let mut resumed = None;
    for _ in 0..300 {
        let start = tokio::time::Instant::now();
        let got = redis.decide(&limit, "fo|k1", T0, 1).await;
        assert!(
            start.elapsed() < deadline + Duration::from_millis(300),
            "a call waited {:?}",
            start.elapsed()
        );
        if let Ok(d) = got {
            resumed = Some(d);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let d = resumed.expect("the replica was promoted and the client followed it");
    eprintln!(
        "cluster failover: decisions again {:?} after the master was killed",
        killed.elapsed()
    );
    assert_eq!(
        d.remaining,
        1000 - 11,
        "the ten before the failover, and this one"
    );
}

#[tokio::test]
async fn tls_and_a_password_pass_through_to_the_client() {
    let dir = std::env::temp_dir().join(format!("ratewarden-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A CA of the test's own, and a server certificate for 127.0.0.1 signed by it.
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    let (cert, key, csr) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("req.csr"),
    );
    let ext = dir.join("ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let openssl = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    openssl(&[
        os("req"),
        os("-x509"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-days"),
        os("1"),
        os("-subj"),
        os("/CN=ratewarden test CA"),
        os("-keyout"),
        ca_key.as_os_str(),
        os("-out"),
        ca_cert.as_os_str(),
    ]);
    openssl(&[
        os("req"),
        os("-newkey"),
        os("rsa:2048"),
        os("-nodes"),
        os("-subj"),
        os("/CN=127.0.0.1"),
        os("-keyout"),
        key.as_os_str(),
        os("-out"),
        csr.as_os_str(),
    ]);
    openssl(&[
        os("x509"),
        os("-req"),
        os("-in"),
        csr.as_os_str(),
        os("-CA"),
        ca_cert.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-days"),
        os("1"),
        os("-extfile"),
        ext.as_os_str(),
        os("-out"),
        cert.as_os_str(),
    ]);
    let tls_port = ratewarden_redis::testing::free_port().to_string();
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let _server = Server::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert_s,
        "--tls-key-file",
        &key_s,
        "--tls-auth-clients",
        "no",
        "--requirepass",
        "s3cret",
    ]);
    let limit = Limit::from(FixedWindow::new(3, Duration::from_secs(60)).unwrap());
    let config = |url: String, ca: Option<Vec<u8>>| RedisConfig {
        target: Target::Single(url),
        deadline: Duration::from_secs(2),
        time: TimeSource::Caller,
        tls_ca: ca,
        ..RedisConfig::default()
    };
    let ca = std::fs::read(&ca_cert).unwrap();
    let url = format!("rediss://:s3cret@127.0.0.1:{tls_port}");
    let redis = RedisStore::new(config(url.clone(), Some(ca.clone()))).unwrap();
    let d = redis.decide(&limit, "tls|k", T0, 1).await.unwrap();
    assert_eq!(d.remaining, 2);
    // A wrong password is refused, and so is a server whose certificate is not trusted.
    let wrong = format!("rediss://:nope@127.0.0.1:{tls_port}");
    let e = RedisStore::new(config(wrong, Some(ca))).unwrap();
    assert!(e.decide(&limit, "tls|k", T0, 1).await.is_err());
    let untrusted = RedisStore::new(config(url, None)).unwrap();
    assert!(untrusted.decide(&limit, "tls|k", T0, 1).await.is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
