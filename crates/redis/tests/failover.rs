//! Failover as an operator meets it, with real processes: a master `kill -9`ed while
//! decisions flow, behind three Sentinels and in a Cluster of three masters with a replica
//! each. Decisions resume on the promoted replica within the promotion plus one deadline,
//! no call waits past its deadline meanwhile, nothing is restarted, and what the failover
//! cost in over-admission is measured (and, with `wait_for_replicas`, is nothing).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratewarden_core::{AsyncStore, FixedWindow, Limit};
use ratewarden_redis::testing::{Cluster, Sentinels, Server};
use ratewarden_redis::{RedisConfig, RedisStore, SentinelTarget, Target, TimeSource};
use tokio::time::Instant;

/// Generous for a shared 2-core machine, short beside a failover.
const DEADLINE: Duration = Duration::from_millis(100);

/// A timer may fire this late before the deadline stops blaming Redis (the store's rule),
/// plus the scheduling of a busy test machine.
const LATE: Duration = Duration::from_millis(70);

/// Concurrent callers, as a server's requests are.
const CALLERS: usize = 8;

/// One failover at a time: three at once (nine Redis processes and their callers on a
/// two-core machine) leave the callers' own timers late, which the store rightly answers by
/// waiting on past the deadline (`deadline.rs`), and the timings measured here would be the
/// machine's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(target: Target) -> RedisConfig {
    RedisConfig {
        target,
        deadline: DEADLINE,
        time: TimeSource::Redis,
        ..RedisConfig::default()
    }
}

fn sentinel_target(group: &Sentinels) -> Target {
    Target::Sentinel(SentinelTarget {
        sentinels: group.urls(),
        master_name: Sentinels::MASTER.to_owned(),
        username: None,
        password: None,
        tls: false,
    })
}

/// What one run through a failover saw.
#[derive(Debug, Default)]
struct Seen {
    /// From the kill to the first decision that failed, to the promotion, and to the first
    /// decision after the outage.
    first_failure: Option<Duration>,
    promoted: Option<Duration>,
    resumed: Option<Duration>,
    /// The longest any one call took.
    longest_call: Duration,
    /// Decisions admitted, refused (limited) and failed (the rule's policy would answer).
    admitted: u64,
    limited: u64,
    failed: u64,
    /// The first errors seen after the promotion, for the failure message.
    after_promotion: Vec<String>,
    /// When the first failure came: decisions resume with the first call begun after it.
    failing_since: Option<Instant>,
}

