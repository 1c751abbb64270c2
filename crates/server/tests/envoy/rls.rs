//! Envoy's rate limit service over real gRPC: a tonic client built from the same protos
//! against `ratewarden serve`'s listener, with envoyproxy/ratelimit configs as they are.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::{Options, Running};
use tonic::transport::Channel;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_796_169_600_000_000_000;

const ENVOY: &str = include_str!("../common/edge.yaml");

/// The `[server]` section of every test: the gRPC listener, nothing else to speak of.
const SERVER: &str =
    "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ngrpc = \"127.0.0.1:0\"\n";

/// The example Envoy config beside `store` (a `[store]` section, or nothing).
async fn start(store: &str) -> (Running, RateLimitServiceClient<Channel>) {
    let envoy = ratewarden_policy::envoy::parse("edge.yaml", ENVOY).unwrap();
    serve_grpc(&format!("{SERVER}{store}"), envoy, None).await
}

/// A server on `toml` (which names its listeners) with `envoy` configs, and a client.
async fn serve_grpc(
    toml: &str,
    envoy: ratewarden_policy::envoy::EnvoyConfig,
    envoy_path: Option<std::path::PathBuf>,
) -> (Running, RateLimitServiceClient<Channel>) {
    let running = common::start(Options {
        envoy,
        envoy_path,
        ..common::options(toml, Arc::new(ManualClock::new(T0)))
    })
    .await;
    let client = common::grpc_client(&running).await;
    (running, client)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(r).await.unwrap().into_inner()
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn the_edge_cases_of_the_reference_service() {
    let (_server, mut client) = start("").await;
    let empty_domain = RateLimitRequest {
        domain: String::new(),
        ..request(vec![descriptor(&[("client_id", "a")])])
    };
    let e = client.should_rate_limit(empty_domain).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("domain must not be empty"));
    let e = client.should_rate_limit(request(vec![])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("descriptor list must not be empty"));

    // An unknown domain, or no matching rule: OK without a limit.
    let unknown = RateLimitRequest {
        domain: "nowhere".to_owned(),
        ..request(vec![descriptor(&[("client_id", "a")])])
    };
    let r = ask(&mut client, unknown).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses.len(), 1);
    assert!(r.statuses[0].current_limit.is_none());
    let r = ask(&mut client, request(vec![descriptor(&[("nothing", "x")])])).await;
    assert!(r.statuses[0].current_limit.is_none());

    // Unlimited: OK, everything remaining, nothing counted.
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("everything", "x")])]),
    )
    .await;
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
}

