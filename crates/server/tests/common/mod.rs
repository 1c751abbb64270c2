//! What the server's test files share: starting a server in-process or the binary, an HTTP
//! client, an upstream, and waiting on sockets and processes (never on a clock).
//!
//! Each test file compiles this module for itself and uses a part of it.
#![allow(dead_code)]

pub mod answers;
pub mod edge;
pub mod fleet;
pub mod gated;
pub mod llm;
pub mod raw;
pub mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratewarden_core::Clock;
use ratewarden_server::serve::{self, Options, Running};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::transport::Channel;

// ---------------------------------------------------------------------------------------
// In-process servers

/// What to start for `toml`: one worker, no Envoy configs, no file to reload from.
pub fn options(toml: &str, clock: Arc<dyn Clock>) -> Options {
    Options {
        config: ratewarden_policy::config::parse("test.toml", toml).expect("a valid config"),
        config_path: None,
        clock,
        workers: 1,
        envoy: Default::default(),
        envoy_path: None,
    }
}

/// Starts a server in-process; its listeners bind where the config says (`127.0.0.1:0` in
/// every test, so the addresses are read back from [`Running`], never guessed).
pub async fn start(options: Options) -> Running {
    serve::start(options).await.expect("the server starts")
}

/// A server on `toml` on `clock`.
pub async fn start_on(toml: &str, clock: Arc<dyn Clock>) -> Running {
    start(options(toml, clock)).await
}

/// A server on `toml` whose clock stands at `now` until the test moves it.
pub async fn start_at(toml: &str, now: u64) -> Running {
    start(options(
        toml,
        Arc::new(ratewarden_core::ManualClock::new(now)),
    ))
    .await
}

/// A server on `toml` with `workers` worker threads beyond the test's own runtime.
pub async fn start_workers(toml: &str, clock: Arc<dyn Clock>, workers: usize) -> Running {
    start(Options {
        workers,
        ..options(toml, clock)
    })
    .await
}

/// A gRPC client of the server's `[server] grpc` listener.
pub async fn grpc_client(running: &Running) -> RateLimitServiceClient<Channel> {
    let addr = running.grpc.expect("a gRPC listener");
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("the gRPC listener answers")
}

// ---------------------------------------------------------------------------------------
// An HTTP client

/// A plain HTTP/1.1 client.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends `request` and reads its answer to the end: its status, or 0 when none came (a
/// refused connection, a reset).
pub async fn status_of(
    client: &Client<HttpConnector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> u16 {
    match client.request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let _ = response.into_body().collect().await;
            status
        }
        Err(_) => 0,
    }
}

/// A whole response: status, headers and the body as text.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The header `name` as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Sends `request` and reads the whole response.
pub async fn send(request: Request<Full<Bytes>>) -> Reply {
    let response = client().request(request).await.expect("a response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `POST`s `body` as JSON to `path` at `addr`.
pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Reply {
    send(
        Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// `GET`s `path` at `addr` with `headers`.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(request.body(Full::new(Bytes::new())).unwrap()).await
}

// ---------------------------------------------------------------------------------------
// An upstream

/// Serves HTTP/1.1 on `127.0.0.1:0` with `answer` for every request, until the test ends;
/// returns the address it took.
pub async fn upstream<F, Fut, B>(answer: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let answer = answer.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let answered = answer(request);
                async move { Ok::<_, Infallible>(answered.await) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(conn), service),
            );
        }
    });
    addr
}

// ---------------------------------------------------------------------------------------
// Waiting on sockets and processes

