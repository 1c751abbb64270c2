//! Envoy's rate limit quota service over a real gRPC listener, driven by a client built from
//! Envoy's own protos (`envoy-types`): several concurrent streams with different demand
//! split one rule's rate max-min, a demand that changes moves the split, a stream that ends
//! frees its share for the others, and the shares never add up past the rate.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::{Options, Running};
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::Stream;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_700_000_000_000_000_000;
const RATE: u64 = 600;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
grpc = "127.0.0.1:0"
admin = "127.0.0.1:0"

[[limit]]
name = "api"
match = { domain = "edge", descriptor = "name=api" }
key = ["descriptor"]
algorithm = "gcra"
rate = "600/s"
burst = 60
"#;

/// What the client last heard for a bucket: a share per second (from the token bucket's
/// fill interval), 0 for deny-all, or `None` once abandoned.
type Heard = Arc<Mutex<HashMap<String, Option<u64>>>>;

struct Reports(mpsc::Receiver<RateLimitQuotaUsageReports>);

impl Stream for Reports {
    type Item = RateLimitQuotaUsageReports;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// One Envoy: its report sender and what it heard.
struct Envoy {
    reports: Option<mpsc::Sender<RateLimitQuotaUsageReports>>,
    heard: Heard,
}

impl Envoy {
    async fn connect(running: &Running) -> Self {
        let addr = running.grpc.expect("a gRPC listener");
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("the gRPC listener answers");
        let (tx, rx) = mpsc::channel(16);
        let mut answers = client
            .stream_rate_limit_quotas(Reports(rx))
            .await
            .expect("a stream")
            .into_inner();
        let heard: Heard = Arc::default();
        let record = Arc::clone(&heard);
        tokio::spawn(async move {
            while let Ok(Some(RateLimitQuotaResponse { bucket_action })) = answers.message().await {
                for action in bucket_action {
                    let name = bucket_name(action.bucket_id.as_ref());
                    let share = match action.bucket_action {
                        Some(Action::QuotaAssignmentAction(q)) => {
                            let ttl = q.assignment_time_to_live.expect("a time to live");
                            assert!(ttl.seconds >= 1, "{ttl:?}");
                            match q.rate_limit_strategy.and_then(|s| s.strategy) {
                                Some(Strategy::TokenBucket(b)) => {
                                    assert_eq!(b.tokens_per_fill.map(|t| t.value), Some(1));
                                    let every = b.fill_interval.expect("an interval");
                                    let ns =
                                        every.seconds as u64 * 1_000_000_000 + every.nanos as u64;
                                    assert!(b.max_tokens >= 1);
                                    // Fill intervals are rounded up (never faster than
                                    // the share): the nearest whole share per second.
                                    Some((1_000_000_000 + ns / 2) / ns)
                                }
                                Some(Strategy::BlanketRule(r)) => {
                                    assert_eq!(r, BlanketRule::DenyAll as i32);
                                    Some(0)
                                }
                                other => panic!("unexpected strategy {other:?}"),
                            }
                        }
                        Some(Action::AbandonAction(_)) => None,
                        None => panic!("an action without an action"),
                    };
                    record.lock().unwrap().insert(name, share);
                }
            }
        });
        Self {
            reports: Some(tx),
            heard,
        }
    }

    /// Reports `requests` over `elapsed` for bucket `name=value`.
    async fn report(&self, value: &str, requests: u64, elapsed: Duration) {
        self.report_bucket(&[("name", value)], requests, elapsed)
            .await;
    }

    /// Reports `requests` over `elapsed` for the bucket whose id is `entries`.
    async fn report_bucket(&self, entries: &[(&str, &str)], requests: u64, elapsed: Duration) {
        let usage = BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            time_elapsed: Some(ProtoDuration {
                seconds: elapsed.as_secs() as i64,
                nanos: elapsed.subsec_nanos() as i32,
            }),
            num_requests_allowed: requests / 2,
            num_requests_denied: requests - requests / 2,
        };
        let reports = RateLimitQuotaUsageReports {
            domain: "edge".to_owned(),
            bucket_quota_usages: vec![usage],
        };
        self.reports
            .as_ref()
            .expect("open")
            .send(reports)
            .await
            .expect("sent");
    }

    fn share(&self, value: &str) -> Option<Option<u64>> {
        self.share_of(&format!("name={value}"))
    }

    /// What it last heard for the bucket `k=v,k=v` (entries sorted by key).
    fn share_of(&self, bucket: &str) -> Option<Option<u64>> {
        self.heard.lock().unwrap().get(bucket).copied()
    }
}

