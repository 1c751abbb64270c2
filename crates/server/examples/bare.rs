//! The physical limit for benchmarks: a bare hyper HTTP/1 server that answers every request,
//! whatever its method, path or body, with 200 and the same fixed bytes; or, with `--proxy`,
//! a bare hyper reverse proxy that forwards every request to one upstream and decides nothing.
//!
//! `scripts/bench-serve` measures the decision API against it (the same response bytes, so
//! the difference is the cost of deciding) and uses it as the upstream behind both the
//! gateway and nginx. As a proxy it is the gateway's own stack (hyper's server, hyper-util's
//! pooled client, one pool per worker) with nothing of Ratewarden in it: the gateway against
//! it is the cost of limiting, and it against nginx is what that stack can reach at best.
//! With `--relay` it is the floor of any proxy on tokio: each client connection gets one
//! upstream connection of its own and the bytes are copied both ways, with no HTTP parsed,
//! no header added, no pool; no proxy that reads the requests it limits does less work.
//! With `--lean-proxy` it is the floor of a proxy that reads HTTP: each request's head is
//! parsed (httparse, as hyper does), forwarded with the hop-by-hop lines dropped and
//! `X-Forwarded-For`/`-Proto` added, to an upstream connection of its own; the answer's
//! head is parsed and relayed with its `Content-Length` body. No pool, no `Request` or
//! `Response` objects, no limits of any kind: a measuring tool, not a server to deploy (it
//! takes no chunked bodies and trusts the upstream's framing). `--lean-limit` adds to it
//! the limiter's own part, through the real engine on the in-memory store: each request
//! decided by one GCRA rule per client address (the gateway benchmark's rule), its path
//! normalized first, and the allowed answer given the RateLimit fields; what a lean
//! gateway would cost, short of the guards, bounds and metrics a real one needs.
//! Like `ratewarden serve` it runs a thread per core, each with a single-threaded tokio
//! runtime accepting on the same socket, and sets `TCP_NODELAY` on every connection.
//!
//! ```text
//! cargo run --release -p ratewarden-server --example bare -- \
//!     --listen 127.0.0.1:3000 --body-file answer.json --content-type application/json
//! cargo run --release -p ratewarden-server --example bare -- --listen 127.0.0.1:3000 --body ok
//! cargo run --release -p ratewarden-server --example bare -- \
//!     --listen 127.0.0.1:3001 --proxy http://127.0.0.1:3000
//! cargo run --release -p ratewarden-server --example bare -- \
//!     --listen 127.0.0.1:3002 --relay 127.0.0.1:3000
//! cargo run --release -p ratewarden-server --example bare -- \
//!     --listen 127.0.0.1:3003 --lean-proxy 127.0.0.1:3000
//! ```

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::http::uri::{Authority, PathAndQuery};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;

const USAGE: &str = "\
usage: bare --listen ADDR [--body-file FILE | --body STRING] [--content-type TYPE]
            [--header 'NAME: VALUE']...
       bare --listen ADDR --proxy URL
       bare --listen ADDR --relay ADDR
       bare --listen ADDR --lean-proxy ADDR [--lean-limit]