/// Polls `check` every 10 ms for up to 10 s until it holds: for what waits on processes
/// and sockets (a server coming up, a signal handled), never on a refill.
pub async fn eventually<F: Future<Output = bool>>(mut check: impl FnMut() -> F) -> bool {
    for _ in 0..1000 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Whether the server whose admin listener is `admin` answers `/ready` with 200.
pub async fn is_ready(admin: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(admin).await.is_ok()
        && get(admin, "/ready", &[]).await.status == StatusCode::OK
}

// ---------------------------------------------------------------------------------------
// The binary

/// The `ratewarden` binary serving, killed when this drops however the test ends.
///
/// Its listeners are configured on port 0 and their addresses read from its log: a port
/// found free by the test and bound later by the child could be taken in between by any
/// other test (the SIGHUP test once met another server's "connection reset" so).
pub struct Served {
    pub child: std::process::Child,
    /// The main listener.
    pub listen: SocketAddr,
    /// The admin listener, if configured.
    pub admin: Option<SocketAddr>,
    /// The gRPC listener, if configured.
    pub grpc: Option<SocketAddr>,
    /// Its log lines after the one that gave the addresses, as they come.
    pub lines: mpsc::UnboundedReceiver<String>,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// Starts `ratewarden` with `args` (a `serve` command), reads from its log where it
    /// listens, and waits until it is ready when it has an admin listener.
    pub async fn spawn<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Self {
        Self::spawn_with_env(args, &[]).await
    }

    /// `ratewarden serve --config <path>`, as [`Served::spawn`] starts it.
    pub async fn serve_config(path: &std::path::Path) -> Self {
        Self::spawn([
            std::ffi::OsStr::new("serve"),
            "--config".as_ref(),
            path.as_os_str(),
        ])
        .await
    }

    /// [`Served::spawn`] with `env` added to its environment.
    pub async fn spawn_with_env<S: AsRef<std::ffi::OsStr>>(
        args: impl IntoIterator<Item = S>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, mut lines) = mpsc::unbounded_channel::<String>();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).split(b'\n') {
                let Ok(line) = line else { return };
                let line = String::from_utf8_lossy(&line).into_owned();
                kept.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut served = None;
        while let Some(line) = lines.recv().await {
            if line.contains("ratewarden serving") {
                served = Some(line);
                break;
            }
        }
        let Some(line) = served else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            panic!(
                "the server did not come up:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        let field = |name: &str| -> Option<SocketAddr> {
            let at = line.find(&format!(" {name}="))? + name.len() + 2;
            let value: String = line[at..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            let value = value
                .strip_prefix("Some(")
                .map_or(value.as_str(), |v| v.strip_suffix(')').unwrap_or(v));
            value.parse().ok()
        };
        let listen = field("listen").unwrap_or_else(|| panic!("no listen address in: {line}"));
        let admin = field("admin");
        let grpc = field("grpc");
        let served = Self {
            child,
            listen,
            admin,
            grpc,
            lines,
            log,
            reader: Some(reader),
        };
        if let Some(admin) = admin {
            assert!(eventually(|| is_ready(admin)).await, "the server is ready");
        }
        served
    }

    /// Sends signal `name` (`HUP`, `TERM`, `INT`).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Sends signal `name` and waits for the server to exit (killed after 10 s); its exit
    /// status, if it exited by itself.
    pub async fn stop(&mut self, name: &str) -> Option<std::process::ExitStatus> {
        self.signal(name);
        let mut status = None;
        eventually(|| {
            status = self.child.try_wait().unwrap();
            std::future::ready(status.is_some())
        })
        .await;
        status
    }

    /// Everything it logged, read to the end: killed first if it is still running.
    pub fn log(&mut self) -> String {
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that `waited` (measured on tokio's clock, paused in these tests) is within
/// `from..=to`: a bound was enforced at its time, not early and not much later.
#[track_caller]
pub fn assert_waited(waited: Duration, from: Duration, to: Duration) {
    assert!(
        waited >= from && waited <= to,
        "waited {waited:?}, not within {from:?}..={to:?}"
    );
}

/// The gateway's requests so far by the path that served them: (lean, hyper).
pub async fn gateway_paths(server: &Running) -> (u64, u64) {
    let admin = server.admin.expect("an admin listener");
    let metrics = get(admin, "/metrics", &[]).await.body;
    let count = |path: &str| -> u64 {
        let series = format!("ratewarden_gateway_path_total{{path=\"{path}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0, |n| n.parse().unwrap())
    };
    (count("lean"), count("hyper"))
}
