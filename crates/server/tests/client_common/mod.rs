//! What the client's socket tests share: an upstream with scripted answers, `ratewarden
//! serve` in-process as the rate-limited gateway in front of it, and the two clients (the
//! tower layer over hyper-util's client, and the reqwest middleware) on one policy.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use ratewarden_client::tower::RetryLayer;
use ratewarden_client::{Policy, RetryMiddleware, Settings};
use ratewarden_core::Clock;
use ratewarden_server::serve::{self, Options, Running, TokioClock};
use tokio::net::TcpListener;
use tower_layer::Layer;
use tower_service::Service;

/// 2023-11-14T22:13:20Z: whole seconds, so HTTP-dates land exactly.
pub const T0: u64 = 1_700_000_000_000_000_000;

/// What the upstream answers on a path, and how many requests it saw there.
#[derive(Clone, Default)]
pub struct Upstream {
    pub addr: Option<SocketAddr>,
    seen: Arc<Mutex<HashMap<String, u32>>>,
}

impl Upstream {
    /// Requests seen on `path`.
    pub fn seen(&self, path: &str) -> u32 {
        self.seen.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// Scripted answers, by path:
/// - `/ok`: 200;
/// - `/busy`: 503 with `Retry-After: 2` the first time, then 200;
/// - `/busy-date`: 503 with `Retry-After` an HTTP-date 3 s ahead the first time, then 200;
/// - `/down`: always 503 with `Retry-After: 1`;
/// - `/flaky`: always 503, without `Retry-After`;
/// - `/hang`: answers after an hour.
pub async fn upstream(clock: Arc<dyn Clock>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = Upstream {
        addr: Some(listener.local_addr().unwrap()),
        ..Default::default()
    };
    let seen = Arc::clone(&up.seen);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            let clock = Arc::clone(&clock);
            let service = service_fn(move |request: Request<Incoming>| {
                let path = request.uri().path().to_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    let n = seen.entry(path.clone()).or_default();
                    *n += 1;
                    *n
                };
                let now = clock.now();
                async move {
                    let reply = |status: u16, retry_after: Option<String>| {
                        let mut r = Response::builder().status(status);
                        if let Some(ra) = retry_after {
                            r = r.header("retry-after", ra);
                        }
                        r.body(Full::new(Bytes::from_static(b"answer"))).unwrap()
                    };
                    let response = match (path.as_str(), n) {
                        ("/busy", 1) => reply(503, Some("2".into())),
                        ("/busy-date", 1) => {
                            let at =
                                UNIX_EPOCH + Duration::from_nanos(now) + Duration::from_secs(3);
                            reply(503, Some(httpdate::fmt_http_date(at)))
                        }
                        ("/down", _) => reply(503, Some("1".into())),
                        ("/flaky", _) => reply(503, None),
                        ("/hang", _) => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            reply(200, None)
                        }
                        _ => reply(200, None),
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(conn), service),
            );
        }
    });
    up
}

/// `ratewarden serve` in front of `upstream`, with `rules` and `extra` `[server]` lines.
pub async fn gateway(
    upstream: &Upstream,
    extra: &str,
    rules: &str,
    clock: Arc<dyn Clock>,
) -> Running {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
upstream = "http://{}"
{extra}

{rules}
"#,
        upstream.addr.unwrap()
    );
    let options = Options {
        config: ratewarden_policy::config::parse("test.toml", &toml).expect("a valid config"),
        config_path: None,
        clock,
        workers: 1,
        envoy: Default::default(),
        envoy_path: None,
    };
    serve::start(options).await.expect("the gateway starts")
}

/// The tokio clock both sides read, so paused time moves them together.
pub fn clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock::new(T0))
}

/// A policy on `clock` with `settings`.
pub fn policy(settings: Settings, clock: &Arc<dyn Clock>) -> Policy {
    Policy::new(settings, Arc::clone(clock))
}

/// Pooled connections are dropped well before the gateway closes idle ones (its
/// `idle_timeout`; before it had one, its 10 s `header_read_timeout`): a retry sent on a
/// connection the server is closing at that instant fails with no answer.
const POOL_IDLE: Duration = Duration::from_secs(5);

/// Which client sends.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    Tower,
    Reqwest,
}

pub const BOTH: [Via; 2] = [Via::Tower, Via::Reqwest];

/// An answer, or the client's error as text.
pub type Outcome = Result<(StatusCode, HeaderMap), String>;

/// Sends `method url` with `headers` through `via`, retried per `policy`.
pub async fn send(
    via: Via,
    policy: &Policy,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
) -> Outcome {
    match via {
        Via::Tower => {
            let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
                .pool_idle_timeout(POOL_IDLE)
                .pool_timer(TokioTimer::new())
                .build_http();
            let mut service = RetryLayer::new(policy.clone()).layer(client);
            let mut request = Request::builder().method(method).uri(url);
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            let request = request.body(Full::new(Bytes::new())).unwrap();
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .unwrap();
            match service.call(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    body.collect().await.unwrap();
                    Ok((parts.status, parts.headers))
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Via::Reqwest => {
            let reqwest = reqwest::Client::builder()
                .pool_idle_timeout(POOL_IDLE)
                .build()
                .unwrap();
            let client = reqwest_middleware::ClientBuilder::new(reqwest)
                .with(RetryMiddleware::new(policy.clone()))
                .build();
            let mut request = client.request(method, url);
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    response.bytes().await.unwrap();
                    Ok((status, headers))
                }
                Err(e) => Err(format!("{e:#}")),
            }
        }
    }
}