Answers every HTTP/1 request with 200 and exactly the given bytes; or, with --proxy,
forwards every request to URL (adding X-Forwarded-For and X-Forwarded-Proto, as the
benchmark's nginx does) and returns what it answers, deciding nothing; or, with --relay,
copies each connection's bytes both ways to a connection of its own to ADDR, reading no HTTP;
or, with --lean-proxy, forwards each request to a connection of its own to ADDR, parsing both
heads by hand (a measuring tool: Content-Length bodies only, no bounds); --lean-limit also
decides each request with ratewarden's engine (GCRA per client address, nothing refused at
the benchmark's rates) and adds the RateLimit fields to the answer.
  --listen ADDR          where to listen, such as 127.0.0.1:3000
  --body-file FILE       the response body, read from FILE
  --body STRING          the response body, given inline (default: empty)
  --content-type TYPE    the Content-Type header (default: text/plain)
  --header 'NAME: VALUE' one more response header; repeat for several
  --proxy URL            forward to this upstream, such as http://127.0.0.1:3000
  --relay ADDR           relay bytes to this address, such as 127.0.0.1:3000
  --lean-proxy ADDR      forward requests to this address, heads parsed by hand
  --lean-limit           with --lean-proxy: decide each request first, as the gateway does";

/// What to serve, from the command line.
#[derive(Clone)]
struct Args {
    listen: SocketAddr,
    body: Bytes,
    content_type: HeaderValue,
    headers: HeaderMap,
    /// The upstream to forward to, instead of answering.
    proxy: Option<Authority>,
    /// The address to relay bytes to, instead of answering.
    relay: Option<SocketAddr>,
    /// The address to forward requests to by hand, instead of answering.
    lean: Option<SocketAddr>,
    /// Whether the lean proxy decides each request with the engine first.
    lean_limit: bool,
    /// The engine it decides with, one for every worker (as the gateway's).
    engine: Option<Arc<(Limiter, ratewarden_core::RealClock)>>,
}

fn parse_args() -> Result<Args, String> {
    let mut listen = None;
    let mut body = Bytes::new();
    let mut content_type = HeaderValue::from_static("text/plain");
    let mut headers = HeaderMap::new();
    let mut proxy = None;
    let mut relay = None;
    let mut lean = None;
    let mut lean_limit = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        if flag == "--lean-limit" {
            lean_limit = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                let addr = value
                    .parse()
                    .map_err(|e| format!("--listen `{value}`: {e}"))?;
                listen = Some(addr);
            }
            "--body" => body = Bytes::from(value),
            "--body-file" => {
                let bytes =
                    std::fs::read(&value).map_err(|e| format!("--body-file `{value}`: {e}"))?;
                body = Bytes::from(bytes);
            }
            "--content-type" => {
                content_type = HeaderValue::from_str(&value)
                    .map_err(|e| format!("--content-type `{value}`: {e}"))?;
            }
            "--header" => {
                let (name, text) = value
                    .split_once(':')
                    .ok_or_else(|| format!("--header `{value}`: want `NAME: VALUE`"))?;
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|e| format!("--header `{value}`: {e}"))?;
                let text = HeaderValue::from_str(text.trim())
                    .map_err(|e| format!("--header `{value}`: {e}"))?;
                headers.append(name, text);
            }
            "--proxy" => {
                let uri: Uri = value
                    .parse()
                    .map_err(|e| format!("--proxy `{value}`: {e}"))?;
                if uri.scheme_str() != Some("http") {
                    return Err(format!("--proxy `{value}`: want an http:// URL"));
                }
                let authority = uri
                    .authority()
                    .cloned()
                    .ok_or_else(|| format!("--proxy `{value}`: no host"))?;
                proxy = Some(authority);
            }
            "--relay" => {
                let addr = value
                    .parse()
                    .map_err(|e| format!("--relay `{value}`: {e}"))?;
                relay = Some(addr);
            }
            "--lean-proxy" => {
                let addr = value
                    .parse()
                    .map_err(|e| format!("--lean-proxy `{value}`: {e}"))?;
                lean = Some(addr);
            }
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    let listen = listen.ok_or("--listen is required")?;
    if usize::from(proxy.is_some()) + usize::from(relay.is_some()) + usize::from(lean.is_some()) > 1
    {
        return Err("--proxy, --relay and --lean-proxy are three modes; give one".to_owned());
    }
    if lean_limit && lean.is_none() {
        return Err("--lean-limit goes with --lean-proxy".to_owned());
    }
    Ok(Args {
        listen,
        body,
        content_type,
        headers,
        proxy,
        relay,
        lean,
        lean_limit,
        engine: None,
    })
}

