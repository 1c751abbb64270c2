//! The gateway's test upstream: paths that wait, stream, fail or never answer, so a test
//! can hold requests in flight and release them when it chooses.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::{Channel, Sender};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// An upstream: `/slow` (and `/payments/slow`) waits for a permit of `gate`; `/stream`
/// answers a chunk, then the rest when the test sends it; `/upload` answers the length of
/// what it received; `/fail` answers 500; `/hang` never answers; anything else echoes the
/// request as JSON, with hop-by-hop headers of its own.
pub struct Gated {
    pub addr: SocketAddr,
    pub gate: Arc<Semaphore>,
    pub stream: Arc<Mutex<Option<Sender<Bytes>>>>,
    /// Requests that reached `/slow`.
    pub arrived: Arc<AtomicUsize>,
}

impl Gated {
    pub async fn start() -> Self {
        let gate = Arc::new(Semaphore::new(0));
        let stream = Arc::new(Mutex::new(None));
        let arrived = Arc::new(AtomicUsize::new(0));
        let (g, s, a) = (Arc::clone(&gate), Arc::clone(&stream), Arc::clone(&arrived));
        let addr = super::upstream(move |request| {
            answer(request, Arc::clone(&g), Arc::clone(&s), Arc::clone(&a))
        })
        .await;
        Self {
            addr,
            gate,
            stream,
            arrived,
        }
    }
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    request: Request<Incoming>,
    gate: Arc<Semaphore>,
    stream: Arc<Mutex<Option<Sender<Bytes>>>>,
    arrived: Arc<AtomicUsize>,
) -> Response<UpBody> {
    match request.uri().path() {
        "/slow" | "/payments/slow" => {
            arrived.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            Response::new(Full::new(Bytes::from_static(b"slow done")).boxed())
        }
        "/stream" => {
            let (mut tx, body) = Channel::<Bytes, Infallible>::new(4);
            tx.send_data(Bytes::from_static(b"first;")).await.unwrap();
            *stream.lock().unwrap() = Some(tx);
            Response::new(body.boxed())
        }
        "/upload" => {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            Response::new(Full::new(Bytes::from(body.len().to_string())).boxed())
        }
        "/fail" => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Full::new(Bytes::from_static(b"failed")).boxed())
            .unwrap(),
        "/hang" => std::future::pending().await,
        path => {
            let headers: serde_json::Map<String, Value> = request
                .headers()
                .iter()
                .map(|(n, v)| (n.to_string(), json!(v.to_str().unwrap_or(""))))
                .collect();
            let echo = json!({ "path": path, "query": request.uri().query(), "headers": headers });
            Response::builder()
                .header("connection", "x-hop")
                .header("x-hop", "only for the next hop")
                .header("keep-alive", "timeout=5")
                .header("x-upstream", "yes")
                .body(Full::new(Bytes::from(echo.to_string())).boxed())
                .unwrap()
        }
    }
}