fn bucket_name(id: Option<&BucketId>) -> String {
    let mut entries: Vec<_> = id.expect("a bucket id").bucket.iter().collect();
    entries.sort();
    entries
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits (for messages on the network, never for a refill) until every Envoy has heard
/// `shares` of bucket `api`; then checks they add up to no more than the rate.
async fn until_shares(envoys: &[&Envoy], shares: &[u64]) {
    for _ in 0..500 {
        let now: Vec<Option<Option<u64>>> = envoys.iter().map(|e| e.share("api")).collect();
        if now
            .iter()
            .zip(shares)
            .all(|(heard, want)| *heard == Some(Some(*want)))
        {
            let total: u64 = shares.iter().sum();
            assert!(total <= RATE, "{shares:?} add up past {RATE}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now: Vec<_> = envoys.iter().map(|e| e.share("api")).collect();
    panic!("heard {now:?}, expected {shares:?}");
}

#[tokio::test]
async fn envoys_split_one_budget_max_min_by_demand_and_regrow_when_one_leaves() {
    let clock = Arc::new(ManualClock::new(T0));
    let running = common::start(Options {
        ..common::options(CONFIG, clock.clone())
    })
    .await;
    let (a, b, c) = (
        Envoy::connect(&running).await,
        Envoy::connect(&running).await,
        Envoy::connect(&running).await,
    );
    // First sight: demand unknown, so the whole rate, then shrunk as others arrive.
    a.report("api", 0, Duration::ZERO).await;
    until_shares(&[&a], &[600]).await;
    b.report("api", 0, Duration::ZERO).await;
    until_shares(&[&a, &b], &[300, 300]).await;
    c.report("api", 0, Duration::ZERO).await;
    until_shares(&[&a, &b, &c], &[200, 200, 200]).await;

    // Real demand: 100/s, 200/s and 1,000/s of a 600/s budget.
    clock.advance(Duration::from_secs(1));
    a.report("api", 100, Duration::from_secs(1)).await;
    b.report("api", 200, Duration::from_secs(1)).await;
    c.report("api", 1000, Duration::from_secs(1)).await;
    until_shares(&[&a, &b, &c], &[100, 200, 300]).await;

    // A's demand grows: equal shares where everyone wants more than a third.
    clock.advance(Duration::from_secs(1));
    a.report("api", 900, Duration::from_secs(1)).await;
    b.report("api", 200, Duration::from_secs(1)).await;
    c.report("api", 1000, Duration::from_secs(1)).await;
    until_shares(&[&a, &b, &c], &[200, 200, 200]).await;

    // C's stream ends: that Envoy is gone, and A grows into its share (B wants only 200).
    let Envoy { reports, heard: _ } = c;
    drop(reports);
    until_shares(&[&a, &b], &[400, 200]).await;

    // A bucket no rule takes is abandoned: the Envoy falls back to its own behaviour.
    a.report("other", 10, Duration::from_secs(1)).await;
    let mut abandoned = false;
    for _ in 0..500 {
        if a.share("other") == Some(None) {
            abandoned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        abandoned,
        "the unknown bucket was not abandoned: {:?}",
        a.share("other")
    );

    // What the metrics show: two streams open, the abandoned bucket, and the shares sent.
    let admin = running.admin.expect("an admin listener");
    let metrics = common::get(admin, "/metrics", &[]).await.body;
    assert!(
        metrics.contains("ratewarden_quota_streams 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratewarden_quota_actions_total{action=\"abandon\"} 1\n"),
        "{metrics}"
    );
    let shares = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ratewarden_quota_actions_total{action=\"share\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(shares.is_some_and(|n| n >= 10), "{metrics}");
}

#[tokio::test]
async fn a_report_past_the_envoy_bounds_ends_its_stream_with_invalid_argument() {
    let toml = CONFIG
        .replace("admin = \"127.0.0.1:0\"", "admin = \"off\"")
        .replace("[[limit]]", "[envoy]\nmax_descriptors = 2\n\n[[limit]]");
    let running = common::start_at(&toml, T0).await;
    let addr = running.grpc.expect("a gRPC listener");
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("the gRPC listener answers");
    let usage = |value: &str| BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [("name".to_owned(), value.to_owned())]
                .into_iter()
                .collect(),
        }),
        time_elapsed: Some(ProtoDuration {
            seconds: 1,
            nanos: 0,
        }),
        num_requests_allowed: 1,
        num_requests_denied: 0,
    };
    let report = RateLimitQuotaUsageReports {
        domain: "edge".to_owned(),
        bucket_quota_usages: vec![usage("api"), usage("b"), usage("c")],
    };
    let (tx, rx) = mpsc::channel(1);
    tx.send(report).await.unwrap();
    let mut answers = client
        .stream_rate_limit_quotas(Reports(rx))
        .await
        .expect("a stream")
        .into_inner();
    // Without the bound the stream answers the buckets and stays open: time out then.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match answers.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the stream ended without a reason"),
                Err(status) => break status,
            }
        }
    });
    let status = ended.await.expect("the stream is ended, not left open");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("max_descriptors"), "{status:?}");
}

