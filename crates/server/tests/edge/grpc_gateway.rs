//! gRPC through the gateway: a tonic service behind it (`upstream = "h2c://…"`), a tonic
//! client in front, a rule on `/package.Service/Method`. Allowed calls reach the service
//! and its trailers come back (a unary answer's `grpc-status` is a trailer: without it the
//! client fails the call); refused calls are answered as gRPC clients read them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as RlsCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratewarden_server::serve::Running;
use tonic::{Code, Request, Response, Status};

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_000_000_000_000;

/// Some gRPC service to stand behind the gateway: Envoy's rate limit protocol is one whose
/// types are at hand. It answers `OK` with a header of its own, `NOT_FOUND` for the
/// domain `missing`, and holds a call for the domain `hold` until `release`; it counts the
/// calls that reach it.
#[derive(Clone, Default)]
struct Service {
    calls: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if request.get_ref().domain == "missing" {
            return Err(Status::not_found("no such domain"));
        }
        if request.get_ref().domain == "hold" {
            self.release.notified().await;
        }
        let mut response = Response::new(RateLimitResponse {
            overall_code: RlsCode::Ok as i32,
            ..RateLimitResponse::default()
        });
        response
            .metadata_mut()
            .insert("x-served-by", "the-service".parse().unwrap());
        Ok(response)
    }
}

async fn service() -> (SocketAddr, Service) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = Service::default();
    let served = RateLimitServiceServer::new(service.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(served)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (addr, service)
}

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

async fn gateway(upstream: SocketAddr, limit: u64, extra: &str) -> Running {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
upstream = "h2c://{upstream}"
{extra}

[[limit]]
name = "per-method"
match = {{ path = "{METHOD}" }}
key = ["ip", "route"]
algorithm = "fixed-window"
limit = {limit}
window = "1m"
"#
    );
    common::start_at(&toml, T0).await
}

fn call(domain: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        ..RateLimitRequest::default()
    }
}

async fn client(gateway: &Running) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(format!("http://{}", gateway.listen))
        .await
        .expect("the gateway takes an HTTP/2 connection")
}

#[tokio::test]
async fn calls_reach_the_service_with_trailers_and_refusals_are_resource_exhausted() {
    let (upstream, service) = service().await;
    let server = gateway(upstream, 2, "").await;
    let mut client = client(&server).await;
    for _ in 0..2 {
        let answer = client
            .should_rate_limit(call("shop"))
            .await
            .expect("an allowed call is the service's answer, trailers and all");
        assert_eq!(answer.get_ref().overall_code, RlsCode::Ok as i32);
        assert_eq!(answer.metadata().get("x-served-by").unwrap(), "the-service");
        assert!(
            answer.metadata().get("ratelimit").is_some(),
            "{:?}",
            answer.metadata()
        );
    }
    let refused = client
        .should_rate_limit(call("shop"))
        .await
        .expect_err("the third call of the minute is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message() == "rate limited by per-method",
        "{refused:?}"
    );
    let metadata = refused.metadata();
    let pushback: u64 = metadata
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let retry: u64 = metadata
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(pushback, retry * 1000, "the same wait, in milliseconds");
    assert!(metadata
        .get("ratelimit")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("\"per-method\";r=0;"));
    assert!(metadata.get("ratelimit-policy").is_some());
    assert_eq!(
        service.calls.load(Ordering::SeqCst),
        2,
        "the refused call never got there"
    );
    server.shutdown();
}

#[tokio::test]
async fn the_services_own_errors_come_back_as_they_were_sent() {
    let (upstream, _) = service().await;
    let server = gateway(upstream, 2, "").await;
    let error = client(&server)
        .await
        .should_rate_limit(call("missing"))
        .await
        .expect_err("the service's NOT_FOUND");
    assert_eq!(error.code(), Code::NotFound);
    assert_eq!(error.message(), "no such domain");
    server.shutdown();
}

#[tokio::test]
async fn a_call_the_gateway_cannot_forward_is_unavailable() {
    // An upstream that is not there: the gateway's 502, as gRPC reads it.
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let server = gateway(gone, 2, "").await;
    let error = client(&server)
        .await
        .should_rate_limit(call("shop"))
        .await
        .expect_err("no upstream");
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    server.shutdown();
}

#[tokio::test]
async fn a_shed_call_is_unavailable_with_its_retry_after() {
    let (upstream, service) = service().await;
    // One place in flight, none kept for critical routes, no waiting for it.
    let server = gateway(
        upstream,
        1_000,
        "max_in_flight = 1\ncritical_reserve = 0\nqueue_timeout = \"0s\"",
    )
    .await;
    let mut client = client(&server).await;
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.should_rate_limit(call("hold")).await }
    });
    // Once the held call has the place (it has reached the service), the next is shed.
    assert!(common::eventually(|| async { service.calls.load(Ordering::SeqCst) == 1 }).await);
    let shed = client
        .should_rate_limit(call("shop"))
        .await
        .expect_err("no place in flight");
    assert_eq!(shed.code(), Code::Unavailable, "{shed:?}");
    assert_eq!(shed.message(), "the server is at capacity", "{shed:?}");
    assert!(shed.metadata().get("retry-after").is_some());
    assert!(shed.metadata().get("grpc-retry-pushback-ms").is_some());
    service.release.notify_waiters();
    assert!(held.await.unwrap().is_ok());
    server.shutdown();
}

#[tokio::test]
async fn calls_over_tls_are_decided_and_relayed_alike() {
    let (upstream, _) = service().await;
    let server = gateway(upstream, 1, &common::edge::section("listen")).await;
    let channel = common::edge::grpc_channel(server.listen, None)
        .await
        .expect("a TLS channel (ALPN h2)");
    let mut client = RateLimitServiceClient::new(channel);
    let answer = client.should_rate_limit(call("shop")).await.unwrap();
    assert_eq!(answer.get_ref().overall_code, RlsCode::Ok as i32);
    let refused = client.should_rate_limit(call("shop")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    server.shutdown();
}