#[tokio::test]
async fn descriptors_are_limited_with_statuses_in_order_and_headers_for_the_client() {
    let (_server, mut client) = start("").await;
    let a = || descriptor(&[("client_id", "a")]);
    for left in [2, 1, 0] {
        let r = ask(
            &mut client,
            request(vec![a(), descriptor(&[("nothing", "")])]),
        )
        .await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses.len(), 2, "one status per descriptor, in order");
        let s = &r.statuses[0];
        assert_eq!(s.limit_remaining, left);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.name.as_str()),
            (3, "per_client")
        );
        assert_eq!(limit.unit, 2, "MINUTE");
        assert!(s.duration_until_reset.is_some());
        assert!(header(&r, "ratelimit")
            .unwrap()
            .contains(&format!("r={left}")));
        assert!(header(&r, "ratelimit-policy").unwrap().contains("q=3"));
        assert_eq!(header(&r, "retry-after"), None);
    }
    let r = ask(&mut client, request(vec![a()])).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");

    // Exact value beats key only; a wildcard path with a nested descriptor.
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "partner")])]),
    )
    .await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        100
    );
    let export = || descriptor(&[("path", "/api/v2/export"), ("client_id", "b")]);
    assert_eq!(
        ask(&mut client, request(vec![export()])).await.overall_code,
        Code::Ok as i32
    );
    assert_eq!(
        ask(&mut client, request(vec![export()])).await.overall_code,
        Code::OverLimit as i32,
        "one an hour"
    );
    // Depth must match: the path alone has no limit.
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("path", "/api/v2/export")])]),
    )
    .await;
    assert!(r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn replaces_shadow_quota_addends_and_overrides() {
    let (_server, mut client) = start("").await;
    // `paid` replaces `free_tier` when both match.
    let r = ask(
        &mut client,
        request(vec![
            descriptor(&[("tier", "free")]),
            descriptor(&[("tier", "paid")]),
        ]),
    )
    .await;
    assert!(r.statuses[0].current_limit.is_none(), "replaced");
    assert_eq!(
        r.statuses[1]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        50
    );

    // Shadow mode counts but never refuses.
    for _ in 0..3 {
        let r = ask(&mut client, request(vec![descriptor(&[("watch", "w")])])).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
    }

    // Quota mode: over alone is over (every quota rule is over).
    assert_eq!(
        ask(&mut client, request(vec![descriptor(&[("soft", "s")])]))
            .await
            .overall_code,
        Code::Ok as i32
    );
    assert_eq!(
        ask(&mut client, request(vec![descriptor(&[("soft", "s")])]))
            .await
            .overall_code,
        Code::OverLimit as i32
    );

    // hits_addend: 2 at the request level; 0 on a descriptor checks without counting.
    let r = ask(
        &mut client,
        RateLimitRequest {
            hits_addend: 2,
            ..request(vec![descriptor(&[("client_id", "c")])])
        },
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 1);
    let mut check = descriptor(&[("client_id", "c")]);
    check.hits_addend = Some(UInt64Value { value: 0 });
    for _ in 0..3 {
        let r = ask(&mut client, request(vec![check.clone()])).await;
        assert_eq!(r.statuses[0].limit_remaining, 1, "checked, not counted");
    }

    // A limit the request brings: 1 a second for this descriptor.
    let mut o = descriptor(&[("anything", "z")]);
    o.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 1,
    });
    assert_eq!(
        ask(&mut client, request(vec![o.clone()]))
            .await
            .overall_code,
        Code::Ok as i32
    );
    assert_eq!(
        ask(&mut client, request(vec![o])).await.overall_code,
        Code::OverLimit as i32
    );

    // Our extension: GCRA behind the same descriptor, 5 at once then exactly 200 ms apart.
    for _ in 0..5 {
        let r = ask(&mut client, request(vec![descriptor(&[("smooth", "x")])])).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    let r = ask(&mut client, request(vec![descriptor(&[("smooth", "x")])])).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(
        header(&r, "retry-after"),
        Some("1"),
        "200 ms, in whole seconds"
    );
}

