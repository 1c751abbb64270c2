//! A decision on a Redis Cluster runs once: it is sent again where a node answered that it
//! did not run it (`MOVED`, `ASK`), and not after a reply that did not come in time.

use std::time::Duration;

use ratewarden_core::{AsyncStore, FixedWindow, Limit};
use ratewarden_redis::testing::{Cluster, Server};
use ratewarden_redis::{RedisConfig, RedisError, RedisStore, Target, TimeSource};

fn store(cluster: &Cluster, deadline: Duration) -> RedisStore {
    RedisStore::new(RedisConfig {
        target: Target::Cluster(cluster.urls()),
        deadline,
        time: TimeSource::Redis,
        ..RedisConfig::default()
    })
    .unwrap()
}

fn limit() -> Limit {
    Limit::from(FixedWindow::new(10, Duration::from_secs(3600)).unwrap())
}

/// The master holding `slot` now, and another master.
fn owner_and_other<'a>(cluster: &'a Cluster, key: &str) -> (&'a Server, &'a Server) {
    let slot = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", key]);
    let slot: u16 = slot.parse().unwrap();
    let owner = cluster
        .nodes
        .iter()
        .find(|n| {
            n.cli(&["CLUSTER", "NODES"])
                .lines()
                .find(|l| l.contains("myself"))
                .is_some_and(|l| owns(l, slot))
        })
        .expect("a master owns the slot");
    let other = cluster.nodes.iter().find(|n| n.port != owner.port).unwrap();
    (owner, other)
}

/// Whether a `CLUSTER NODES` line's slot ranges hold `slot`.
fn owns(line: &str, slot: u16) -> bool {
    line.split(' ').skip(8).any(|range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
    })
}

fn id(node: &Server) -> String {
    node.cli(&["CLUSTER", "MYID"])
}

#[tokio::test]
async fn a_decision_on_a_moved_slot_is_sent_to_its_new_master_and_charged_once() {
    let cluster = Cluster::start();
    let redis = store(&cluster, Duration::from_secs(2));
    let key = "rw:moved|{k}";
    let limit = limit();
    assert_eq!(
        redis
            .decide(&limit, "moved|k", 0, 1)
            .await
            .unwrap()
            .remaining,
        9
    );
    let (from, to) = owner_and_other(&cluster, key);
    let slot = from.cli(&["CLUSTER", "KEYSLOT", key]);
    // Move the slot and its key by hand, as `redis-cli --cluster reshard` does; the client
    // still routes the slot to `from`, which answers MOVED.
    assert_eq!(
        to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)]),
        "OK"
    );
    assert_eq!(
        from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)]),
        "OK"
    );
    let moved = from.cli(&[
        "MIGRATE",
        "127.0.0.1",
        &to.port.to_string(),
        key,
        "0",
        "5000",
    ]);
    assert_eq!(moved, "OK");
    for node in &cluster.nodes {
        assert_eq!(
            node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &id(to)]),
            "OK"
        );
    }
    let d = redis.decide(&limit, "moved|k", 0, 1).await.unwrap();
    assert_eq!(d.remaining, 8, "charged once, on the slot's new master");
    assert_eq!(to.cli(&["EXISTS", key]), "1");
}

#[tokio::test]
async fn a_decision_on_a_migrating_slot_follows_ask_to_the_importing_master() {
    let cluster = Cluster::start();
    let redis = store(&cluster, Duration::from_secs(2));
    let limit = limit();
    // Route the client's map to the slot first, with another key of the same slot.
    redis.decide(&limit, "seed|k", 0, 1).await.unwrap();
    let key = "rw:asked|{k}";
    let (from, to) = owner_and_other(&cluster, key);
    let slot = from.cli(&["CLUSTER", "KEYSLOT", key]);
    assert_eq!(
        to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)]),
        "OK"
    );
    assert_eq!(
        from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)]),
        "OK"
    );
    // The key is on neither: `from` answers ASK, and the decision runs on `to` after ASKING.
    for remaining in [9, 8] {
        let d = redis.decide(&limit, "asked|k", 0, 1).await.unwrap();
        assert_eq!(d.remaining, remaining, "charged once per decision");
    }
    // (Asked without ASKING, `to` would answer MOVED: count the slot's keys instead.)
    assert_eq!(to.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), "1");
    assert_eq!(
        from.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        "1",
        "the seed's key only"
    );
}

/// The call that times out is not sent again: its reply did not come, so whether it ran is
/// unknown. (The client's own retries are off; with them on, this passes too, as the client
/// drops a request its caller dropped: what they would resend is a call whose connection
/// broke within its deadline, which a loopback test cannot time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_whose_reply_came_late_is_charged_once() {
    let cluster = Cluster::start();
    let deadline = Duration::from_millis(100);
    let redis = store(&cluster, deadline);
    let limit = limit();
    let key = "rw:once|{k}";
    assert_eq!(
        redis
            .decide(&limit, "once|k", 0, 1)
            .await
            .unwrap()
            .remaining,
        9
    );
    let (owner, _) = owner_and_other(&cluster, key);
    // The master stops answering: the call is written, and its deadline passes.
    owner.signal("STOP");
    let got = redis.decide(&limit, "once|k", 0, 1).await;
    assert!(matches!(got, Err(RedisError::Timeout(_))), "{got:?}");
    // Past the client's own reply timeout (six deadlines), where a client retrying on
    // timeouts would have written the call again.
    tokio::time::sleep(deadline * 8).await;
    owner.signal("CONT");
    // The call written before the stop ran once when the master woke; nothing else did.
    let d = redis.decide(&limit, "once|k", 0, 1).await.unwrap();
    assert_eq!(
        d.remaining, 7,
        "the first decision, the one whose reply never came (once), and this one"
    );
}
