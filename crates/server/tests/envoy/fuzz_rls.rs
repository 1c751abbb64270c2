//! Fuzzing Envoy's rate limit service (issue 12, "Fuzzing and soak"): what a stranger can
//! send to `ShouldRateLimit` on `[server] grpc`, to one live server over real HTTP/2.
//!
//! Two targets: raw gRPC frames (an arbitrary payload, and framing tonic's own client would
//! never build: a wrong length prefix, the compressed flag, bytes after the message), sent
//! with `h2` directly; and structure-aware `RateLimitRequest`s through the generated client
//! (any domain; descriptors with empty, huge, control-character and non-ASCII keys and
//! values, many entries, many descriptors (either side of `[envoy]`'s bounds), huge and
//! zero `hits_addend`s, limit overrides of any unit and size). Whatever arrives, the call ends with a valid gRPC status (`OK` with a
//! well-formed response, or an error status naming the problem: never `UNKNOWN`, and
//! `INTERNAL` only for a frame that is no readable request), the stream is not reset (how
//! a panic shows), and a well-formed
//! call that follows decides exactly (a fresh client of a 3-a-minute rule has 2 left,
//! then 1).
//!
//! `PROPTEST_CASES=N` runs N cases per target (default 500; the suite stays quick).
//!
//! Executions recorded (2026-12-02, debug build, a loaded 2-core machine):
//! `PROPTEST_CASES=5000` ran 5,000 structure-aware requests (1,022 s with the other target)
//! and 5,000 raw frames (228 s), each followed by its two-call probe: 20,000 probes, all
//! exact. Every run of the suite adds 500 cases per target.
//!
//! Found: a descriptor's `is_negative_hits` (a refund) was ignored, so a refund was charged
//! as a cost; it is refused by name now (`negative_hits_are_refused_not_charged` in
//! `tests/envoy/rls.rs`). tonic answers a frame it cannot read (an empty body, bad framing, bytes
//! that are no protobuf message) with `INTERNAL` and a message saying so, as grpc-go does;
//! a readable request never gets `INTERNAL`. No panic, hang, reset stream or miscount.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use prost::Message;
use ratewarden_core::{Clock, ManualClock};
use ratewarden_server::serve::{Options, Running};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tonic::transport::Channel;

#[path = "../common/mod.rs"]
mod common;

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The YAML: exact values, key only, nesting, wildcards, shadow, quota, unlimited,
/// `replaces`, one of our algorithms; and `probe`, what the follow-up call asks.
const ENVOY: &str = concat!(
    include_str!("../common/edge.yaml"),
    "  - key: probe\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
);

/// A native rule behind the protocol too, and a small body bound for the HTTP side.
const TOML: &str = r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
grpc = "127.0.0.1:0"

[[limit]]
name = "mesh-tenants"
match = { domain = "mesh", descriptor = "tenant,path=/reports/*" }
key = ["descriptor"]
algorithm = "token-bucket"
rate = "10/s"
burst = 10
"#;

/// One runtime, one server, one client for every case.
struct World {
    runtime: Runtime,
    server: Running,
    client: RateLimitServiceClient<Channel>,
    /// Fresh probe values, one per follow-up call.
    probes: AtomicU64,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (server, client) = runtime.block_on(async {
            let envoy = ratewarden_policy::envoy::parse("edge.yaml", ENVOY).expect("the YAML");
            // Time stands still: the probe's counts are exact, nothing refills.
            let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_796_169_600_000_000_000));
            let server = common::start(Options {
                envoy,
                ..common::options(TOML, clock)
            })
            .await;
            let client = common::grpc_client(&server)
                .await
                // Huge requests are part of the point.
                .max_encoding_message_size(usize::MAX)
                .max_decoding_message_size(usize::MAX);
            (server, client)
        });
        World {
            runtime,
            server,
            client,
            probes: AtomicU64::new(0),
        }
    })
}

fn grpc(server: &Running) -> SocketAddr {
    server.grpc.expect("a gRPC listener")
}

/// The gRPC codes a well-behaved service answers bad input with. `UNKNOWN` and `INTERNAL`
/// are what a panic or a broken connection looks like; they are not among them (but see
/// [`judge_raw`] for bytes that are no protobuf message).
fn acceptable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Ok
            | tonic::Code::InvalidArgument
            | tonic::Code::ResourceExhausted
            | tonic::Code::OutOfRange
            | tonic::Code::Unimplemented
    )
}

/// A response that is one: a status per descriptor, each OK or over the limit.
fn well_formed(response: &RateLimitResponse, descriptors: usize) -> Result<(), TestCaseError> {
    prop_assert!(
        response.overall_code == Code::Ok as i32 || response.overall_code == Code::OverLimit as i32,
        "overall code {}",
        response.overall_code
    );
    prop_assert_eq!(response.statuses.len(), descriptors);
    for status in &response.statuses {
        prop_assert!(
            status.code == Code::Ok as i32 || status.code == Code::OverLimit as i32,
            "status code {}",
            status.code
        );
    }
    Ok(())
}

