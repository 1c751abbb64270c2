//! One engine behind every front door: the same rules and keys driven through the decision
//! API (`POST /v1/check`) and Envoy's `ShouldRateLimit` decide alike, count alike, and show
//! the same `ratewarden_decisions_total` lines (issue 11).

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::Running;
use serde_json::Value;
use tonic::transport::Channel;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_700_000_000_000_000_000;

/// Each rule's algorithm and numbers; every one is tried through both doors.
const RULES: &[(&str, &str)] = &[
    (
        "fixed-window",
        "algorithm = \"fixed-window\"\nlimit = 3\nwindow = \"1m\"",
    ),
    (
        "sliding-window",
        "algorithm = \"sliding-window\"\nlimit = 3\nwindow = \"1m\"",
    ),
    (
        "sliding-window-10",
        "algorithm = \"sliding-window\"\nlimit = 3\nwindow = \"1m\"\nsub_windows = 10",
    ),
    (
        "sliding-log",
        "algorithm = \"sliding-log\"\nlimit = 3\nwindow = \"1m\"",
    ),
    (
        "token-bucket",
        "algorithm = \"token-bucket\"\nrate = \"3/m\"\nburst = 3",
    ),
    (
        "leaky-bucket",
        "algorithm = \"leaky-bucket\"\nrate = \"3/m\"\nburst = 3",
    ),
    (
        "leaky-queue",
        "algorithm = \"leaky-queue\"\nrate = \"3/m\"\nburst = 3",
    ),
    ("gcra", "algorithm = \"gcra\"\nrate = \"3/m\"\nburst = 3"),
    (
        "quota",
        "algorithm = \"quota\"\nlimit = 3\nperiod = \"day\"",
    ),
    (
        "concurrency",
        "algorithm = \"concurrency\"\nlimit = 3\nlease = \"5m\"",
    ),
    (
        "rollout",
        "algorithm = \"fixed-window\"\nlimit = 2\nwindow = \"1m\"\nrollout = \"50%\"",
    ),
    (
        "shadow",
        "algorithm = \"fixed-window\"\nlimit = 2\nwindow = \"1m\"\nmode = \"shadow\"",
    ),
];

/// Two rules on one request, the tight one rejecting: the other counts it as skipped.
const PAIR: &[(&str, &str)] = &[
    (
        "pair-tight",
        "algorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"",
    ),
    (
        "pair-loose",
        "algorithm = \"gcra\"\nrate = \"10/m\"\nburst = 10",
    ),
];

/// The config for one door: the HTTP door matches each rule by path and keys it on the
/// `x-user` header; the Envoy door matches it by domain and keys it on the descriptor's one
/// value. Either way a rule's key is `name@fingerprint|user`.
fn config(grpc: bool) -> String {
    let mut toml = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n",
    );
    for (name, numbers) in RULES {
        let (matches, key) = if grpc {
            (
                format!("{{ domain = \"{name}\", descriptor = \"user\" }}"),
                "descriptor",
            )
        } else {
            (format!("{{ path = \"/{name}\" }}"), "header:x-user")
        };
        toml.push_str(&format!(
            "\n[[limit]]\nname = \"{name}\"\nmatch = {matches}\nkey = [\"{key}\"]\n{numbers}\n"
        ));
    }
    for (name, numbers) in PAIR {
        let (matches, key) = if grpc {
            (
                format!("{{ domain = \"pair\", descriptor = \"{name}\" }}"),
                "descriptor",
            )
        } else {
            ("{ path = \"/pair\" }".to_owned(), "header:x-user")
        };
        toml.push_str(&format!(
            "\n[[limit]]\nname = \"{name}\"\nmatch = {matches}\nkey = [\"{key}\"]\n{numbers}\n"
        ));
    }
    toml
}

async fn start(grpc: bool) -> Running {
    common::start_on(&config(grpc), Arc::new(ManualClock::new(T0))).await
}

/// What a door said: allowed, and each rule's remaining count, by rule name.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    allowed: bool,
    remaining: Vec<(String, u64)>,
}

