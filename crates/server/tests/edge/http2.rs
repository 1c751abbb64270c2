//! HTTP/2 from clients, over real sockets: the contract as on HTTP/1.1 (hyper's client, by
//! prior knowledge), the upstream still spoken to in HTTP/1.1, and the bounds a client does
//! not set, read off raw frames: the settings we announce, streams past the bound refused,
//! rapid resets and CONTINUATION floods ended while other clients are served.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use ratewarden_server::serve::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_000_000_000_000;

/// What the upstream saw of each request: its version, `Host` and body.
type Seen = Arc<Mutex<Vec<(http::Version, String, String)>>>;

/// A gateway with two requests a minute per client on `/orders`, a bare 429 on `/login`,
/// `extra` in `[server]`; the upstream holds `/slow` until `release`.
async fn gateway(extra: &str, release: Arc<Notify>) -> (Running, Seen) {
    let seen: Seen = Arc::default();
    let upstream = {
        let seen = Arc::clone(&seen);
        common::upstream(move |request: Request<hyper::body::Incoming>| {
            let (seen, release) = (Arc::clone(&seen), Arc::clone(&release));
            async move {
                if request.uri().path() == "/slow" {
                    release.notified().await;
                }
                let version = request.version();
                let host = request
                    .headers()
                    .get("host")
                    .map(|h| h.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                let body = request.into_body().collect().await.unwrap().to_bytes();
                seen.lock().unwrap().push((
                    version,
                    host,
                    String::from_utf8_lossy(&body).into_owned(),
                ));
                http::Response::new(Full::new(Bytes::from_static(b"ok")))
            }
        })
        .await
    };
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"
{extra}

[[limit]]
name = "per-client"
match = {{ path = "/orders" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 2
window = "1m"

[[limit]]
name = "login"
match = {{ path = "/login" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1m"
sensitive = true
"#
    );
    (common::start_at(&toml, T0).await, seen)
}

async fn h2c(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    common::edge::h2(TcpStream::connect(addr).await.unwrap()).await
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://shop.example{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn http2_by_prior_knowledge_gets_the_contract_of_http1() {
    let (server, seen) = gateway("", Arc::new(Notify::new())).await;
    let mut h2 = h2c(server.listen).await;
    let first = common::edge::h2_send(&mut h2, get("/orders")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "ok");
    let ratelimit = first.header("ratelimit").expect("RateLimit");
    assert!(
        ratelimit.starts_with("\"per-client\";r=1;t="),
        "{ratelimit}"
    );
    assert!(first.header("ratelimit-policy").is_some());
    let _ = common::edge::h2_send(&mut h2, get("/orders")).await;
    let refused = common::edge::h2_send(&mut h2, get("/orders")).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(refused.header("cache-control"), Some("no-store"));
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.json()["violated-policies"][0], "per-client");
    // A login limit answers a bare 429: no policy named, no numbers.
    let _ = common::edge::h2_send(&mut h2, get("/login")).await;
    let bare = common::edge::h2_send(&mut h2, get("/login")).await;
    assert_eq!(bare.status, 429);
    assert!(bare.header("ratelimit").is_none() && bare.header("ratelimit-policy").is_none());
    assert!(!bare.body.contains("login"), "{}", bare.body);
    // A body goes through, and the upstream is spoken to in HTTP/1.1 with the request's
    // authority as its `Host`.
    let post = Request::post("http://shop.example/upload")
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"hello over h2")))
        .unwrap();
    assert_eq!(common::edge::h2_send(&mut h2, post).await.status, 200);
    let seen = seen.lock().unwrap().clone();
    assert!(seen
        .iter()
        .all(|(v, host, _)| *v == http::Version::HTTP_11 && host == "shop.example"));
    assert_eq!(seen.last().unwrap().2, "hello over h2");
    server.shutdown();
}

// -----------------------------------------------------------------------------------------
// Raw frames (RFC 9113 §4.1): for what hyper's client would never send.

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK string literal, not Huffman-coded (RFC 7541 §5.2), its length in a 7-bit prefix.
fn literal(out: &mut Vec<u8>, text: &[u8]) {
    integer(out, 0, 7, text.len());
    out.extend_from_slice(text);
}

fn integer(out: &mut Vec<u8>, high: u8, prefix: u32, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(high | n as u8);
        return;
    }
    out.push(high | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128 + 128) as u8);
        n /= 128;
    }
    out.push(n as u8);
}

/// A `GET path` head, each field a literal without indexing (names from the static table).
fn head(path: &str) -> Vec<u8> {
    let mut out = vec![0x82, 0x86]; // :method GET, :scheme http
    out.push(0x04); // :path, by its static index
    literal(&mut out, path.as_bytes());
    out.push(0x01); // :authority
    literal(&mut out, b"shop.example");
    out
}

/// A frame read off the connection: its type, flags, stream and payload.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

async fn read_frame(stream: &mut TcpStream) -> Option<Frame> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).await.ok()?;
    let len =
        (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2]);
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: header[3],
        flags: header[4],
        stream: u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// A connection past its preface and our empty SETTINGS, with the server's SETTINGS read
/// (as `(id, value)` pairs) and acknowledged.
async fn connected(addr: SocketAddr) -> (TcpStream, Vec<(u16, u32)>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(PREFACE).await.unwrap();
    stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
    loop {
        let f = read_frame(&mut stream)
            .await
            .expect("the server's SETTINGS");
        if f.kind == SETTINGS && f.flags & ACK == 0 {
            let settings = f
                .payload
                .chunks(6)
                .map(|c| {
                    (
                        u16::from_be_bytes([c[0], c[1]]),
                        u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                    )
                })
                .collect();
            stream
                .write_all(&frame(SETTINGS, ACK, 0, &[]))
                .await
                .unwrap();
            return (stream, settings);
        }
    }
}