/// A well-formed call for a fresh client of the 3-a-minute `probe` rule, twice: it must
/// answer OK with exactly 2, then 1, left.
fn probe() -> Result<(), TestCaseError> {
    let w = world();
    let n = w.probes.fetch_add(1, Ordering::Relaxed);
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "probe".to_owned(),
                value: format!("p{n}"),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    for left in [2, 1] {
        let mut client = w.client.clone();
        let answer = w
            .runtime
            .block_on(async { client.should_rate_limit(request.clone()).await });
        let response = answer
            .map_err(|s| TestCaseError::fail(format!("the probe failed: {s:?}")))?
            .into_inner();
        prop_assert_eq!(response.overall_code, Code::Ok as i32);
        prop_assert_eq!(response.statuses.len(), 1);
        prop_assert_eq!(response.statuses[0].limit_remaining, left);
    }
    Ok(())
}

/// What a raw call ended with.
struct RawAnswer {
    http_status: u16,
    grpc_status: Option<i32>,
    message: String,
    /// The response messages' bytes, without their length prefixes.
    messages: Vec<Bytes>,
}

/// Sends `body` (whole gRPC framing included) to `ShouldRateLimit` over a new HTTP/2
/// connection, and reads the answer to its trailers.
fn raw_call(content_type: &'static str, body: Bytes) -> Result<RawAnswer, String> {
    let addr = grpc(&world().server);
    world().runtime.block_on(async move {
        let call = async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let (client, connection) = h2::client::handshake(tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(connection);
            let mut client = client.ready().await.map_err(|e| format!("ready: {e}"))?;
            let request = http::Request::post(format!("http://{addr}{METHOD}"))
                .header("content-type", content_type)
                .header("te", "trailers")
                .body(())
                .map_err(|e| e.to_string())?;
            let (response, mut send) = client
                .send_request(request, false)
                .map_err(|e| format!("send: {e}"))?;
            send.reserve_capacity(body.len());
            send.send_data(body, true)
                .map_err(|e| format!("send data: {e}"))?;
            let response = response.await.map_err(|e| format!("response: {e}"))?;
            let (parts, mut received) = response.into_parts();
            let mut data = BytesMut::new();
            while let Some(chunk) = received.data().await {
                let chunk = chunk.map_err(|e| format!("body: {e}"))?;
                let _ = received.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let trailers = received
                .trailers()
                .await
                .map_err(|e| format!("trailers: {e}"))?;
            // A trailers-only answer carries the status in its headers.
            let fields = trailers.as_ref().unwrap_or(&parts.headers);
            let grpc_status = fields
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let message = fields
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let mut messages = Vec::new();
            let mut data = data.freeze();
            while data.len() >= 5 {
                let length = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
                if data.len() < 5 + length {
                    return Err(format!("a response message cut short: {data:?}"));
                }
                messages.push(data.slice(5..5 + length));
                data = data.slice(5 + length..);
            }
            if !data.is_empty() {
                return Err(format!("stray bytes after the messages: {data:?}"));
            }
            Ok(RawAnswer {
                http_status: parts.status.as_u16(),
                grpc_status,
                message,
                messages,
            })
        };
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .map_err(|_| "no answer within 20 s".to_owned())?
    })
}

/// The invariant of a raw call's answer.
/// `readable`: the frame was framed right and its payload decodes as a `RateLimitRequest`.
fn judge_raw(answer: Result<RawAnswer, String>, readable: bool) -> Result<(), TestCaseError> {
    let answer = answer.map_err(TestCaseError::fail)?;
    prop_assert_eq!(
        answer.http_status,
        200,
        "gRPC answers 200, status in trailers"
    );
    let Some(code) = answer.grpc_status else {
        return Err(TestCaseError::fail("no grpc-status"));
    };
    let code = tonic::Code::from_i32(code);
    // tonic (as grpc-go) answers a frame it cannot read (no message, bad framing, bytes
    // that are no protobuf message) with INTERNAL and a message saying so; our service never
    // answers INTERNAL. So INTERNAL is allowed exactly for frames that are not a readable
    // request. A panic never gets that far: its stream is reset, and `raw_call` fails.
    let undecodable = code == tonic::Code::Internal && !readable;
    prop_assert!(
        acceptable(code) || undecodable,
        "{:?}: {}",
        code,
        answer.message
    );
    if code == tonic::Code::Ok {
        prop_assert_eq!(answer.messages.len(), 1);
        let response = RateLimitResponse::decode(answer.messages[0].clone())
            .map_err(|e| TestCaseError::fail(format!("an OK answer that does not decode: {e}")))?;
        prop_assert!(
            response.overall_code == Code::Ok as i32
                || response.overall_code == Code::OverLimit as i32
        );
    } else {
        prop_assert!(!answer.message.is_empty(), "{:?} without a message", code);
    }
    Ok(())
}

/// gRPC's length-prefixed framing of `payload`, done right or wrong, and whether it is a
/// readable request (framed right, and the payload decodes).
fn frame() -> impl Strategy<Value = (Bytes, bool)> {
    let payload = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..400),
        // Protobuf-looking bytes: field tags of the request's fields and wire types.
        4 => prop::collection::vec(
            prop_oneof![Just(0x0au8), Just(0x12), Just(0x18), Just(0x08), Just(0x10), Just(0x1a), Just(0x22), any::<u8>()],
            0..200,
        ),
        1 => Just(vec![0xff; 64]),
    ];
    let framing = prop_oneof![
        6 => Just(Framing::Right),
        1 => Just(Framing::Compressed),
        1 => any::<u32>().prop_map(Framing::Length),
        1 => prop::collection::vec(any::<u8>(), 1..8).prop_map(Framing::Trailing),
        1 => Just(Framing::Bare),
    ];
    (payload, framing).prop_map(|(payload, framing)| {
        let readable = matches!(framing, Framing::Right)
            && RateLimitRequest::decode(payload.as_slice()).is_ok();
        (framing.apply(&payload), readable)
    })
}

