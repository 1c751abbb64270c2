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
//! ```

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

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

Answers every HTTP/1 request with 200 and exactly the given bytes; or, with --proxy,
forwards every request to URL (adding X-Forwarded-For and X-Forwarded-Proto, as the
benchmark's nginx does) and returns what it answers, deciding nothing; or, with --relay,
copies each connection's bytes both ways to a connection of its own to ADDR, reading no HTTP.
  --listen ADDR          where to listen, such as 127.0.0.1:3000
  --body-file FILE       the response body, read from FILE
  --body STRING          the response body, given inline (default: empty)
  --content-type TYPE    the Content-Type header (default: text/plain)
  --header 'NAME: VALUE' one more response header; repeat for several
  --proxy URL            forward to this upstream, such as http://127.0.0.1:3000
  --relay ADDR           relay bytes to this address, such as 127.0.0.1:3000";

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
}

fn parse_args() -> Result<Args, String> {
    let mut listen = None;
    let mut body = Bytes::new();
    let mut content_type = HeaderValue::from_static("text/plain");
    let mut headers = HeaderMap::new();
    let mut proxy = None;
    let mut relay = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
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
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    let listen = listen.ok_or("--listen is required")?;
    if proxy.is_some() && relay.is_some() {
        return Err("--proxy and --relay are two modes; give one".to_owned());
    }
    Ok(Args {
        listen,
        body,
        content_type,
        headers,
        proxy,
        relay,
    })
}

/// The same allocator as `ratewarden`, so the baseline differs only in what it does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match parse_args() {
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
    let served = match (args.proxy.clone(), args.relay) {
        (Some(upstream), _) => runtime.block_on(proxy(listener, upstream)),
        (None, Some(upstream)) => runtime.block_on(relay(listener, upstream)),
        (None, None) => runtime.block_on(serve(listener, args)),
    };
    if let Err(e) = served {
        eprintln!("error: {e}");
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
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait a little rather than spin.
                eprintln!("bare: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
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
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (mut client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("bare: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                return;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
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