/// Two ratewarden servers on one real Redis serve RLQS for one budget: each leases its
/// share from Redis and splits it among its own Envoys, so the Envoys of both share the
/// rule's rate max-min, and a server whose Envoy leaves gives its share back.
#[tokio::test]
async fn two_servers_on_one_redis_split_one_budget_between_their_envoys() {
    let redis = ratewarden_redis::testing::Server::start();
    let toml = CONFIG.replace(
        "[[limit]]",
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\n\n[[limit]]",
            redis.url()
        ),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let one = common::start_on(&toml, clock.clone()).await;
    let two = common::start_on(&toml, clock.clone()).await;
    let (a, b) = (Envoy::connect(&one).await, Envoy::connect(&two).await);

    // A alone: its server leases the whole rate.
    a.report("api", 0, Duration::ZERO).await;
    until_shares(&[&a], &[600]).await;
    // B arrives on the other server, which may grant it only what A's server gives back:
    // equal shares once both servers have renewed.
    b.report("api", 0, Duration::ZERO).await;
    until_shares(&[&a, &b], &[300, 300]).await;

    // Real demand: A wants 100/s, B 1,000/s.
    clock.advance(Duration::from_secs(1));
    a.report("api", 100, Duration::from_secs(1)).await;
    b.report("api", 1000, Duration::from_secs(1)).await;
    until_shares(&[&a, &b], &[100, 500]).await;

    // B's Envoy leaves: its server gives its share back, and A's grows into it.
    let Envoy { reports, heard: _ } = b;
    drop(reports);
    clock.advance(Duration::from_secs(1));
    a.report("api", 1000, Duration::from_secs(1)).await;
    until_shares(&[&a], &[600]).await;

    // What Redis holds: one lease, A's server's, of the whole rate.
    let keys = redis.cli(&["KEYS", "*share:*"]);
    let key = keys.trim();
    assert!(!key.is_empty() && !key.contains('\n'), "{keys:?}");
    let held = redis.cli(&["HVALS", key]);
    assert!(held.trim().starts_with("1000 1 600 "), "{held:?}");
}

const WEIGHTED: &str = r#"
[server]
listen = "127.0.0.1:0"
grpc = "127.0.0.1:0"
admin = "off"

[[limit]]
name = "api"
match = { domain = "edge", bucket = "name=api" }
key = ["global"]
weights = { "tier=gold" = 3 }
algorithm = "gcra"
rate = "600/s"
burst = 60
"#;

