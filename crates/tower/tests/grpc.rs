//! The layer in a tonic server, over real gRPC: a refused call is `RESOURCE_EXHAUSTED` with
//! the retry delay in its metadata, as a gRPC client reads it.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratewarden_core::{Gcra, Rate};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// Any gRPC service will do: this one answers an empty response.
struct Answering;

#[tonic::async_trait]
impl RateLimitService for Answering {
    async fn should_rate_limit(
        &self,
        _: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse::default()))
    }
}

async fn serve() -> Channel {
    // Two calls per user an hour: time does not matter to this test.
    let per_user = KeyedLimit::new(
        "calls",
        Gcra::new(Rate::new(1, Duration::from_secs(3600)).unwrap(), 2).unwrap(),
    )
    .key(|request| header(request, "x-user"))
    .cost(|request| match header(request, "x-cost") {
        None => Ok(1),
        Some(text) => text
            .parse()
            .map_err(|_| format!("metadata `x-cost` must be a whole number, not `{text}`")),
    });
    let layer = RateLimitLayer::builder().limit(per_user).build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(RateLimitServiceServer::new(Answering))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn call(user: &str) -> Request<RateLimitRequest> {
    let mut request = Request::new(RateLimitRequest {
        domain: "test".to_owned(),
        ..RateLimitRequest::default()
    });
    request
        .metadata_mut()
        .insert("x-user", user.parse().unwrap());
    request
}

#[tokio::test]
async fn a_refused_call_is_resource_exhausted_with_the_retry_delay_in_its_metadata() {
    let mut client = RateLimitServiceClient::new(serve().await);
    for _ in 0..2 {
        let allowed = client.should_rate_limit(call("ada")).await.unwrap();
        assert!(allowed.metadata().get("ratelimit").is_some());
    }
    let refused = client.should_rate_limit(call("ada")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
    assert!(refused.message().contains("calls"), "{}", refused.message());
    let metadata = refused.metadata();
    // One call an hour after the burst: the next is due an hour after the first two.
    let retry: u64 = metadata
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((3_599..=3_600).contains(&retry), "retry-after {retry}");
    let pushback: u64 = metadata
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        pushback > 3_599_000 && pushback <= 3_600_000,
        "pushback {pushback}"
    );
    assert!(metadata.get("ratelimit-policy").is_some());
    // Another user's calls still go through.
    client.should_rate_limit(call("bob")).await.unwrap();
}

#[tokio::test]
async fn a_call_the_limits_cannot_read_is_invalid_argument_naming_the_limit() {
    let mut client = RateLimitServiceClient::new(serve().await);
    let mut request = call("ada");
    request
        .metadata_mut()
        .insert("x-cost", "lots".parse().unwrap());
    let refused = client.should_rate_limit(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    assert!(
        refused.message().contains("limit `calls`") && refused.message().contains("`lots`"),
        "{}",
        refused.message()
    );
}