#[tokio::test]
async fn a_store_failure_is_unavailable_so_envoys_failure_mode_decides() {
    let redis = ratewarden_redis::testing::Server::start();
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ndeadline = \"200ms\"\n",
        redis.url()
    );
    let (_server, mut client) = start(&store).await;
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "r")])]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 2, "decided on Redis");
    drop(redis);
    let e = client
        .should_rate_limit(request(vec![descriptor(&[("client_id", "r")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
}

#[tokio::test]
async fn the_json_endpoint_round_trips_as_envoyproxy_ratelimit_answers() {
    let (server, _client) = start("").await;
    let listen = server.listen;
    let post = |body: &'static str| async move {
        let reply = common::post(listen, "/json", body).await;
        (reply.status, reply.json())
    };
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client_id","value":"j"}]},{"entries":[{"key":"nothing","value":"x"}]}]}"#;
    let (status, json) = post(body).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(json["overallCode"], "OK");
    assert_eq!(json["statuses"][0]["code"], "OK");
    assert_eq!(json["statuses"][0]["currentLimit"]["requestsPerUnit"], 3);
    assert_eq!(json["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(json["statuses"][0]["limitRemaining"], 2);
    assert!(json["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    assert_eq!(json["statuses"][1], serde_json::json!({"code": "OK"}));
    // The proto names are accepted too, and 64-bit numbers as strings.
    let more = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client_id","value":"j"}],"hits_addend":"2"}]}"#;
    let (status, json) = post(more).await;
    assert_eq!(status, http::StatusCode::OK);
    assert!(
        json["statuses"][0].get("limitRemaining").is_none(),
        "0 is omitted: {json}"
    );
    let (status, json) = post(body).await;
    assert_eq!(status, http::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    // Bad input is a 400, as there.
    let (status, _) = post(r#"{"domain":"edge","descriptors":[]}"#).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    let (status, _) = post(r#"{"domain": 7}"#).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    let health = common::get(server.listen, "/healthcheck", &[]).await;
    assert_eq!(health.status, http::StatusCode::OK);
}

#[tokio::test]
async fn envoy_configs_reload_and_a_bad_one_keeps_the_old() {
    let dir = std::env::temp_dir().join(format!("ratewarden-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("edge.yaml");
    let config = |n: u32| {
        format!("domain: edge\ndescriptors:\n  - key: client_id\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n")
    };
    std::fs::write(&path, config(3)).unwrap();
    let envoy = ratewarden_policy::envoy::load(&path).unwrap();
    let (running, mut client) = serve_grpc(SERVER, envoy, Some(path.clone())).await;
    let limit = |r: &RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit
    };
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "a")])]),
    )
    .await;
    assert_eq!(limit(&r), 3);
    std::fs::write(&path, config(7).replace("unit: minute", "unit: fortnight")).unwrap();
    let errors = running.reload().await.unwrap_err().to_string();
    assert!(errors.contains("edge.yaml:4:"), "{errors}");
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "a")])]),
    )
    .await;
    assert_eq!(limit(&r), 3, "the old config stays");
    assert_eq!(
        header(&r, "ratelimit-policy").unwrap(),
        r#""edge/client_id";q=3;w=60"#
    );
    std::fs::write(&path, config(7)).unwrap();
    running.reload().await.unwrap();
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "a")])]),
    )
    .await;
    assert_eq!(limit(&r), 7);
    // The policy field of a rule kept between calls follows the reload.
    assert_eq!(
        header(&r, "ratelimit-policy").unwrap(),
        r#""edge/client_id";q=7;w=60"#
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn native_rules_can_be_addressed_by_domain_and_descriptor() {
    let toml = r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
grpc = "127.0.0.1:0"

[[limit]]
name = "tenant-gcra"
match = { domain = "mesh", descriptor = "tenant,path=/reports/*" }
key = ["descriptor"]
algorithm = "gcra"
rate = "2/s"
burst = 2
"#;
    let (_running, mut client) = serve_grpc(toml, Default::default(), None).await;
    let mesh = |entries: &[(&str, &str)]| RateLimitRequest {
        domain: "mesh".to_owned(),
        ..request(vec![descriptor(entries)])
    };
    let report = [("tenant", "acme"), ("path", "/reports/q3")];
    for left in [1, 0] {
        let r = ask(&mut client, mesh(&report)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, left);
        assert_eq!(
            r.statuses[0].current_limit.as_ref().unwrap().name,
            "tenant-gcra"
        );
    }
    let r = ask(&mut client, mesh(&report)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(
        header(&r, "retry-after"),
        Some("1"),
        "500 ms at 2/s, in whole seconds"
    );
    // Another tenant has its own budget; another path or depth is not this rule's.
    let other = ask(
        &mut client,
        mesh(&[("tenant", "globex"), ("path", "/reports/q3")]),
    )
    .await;
    assert_eq!(other.statuses[0].limit_remaining, 1);
    let elsewhere = ask(
        &mut client,
        mesh(&[("tenant", "acme"), ("path", "/orders")]),
    )
    .await;
    assert!(elsewhere.statuses[0].current_limit.is_none());
    let shallow = ask(&mut client, mesh(&[("tenant", "acme")])).await;
    assert!(shallow.statuses[0].current_limit.is_none());

    // Such rules never apply to HTTP requests, and a descriptor needs its domain.
    let e = ratewarden_policy::config::parse(
        "bad.toml",
        "[[limit]]\nname = \"x\"\nmatch = { descriptor = \"tenant\" }\nkey = [\"descriptor\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`match.descriptor` needs `match.domain`"), "{e}");
}

#[tokio::test]
async fn native_rules_keep_their_failure_policy_over_envoys_protocol() {
    let redis = ratewarden_redis::testing::Server::start();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
grpc = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
deadline = "200ms"

[[limit]]
name = "open"
match = {{ domain = "mesh", descriptor = "open" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "open"

[[limit]]
name = "shared"
match = {{ domain = "mesh", descriptor = "shared" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 10
window = "1m"
on_store_failure = "local"
local_divide_by = 5

[[limit]]
name = "closed"
match = {{ domain = "mesh", descriptor = "closed" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 10
window = "1m"
on_store_failure = "closed"
"#,
        url = redis.url()
    );
    let (_running, mut client) = serve_grpc(&toml, Default::default(), None).await;
    let mesh = |key: &str| RateLimitRequest {
        domain: "mesh".to_owned(),
        ..request(vec![descriptor(&[(key, "k")])])
    };
    assert_eq!(
        ask(&mut client, mesh("closed")).await.statuses[0].limit_remaining,
        9
    );
    drop(redis);
    assert_eq!(
        ask(&mut client, mesh("open")).await.overall_code,
        Code::Ok as i32
    );
    let mut ok = 0;
    for _ in 0..4 {
        ok += u32::from(ask(&mut client, mesh("shared")).await.overall_code == Code::Ok as i32);
    }
    assert_eq!(ok, 2, "the local share: 10 / 5");
    let e = client.should_rate_limit(mesh("closed")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
}

/// `POST /json` with `body` to the decision API at `addr`: the status and the body.
async fn post_json(addr: std::net::SocketAddr, body: &str) -> (http::StatusCode, String) {
    let reply = common::post(addr, "/json", body).await;
    (reply.status, reply.body)
}

#[tokio::test]
async fn the_json_endpoint_answers_500_for_a_store_failure_and_400_for_bad_input() {
    // Issue 11: every failure was a 400, a Redis outage included.
    let redis = ratewarden_redis::testing::Server::start();
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ndeadline = \"200ms\"\n",
        redis.url()
    );
    let (server, _client) = start(&store).await;
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client_id","value":"j"}]}]}"#;
    assert_eq!(post_json(server.listen, body).await.0, http::StatusCode::OK);
    drop(redis);
    let (status, said) = post_json(server.listen, body).await;
    assert_eq!(status, http::StatusCode::INTERNAL_SERVER_ERROR, "{said}");
    assert!(said.contains("store failed"), "{said}");
    let (status, _) = post_json(server.listen, r#"{"domain":""}"#).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_reload_with_a_bad_toml_keeps_the_old_envoy_yaml_too() {
    // Issue 11: the new YAML went in force before the TOML was read, and stayed.
    let dir = std::env::temp_dir().join(format!("ratewarden-both-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (toml, yaml) = (dir.join("r.toml"), dir.join("edge.yaml"));
    let envoy = |n: u32| {
        format!("domain: edge\ndescriptors:\n  - key: client_id\n    rate_limit: {{unit: minute, requests_per_unit: {n}}}\n")
    };
    std::fs::write(&toml, SERVER).unwrap();
    std::fs::write(&yaml, envoy(3)).unwrap();
    let running = common::start(Options {
        config: ratewarden_policy::config::load(&toml).unwrap(),
        config_path: Some(toml.clone()),
        clock: Arc::new(ManualClock::new(T0)),
        workers: 1,
        envoy: ratewarden_policy::envoy::load(&yaml).unwrap(),
        envoy_path: Some(yaml.clone()),
    })
    .await;
    let mut client = common::grpc_client(&running).await;
    let limit = |r: &RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit
    };
    let a = || request(vec![descriptor(&[("client_id", "a")])]);
    assert_eq!(limit(&ask(&mut client, a()).await), 3);
    // A good YAML beside a broken TOML: neither goes in force.
    std::fs::write(&yaml, envoy(7)).unwrap();
    std::fs::write(&toml, format!("{SERVER}\n[[limit]]\nname = \"x\"\n")).unwrap();
    assert!(running.reload().await.is_err());
    assert_eq!(limit(&ask(&mut client, a()).await), 3, "the old YAML stays");
    // Both good: both go in force together.
    std::fs::write(&toml, SERVER).unwrap();
    running.reload().await.unwrap();
    assert_eq!(limit(&ask(&mut client, a()).await), 7);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_native_rule_whose_numbers_change_on_reload_starts_afresh_over_grpc_too() {
    // Issue 11: gRPC keyed native rules `native:{name}`, HTTP `name@fingerprint`, so a
    // reload that changed a rule's numbers restarted its counters over HTTP only.
    let dir = std::env::temp_dir().join(format!("ratewarden-native-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("r.toml");
    let config = |n: u32| {
        format!("{SERVER}\n[[limit]]\nname = \"mesh\"\nmatch = {{ domain = \"mesh\", descriptor = \"user\" }}\nkey = [\"descriptor\"]\nalgorithm = \"fixed-window\"\nlimit = {n}\nwindow = \"1m\"\n")
    };
    std::fs::write(&toml, config(2)).unwrap();
    let running = common::start(Options {
        config: ratewarden_policy::config::load(&toml).unwrap(),
        config_path: Some(toml.clone()),
        ..common::options("", Arc::new(ManualClock::new(T0)))
    })
    .await;
    let mut client = common::grpc_client(&running).await;
    let mesh = || RateLimitRequest {
        domain: "mesh".to_owned(),
        ..request(vec![descriptor(&[("user", "alice")])])
    };
    for left in [1, 0] {
        assert_eq!(
            ask(&mut client, mesh()).await.statuses[0].limit_remaining,
            left
        );
    }
    std::fs::write(&toml, config(3)).unwrap();
    running.reload().await.unwrap();
    assert_eq!(
        ask(&mut client, mesh()).await.statuses[0].limit_remaining,
        2,
        "new numbers, a new counter"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn negative_hits_are_refused_not_charged() {
    let (_server, mut client) = start("").await;
    let mut refund = descriptor(&[("client_id", "n")]);
    refund.is_negative_hits = true;
    refund.hits_addend = Some(UInt64Value { value: 2 });
    let e = client
        .should_rate_limit(request(vec![descriptor(&[("tier", "free")]), refund]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("descriptor 1: `is_negative_hits`"),
        "{}",
        e.message()
    );
    // Nothing was charged: the client still has its 3.
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("client_id", "n")])]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

/// The `ratewarden_decisions_total` lines of the YAML rules (labels with a `/`), sorted.
async fn yaml_decisions(running: &Running) -> Vec<String> {
    let metrics = common::get(running.admin.unwrap(), "/metrics", &[])
        .await
        .body;
    let mut lines: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("ratewarden_decisions_total{rule=\"edge/"))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Whether `lines` hold the counter of `rule` for `outcome` at `value`.
fn counted(lines: &[String], rule: &str, outcome: &str, value: u64) -> bool {
    let line =
        format!("ratewarden_decisions_total{{rule=\"{rule}\",outcome=\"{outcome}\"}} {value}");
    lines.contains(&line)
}

#[tokio::test]
async fn yaml_rules_count_their_decisions_per_rule_by_a_readable_label() {
    // YAML rules reached the engine without counters: `ratewarden_decisions_total` showed
    // native rules only, however many decisions Envoy's descriptors made.
    let admin =
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n";
    let envoy = ratewarden_policy::envoy::parse("edge.yaml", ENVOY).unwrap();
    let (server, mut client) = serve_grpc(admin, envoy, None).await;
    // Every rule that decides has its lines from the start; unlimited ones have none.
    let lines = yaml_decisions(&server).await;
    for rule in [
        "edge/client_id",
        "edge/client_id=partner",
        "edge/path=/api/*/export/client_id",
        "edge/tier=free",
        "edge/tier=paid",
        "edge/watch",
        "edge/soft",
        "edge/smooth",
    ] {
        assert!(counted(&lines, rule, "allowed", 0), "{rule}: {lines:#?}");
        assert!(
            counted(&lines, rule, "failed_closed", 0),
            "{rule}: {lines:#?}"
        );
    }
    assert!(
        !lines.iter().any(|l| l.contains("edge/everything")),
        "{lines:#?}"
    );

    let a = || descriptor(&[("client_id", "a")]);
    for _ in 0..3 {
        assert_eq!(
            ask(&mut client, request(vec![a()])).await.overall_code,
            Code::Ok as i32
        );
    }
    // Over its limit: rejected by `client_id`, and `tier=free` beside it is not charged.
    let r = ask(&mut client, request(vec![a()])).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let r = ask(
        &mut client,
        request(vec![a(), descriptor(&[("tier", "free")])]),
    )
    .await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    // A shadow rule over its limit would have rejected.
    for _ in 0..2 {
        let r = ask(&mut client, request(vec![descriptor(&[("watch", "w")])])).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    // A nested rule, matched through a wildcard value.
    let nested = descriptor(&[("path", "/api/v2/export"), ("client_id", "z")]);
    assert_eq!(
        ask(&mut client, request(vec![nested])).await.overall_code,
        Code::Ok as i32
    );
    // A request's own limit is no rule of the file: no label of its own.
    let own = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: 1,
        }),
        ..descriptor(&[("client_id", "own")])
    };
    ask(&mut client, request(vec![own])).await;

    let lines = yaml_decisions(&server).await;
    for (rule, outcome, value) in [
        ("edge/client_id", "allowed", 3),
        ("edge/client_id", "rejected", 2),
        ("edge/tier=free", "skipped", 1),
        ("edge/tier=free", "allowed", 0),
        ("edge/watch", "shadow_rejected", 1),
        ("edge/watch", "rejected", 0),
        ("edge/path=/api/*/export/client_id", "allowed", 1),
        ("edge/client_id=partner", "allowed", 0),
    ] {
        assert!(
            counted(&lines, rule, outcome, value),
            "{rule} {outcome} {value}: {lines:#?}"
        );
    }
    assert_eq!(
        lines.len(),
        8 * 6,
        "six outcomes for each of the eight rules: {lines:#?}"
    );
}

#[tokio::test]
async fn a_yaml_rules_store_failure_is_counted_as_failed_closed() {
    let redis = ratewarden_redis::testing::Server::start();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n\n[store]\nkind = \"redis\"\nurl = \"{}\"\ndeadline = \"200ms\"\n",
        redis.url()
    );
    let envoy = ratewarden_policy::envoy::parse("edge.yaml", ENVOY).unwrap();
    let (server, mut client) = serve_grpc(&toml, envoy, None).await;
    let r = || request(vec![descriptor(&[("client_id", "r")])]);
    assert_eq!(ask(&mut client, r()).await.overall_code, Code::Ok as i32);
    drop(redis);
    let e = client.should_rate_limit(r()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    let lines = yaml_decisions(&server).await;
    assert!(
        counted(&lines, "edge/client_id", "allowed", 1),
        "{lines:#?}"
    );
    assert!(
        counted(&lines, "edge/client_id", "failed_closed", 1),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_sensitive_rule_shows_envoy_no_fields_and_refuses_bare_as_http_does() {
    // Envoy passes these fields on to the client: a login or OTP rule's numbers must not
    // reach it through gRPC either (over HTTP they never did).
    let toml = format!(
        "{SERVER}\n[[limit]]\nname = \"otp\"\nmatch = {{ domain = \"auth\", descriptor = \"user\" }}\nkey = [\"descriptor\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\nsensitive = true\n"
    );
    let (_running, mut client) = serve_grpc(
        &toml,
        ratewarden_policy::envoy::EnvoyConfig::default(),
        None,
    )
    .await;
    let otp = || RateLimitRequest {
        domain: "auth".to_owned(),
        ..request(vec![descriptor(&[("user", "ann")])])
    };
    let first = ask(&mut client, otp()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    assert_eq!(header(&first, "ratelimit"), None);
    assert_eq!(header(&first, "ratelimit-policy"), None);
    let second = ask(&mut client, otp()).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    assert!(header(&second, "retry-after").is_some());
    assert_eq!(header(&second, "ratelimit"), None);
    assert_eq!(header(&second, "ratelimit-policy"), None);
}

#[tokio::test]
async fn a_shadow_rule_that_would_refuse_does_not_set_the_wait() {
    let yaml = "domain: w\ndescriptors:\n  - key: fast\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: slow\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    shadow_mode: true\n";
    let envoy = ratewarden_policy::envoy::parse("w.yaml", yaml).unwrap();
    let (_running, mut client) = serve_grpc(SERVER, envoy, None).await;
    let both = || RateLimitRequest {
        domain: "w".to_owned(),
        ..request(vec![
            descriptor(&[("fast", "a")]),
            descriptor(&[("slow", "a")]),
        ])
    };
    assert_eq!(ask(&mut client, both()).await.overall_code, Code::Ok as i32);
    let refused = ask(&mut client, both()).await;
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    // The enforced rule's window is a second; the shadow rule's hour is not the client's.
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!(retry <= 2, "{retry}");
}

/// `n` descriptors of one entry each, every one a different client of `per_client`.
fn many(n: usize) -> RateLimitRequest {
    let values: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    request(
        values
            .iter()
            .map(|v| descriptor(&[("client_id", v.as_str())]))
            .collect(),
    )
}

#[tokio::test]
async fn a_call_past_the_descriptor_or_entry_bound_is_refused_naming_its_setting() {
    let (_running, mut client) = start("[envoy]\nmax_descriptors = 8\nmax_entries = 3\n").await;
    // At the bounds: decided.
    assert_eq!(ask(&mut client, many(8)).await.statuses.len(), 8);
    let four: Vec<(&str, &str)> = vec![("path", "/x"), ("a", "1"), ("b", "2")];
    assert_eq!(
        ask(&mut client, request(vec![descriptor(&four)]))
            .await
            .overall_code,
        Code::Ok as i32
    );
    // One past either: refused whole, before anything is charged.
    let refused = client.should_rate_limit(many(9)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("9 descriptors")
            && refused.message().contains("`[envoy] max_descriptors` (8)"),
        "{}",
        refused.message()
    );
    let five: Vec<(&str, &str)> = vec![("client_id", "z"), ("a", "1"), ("b", "2"), ("c", "3")];
    let refused = client
        .should_rate_limit(request(vec![
            descriptor(&[("client_id", "y")]),
            descriptor(&five),
        ]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("descriptor 1: 4 entries")
            && refused.message().contains("`[envoy] max_entries` (3)"),
        "{}",
        refused.message()
    );
    // Nothing of the refused calls was charged: `c0`..`c7` have one of three requests spent.
    let again = ask(&mut client, many(1)).await;
    assert_eq!(again.statuses[0].limit_remaining, 1);
    assert_eq!(
        ask(
            &mut client,
            request(vec![descriptor(&[("client_id", "y")])])
        )
        .await
        .statuses[0]
            .limit_remaining,
        2,
        "the refused call charged `y`"
    );
}

#[tokio::test]
async fn the_default_bound_refuses_the_quadratic_call_of_thousands_of_descriptors() {
    let (server, mut client) = start("").await;
    let refused = client.should_rate_limit(many(32_000)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("`[envoy] max_descriptors` (64)"),
        "{}",
        refused.message()
    );
    // `POST /json`, the same decision over HTTP: a 400 problem naming the same setting.
    let descriptors: Vec<String> = (0..65)
        .map(|i| format!(r#"{{"entries":[{{"key":"client_id","value":"j{i}"}}]}}"#))
        .collect();
    let body = format!(
        r#"{{"domain":"edge","descriptors":[{}]}}"#,
        descriptors.join(",")
    );
    let reply = common::post(server.listen, "/json", &body).await;
    assert_eq!(reply.status, http::StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let detail = reply.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains("`[envoy] max_descriptors` (64)"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_message_past_max_message_bytes_is_refused_before_it_is_decoded() {
    let (_running, mut client) = start("[envoy]\nmax_message_bytes = 2048\n").await;
    let long = "v".repeat(4096);
    let refused = client
        .should_rate_limit(request(vec![descriptor(&[("client_id", long.as_str())])]))
        .await
        .unwrap_err();
    // As every bound of a call is refused: the setting named, then the codec's sizes.
    assert_eq!(
        refused.code(),
        tonic::Code::InvalidArgument,
        "{}",
        refused.message()
    );
    for part in [
        "`[envoy] max_message_bytes` (2048 bytes)",
        "found 4122 bytes",
    ] {
        assert!(refused.message().contains(part), "{}", refused.message());
    }
    assert_eq!(
        ask(&mut client, many(3)).await.overall_code,
        Code::Ok as i32,
        "a small message still passes"
    );
}

#[tokio::test]
async fn only_the_listed_clients_may_call_should_rate_limit() {
    // No list: anyone, as before (an Envoy-only deployment has no TOML to name its Envoys).
    let (_open, mut client) = start("").await;
    assert_eq!(
        ask(&mut client, many(1)).await.overall_code,
        Code::Ok as i32
    );
    // `trusted_proxies` without `[envoy] clients`: the proxies named are the callers.
    let (_proxied, mut client) = start("trusted_proxies = [\"10.0.0.0/8\"]\n").await;
    let refused = client.should_rate_limit(many(1)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused.message().contains("127.0.0.1") && refused.message().contains("trusted_proxies"),
        "{}",
        refused.message()
    );
    // `[envoy] clients` wins over `trusted_proxies`, both ways.
    let (_listed, mut client) =
        start("trusted_proxies = [\"10.0.0.0/8\"]\n[envoy]\nclients = [\"127.0.0.1/32\"]\n").await;
    assert_eq!(
        ask(&mut client, many(1)).await.overall_code,
        Code::Ok as i32
    );
    let (_other, mut client) = start("[envoy]\nclients = [\"192.0.2.0/24\"]\n").await;
    let refused = client.should_rate_limit(many(1)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(
        refused.message().contains("`[envoy] clients`"),
        "{}",
        refused.message()
    );
}

/// A rule with `always_charge` counts what a call carries even when it is refused: the
/// token usage Envoy reports with `hits_addend` at a stream's end (`apply_on_stream_done`)
/// is charged into debt, as envoyproxy/ratelimit's counters count past the limit, and the
/// next ask waits the debt out. The same rule without it charges a refused call nothing.
#[tokio::test]
async fn always_charge_counts_a_stream_done_report_past_the_limit() {
    for always in [true, false] {
        let toml = format!(
            r#"{SERVER}
[[limit]]
name = "tokens"
match = {{ domain = "ai", descriptor = "project" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 1000
window = "1h"
always_charge = {always}
"#
        );
        let (_running, mut client) = serve_grpc(&toml, Default::default(), None).await;
        report_past_the_limit(&mut client, always, &[], "p1").await;
    }
}

/// The same through an envoyproxy/ratelimit YAML rule, whose `ratewarden` map says
/// `always_charge`: alone in its call and beside another descriptor (which decides each
/// rule on its own path), in memory and on a real redis-server (a day's window, which
/// Redis's own clock does not cross during the test).
#[tokio::test]
async fn a_yaml_rule_with_always_charge_counts_a_stream_done_report_past_the_limit() {
    let redis = ratewarden_redis::testing::Server::start();
    let on_redis = format!("[store]\nkind = \"redis\"\nurl = \"{}\"\n", redis.url());
    for store in ["", on_redis.as_str()] {
        for always in [true, false] {
            let yaml = format!(
                "domain: ai\ndescriptors:\n  - key: project\n    rate_limit: {{unit: day, requests_per_unit: 1000}}\n    ratewarden: {{always_charge: {always}}}\n  - key: model\n    rate_limit: {{unlimited: true}}\n"
            );
            for beside in [&[][..], &[("model", "m1")][..]] {
                let envoy = ratewarden_policy::envoy::parse("ai.yaml", &yaml).unwrap();
                let (_running, mut client) =
                    serve_grpc(&format!("{SERVER}{store}"), envoy, None).await;
                // A project of its own for each run: Redis keeps the counts between them.
                let project = format!("p-{}-{always}-{}", store.len(), beside.len());
                report_past_the_limit(&mut client, always, beside, &project).await;
            }
        }
    }
}

/// One hit asked, 5,000 reported over the 999 left, then one more asked: refused if the
/// report was charged, allowed if it was not. `beside` adds a descriptor to each call.
async fn report_past_the_limit(
    client: &mut RateLimitServiceClient<Channel>,
    always: bool,
    beside: &[(&str, &str)],
    project: &str,
) {
    let call = |hits: u32| {
        let mut descriptors = vec![descriptor(&[("project", project)])];
        if !beside.is_empty() {
            descriptors.push(descriptor(beside));
        }
        RateLimitRequest {
            domain: "ai".to_owned(),
            hits_addend: hits,
            ..request(descriptors)
        }
    };
    // The request itself: one hit, allowed.
    let asked = ask(client, call(1)).await;
    assert_eq!(asked.overall_code, Code::Ok as i32);
    assert_eq!(asked.statuses[0].limit_remaining, 999);
    // The stream's usage at its end: 5,000 tokens, over what is left.
    let reported = ask(client, call(5_000)).await;
    assert_eq!(reported.overall_code, Code::OverLimit as i32);
    // The next request: refused after the report was charged, allowed if it was not.
    let next = ask(client, call(1)).await;
    if always {
        assert_eq!(
            next.overall_code,
            Code::OverLimit as i32,
            "5,001 of 1,000 spent ({beside:?})"
        );
        assert_eq!(next.statuses[0].limit_remaining, 0);
    } else {
        assert_eq!(next.overall_code, Code::Ok as i32, "{beside:?}");
        assert_eq!(next.statuses[0].limit_remaining, 998);
    }
}
