//! The physical limit for benchmarks: a bare hyper HTTP/1 server that answers every request,
//! whatever its method, path or body, with 200 and the same fixed bytes.
//!
//! `scripts/bench-serve` measures the decision API against it (the same response bytes, so
//! the difference is the cost of deciding) and uses it as the upstream behind both the
//! gateway and nginx. Like `ratewarden serve` it runs a thread per core, each with a
//! single-threaded tokio runtime accepting on the same socket, and sets `TCP_NODELAY` on
//! every connection.
//!
//! ```text
//! cargo run --release -p ratewarden-server --example bare -- \
//!     --listen 127.0.0.1:3000 --body-file answer.json --content-type application/json
//! cargo run --release -p ratewarden-server --example bare -- --listen 127.0.0.1:3000 --body ok
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const USAGE: &str = "\
usage: bare --listen ADDR [--body-file FILE | --body STRING] [--content-type TYPE]
            [--header 'NAME: VALUE']...

Answers every HTTP/1 request with 200 and exactly the given bytes.
  --listen ADDR          where to listen, such as 127.0.0.1:3000
  --body-file FILE       the response body, read from FILE
  --body STRING          the response body, given inline (default: empty)
  --content-type TYPE    the Content-Type header (default: text/plain)
  --header 'NAME: VALUE' one more response header; repeat for several";

/// What to serve, from the command line.
#[derive(Clone)]
struct Args {
    listen: SocketAddr,
    body: Bytes,
    content_type: HeaderValue,
    headers: HeaderMap,
}

fn parse_args() -> Result<Args, String> {
    let mut listen = None;
    let mut body = Bytes::new();
    let mut content_type = HeaderValue::from_static("text/plain");
    let mut headers = HeaderMap::new();
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
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    let listen = listen.ok_or("--listen is required")?;
    Ok(Args {
        listen,
        body,
        content_type,
        headers,
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
                println!("{USAGE}");
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
    if let Err(e) = runtime.block_on(serve(listener, args)) {
        eprintln!("error: {e}");
    }
}

/// Accepts connections forever, one task each.
async fn serve(listener: std::net::TcpListener, args: Args) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait a little rather than spin.
                eprintln!("bare: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let body = args.body.clone();
        let content_type = args.content_type.clone();
        let headers = args.headers.clone();
        let service = service_fn(move |request: Request<Incoming>| {
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
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