/// Drives `key` at `limit` (a fixed window of `units` for an hour: no refill in the run)
/// from [`CALLERS`] tasks; once half the units are spent, `kill` runs; `promoted` is polled
/// until it says a replica took over, and `then` runs; the run ends when the key is limited again after the
/// failover, or after 20 s.
async fn through_failover(
    store: Arc<RedisStore>,
    key: &'static str,
    units: u64,
    kill: impl FnOnce() + Send + 'static,
    promoted: impl Fn() -> bool + Send + 'static,
    then: impl FnOnce() + Send + 'static,
) -> Seen {
    let limit = Arc::new(Limit::from(
        FixedWindow::new(units, Duration::from_secs(3600)).unwrap(),
    ));
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let admitted = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (kill_now, kill_signal) = tokio::sync::oneshot::channel::<()>();
    let mut kill_now = Some(kill_now);
    let killer = {
        let killed_at = killed_at.clone();
        let seen = seen.clone();
        let done = done.clone();
        tokio::task::spawn_blocking(move || {
            if kill_signal.blocking_recv().is_err() {
                return;
            }
            kill();
            let at = Instant::now();
            *killed_at.lock().unwrap() = Some(at);
            while !done.load(Ordering::Relaxed) {
                if promoted() {
                    seen.lock().unwrap().promoted = Some(at.elapsed());
                    then();
                    return;
                }
            }
        })
    };
    let mut callers = Vec::new();
    let half = units / 2;
    let (to_kill, mut kill_asked) = tokio::sync::mpsc::unbounded_channel::<()>();
    for _ in 0..CALLERS {
        let (store, limit, seen, killed_at, admitted, done, to_kill) = (
            store.clone(),
            limit.clone(),
            seen.clone(),
            killed_at.clone(),
            admitted.clone(),
            done.clone(),
            to_kill.clone(),
        );
        callers.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(20) {
                let began = Instant::now();
                let got = store.decide(&limit, key, 0, 1).await;
                let took = began.elapsed();
                let killed = *killed_at.lock().unwrap();
                let failed = got.is_err();
                {
                    let mut seen = seen.lock().unwrap();
                    seen.longest_call = seen.longest_call.max(took);
                    match got {
                        Ok(d) if d.is_allowed() => {
                            seen.admitted += 1;
                            if admitted.fetch_add(1, Ordering::Relaxed) + 1 == half {
                                let _ = to_kill.send(());
                            }
                        }
                        Ok(_) => seen.limited += 1,
                        Err(_) => seen.failed += 1,
                    }
                    if let (Some(killed), Err(e)) = (killed, &got) {
                        if seen.promoted.is_some() && seen.after_promotion.len() < 12 {
                            let at = killed.elapsed();
                            seen.after_promotion.push(format!("{at:?}: {e}"));
                        }
                    }
                    if let Some(killed) = killed {
                        let since = began.saturating_duration_since(killed);
                        match &got {
                            Err(_) if seen.first_failure.is_none() => {
                                seen.first_failure = Some(since);
                                seen.failing_since = Some(Instant::now());
                            }
                            Ok(_)
                                if seen.failing_since.is_some_and(|f| began > f)
                                    && seen.resumed.is_none() =>
                            {
                                seen.resumed = Some(since + took);
                            }
                            // Limited again after the failover: every unit is spent.
                            // Not done before the watcher has seen the promotion: the
                            // store may follow it (on +switch-master) before a Sentinel
                            // answers the watcher's poll.
                            Ok(d)
                                if seen.resumed.is_some()
                                    && seen.promoted.is_some()
                                    && !d.is_allowed() =>
                            {
                                done.store(true, Ordering::Relaxed);
                            }
                            _ => {}
                        }
                    }
                }
                if failed {
                    // A failed call costs nothing; a caller retrying at once would only spin.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }));
    }
    drop(to_kill);
    if kill_asked.recv().await.is_some() {
        if let Some(now) = kill_now.take() {
            let _ = now.send(());
        }
    }
    for caller in callers {
        caller.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    killer.await.unwrap();
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

/// The checks every failover run must pass, and its figures on stderr; `promptly`: decisions
/// resume within a deadline of the promotion.
fn judge(topology: &str, seen: &Seen, units: u64, promptly: bool) {
    eprintln!(
        "{topology}: first failure {:?}, promoted {:?}, resumed {:?} after the kill; \
         longest call {:?}; admitted {} of {units} ({} over), limited {}, failed {}",
        seen.first_failure,
        seen.promoted,
        seen.resumed,
        seen.longest_call,
        seen.admitted,
        seen.admitted.saturating_sub(units),
        seen.limited,
        seen.failed,
    );
    let promoted = seen.promoted.expect("a replica was promoted");
    let resumed = seen.resumed.expect("decisions resumed after the failover");
    assert!(
        !promptly || resumed <= promoted + DEADLINE + LATE,
        "{topology}: decisions resumed {resumed:?} after the kill, the promotion was at {promoted:?}; errors after it: {:#?}",
        seen.after_promotion
    );
    assert!(
        seen.longest_call <= DEADLINE + LATE,
        "{topology}: a call waited {:?}, past its deadline",
        seen.longest_call
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_resumes_on_the_promoted_replica_within_a_deadline() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let group = Sentinels::start(Duration::from_millis(500));
    let store = Arc::new(RedisStore::new(config(sentinel_target(&group))).unwrap());
    let units = 4000;
    let master_pid = group.servers[0].pid();
    let replica_port = group.servers[1].port;
    let urls = group.urls();
    let seen = through_failover(
        store.clone(),
        "sentinel|k",
        units,
        move || kill(master_pid),
        move || master_named(&urls) == Some(replica_port),
        || {},
    )
    .await;
    judge("sentinel", &seen, units, true);
    // The counts the old master acknowledged reached the new one, but for the replication
    // stream in flight at the kill: a handful of decisions at most on one host.
    assert!(
        seen.admitted <= units + CALLERS as u64,
        "admitted {} of {units}",
        seen.admitted
    );
    // The store follows the new master without a restart, and keeps deciding there.
    let limit = Limit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    assert!(store
        .decide(&limit, "after|k", 0, 1)
        .await
        .unwrap()
        .is_allowed());
    assert_eq!(
        group.server(replica_port).cli(&["EXISTS", "rw:after|{k}"]),
        "1",
        "decided on the promoted replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_loses_no_decision_across_a_sentinel_failover() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let group = Sentinels::start(Duration::from_millis(500));
    let store = Arc::new(
        RedisStore::new(RedisConfig {
            wait_for_replicas: 1,
            ..config(sentinel_target(&group))
        })
        .unwrap(),
    );
    let units = 2000;
    let master_pid = group.servers[0].pid();
    let replica_port = group.servers[1].port;
    let urls = group.urls();
    // The promoted replica has no replica of its own until another attaches (a supervisor
    // restarting the old master, or a new one): until then no decision can be acknowledged,
    // and the rules' failure policies answer.
    let attached: Arc<Mutex<Option<Server>>> = Arc::default();
    let seen = through_failover(
        store,
        "waited|k",
        units,
        move || kill(master_pid),
        move || master_named(&urls) == Some(replica_port),
        {
            let attached = attached.clone();
            move || {
                *attached.lock().unwrap() = Some(Server::start_with(&[
                    "--replicaof",
                    "127.0.0.1",
                    &replica_port.to_string(),
                ]))
            }
        },
    )
    .await;
    eprintln!("(resumed once a new replica attached to the promoted one)");
    judge("sentinel, wait_for_replicas = 1", &seen, units, false);
    assert!(
        seen.admitted <= units,
        "every admitted decision was on the replica that took over: admitted {} of {units}",
        seen.admitted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_resumes_on_the_promoted_replica_within_a_deadline() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start_with_node_timeout(1, Duration::from_millis(1000));
    let store = Arc::new(RedisStore::new(config(Target::Cluster(cluster.urls()))).unwrap());
    // Its slot's master, and that master's replica.
    let limit = Limit::from(FixedWindow::new(5, Duration::from_secs(3600)).unwrap());
    store.decide(&limit, "probe|k", 0, 1).await.unwrap();
    let master = cluster
        .master_of("rw:probe|{k}")
        .expect("a master holds the key");
    let master_id = master.cli(&["CLUSTER", "MYID"]);
    let replica = cluster
        .nodes
        .iter()
        .find(|n| n.cli(&["ROLE"]).starts_with("slave") && replica_of(n) == master_id)
        .expect("the master has a replica");
    let replica_port = replica.port;
    let master_pid = master.pid();
    // A replica still on its first sync cannot be promoted.
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let units = 4000;
    let seen = through_failover(
        store,
        "cluster|k",
        units,
        move || kill(master_pid),
        move || role(replica_port).starts_with("master"),
        || {},
    )
    .await;
    judge("cluster", &seen, units, true);
    assert!(
        seen.admitted <= units + CALLERS as u64,
        "admitted {} of {units}",
        seen.admitted
    );
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The master's port as the first answering Sentinel names it.
fn master_named(sentinels: &[String]) -> Option<u16> {
    sentinels.iter().find_map(|url| {
        let port = url.rsplit(':').next()?;
        let out = std::process::Command::new("redis-cli")
            .args(["-p", port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME"])
            .arg(Sentinels::MASTER)
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)?
            .trim()
            .parse()
            .ok()
    })
}

fn role(port: u16) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "ROLE"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The id of the master `node` replicates (`CLUSTER NODES`, its own line).
fn replica_of(node: &Server) -> String {
    let nodes = node.cli(&["CLUSTER", "NODES"]);
    nodes
        .lines()
        .find(|l| l.contains("myself"))
        .and_then(|l| l.split(' ').nth(3))
        .unwrap_or_default()
        .to_owned()
}

/// A switchover an operator asks for (`SENTINEL FAILOVER`): the old master lives on as a
/// replica, and the store moves to the new one by itself. Sentinel promotes the replica
/// before it demotes the old master, so decisions made on the old master in between are
/// lost when it resyncs from the new one: counted here for a plain store, and none for a
/// store that waits for a replica (the old master has none once its replica is promoted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_switchover_is_followed_and_waiting_for_a_replica_loses_nothing() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let group = Sentinels::start(Duration::from_millis(500));
    let plain = RedisStore::new(config(sentinel_target(&group))).unwrap();
    let waited = RedisStore::new(RedisConfig {
        wait_for_replicas: 1,
        ..config(sentinel_target(&group))
    })
    .unwrap();
    let limit = Limit::from(FixedWindow::new(100_000, Duration::from_secs(3600)).unwrap());
    let (mut plain_admitted, mut waited_admitted) = (0u64, 0u64);
    for _ in 0..10 {
        assert!(plain
            .decide(&limit, "plain|k", 0, 1)
            .await
            .unwrap()
            .is_allowed());
        assert!(waited
            .decide(&limit, "waited|k", 0, 1)
            .await
            .unwrap()
            .is_allowed());
    }
    (plain_admitted, waited_admitted) = (plain_admitted + 10, waited_admitted + 10);
    let (old, new) = (group.servers[0].port, group.servers[1].port);
    assert_eq!(
        group.sentinels[0].cli(&["SENTINEL", "FAILOVER", Sentinels::MASTER]),
        "OK"
    );
    let asked = Instant::now();
    let switched = || {
        group.master_port() == Some(new)
            && group.server(old).cli(&["ROLE"]).starts_with("slave")
            && group.server(new).cli(&["ROLE"]).starts_with("master")
    };
    loop {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "the switchover was not followed within 20 s"
        );
        plain_admitted += u64::from(plain.decide(&limit, "plain|k", 0, 1).await.is_ok());
        waited_admitted += u64::from(waited.decide(&limit, "waited|k", 0, 1).await.is_ok());
        if switched() {
            break;
        }
    }
    // Both stores decide on the new master now.
    let mut on_new = None;
    for _ in 0..1000 {
        if let (Ok(_), Ok(_)) = (
            plain.decide(&limit, "after|a", 0, 1).await,
            waited.decide(&limit, "after|b", 0, 1).await,
        ) {
            on_new = Some(());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    on_new.expect("both stores decide after the switchover");
    assert_eq!(group.server(new).cli(&["EXISTS", "rw:after|{a}"]), "1");
    assert_eq!(group.server(new).cli(&["EXISTS", "rw:after|{b}"]), "1");
    let plain_counted = counted(&plain, &limit, "plain|k").await;
    let waited_counted = counted(&waited, &limit, "waited|k").await;
    eprintln!(
        "switchover: plain store admitted {plain_admitted}, the new master counts {plain_counted} \
         ({} lost); waiting store admitted {waited_admitted}, counted {waited_counted}",
        plain_admitted.saturating_sub(plain_counted)
    );
    assert!(
        waited_counted >= waited_admitted,
        "every decision a replica acknowledged survived the switchover: admitted \
         {waited_admitted}, counted {waited_counted}"
    );
}

/// The units `store` holds charged to `key` under `limit` (a decision of cost 0 reads them).
async fn counted(store: &RedisStore, limit: &Limit, key: &str) -> u64 {
    let d = store.decide(limit, key, 0, 0).await.unwrap();
    100_000 - d.remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_wait_for_a_stopped_replica_fails_it_alone_and_opens_no_breaker() {
    // A master and its replica, the replica then stopped: its acknowledgements stop, and a
    // decision that waits for it cannot be held by any replica. A breaker that opens at the
    // first failure, and no store-wide wait: only the calls that ask wait.
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    for _ in 0..2000 {
        if replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let store = Arc::new(
        RedisStore::new(RedisConfig {
            // The wait is half of it: a second, long beside an unwaited call on a busy host.
            deadline: Duration::from_secs(2),
            breaker_failures: 1,
            ..config(Target::Single(master.url()))
        })
        .unwrap(),
    );
    let limit = Limit::from(FixedWindow::new(100, Duration::from_secs(3600)).unwrap());
    let checks = |key: &'static str| {
        [ratewarden_core::Check {
            limit: &limit,
            key,
            cost: 1,
        }]
    };
    // Replicated while the replica runs.
    let held = store.decide_replicated(&checks("held|k"), 0, 1).await;
    assert!(
        held.is_ok_and(|d| d[0].is_allowed()),
        "acknowledged by a running replica"
    );

    replica.signal("STOP");
    let waited = {
        let store = Arc::clone(&store);
        let limit = limit.clone();
        tokio::spawn(async move {
            let checks = [ratewarden_core::Check {
                limit: &limit,
                key: "waited|k",
                cost: 1,
            }];
            store.decide_replicated(&checks, 0, 1).await
        })
    };
    // Every unwaited call meanwhile is answered while the waited one still waits: it is on
    // a connection of its own, and no `WAIT` holds the others'.
    for _ in 0..20 {
        let plain = store.decide(&limit, "plain|k", 0, 1).await;
        assert!(
            plain.is_ok_and(|d| d.is_allowed()),
            "an unwaited call is answered"
        );
    }
    assert!(
        !waited.is_finished(),
        "the waited call still waits for the stopped replica"
    );
    match waited.await.unwrap() {
        Err(ratewarden_redis::RedisError::NotReplicated {
            acknowledged: 0,
            wanted: 1,
        }) => {}
        other => panic!("a decision no replica holds fails as not replicated: {other:?}"),
    }
    // The master answered: a missing replica is not a failing Redis.
    assert_eq!(store.breaker(), ratewarden_redis::BreakerState::Closed);
    let plain = store.decide(&limit, "plain|k", 0, 1).await;
    assert!(
        plain.is_ok_and(|d| d.remaining == 100 - 21),
        "still decided, and exact"
    );
    replica.signal("CONT");
}
