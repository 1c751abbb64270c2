//! Envoy's `ext_authz` over gRPC (`envoy.service.auth.v3.Authorization/Check`) on the gRPC
//! listener, called with a tonic client built from Envoy's protos: allowed, denied with the
//! 429's headers, store failures by the rules' policies, and what the door refuses.

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};
use ratewarden_server::serve::Running;
use tonic::transport::Channel;

#[path = "../common/mod.rs"]
mod common;

/// A minute's start: fixed windows are aligned to the epoch, so each starts whole here.
const T0: u64 = 1_699_999_980_000_000_000;

/// Two requests a minute per client address on `/orders`.
const ORDERS: &str = r#"
[[limit]]
name = "orders"
match = { path = "/orders" }
key = ["ip"]
algorithm = "fixed-window"
limit = 2
window = "1m"
"#;

async fn serve(trusted: &str, rules: &str) -> (Running, AuthorizationClient<Channel>) {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ngrpc = \"127.0.0.1:0\"\ntrusted_proxies = [{trusted}]\n{rules}"
    );
    let running = common::start_at(&toml, T0).await;
    let addr = running.grpc.expect("a gRPC listener");
    let client = AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .expect("the gRPC listener answers");
    (running, client)
}

/// What Envoy sends about `method path` from `client`.
fn check(client: &str, method: &str, path: &str) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(AddressKind::SocketAddress(SocketAddress {
                        address: client.to_owned(),
                        port_specifier: Some(PortSpecifier::PortValue(41000)),
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: method.to_owned(),
                    path: path.to_owned(),
                    host: "shop.example".to_owned(),
                    headers: HashMap::from([
                        (":path".to_owned(), path.to_owned()),
                        ("user-agent".to_owned(), "curl/8".to_owned()),
                    ]),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// A header of an OK or denied answer.
fn header<'a>(response: &'a CheckResponse, name: &str) -> Option<&'a str> {
    let headers = match response.http_response.as_ref()? {
        HttpResponse::OkResponse(ok) => &ok.response_headers_to_add,
        HttpResponse::DeniedResponse(denied) => &denied.headers,
        HttpResponse::ErrorResponse(_) => return None,
    };
    headers
        .iter()
        .filter_map(|o| o.header.as_ref())
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

fn code(response: &CheckResponse) -> i32 {
    response.status.as_ref().map_or(-1, |s| s.code)
}

#[tokio::test]
async fn allowed_with_the_ratelimit_fields_then_denied_with_the_429() {
    let (_running, mut client) = serve(r#""127.0.0.1""#, ORDERS).await;
    for remaining in [1, 0] {
        let ok = client
            .check(check("203.0.113.7", "GET", "/orders?page=2"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code(&ok), tonic::Code::Ok as i32);
        assert!(matches!(
            ok.http_response,
            Some(HttpResponse::OkResponse(_))
        ));
        assert_eq!(
            header(&ok, "ratelimit-policy"),
            Some(r#""orders";q=2;w=60"#)
        );
        assert_eq!(
            header(&ok, "ratelimit"),
            Some(format!(r#""orders";r={remaining};t=60"#).as_str())
        );
    }
    // An alias of the path is that path, and over the limit.
    let denied = client
        .check(check("203.0.113.7", "GET", "//orders/./"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&denied), tonic::Code::ResourceExhausted as i32);
    let Some(HttpResponse::DeniedResponse(http)) = &denied.http_response else {
        panic!("not a denied response: {denied:?}");
    };
    assert_eq!(http.status.as_ref().map(|s| s.code), Some(429));
    assert!(http.body.contains("quota-exceeded"), "{}", http.body);
    assert_eq!(header(&denied, "retry-after"), Some("60"));
    assert_eq!(header(&denied, "ratelimit"), Some(r#""orders";r=0;t=60"#));
    assert_eq!(
        header(&denied, "content-type"),
        Some("application/problem+json")
    );
    // Another client has its own budget.
    let ok = client
        .check(check("198.51.100.4", "GET", "/orders"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&ok), tonic::Code::Ok as i32);
}

#[tokio::test]
async fn a_store_failure_is_unavailable_only_under_a_closed_rule() {
    // A port nothing listens on: every store call fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let rules = format!(
        r#"
[store]
kind = "redis"
url = "{url}"
deadline = "100ms"

[[limit]]
name = "browse"
match = {{ path = "/browse" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "open"

[[limit]]
name = "pay"
match = {{ path = "/pay" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "closed"
"#
    );
    let (_running, mut client) = serve(r#""127.0.0.1""#, &rules).await;
    let open = client
        .check(check("203.0.113.7", "GET", "/browse"))
        .await
        .expect("an open rule allows")
        .into_inner();
    assert_eq!(code(&open), tonic::Code::Ok as i32);
    let e = client
        .check(check("203.0.113.7", "POST", "/pay"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
}

#[tokio::test]
async fn a_check_from_an_untrusted_peer_is_permission_denied() {
    let (_running, mut client) = serve(r#""10.0.0.0/8""#, ORDERS).await;
    let e = client
        .check(check("203.0.113.7", "GET", "/orders"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(
        e.message().contains("not a trusted proxy"),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn a_check_the_door_cannot_read_is_an_invalid_argument_naming_the_field() {
    let rules = format!(
        r#"{ORDERS}
[[limit]]
name = "reports-in-flight"
match = {{ path = "/reports" }}
key = ["ip"]
algorithm = "concurrency"
limit = 2
lease = "30s"
"#
    );
    let (_running, mut client) = serve(r#""127.0.0.1""#, &rules).await;
    for (request, field) in [
        (
            check("not-an-ip", "GET", "/orders"),
            "attributes.source.address",
        ),
        (
            check("203.0.113.7", "GET", "/a%2fb"),
            "attributes.request.http.path",
        ),
        (
            check("203.0.113.7", "", "/orders"),
            "attributes.request.http.method",
        ),
        (CheckRequest::default(), "attributes.source.address"),
    ] {
        let e = client.check(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    let e = client
        .check(check("203.0.113.7", "GET", "/reports"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(
        e.message()
            .contains("rule `reports-in-flight` is a concurrency limit"),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn a_check_request_past_max_message_bytes_is_refused_naming_the_setting() {
    let rules = format!("[envoy]\nmax_message_bytes = 4096\n{ORDERS}");
    let (_running, mut client) = serve("\"127.0.0.1\"", &rules).await;
    let mut big = check("192.0.2.7", "GET", "/orders");
    if let Some(http) = big
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
    {
        http.headers.insert("cookie".to_owned(), "c".repeat(8_192));
    }
    let refused = client.check(big).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::InvalidArgument,
        "{}",
        refused.message()
    );
    assert!(
        refused
            .message()
            .contains("`[envoy] max_message_bytes` (4096 bytes)"),
        "{}",
        refused.message()
    );
    let small = client.check(check("192.0.2.7", "GET", "/orders")).await;
    assert!(small.is_ok(), "a small request is still decided: {small:?}");
}