/// Reads frames until the server's GOAWAY (the last stream it processed and its error
/// code) or the connection's end (`None`), for at most 10 s.
async fn goaway(stream: &mut TcpStream) -> Option<(u32, u32)> {
    let read = async {
        while let Some(f) = read_frame(stream).await {
            if f.kind == GOAWAY {
                let word =
                    |at: usize| u32::from_be_bytes(f.payload[at..at + 4].try_into().unwrap());
                return Some((word(0) & 0x7fff_ffff, word(4)));
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the server ends the connection")
}

const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const ENHANCE_YOUR_CALM: u32 = 0xb;

#[tokio::test]
async fn the_server_announces_its_bounds_and_refuses_a_stream_past_them() {
    let release = Arc::new(Notify::new());
    let (server, _) = gateway(
        "http2_max_streams = 3\nmax_header_bytes = 16384",
        Arc::clone(&release),
    )
    .await;
    let (mut stream, settings) = connected(server.listen).await;
    assert!(
        settings.contains(&(MAX_CONCURRENT_STREAMS, 3)),
        "{settings:?}"
    );
    assert!(
        settings.contains(&(MAX_HEADER_LIST_SIZE, 16384)),
        "{settings:?}"
    );
    // Three held at the upstream, then a fourth the client should not have opened.
    for id in [1, 3, 5, 7] {
        let f = frame(HEADERS, END_HEADERS | END_STREAM, id, &head("/slow"));
        stream.write_all(&f).await.unwrap();
    }
    let refused = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let f = read_frame(&mut stream).await.expect("a frame");
            if f.kind == RST_STREAM {
                return (
                    f.stream,
                    u32::from_be_bytes(f.payload[..4].try_into().unwrap()),
                );
            }
        }
    })
    .await
    .expect("the fourth stream is refused");
    assert_eq!(refused, (7, REFUSED_STREAM));
    release.notify_waiters();
    server.shutdown();
}

#[tokio::test]
async fn rapid_resets_end_the_connection_and_other_clients_are_served() {
    let (server, _) = gateway("", Arc::new(Notify::new())).await;
    let (mut attacker, _) = connected(server.listen).await;
    // CVE-2023-44487: open a stream and reset it at once, as fast as the socket takes it.
    let mut burst = Vec::new();
    let mut sent = 0u32;
    let mut closed = None;
    for id in (1..200_000u32).step_by(2) {
        burst.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            &head("/orders"),
        ));
        burst.extend(frame(RST_STREAM, 0, id, &0x8u32.to_be_bytes())); // CANCEL
        if burst.len() > 64 * 1024 {
            if attacker.write_all(&burst).await.is_err() {
                closed = Some(sent);
                break;
            }
            sent = id;
            burst.clear();
        }
    }
    // The server says it is done with the connection, having processed a few hundred of
    // the flood's streams at most (each costs a decision), whatever the socket took in.
    let ended = goaway(&mut attacker).await;
    let (last, code) = ended.unwrap_or_else(|| panic!("a GOAWAY, after {sent} ({closed:?})"));
    assert_eq!(code, ENHANCE_YOUR_CALM);
    assert!(last < 2_000, "the last stream processed is {last}");
    // Someone else is served all along.
    let mut other = h2c(server.listen).await;
    assert_eq!(
        common::edge::h2_send(&mut other, get("/")).await.status,
        200
    );
    server.shutdown();
}

#[tokio::test]
async fn a_head_past_the_bound_is_431_and_a_continuation_flood_is_ended() {
    let (server, _) = gateway("max_header_bytes = 16384", Arc::new(Notify::new())).await;
    // One stream with a head past the bound: 431 for it, the connection still serves.
    let mut h2 = h2c(server.listen).await;
    let big = Request::get("http://shop.example/")
        .header("x-big", "a".repeat(20_000))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = h2.send_request(big).await;
    match answer {
        Ok(response) => assert_eq!(response.status(), 431),
        Err(error) => panic!("a 431, not {error}"),
    }
    assert_eq!(common::edge::h2_send(&mut h2, get("/")).await.status, 200);
    // CONTINUATION frames that never end the head: the connection is ended, not grown.
    let (mut flood, _) = connected(server.listen).await;
    let mut block = head("/");
    block.push(0x00);
    literal(&mut block, b"x-flood");
    literal(&mut block, &[b'a'; 4000]);
    flood
        .write_all(&frame(HEADERS, END_STREAM, 1, &block))
        .await
        .unwrap();
    let mut written = 0usize;
    let mut piece = Vec::new();
    piece.push(0x00);
    literal(&mut piece, b"x-more");
    literal(&mut piece, &[b'b'; 8000]);
    let continuation = frame(CONTINUATION, 0, 1, &piece);
    while written < 64 * 1024 * 1024 {
        if flood.write_all(&continuation).await.is_err() {
            break;
        }
        written += continuation.len();
        if written > 1024 * 1024 {
            // Well past the bound: the server has had its chance to end it.
            break;
        }
    }
    let ended = goaway(&mut flood).await;
    assert_eq!(
        ended.map(|(_, code)| code),
        Some(ENHANCE_YOUR_CALM),
        "the flooding connection is ended ({written} bytes written)"
    );
    let mut other = h2c(server.listen).await;
    assert_eq!(
        common::edge::h2_send(&mut other, get("/")).await.status,
        200
    );
    server.shutdown();
}
