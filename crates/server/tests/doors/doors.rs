//! Every front door, one logical request: the same client asking about `GET /orders` four
//! times through the gateway (its lean path and hyper's, HTTP/2 by prior knowledge, and
//! over TLS in HTTP/1.1 and HTTP/2), the decision API (both paths, and HTTP/2 over TLS),
//! forward-auth (all three flavours), Envoy's `ext_authz`, and Envoy's rate limit service
//! (gRPC and `POST /json`, the same limit on a descriptor). Each door must give the same
//! verdicts with the same RateLimit numbers, count the same decisions in `/metrics`, and
//! shed the same way when every place in flight is taken, critical routes first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http::Response;
use http_body_util::Full;
use ratewarden_server::serve::Running;
use tokio::sync::Notify;

#[path = "../common/mod.rs"]
mod common;

use common::raw::{raw, Raw};

const T0: u64 = 1_000_000_000_000;
const CLIENT: &str = "203.0.113.7";

/// The rules: three a minute per client on `/orders` and on Envoy's `edge` domain, each
/// watched by a shadow rule of one a minute (a descriptor of its own on `edge`: Envoy's
/// protocol decides one rule per descriptor). At most two requests in flight, one of them
/// kept for `/critical`, and no waiting for a place.
fn config(upstream: SocketAddr, tls: bool) -> String {
    // The TLS doors' server: TLS on the gateway and on the decision API's listener.
    let tls = if tls {
        format!(
            "{}\n{}",
            common::edge::section("listen"),
            common::edge::section("api")
        )
    } else {
        String::new()
    };
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
api = "127.0.0.1:0"
grpc = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
trusted_proxies = ["127.0.0.1"]
max_in_flight = 2
critical_reserve = 1
queue_timeout = "0s"
critical = [{{ path = "/critical" }}]

[[limit]]
name = "per-client"
match = {{ path = "/orders" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 3
window = "1m"

[[limit]]
name = "watch"
mode = "shadow"
match = {{ path = "/orders" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1m"

[[limit]]
name = "per-client-edge"
match = {{ domain = "edge", descriptor = "remote_address" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 3
window = "1m"

[[limit]]
name = "watch-edge"
mode = "shadow"
match = {{ domain = "edge", descriptor = "watch" }}
key = ["descriptor"]
algorithm = "fixed-window"
limit = 1
window = "1m"

{tls}
"#
    )
}

/// A door's answer, in the terms every door shares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// 200 (go on), 429 (over a limit) or 503 (shed).
    status: u16,
    /// The `RateLimit` field, its policy name without the `-edge` of the descriptor rule.
    ratelimit: Option<String>,
    retry_after: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    GatewayLean,
    GatewayHyper,
    GatewayH2c,
    GatewayTls,
    GatewayTlsH2,
    ApiLean,
    ApiHyper,
    ApiTls,
    ApiTlsH2,
    ForwardAuth,
    ForwardAuthNginx,
    ForwardAuthEnvoy,
    ExtAuthz,
    Rls,
    RlsJson,
}

const DOORS: [Door; 15] = [
    Door::GatewayLean,
    Door::GatewayHyper,
    Door::GatewayH2c,
    Door::GatewayTls,
    Door::GatewayTlsH2,
    Door::ApiLean,
    Door::ApiHyper,
    Door::ApiTls,
    Door::ApiTlsH2,
    Door::ForwardAuth,
    Door::ForwardAuthNginx,
    Door::ForwardAuthEnvoy,
    Door::ExtAuthz,
    Door::Rls,
    Door::RlsJson,
];

impl Door {
    /// Whether the door asks by descriptors (its rules are the `-edge` ones).
    fn descriptors(self) -> bool {
        matches!(self, Door::Rls | Door::RlsJson)
    }

    /// Whether the door's server speaks TLS (on its gateway and API listeners).
    fn tls(self) -> bool {
        matches!(
            self,
            Door::GatewayTls | Door::GatewayTlsH2 | Door::ApiTls | Door::ApiTlsH2
        )
    }

    /// Whether the door is the gateway's, and which of its paths serves it: the lean one
    /// (HTTP/1.1 it reads itself, in clear text or over TLS) or hyper's.
    fn gateway(self) -> Option<bool> {
        match self {
            Door::GatewayLean | Door::GatewayTls => Some(true),
            Door::GatewayHyper | Door::GatewayH2c | Door::GatewayTlsH2 => Some(false),
            _ => None,
        }
    }

    /// Asks about `path` for the client, and reads the answer.
    async fn ask(self, server: &Running, path: &str) -> Seen {
        let listen = server.listen;
        let api = server.api.expect("an API listener");
        let xff = format!("X-Forwarded-For: {CLIENT}");
        match self {
            Door::GatewayLean => seen_raw(
                raw(
                    listen,
                    &format!("GET {path} HTTP/1.1\nHost: shop.example\n{xff}\n\n"),
                )
                .await,
            ),
            // A hop-by-hop header the lean path leaves to hyper's gateway.
            Door::GatewayHyper => seen_raw(
                raw(
                    listen,
                    &format!(
                        "GET {path} HTTP/1.1\nHost: shop.example\n{xff}\nKeep-Alive: timeout=5\n\n"
                    ),
                )
                .await,
            ),
            Door::GatewayH2c => {
                let tcp = tokio::net::TcpStream::connect(listen).await.unwrap();
                seen_reply(&h2_get(common::edge::h2(tcp).await, path).await)
            }
            Door::GatewayTls => {
                let config = common::edge::client_config(&["http/1.1"], None);
                let mut tls = common::edge::connect(listen, "gateway.test", config)
                    .await
                    .unwrap();
                seen_raw(
                    common::edge::raw_on(
                        &mut tls,
                        &format!("GET {path} HTTP/1.1\nHost: shop.example\n{xff}\n\n"),
                    )
                    .await,
                )
            }
            Door::GatewayTlsH2 => {
                let config = common::edge::client_config(&["h2"], None);
                let tls = common::edge::connect(listen, "gateway.test", config)
                    .await
                    .unwrap();
                assert_eq!(common::edge::alpn(&tls).as_deref(), Some(&b"h2"[..]));
                seen_reply(&h2_get(common::edge::h2(tls).await, path).await)
            }
            Door::ApiTlsH2 => {
                let config = common::edge::client_config(&["h2", "http/1.1"], None);
                let tls = common::edge::connect(api, "localhost", config)
                    .await
                    .unwrap();
                let mut sender = common::edge::h2(tls).await;
                let body = format!(r#"{{"ip":"{CLIENT}","method":"GET","path":"{path}"}}"#);
                let request = http::Request::post("https://localhost/v1/check")
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let answer = common::edge::h2_send(&mut sender, request).await;
                let head = answer
                    .headers
                    .iter()
                    .map(|(n, v)| format!("{n}: {}\r\n", v.to_str().unwrap()))
                    .collect();
                let decision = Raw {
                    status: answer.status.as_u16(),
                    head,
                    body: answer.body,
                };
                seen_decision(self, decision)
            }
            Door::ApiLean | Door::ApiHyper | Door::ApiTls => {
                let body = format!(r#"{{"ip":"{CLIENT}","method":"GET","path":"{path}"}}"#);
                let request = if self != Door::ApiHyper {
                    format!(
                        "POST /v1/check HTTP/1.1\nHost: a\nContent-Type: application/json\nContent-Length: {}\n\n{body}",
                        body.len()
                    )
                } else {
                    // Chunked: the lean path leaves it to hyper.
                    format!(
                        "POST /v1/check HTTP/1.1\nHost: a\nContent-Type: application/json\nTransfer-Encoding: chunked\n\n{:x}\n{body}\n0\n\n",
                        body.len()
                    )
                };
                if self == Door::ApiTls {
                    let config = common::edge::client_config(&["http/1.1"], None);
                    let mut tls = common::edge::connect(api, "localhost", config)
                        .await
                        .unwrap();
                    return seen_decision(self, common::edge::raw_on(&mut tls, &request).await);
                }
                seen_decision(self, raw(api, &request).await)
            }
            Door::ForwardAuth => seen_raw(
                raw(
                    api,
                    &format!("GET /v1/auth HTTP/1.1\nHost: a\nX-Forwarded-Uri: {path}\nX-Forwarded-Method: GET\nX-Forwarded-Host: shop.example\n{xff}\n\n"),
                )
                .await,
            ),
            Door::ForwardAuthNginx => {
                let mut seen = seen_raw(
                    raw(
                        api,
                        &format!("GET /v1/auth/nginx HTTP/1.1\nHost: a\nX-Original-URI: {path}\nX-Original-Method: GET\n{xff}\n\n"),
                    )
                    .await,
                );
                // nginx's flavour answers a limit with 403 (its `auth_request` takes no 429).
                if seen.status == 403 {
                    seen.status = 429;
                }
                seen
            }
            Door::ForwardAuthEnvoy => seen_raw(
                raw(
                    api,
                    &format!("GET /v1/auth/envoy{path} HTTP/1.1\nHost: shop.example\n{xff}\n\n"),
                )
                .await,
            ),
            Door::ExtAuthz => {
                let grpc = server.grpc.expect("a gRPC listener");
                let mut client = AuthorizationClient::connect(format!("http://{grpc}"))
                    .await
                    .unwrap();
                let answer = client.check(ext_authz(path)).await;
                let answer = match answer {
                    Ok(answer) => answer.into_inner(),
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                        return Seen {
                            status: 503,
                            ratelimit: None,
                            retry_after: None,
                        };
                    }
                };
                let (status, headers) = match answer.http_response.expect("an HTTP response") {
                    HttpResponse::OkResponse(ok) => (200, ok.response_headers_to_add),
                    HttpResponse::DeniedResponse(denied) => {
                        (denied.status.unwrap().code as u16, denied.headers)
                    }
                    HttpResponse::ErrorResponse(_) => panic!("an error response"),
                };
                let header = |name: &str| {
                    headers
                        .iter()
                        .filter_map(|o| o.header.as_ref())
                        .find(|h| h.key.eq_ignore_ascii_case(name))
                        .map(|h| h.value.clone())
                };
                Seen {
                    status,
                    ratelimit: header("ratelimit"),
                    retry_after: header("retry-after"),
                }
            }
            Door::Rls => {
                let mut client = common::grpc_client(server).await;
                match client.should_rate_limit(rls(path)).await {
                    Ok(answer) => {
                        let answer = answer.into_inner();
                        let header = |name: &str| {
                            answer
                                .response_headers_to_add
                                .iter()
                                .find(|h| h.key.eq_ignore_ascii_case(name))
                                .map(|h| h.value.replace("-edge", ""))
                        };
                        Seen {
                            status: if answer.overall_code == 1 { 200 } else { 429 },
                            ratelimit: header("ratelimit"),
                            retry_after: header("retry-after"),
                        }
                    }
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                        Seen {
                            status: 503,
                            ratelimit: None,
                            retry_after: None,
                        }
                    }
                }
            }
            Door::RlsJson => {
                let body = format!(
                    r#"{{"domain":"edge","descriptors":[{{"entries":[{{"key":"remote_address","value":"{v}"}}]}},{{"entries":[{{"key":"watch","value":"{v}"}}]}}]}}"#,
                    v = rls_value(path)
                );
                let answer = raw(
                    api,
                    &format!(
                        "POST /json HTTP/1.1\nHost: a\nContent-Type: application/json\nContent-Length: {}\n\n{body}",
                        body.len()
                    ),
                )
                .await;
                if answer.status == 503 {
                    return seen_raw(answer);
                }
                let d = answer.json();
                let header = |name: &str| {
                    d["responseHeadersToAdd"].as_array().and_then(|hs| {
                        hs.iter()
                            .find(|h| h["key"].as_str().unwrap().eq_ignore_ascii_case(name))
                            .map(|h| h["value"].as_str().unwrap().replace("-edge", ""))
                    })
                };
                Seen {
                    status: answer.status,
                    ratelimit: header("ratelimit"),
                    retry_after: header("retry-after"),
                }
            }
        }
    }
}

/// The decision API's answer, in the terms every door shares.
fn seen_decision(door: Door, answer: Raw) -> Seen {
    if answer.status == 503 {
        return seen_raw(answer);
    }
    assert_eq!(answer.status, 200, "{door:?}: {}", answer.body);
    let d = answer.json();
    // The headers the caller should send, as `[name, value]` pairs.
    let header = |name: &str| {
        d["headers"].as_array().and_then(|hs| {
            hs.iter()
                .find(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
                .map(|h| h[1].as_str().unwrap().to_owned())
        })
    };
    Seen {
        status: match d["status"].as_u64().unwrap() {
            // The API says what the caller should answer.
            s if d["allowed"] == true => {
                assert_eq!(s, 200);
                200
            }
            s => s as u16,
        },
        ratelimit: header("ratelimit"),
        retry_after: header("retry-after"),
    }
}

/// `GET path` for the client on an HTTP/2 connection to the gateway.
async fn h2_get(
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    path: &str,
) -> common::Reply {
    let request = http::Request::get(format!("https://shop.example{path}"))
        .header("x-forwarded-for", CLIENT)
        .body(Full::new(Bytes::new()))
        .unwrap();
    common::edge::h2_send(&mut sender, request).await
}

fn seen_reply(answer: &common::Reply) -> Seen {
    Seen {
        status: answer.status.as_u16(),
        ratelimit: answer.header("ratelimit").map(str::to_owned),
        retry_after: answer.header("retry-after").map(str::to_owned),
    }
}

fn seen_raw(answer: Raw) -> Seen {
    Seen {
        status: answer.status,
        ratelimit: answer.header("ratelimit").map(str::to_owned),
        retry_after: answer.header("retry-after").map(str::to_owned),
    }
}

/// The descriptor value standing for the client on `path`: the client's address on
/// `/orders`, another value elsewhere (no `critical` route exists for descriptors).
fn rls_value(path: &str) -> String {
    if path == "/orders" {
        CLIENT.to_owned()
    } else {
        format!("{CLIENT}{path}")
    }
}

fn rls(path: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: ["remote_address", "watch"]
            .map(|key| RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.to_owned(),
                    value: rls_value(path),
                }],
                ..RateLimitDescriptor::default()
            })
            .to_vec(),
        hits_addend: 1,
    }
}

fn ext_authz(path: &str) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(AddressKind::SocketAddress(SocketAddress {
                        address: CLIENT.to_owned(),
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".to_owned(),
                    path: path.to_owned(),
                    host: "shop.example".to_owned(),
                    headers: HashMap::from([(":path".to_owned(), path.to_owned())]),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// An upstream that answers at once, except `/slow`, which it holds until told.
async fn upstream(release: Arc<Notify>) -> SocketAddr {
    common::upstream(move |request: http::Request<hyper::body::Incoming>| {
        let release = Arc::clone(&release);
        async move {
            if request.uri().path() == "/slow" {
                release.notified().await;
            }
            Response::new(Full::new(Bytes::from_static(b"ok")))
        }
    })
    .await
}

async fn start(release: &Arc<Notify>, door: Door) -> Running {
    let toml = config(upstream(Arc::clone(release)).await, door.tls());
    common::start_at(&toml, T0).await
}

/// A request held at the upstream (`/slow`), sent as `door`'s server takes it.
async fn hold(server: &Running, door: Door) -> Raw {
    let request = format!("GET /slow HTTP/1.1\nHost: shop.example\nX-Forwarded-For: {CLIENT}\n\n");
    if door.tls() {
        let config = common::edge::client_config(&["http/1.1"], None);
        let mut tls = common::edge::connect(server.listen, "gateway.test", config)
            .await
            .unwrap();
        common::edge::raw_on(&mut tls, &request).await
    } else {
        raw(server.listen, &request).await
    }
}

/// `/metrics` series and their values.
type Counts = Vec<(String, u64)>;

/// The series of `/metrics` a door's requests should move: each rule's outcomes, the
/// decisions timed, the requests shed.
async fn counts(server: &Running, descriptors: bool) -> Counts {
    let admin = server.admin.expect("an admin listener");
    let metrics = common::get(admin, "/metrics", &[]).await.body;
    let suffix = if descriptors { "-edge" } else { "" };
    let mut wanted: Vec<String> = Vec::new();
    for rule in ["per-client", "watch"] {
        for outcome in [
            "allowed",
            "rejected",
            "skipped",
            "shadow_allowed",
            "shadow_rejected",
        ] {
            wanted.push(format!(
                "ratewarden_decisions_total{{rule=\"{rule}{suffix}\",outcome=\"{outcome}\"}}"
            ));
        }
    }
    wanted.push("ratewarden_decision_duration_seconds_count".to_owned());
    wanted.push("ratewarden_shed_total{reason=\"in_flight\"}".to_owned());
    wanted
        .into_iter()
        .map(|series| {
            let value = metrics
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{series} ")))
                .map_or(0, |n| n.parse().unwrap());
            (series.replace(suffix, ""), value)
        })
        .map(|(series, value)| (series.replace("-edge", ""), value))
        .collect()
}

#[tokio::test]
async fn every_door_gives_the_same_verdicts_numbers_and_counts() {
    let mut first: Option<(Vec<Seen>, Counts)> = None;
    for door in DOORS {
        let release = Arc::new(Notify::new());
        let server = start(&release, door).await;
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(door.ask(&server, "/orders").await);
        }
        let statuses: Vec<u16> = seen.iter().map(|s| s.status).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{door:?}: {seen:?}");
        let remaining: Vec<Option<String>> = seen.iter().map(|s| s.ratelimit.clone()).collect();
        assert!(
            remaining[0]
                .as_deref()
                .is_some_and(|r| r.starts_with("\"per-client\";r=2;")),
            "{door:?}: {remaining:?}"
        );
        assert!(seen[3].retry_after.is_some(), "{door:?}: {seen:?}");
        let counted = counts(&server, door.descriptors()).await;
        if let Some(lean_path) = door.gateway() {
            let (lean, hyper) = common::gateway_paths(&server).await;
            let expected = if lean_path { (4, 0) } else { (0, 4) };
            assert_eq!(
                (lean, hyper),
                expected,
                "{door:?} served by the path it names"
            );
        }
        match &first {
            None => {
                let value = |name: &str| counted.iter().find(|(s, _)| s == name).unwrap().1;
                assert_eq!(
                    value("ratewarden_decisions_total{rule=\"per-client\",outcome=\"allowed\"}"),
                    3
                );
                assert_eq!(
                    value("ratewarden_decisions_total{rule=\"per-client\",outcome=\"rejected\"}"),
                    1
                );
                // A shadow rule's outcomes add up to what it matched.
                let shadow = value(
                    "ratewarden_decisions_total{rule=\"watch\",outcome=\"shadow_allowed\"}",
                ) + value(
                    "ratewarden_decisions_total{rule=\"watch\",outcome=\"shadow_rejected\"}",
                );
                assert_eq!(shadow, 4, "{counted:?}");
                assert_eq!(value("ratewarden_decision_duration_seconds_count"), 4);
                first = Some((seen, counted));
            }
            Some((seen_first, counted_first)) => {
                assert_eq!(&seen, seen_first, "{door:?} answers as {:?}", DOORS[0]);
                assert_eq!(&counted, counted_first, "{door:?} counts as {:?}", DOORS[0]);
            }
        }
        release.notify_waiters();
        server.shutdown();
    }
}

#[tokio::test]
async fn every_door_sheds_alike_with_every_place_taken_but_the_critical_one() {
    for door in DOORS {
        let release = Arc::new(Notify::new());
        let server = Arc::new(start(&release, door).await);
        // One request held at the upstream takes the one place others may take.
        let held = tokio::spawn({
            let server = Arc::clone(&server);
            async move { hold(&server, door).await }
        });
        let admin = server.admin.unwrap();
        assert!(
            common::eventually(|| async {
                let metrics = common::get(admin, "/metrics", &[]).await.body;
                metrics.lines().any(|l| l == "ratewarden_in_flight 1")
            })
            .await,
            "the held request takes its place"
        );
        let shed = door.ask(&server, "/orders").await;
        assert_eq!(shed.status, 503, "{door:?}: {shed:?}");
        if !matches!(door, Door::ExtAuthz | Door::Rls) {
            assert!(
                shed.retry_after.is_some(),
                "{door:?}: a 503 says when to come back"
            );
        }
        // The reserve is for critical routes, at every door that asks about a route.
        let critical = door.ask(&server, "/critical").await;
        let expected = if door.descriptors() { 503 } else { 200 };
        assert_eq!(critical.status, expected, "{door:?}: {critical:?}");
        let shed_count = counts(&server, door.descriptors())
            .await
            .into_iter()
            .find(|(s, _)| s.starts_with("ratewarden_shed_total"))
            .unwrap()
            .1;
        assert_eq!(
            shed_count,
            if door.descriptors() { 2 } else { 1 },
            "{door:?}"
        );
        release.notify_waiters();
        assert_eq!(held.await.unwrap().status, 200);
        server.shutdown();
    }
}
