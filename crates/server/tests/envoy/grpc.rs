//! Envoy's gRPC door under the server's load shedding: the same in-flight cap as the HTTP
//! listeners, served on every worker.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::Running;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_700_000_000_000_000_000;

const RULE: &str = r#"
[[limit]]
name = "mesh"
match = { domain = "mesh", descriptor = "user" }
key = ["descriptor"]
algorithm = "fixed-window"
limit = 100
window = "1m"
"#;

async fn start(toml: &str, workers: usize) -> Running {
    common::start_workers(toml, Arc::new(ManualClock::new(T0)), workers).await
}

fn ask() -> RateLimitRequest {
    RateLimitRequest {
        domain: "mesh".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: "alice".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn a_grpc_call_over_the_in_flight_cap_is_shed_as_unavailable() {
    // An upstream that takes the connection and never answers: a gateway request to it
    // holds the one in-flight place.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nupstream = \"http://{}\"\nmax_in_flight = 1\ncritical_reserve = 0\nqueue_timeout = \"0s\"\n{RULE}",
        upstream.local_addr().unwrap()
    );
    let running = start(&toml, 1).await;
    let mut client = common::grpc_client(&running).await;
    let r = client.should_rate_limit(ask()).await.unwrap().into_inner();
    assert_eq!(
        r.overall_code,
        Code::Ok as i32,
        "served while there is room"
    );

    let gateway = running.listen;
    let held = tokio::spawn(async move {
        let _ = common::client()
            .get(format!("http://{gateway}/slow").parse().unwrap())
            .await;
    });
    // The gateway reached the upstream: its request holds the place.
    let (_connection, _) = upstream.accept().await.unwrap();
    let e = client.should_rate_limit(ask()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    assert!(e.message().contains("in flight"), "{e}");

    let metrics = common::get(running.admin.unwrap(), "/metrics", &[])
        .await
        .body;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ratewarden_shed_total{reason=\"in_flight\"} 1")),
        "{metrics}"
    );
    held.abort();
}

#[tokio::test]
async fn grpc_on_several_workers_answers_every_call_and_stops_cleanly() {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ngrpc = \"127.0.0.1:0\"\n{RULE}"
    );
    let running = start(&toml, 3).await;
    // Many connections: the kernel spreads them over the workers' accept loops, and every
    // one is answered, whichever runtime took it.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..24 {
        let addr = running.grpc.unwrap();
        calls.spawn(async move {
            let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            client.should_rate_limit(ask()).await.unwrap().into_inner()
        });
    }
    let mut ok = 0;
    while let Some(r) = calls.join_next().await {
        ok += u32::from(r.unwrap().overall_code == Code::Ok as i32);
    }
    assert_eq!(ok, 24);
    running.shutdown();
    running.wait().await;
}

/// One HTTP/2 connection carries many streams of up to `max_message_bytes` each, so a client
/// that may open connections without end holds memory without end: the gRPC listener holds
/// each client to `max_connections_per_client`, as the HTTP listeners do.
#[tokio::test]
async fn the_grpc_listener_holds_a_client_to_its_share_of_connections() {
    use tokio::io::AsyncReadExt;

    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nmax_connections_per_client = 2\n{RULE}"
    );
    let running = start(&toml, 1).await;
    let grpc = running.grpc.unwrap();
    let held = [
        tokio::net::TcpStream::connect(grpc).await.unwrap(),
        tokio::net::TcpStream::connect(grpc).await.unwrap(),
    ];
    let mut third = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        third.read_to_end(&mut rest),
    )
    .await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the third connection was kept open"
    );
    // Its connections closed, the client is served again, and the calls still know who
    // asks (the connection's address reaches the service).
    drop(held);
    let answered = async {
        loop {
            if let Ok(mut client) = RateLimitServiceClient::connect(format!("http://{grpc}")).await
            {
                if let Ok(r) = client.should_rate_limit(ask()).await {
                    return r.into_inner();
                }
            }
            tokio::task::yield_now().await;
        }
    };
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), answered)
        .await
        .expect("served once the held connections closed");
    assert_eq!(r.overall_code, Code::Ok as i32);
}
