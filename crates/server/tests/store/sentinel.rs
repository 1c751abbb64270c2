//! A server on Redis behind Sentinel, as an operator runs it: the master is `kill -9`ed
//! while requests flow. Meanwhile each rule's `on_store_failure` answers, no request waits
//! past the store's deadline, and once Sentinel promotes the replica the server decides
//! there again, with no restart, reload or other act of the operator.

use std::time::Duration;

use ratewarden_redis::testing::Sentinels;
use serde_json::Value;
use tokio::time::Instant;

#[path = "../common/mod.rs"]
mod common;

use common::post;

/// The store's deadline in this test.
const DEADLINE: Duration = Duration::from_millis(100);

/// The time an HTTP round trip on a busy two-core machine may add to the deadline.
const SLACK: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_and_each_rule_answers_its_policy_meanwhile() {
    let group = Sentinels::start(Duration::from_millis(500));
    let sentinels: Vec<String> = group.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
kind = "redis-sentinel"
sentinels = [{sentinels}]
master_name = "{master}"
deadline = "100ms"

[[limit]]
name = "browse"
match = {{ path = "/browse" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 1000000
window = "1h"
on_store_failure = "open"

[[limit]]
name = "pay"
match = {{ path = "/pay" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 1000000
window = "1h"
on_store_failure = "closed"
"#,
        sentinels = sentinels.join(", "),
        master = Sentinels::MASTER,
    );
    let server = common::start_at(&toml, 0).await;
    let check = |path: &str| format!(r#"{{"ip": "198.51.100.4", "path": "{path}"}}"#);
    let decided = |d: &Value| d["policies"][0]["store_failed"] != true;
    for path in ["/browse", "/pay"] {
        let d = post(server.listen, "/v1/check", &check(path)).await.json();
        assert!(
            d["allowed"] == true && decided(&d),
            "before the failover: {d}"
        );
    }
    let replica = group.servers[1].port;
    group.servers[0].signal("KILL");
    let killed = Instant::now();
    let (mut failed_open, mut failed_closed) = (0, 0);
    let mut resumed = None;
    let mut promoted = None;
    while killed.elapsed() < Duration::from_secs(20) {
        if promoted.is_none() && group.master_port() == Some(replica) {
            promoted = Some(killed.elapsed());
        }
        let mut both = true;
        for path in ["/browse", "/pay"] {
            let asked = Instant::now();
            let d = post(server.listen, "/v1/check", &check(path)).await.json();
            let took = asked.elapsed();
            assert!(took <= DEADLINE + SLACK, "{path} waited {took:?}: {d}");
            if decided(&d) {
                assert_eq!(d["allowed"], true, "{path} decided on Redis: {d}");
                continue;
            }
            both = false;
            if path == "/browse" {
                assert_eq!(d["allowed"], true, "open: allowed while Redis fails: {d}");
                failed_open += 1;
            } else {
                assert_eq!(
                    d["allowed"], false,
                    "closed: refused while Redis fails: {d}"
                );
                assert_eq!(d["status"], 503, "{d}");
                failed_closed += 1;
            }
        }
        if both && (failed_open > 0 || failed_closed > 0) {
            resumed = Some(killed.elapsed());
            break;
        }
    }
    let resumed = resumed.expect("decisions resumed on the promoted replica");
    // The store may resume (on `+switch-master`) before this loop's next look at the
    // Sentinels: then the promotion is seen now, and was no later than the resumption.
    let promoted = promoted
        .or_else(|| (group.master_port() == Some(replica)).then_some(resumed))
        .expect("the Sentinels promoted the replica");
    eprintln!(
        "sentinel under serve: promoted {promoted:?}, resumed {resumed:?} after the kill; \
         {failed_open} answered open, {failed_closed} closed meanwhile"
    );
    assert!(failed_open > 0 && failed_closed > 0, "the outage was seen");
    // The promotion is observed by polling the Sentinels between requests, so it is seen
    // up to one round of requests late; resuming may not be later than a deadline past it.
    assert!(
        resumed <= promoted + DEADLINE + 2 * (DEADLINE + SLACK),
        "resumed {resumed:?}, promoted {promoted:?}"
    );
}