#[derive(Debug, Clone)]
enum Framing {
    /// Flag 0, the true length.
    Right,
    /// The compressed flag, with no `grpc-encoding` agreed.
    Compressed,
    /// A length prefix that lies.
    Length(u32),
    /// Bytes after the message: half of a next frame.
    Trailing(Vec<u8>),
    /// No prefix at all.
    Bare,
}

impl Framing {
    fn apply(&self, payload: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        match self {
            Framing::Bare => {
                out.put_slice(payload);
                return out.freeze();
            }
            Framing::Compressed => out.put_u8(1),
            _ => out.put_u8(0),
        }
        match self {
            Framing::Length(lie) => out.put_u32(*lie),
            _ => out.put_u32(length),
        }
        out.put_slice(payload);
        if let Framing::Trailing(extra) = self {
            out.put_slice(extra);
        }
        out.freeze()
    }
}

/// Strings as a stranger writes them: empty, ordinary, control characters, non-ASCII,
/// wildcards and separators our keys use, and now and then huge.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop_oneof![
            Just(String::new()),
            Just("client_id".to_owned()),
            Just("path".to_owned()),
            Just("tier".to_owned()),
            Just("free".to_owned()),
            Just("paid".to_owned()),
            Just("partner".to_owned()),
            Just("watch".to_owned()),
            Just("everything".to_owned()),
            Just("soft".to_owned()),
            Just("smooth".to_owned()),
            Just("tenant".to_owned()),
            Just("/api/x/export".to_owned()),
            Just("/reports/2024".to_owned()),
            Just("*".to_owned()),
            Just("|@|".to_owned()),
        ],
        3 => "\\PC{0,16}",
        2 => "[\\x00-\\x1f\\x7f|@*:]{1,8}",
        1 => (1usize..70_000).prop_map(|n| "x".repeat(n)),
        1 => (1usize..2_000).prop_map(|n| "\u{1F600}\u{0}\r\n".repeat(n)),
    ]
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    let entries = prop_oneof![
        6 => prop::collection::vec((text(), text()), 0..4),
        1 => prop::collection::vec((text(), text()), 0..200),
    ];
    let limit = prop::option::weighted(
        0.2,
        (
            prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
            prop_oneof![0i32..8, any::<i32>()],
        ),
    );
    let hits = prop::option::weighted(
        0.3,
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just(u64::from(u32::MAX) + 1),
            any::<u64>()
        ],
    );
    (entries, limit, hits, prop::bool::weighted(0.1)).prop_map(
        |(entries, limit, hits, negative)| RateLimitDescriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| Entry { key, value })
                .collect(),
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
        },
    )
}

fn request() -> impl Strategy<Value = RateLimitRequest> {
    let domain = prop_oneof![
        4 => Just("edge".to_owned()),
        1 => Just("mesh".to_owned()),
        2 => text(),
    ];
    let descriptors = prop_oneof![
        8 => prop::collection::vec(descriptor(), 0..4),
        // Either side of `[envoy] max_descriptors` (64 by default).
        1 => prop::collection::vec(descriptor(), 0..100),
    ];
    let hits = prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()];
    (domain, descriptors, hits).prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
        domain,
        descriptors,
        hits_addend,
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_grpc_frames_get_a_grpc_status_and_the_service_still_decides(
        (body, readable) in frame(),
        content_type in prop_oneof![4 => Just("application/grpc"), 1 => Just("application/grpc+proto")],
    ) {
        judge_raw(raw_call(content_type, body), readable)?;
        probe()?;
    }

    #[test]
    fn odd_rate_limit_requests_get_a_grpc_status_and_the_service_still_decides(request in request()) {
        let w = world();
        let descriptors = request.descriptors.len();
        let mut client = w.client.clone();
        let answer = w.runtime.block_on(async { client.should_rate_limit(request).await });
        match answer {
            Ok(response) => well_formed(&response.into_inner(), descriptors)?,
            Err(status) => {
                prop_assert!(acceptable(status.code()), "{:?}", status);
                prop_assert!(!status.message().is_empty(), "{:?}", status);
            }
        }
        probe()?;
    }
}
