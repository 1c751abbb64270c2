//! Load for Envoy's gRPC services, for `scripts/bench-rls` and `scripts/bench-auth`:
//! `ShouldRateLimit` (or, with `--check`, ext_authz's `Authorization/Check`) calls per
//! second and latency from N concurrent callers over one HTTP/2 connection (or
//! `--connections C`, as an Envoy with C worker threads opens one each), as Envoy sends
//! them; and, with `--serve-bare`, the ceiling: a tonic service answering OK to both
//! without deciding anything.
//!
//! ```text
//! cargo run --release -p ratewarden-server --example rls_bench -- --serve-bare 127.0.0.1:9081
//! cargo run --release -p ratewarden-server --example rls_bench -- \
//!     --target http://127.0.0.1:8081 --streams 64 --seconds 5 [--check]
//! ```
//!
//! `--calls N` sends N calls in all and stops, whatever the time: `scripts/bench-instructions`
//! counts what N and 2N calls cost a server under callgrind.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse, HttpResponse, OkHttpResponse,
};
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// The ceiling: OK for every descriptor, nothing decided.
struct Bare;

#[tonic::async_trait]
impl RateLimitService for Bare {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = request.into_inner().descriptors.len();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                };
                n
            ],
            ..RateLimitResponse::default()
        }))
    }
}

#[tonic::async_trait]
impl Authorization for Bare {
    async fn check(
        &self,
        _request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(CheckResponse {
            status: Some(Default::default()),
            http_response: Some(HttpResponse::OkResponse(OkHttpResponse::default())),
            ..CheckResponse::default()
        }))
    }
}

/// What Envoy's ext_authz sends about `GET /orders` from `client`.
fn check_request(client: String) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(AddressKind::SocketAddress(SocketAddress {
                        address: client,
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(
                envoy_types::pb::envoy::service::auth::v3::attribute_context::Request {
                    http: Some(HttpRequest {
                        method: "GET".to_owned(),
                        path: "/orders".to_owned(),
                        host: "shop.example".to_owned(),
                        ..HttpRequest::default()
                    }),
                    ..Default::default()
                },
            ),
            ..AttributeContext::default()
        }),
    }
}

/// One caller's connection: either service.
#[derive(Clone)]
enum Caller {
    Rls(RateLimitServiceClient<tonic::transport::Channel>),
    Authz(AuthorizationClient<tonic::transport::Channel>),
}

impl Caller {
    /// The `n`th call of stream `s`: one of 10,000 clients, as the RLS calls spread.
    async fn call(&mut self, domain: &str, s: usize, n: u64) -> bool {
        let client = (s as u64 * 7919 + n) % 10_000;
        match self {
            Caller::Rls(c) => {
                let request = RateLimitRequest {
                    domain: domain.to_owned(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "client_id".to_owned(),
                            value: format!("c{client}"),
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 0,
                };
                c.should_rate_limit(request).await.is_ok()
            }
            Caller::Authz(c) => {
                let ip = format!(
                    "10.{}.{}.{}",
                    client / 65536,
                    (client / 256) % 256,
                    client % 256
                );
                let answer = c.check(check_request(ip)).await;
                answer.is_ok_and(|r| r.get_ref().status.as_ref().is_some_and(|s| s.code == 0))
            }
        }
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(addr) = flag(&args, "--serve-bare") {
        let Ok(addr) = addr.parse() else {
            eprintln!("error: --serve-bare wants an address such as 127.0.0.1:9081");
            return ExitCode::from(2);
        };
        eprintln!("bare rate limit service on {addr}");
        let served = tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Bare))
            .add_service(AuthorizationServer::new(Bare))
            .serve(addr)
            .await;
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(target) = flag(&args, "--target") else {
        eprintln!("usage: rls_bench --serve-bare ADDR | --target URL [--streams N] [--connections C] [--seconds S | --calls N] [--domain D] [--check]");
        return ExitCode::from(2);
    };
    let streams: usize = flag(&args, "--streams")
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let seconds: u64 = flag(&args, "--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let domain = flag(&args, "--domain").unwrap_or_else(|| "bench".to_owned());
    let connections: usize = flag(&args, "--connections")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let calls: Option<u64> = match flag(&args, "--calls").map(|c| c.parse()) {
        None => None,
        Some(Ok(calls)) => Some(calls),
        Some(Err(_)) => {
            eprintln!("error: --calls wants a whole number of calls");
            return ExitCode::from(2);
        }
    };
    let check = args.iter().any(|a| a == "--check");
    let mut clients = Vec::new();
    for _ in 0..connections {
        let connected = if check {
            AuthorizationClient::connect(target.clone())
                .await
                .map(Caller::Authz)
        } else {
            RateLimitServiceClient::connect(target.clone())
                .await
                .map(Caller::Rls)
        };
        match connected {
            Ok(c) => clients.push(c),
            Err(e) => {
                eprintln!("error: cannot connect to {target}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let end = Instant::now() + Duration::from_secs(seconds);
    // With `--calls`, the calls left to send, taken one at a time by the streams.
    let left = Arc::new(AtomicU64::new(calls.unwrap_or(0)));
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = clients[s % connections].clone();
        let domain = domain.clone();
        let left = Arc::clone(&left);
        let more = move || match calls {
            Some(_) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            None => Instant::now() < end,
        };
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            let mut n = 0u64;
            while more() {
                let sent = Instant::now();
                if client.call(&domain, s, n).await {
                    latencies.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                } else {
                    errors += 1;
                }
                n += 1;
            }
            (latencies, errors)
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap_or_default();
        all.extend(l);
        errors += e;
    }
    let took = match calls {
        Some(_) => started.elapsed().as_secs_f64(),
        None => started.elapsed().as_secs_f64().max(seconds as f64),
    };
    all.sort_unstable();
    let at = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{{\"target\":\"{target}\",\"streams\":{streams},\"calls\":{},\"errors\":{errors},\"per_second\":{:.0},\"p50_us\":{},\"p99_us\":{}}}",
        all.len(),
        all.len() as f64 / took,
        at(0.5),
        at(0.99)
    );
    ExitCode::SUCCESS
}