/// Waits (for messages, never for a refill) until the gold and the free Envoy have heard
/// `shares` of their buckets; then checks they add up to no more than the rate.
async fn until_weighted(gold: &Envoy, free: &Envoy, shares: [u64; 2]) {
    let heard = || {
        [
            gold.share_of("name=api,tier=gold"),
            free.share_of("name=api,tier=free"),
        ]
    };
    for _ in 0..500 {
        if heard() == shares.map(|s| Some(Some(s))) {
            assert!(
                shares.iter().sum::<u64>() <= RATE,
                "{shares:?} add up past {RATE}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("heard {:?}, expected {shares:?}", heard());
}

#[tokio::test]
async fn weighted_buckets_of_one_budget_split_it_by_their_weights() {
    const GOLD: &[(&str, &str)] = &[("name", "api"), ("tier", "gold")];
    const FREE: &[(&str, &str)] = &[("name", "api"), ("tier", "free")];
    let clock = Arc::new(ManualClock::new(T0));
    let running = common::start_on(WEIGHTED, clock.clone()).await;
    let (gold, free) = (
        Envoy::connect(&running).await,
        Envoy::connect(&running).await,
    );
    // Two buckets of one rule keyed `global`: one budget, its 600/s split 3:1 when both
    // want more than the rate (demand not known yet counts as the whole rate).
    gold.report_bucket(GOLD, 0, Duration::ZERO).await;
    for _ in 0..500 {
        if gold.share_of("name=api,tier=gold") == Some(Some(600)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        gold.share_of("name=api,tier=gold"),
        Some(Some(600)),
        "alone, the whole rate"
    );
    free.report_bucket(FREE, 0, Duration::ZERO).await;
    until_weighted(&gold, &free, [450, 150]).await;
    clock.advance(Duration::from_secs(1));
    gold.report_bucket(GOLD, 10_000, Duration::from_secs(1))
        .await;
    free.report_bucket(FREE, 10_000, Duration::from_secs(1))
        .await;
    until_weighted(&gold, &free, [450, 150]).await;
    // A weight buys no more than the bucket asks for: the rest goes to the other.
    clock.advance(Duration::from_secs(1));
    gold.report_bucket(GOLD, 100, Duration::from_secs(1)).await;
    free.report_bucket(FREE, 10_000, Duration::from_secs(1))
        .await;
    until_weighted(&gold, &free, [100, 500]).await;
}

/// Envoy builds bucket ids from requests, so clients choose how many there are: past
/// `[envoy] max_quota_buckets` a new bucket is abandoned, not held, until others go.
#[tokio::test]
async fn buckets_past_the_bound_are_abandoned_until_others_go() {
    let toml = r#"
[server]
listen = "127.0.0.1:0"
grpc = "127.0.0.1:0"
admin = "off"

[envoy]
max_quota_buckets = 2

[[limit]]
name = "per-name"
match = { domain = "edge", bucket = "name" }
key = ["bucket"]
algorithm = "gcra"
rate = "600/s"
burst = 60
"#;
    let running = common::start_at(toml, T0).await;
    let (a, b) = (
        Envoy::connect(&running).await,
        Envoy::connect(&running).await,
    );
    a.report("x1", 0, Duration::ZERO).await;
    a.report("x2", 0, Duration::ZERO).await;
    a.report("x3", 0, Duration::ZERO).await;
    heard(&a, "x3", None).await;
    assert_eq!(
        (a.share("x1"), a.share("x2")),
        (Some(Some(600)), Some(Some(600)))
    );
    // The bound is the board's, across streams: b's first bucket does not fit either.
    b.report("x1", 0, Duration::ZERO).await;
    heard(&b, "x1", None).await;
    // a leaves: its buckets go, and b's next report is held.
    let Envoy { reports, heard: _ } = a;
    drop(reports);
    for _ in 0..500 {
        b.report("x1", 0, Duration::ZERO).await;
        if b.share("x1") == Some(Some(600)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("b's bucket was not held once a left: {:?}", b.share("x1"));
}

/// Waits (for messages on the network) until `envoy` has heard `share` for bucket `value`.
async fn heard(envoy: &Envoy, value: &str, share: Option<u64>) {
    for _ in 0..500 {
        if envoy.share(value) == Some(share) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "heard {:?} for {value}, expected {share:?}",
        envoy.share(value)
    );
}

/// A report is work like a request: with every place in flight taken it is dropped and
/// counted as shed (the Envoy keeps its assignment), and answered once a place is free.
#[tokio::test]
async fn a_report_with_every_place_in_flight_taken_is_shed() {
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::clone(&release);
    let upstream = common::upstream(move |_request: http::Request<hyper::body::Incoming>| {
        let held = Arc::clone(&held);
        async move {
            held.notified().await;
            http::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"ok")))
        }
    })
    .await;
    let toml = CONFIG.replace(
        "[server]\n",
        &format!(
            "[server]\nupstream = \"http://{upstream}\"\nmax_in_flight = 1\nqueue_timeout = \"0s\"\n"
        ),
    );
    let running = common::start_at(&toml, T0).await;
    let admin = running.admin.expect("an admin listener");
    let listen = running.listen;
    let slow = tokio::spawn(async move {
        common::raw::raw(listen, "GET /slow HTTP/1.1\nHost: shop.example\n\n").await
    });
    let metric = |line: &'static str| async move {
        common::get(admin, "/metrics", &[])
            .await
            .body
            .lines()
            .any(|l| l == line)
    };
    assert!(
        common::eventually(|| metric("ratewarden_in_flight 1")).await,
        "the held request takes the one place"
    );
    let envoy = Envoy::connect(&running).await;
    envoy.report("api", 0, Duration::ZERO).await;
    assert!(
        common::eventually(|| metric("ratewarden_shed_total{reason=\"in_flight\"} 1")).await,
        "the report is shed"
    );
    assert_eq!(envoy.share("api"), None, "and not answered");
    release.notify_one();
    slow.await.expect("the held request ends");
    envoy.report("api", 0, Duration::ZERO).await;
    until_shares(&[&envoy], &[600]).await;
}

/// Reports move every Envoy's share: a peer outside `[envoy] clients` may not stream them,
/// and is told so, by name, before anything is recorded.
#[tokio::test]
async fn only_the_listed_clients_may_stream_reports() {
    let toml = CONFIG.replace(
        "[[limit]]",
        "[envoy]\nclients = [\"192.0.2.0/24\"]\n\n[[limit]]",
    );
    let running = common::start_at(&toml, T0).await;
    let addr = running.grpc.expect("a gRPC listener");
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("the gRPC listener answers");
    let (_tx, rx) = mpsc::channel(1);
    let refused = client
        .stream_rate_limit_quotas(Reports(rx))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused.message().contains("127.0.0.1") && refused.message().contains("[envoy] clients"),
        "{}",
        refused.message()
    );
}