/// The same allocator as `ratewarden`, so the baseline differs only in what it does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if message.is_empty() {
                // Not `println!`: `bare --help | head` must not panic on the closed pipe.
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.lean_limit {
        match limiter() {
            Ok(engine) => args.engine = Some(Arc::new(engine)),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let listener = match std::net::TcpListener::bind(args.listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    if let Ok(addr) = listener.local_addr() {
        eprintln!("bare: listening on {addr}");
    }
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads: Vec<_> = (0..workers)
        .filter_map(|_| {
            let listener = listener.try_clone().ok()?;
            let args = args.clone();
            Some(std::thread::spawn(move || worker(listener, args)))
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    ExitCode::FAILURE
}

/// One thread: a single-threaded runtime serving the shared socket.
fn worker(listener: std::net::TcpListener, args: Args) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return;
        }
    };
    let served = match (args.proxy.clone(), args.relay, args.lean) {
        (Some(upstream), _, _) => runtime.block_on(proxy(listener, upstream)),
        (None, Some(upstream), _) => runtime.block_on(relay(listener, upstream)),
        (None, None, Some(upstream)) => {
            runtime.block_on(lean_proxy(listener, upstream, args.engine.clone()))
        }
        (None, None, None) => runtime.block_on(serve(listener, args)),
    };
    if let Err(e) = served {
        eprintln!("error: {e}");
    }
}

/// `listener` on this thread's runtime.
fn listening(listener: std::net::TcpListener) -> std::io::Result<TcpListener> {
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// The next connection, waiting a little after a failed accept rather than spinning (out
/// of file descriptors, say).
async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                eprintln!("bare: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Accepts connections forever, one task each, serving each with what `service_for` makes
/// for its peer.
async fn accept_each<S, B>(
    listener: std::net::TcpListener,
    mut service_for: impl FnMut(SocketAddr) -> S,
) -> std::io::Result<()>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = listening(listener)?;
    loop {
        let (stream, peer) = accept(&listener).await;
        let _ = stream.set_nodelay(true);
        let service = service_for(peer);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers every request with the fixed bytes.
async fn serve(listener: std::net::TcpListener, args: Args) -> std::io::Result<()> {
    accept_each(listener, |_| {
        let (body, content_type, headers) = (
            args.body.clone(),
            args.content_type.clone(),
            args.headers.clone(),
        );
        service_fn(move |request: Request<Incoming>| {
            let body = body.clone();
            let content_type = content_type.clone();
            let headers = headers.clone();
            async move {
                // Read the request body to its end, as a real handler would, so the
                // connection can be kept alive.
                let _ = request.into_body().collect().await;
                let mut response = Response::new(Full::new(body));
                let out = response.headers_mut();
                out.insert(CONTENT_TYPE, content_type);
                out.extend(headers);
                Ok::<_, Infallible>(response)
            }
        })
    })
    .await
}

/// A request's body, or a response's, boxed: what the proxy forwards either way.
type Body = http_body_util::combinators::BoxBody<Bytes, hyper::Error>;

/// Forwards every connection's requests to `upstream` through one pool of kept-alive
/// connections (this worker's, as each gateway worker has its own).
async fn proxy(listener: std::net::TcpListener, upstream: Authority) -> std::io::Result<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Body> = Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .build(connector);
    accept_each(listener, |peer| {
        let client = client.clone();
        let upstream = upstream.clone();
        let forwarded_for = HeaderValue::from_str(&peer.ip().to_string()).ok();
        service_fn(move |request: Request<Incoming>| {
            let client = client.clone();
            let upstream = upstream.clone();
            let forwarded_for = forwarded_for.clone();
            async move {
                let (mut parts, body) = request.into_parts();
                let path = parts
                    .uri
                    .path_and_query()
                    .cloned()
                    .unwrap_or_else(|| PathAndQuery::from_static("/"));
                parts.uri = match Uri::builder()
                    .scheme("http")
                    .authority(upstream)
                    .path_and_query(path)
                    .build()
                {
                    Ok(uri) => uri,
                    Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
                };
                if let Some(ip) = forwarded_for {
                    parts.headers.insert("x-forwarded-for", ip);
                }
                parts
                    .headers
                    .insert("x-forwarded-proto", HeaderValue::from_static("http"));
                let request = Request::from_parts(parts, body.boxed());
                Ok::<_, Infallible>(match client.request(request).await {
                    Ok(response) => response.map(BodyExt::boxed),
                    Err(_) => status(StatusCode::BAD_GATEWAY),
                })
            }
        })
    })
    .await
}

/// Copies each connection's bytes both ways to a connection of its own to `upstream`.
async fn relay(listener: std::net::TcpListener, upstream: SocketAddr) -> std::io::Result<()> {
    let listener = listening(listener)?;
    loop {
        let (mut client, _) = accept(&listener).await;
        tokio::spawn(async move {
            let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                return;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}

/// Forwards each connection's requests to a connection of its own to `upstream`, both
/// heads parsed by hand.
async fn lean_proxy(
    listener: std::net::TcpListener,
    upstream: SocketAddr,
    engine: Option<Arc<(Limiter, ratewarden_core::RealClock)>>,
) -> std::io::Result<()> {
    let listener = listening(listener)?;
    loop {
        let (client, peer) = accept(&listener).await;
        let engine = engine.clone();
        tokio::spawn(async move {
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                return;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            if let Err(e) = lean_connection(client, server, peer, engine.as_deref()).await {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    eprintln!("bare: lean proxy connection: {e}");
                }
            }
        });
    }
}

/// The engine `--lean-limit` decides with: the gateway benchmark's rule, in memory.
type Limiter = ratewarden_policy::Engine<ratewarden_memory::MemoryStore>;

/// The engine of the gateway benchmark's rule (one GCRA per client address, never refusing
/// at the rates a benchmark reaches), on the in-memory store, with the real clock.
fn limiter() -> Result<(Limiter, ratewarden_core::RealClock), String> {
    const RULE: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "gcra"
rate = "1000000/s"
burst = 1000000
"#;
    let config =
        ratewarden_policy::config::parse("lean-limit.toml", RULE).map_err(|e| e.to_string())?;
    let store = ratewarden_memory::MemoryStore::new(ratewarden_memory::StoreConfig::default());
    Ok((
        ratewarden_policy::Engine::new(config, store),
        ratewarden_core::RealClock::new(),
    ))
}

/// Hop-by-hop lines, not forwarded either way.
fn hop_by_hop(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// Reads from `stream` into `buf` until `parse` finds a whole head in it; its length.
async fn read_head(
    stream: &mut tokio::net::TcpStream,
    buf: &mut bytes::BytesMut,
    mut parse: impl FnMut(&[u8]) -> Result<Option<usize>, httparse::Error>,
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt as _;
    loop {
        if !buf.is_empty() {
            match parse(buf) {
                Ok(Some(len)) => return Ok(len),
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            }
        }
        if buf.len() > 64 * 1024 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "head too large",
            ));
        }
        buf.reserve(8192);
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// Reads `len` bytes of body after `buf`'s first `head` bytes into `out`.
async fn body_into(
    stream: &mut tokio::net::TcpStream,
    buf: &mut bytes::BytesMut,
    len: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt as _;
    while buf.len() < len {
        buf.reserve(len - buf.len());
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    out.extend_from_slice(&buf.split_to(len));
    Ok(())
}

/// The most body the lean proxy buffers for one request or answer: a measuring tool still
/// must not let a client's `Content-Length` size its memory.
const MAX_LEAN_BODY: usize = 1 << 20;

/// The value of `Content-Length` among `headers`, 0 when absent; over [`MAX_LEAN_BODY`],
/// or given twice, is bad framing.
fn content_length(headers: &[httparse::Header<'_>]) -> std::io::Result<usize> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad framing");
    let mut length = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad());
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n <= MAX_LEAN_BODY);
            if length.is_some() || value.is_none() {
                return Err(bad());
            }
            length = value;
        }
    }
    Ok(length.unwrap_or(0))
}

/// One client connection's requests, each forwarded on `server` and answered in turn.
async fn lean_connection(
    mut client: tokio::net::TcpStream,
    mut server: tokio::net::TcpStream,
    peer: SocketAddr,
    engine: Option<&(Limiter, ratewarden_core::RealClock)>,
) -> std::io::Result<()> {
    use ratewarden_core::Clock as _;
    use std::io::Write as _;
    use tokio::io::AsyncWriteExt as _;
    let forwarded_for = peer.ip().to_string();
    let (mut from_client, mut from_server) = (bytes::BytesMut::new(), bytes::BytesMut::new());
    let mut out = Vec::with_capacity(1024);
    // The RateLimit fields for the answer, when deciding.
    let mut fields = Vec::with_capacity(256);
    loop {
        // The request: decided, its head rewritten, then its body.
        out.clear();
        fields.clear();
        let mut length = 0;
        let mut decide = None;
        let head = read_head(&mut client, &mut from_client, |bytes| {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut headers);
            let httparse::Status::Complete(len) = request.parse(bytes)? else {
                return Ok(None);
            };
            if engine.is_some() {
                // What the engine is asked: the method, the path as forwarded, the host.
                let path = request.path.unwrap_or("/");
                let path = path.split('?').next().unwrap_or(path);
                let host = request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("host"))
                    .and_then(|h| std::str::from_utf8(h.value).ok());
                decide = Some((
                    request.method.unwrap_or("GET").to_owned(),
                    ratewarden_policy::path::normalize(path)
                        .map_err(|_| httparse::Error::Token)?
                        .into_owned(),
                    host.map(str::to_owned),
                ));
            }
            let _ = write!(
                out,
                "{} {} HTTP/1.1\r\n",
                request.method.unwrap_or("GET"),
                request.path.unwrap_or("/")
            );
            for h in request.headers.iter().filter(|h| !hop_by_hop(h.name)) {
                out.extend_from_slice(h.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(h.value);
                out.extend_from_slice(b"\r\n");
            }
            let _ = write!(
                out,
                "x-forwarded-for: {forwarded_for}\r\nx-forwarded-proto: http\r\n\r\n"
            );
            length = content_length(request.headers).map_err(|_| httparse::Error::Token)?;
            Ok(Some(len))
        })
        .await?;
        let _ = from_client.split_to(head);
        if let (Some((engine, clock)), Some((method, path, host))) = (engine, decide) {
            let request = ratewarden_policy::Request {
                peer: peer.ip(),
                method: &method,
                path: &path,
                host: host.as_deref(),
                headers: &[],
                cost: None,
                api_key: None,
                tenant: None,
                body: None,
                client_cert: None,
            };
            let verdict = engine
                .decide(&request, clock.now())
                .await
                .map_err(std::io::Error::other)?;
            match verdict.answer(false, verdict.retry_ns()) {
                ratewarden_policy::Answer::Go { headers, .. } => {
                    for (name, value) in headers {
                        fields.extend_from_slice(name.as_str().as_bytes());
                        fields.extend_from_slice(b": ");
                        fields.extend_from_slice(value.as_bytes());
                        fields.extend_from_slice(b"\r\n");
                    }
                }
                ratewarden_policy::Answer::Stop(refusal) => {
                    let _ = write!(
                        out,
                        "HTTP/1.1 {} Too Many Requests\r\ncontent-length: {}\r\n\r\n{}",
                        refusal.status,
                        refusal.body.len(),
                        refusal.body
                    );
                    let _ = from_client.split_to(length.min(from_client.len()));
                    client.write_all(&out).await?;
                    continue;
                }
            }
        }
        body_into(&mut client, &mut from_client, length, &mut out).await?;
        server.write_all(&out).await?;
        // The answer: its head without hop-by-hop lines, then its body.
        out.clear();
        let head = read_head(&mut server, &mut from_server, |bytes| {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(len) = response.parse(bytes)? else {
                return Ok(None);
            };
            let _ = write!(
                out,
                "HTTP/1.1 {} {}\r\n",
                response.code.unwrap_or(502),
                response.reason.unwrap_or("")
            );
            for h in response.headers.iter().filter(|h| !hop_by_hop(h.name)) {
                out.extend_from_slice(h.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(h.value);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(&fields);
            out.extend_from_slice(b"\r\n");
            length = content_length(response.headers).map_err(|_| httparse::Error::Token)?;
            Ok(Some(len))
        })
        .await?;
        let _ = from_server.split_to(head);
        body_into(&mut server, &mut from_server, length, &mut out).await?;
        client.write_all(&out).await?;
    }
}

/// An empty answer with `code`.
fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = code;
    response
}