async fn over_http(addr: SocketAddr, path: &str, user: &str) -> Said {
    let body = format!(r#"{{"path": "{path}", "headers": {{"x-user": "{user}"}}}}"#);
    let d: Value =
        serde_json::from_str(&common::post(addr, "/v1/check", &body).await.body).unwrap();
    let mut remaining: Vec<(String, u64)> = d["policies"]
        .as_array()
        .unwrap_or_else(|| panic!("{d}"))
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["remaining"].as_u64().unwrap(),
            )
        })
        .collect();
    remaining.sort();
    Said {
        allowed: d["allowed"].as_bool().unwrap(),
        remaining,
    }
}

async fn over_grpc(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
    names: &[&str],
) -> Said {
    let descriptors = entries
        .iter()
        .map(|(k, v)| RateLimitDescriptor {
            entries: vec![Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            }],
            ..RateLimitDescriptor::default()
        })
        .collect();
    let r = client
        .should_rate_limit(RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut remaining: Vec<(String, u64)> = names
        .iter()
        .zip(&r.statuses)
        .map(|(n, s)| ((*n).to_owned(), u64::from(s.limit_remaining)))
        .collect();
    remaining.sort();
    Said {
        allowed: r.overall_code == Code::Ok as i32,
        remaining,
    }
}

/// The `ratewarden_decisions_total` lines of `/metrics`, sorted.
async fn decisions(running: &Running) -> Vec<String> {
    let text = common::get(running.admin.unwrap(), "/metrics", &[])
        .await
        .body;
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("ratewarden_decisions_total"))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[tokio::test]
async fn both_doors_decide_count_and_report_alike_for_every_algorithm_rollout_and_shadow() {
    let (web, envoy) = (start(false).await, start(true).await);
    let mut client = RateLimitServiceClient::connect(format!("http://{}", envoy.grpc.unwrap()))
        .await
        .unwrap();
    let users: Vec<String> = (0..8).map(|u| format!("user-{u}")).collect();
    for (name, _) in RULES {
        for user in &users {
            for attempt in 0..5 {
                let a = over_http(web.listen, &format!("/{name}"), user).await;
                let b = over_grpc(&mut client, name, &[("user", user)], &[name]).await;
                assert_eq!(a, b, "rule {name}, {user}, attempt {attempt}");
            }
        }
    }
    for user in &users[..3] {
        for attempt in 0..3 {
            let a = over_http(web.listen, "/pair", user).await;
            let b = over_grpc(
                &mut client,
                "pair",
                &[("pair-tight", user), ("pair-loose", user)],
                &["pair-tight", "pair-loose"],
            )
            .await;
            assert_eq!(a, b, "pair, {user}, attempt {attempt}");
        }
    }
    let (a, b) = (decisions(&web).await, decisions(&envoy).await);
    assert_eq!(a, b);
    // The counts mean what they say: the shadow rule would have rejected 3 of 5 for each
    // of 8 users, and the loose rule of the pair skipped the 2 requests per user the tight
    // one rejected.
    assert!(
        a.iter().any(|l| l.contains("rule=\"shadow\"")
            && l.contains("shadow_rejected")
            && l.ends_with(" 24")),
        "{a:#?}"
    );
    assert!(
        a.iter().any(|l| l.contains("rule=\"pair-loose\"")
            && l.contains("\"skipped\"")
            && l.ends_with(" 6")),
        "{a:#?}"
    );
    // Half the keys in the rollout's share: some users rejected, others only recorded.
    let count = |rule: &str, outcome: &str| {
        a.iter()
            .find(|l| {
                l.contains(&format!("rule=\"{rule}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {rule} {outcome} in {a:#?}"))
    };
    assert!(count("rollout", "rejected") > 0, "{a:#?}");
    assert!(count("rollout", "shadow_rejected") > 0, "{a:#?}");
    assert!(
        a.iter().any(|l| l.contains("rule=\"fixed-window\"")
            && l.contains("\"allowed\"")
            && l.ends_with(" 24")),
        "{a:#?}"
    );
}
