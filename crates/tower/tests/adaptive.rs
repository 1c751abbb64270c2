//! Adaptive concurrency in the layer: built from a config with an adaptive rule, it
//! measures the inner service (its round trip from the call to its answer; an error or a
//! 5xx is a drop) and gives each place back with that, as the gateway does; with the
//! rule's queue, the excess waits its turn instead of a 503.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::Engine;
use ratewarden_tower::{RateLimitLayer, TokioClock};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt;

const BASE: u64 = 1_700_000_000_000_000_000;
/// The inner service's workers, and how long each request holds one.
const WORKERS: usize = 2;
const SERVICE: Duration = Duration::from_millis(100);

const RULE: &str = "[[limit]]\nname = \"inner\"\nkey = [\"global\"]\nalgorithm = \"adaptive-concurrency\"\nstrategy = \"aimd\"\n";

/// A service of fixed capacity (`/work`: a worker for `SERVICE`, the rest wait for one),
/// one that fails (`/fail`: a 500 after `SERVICE / 10`) and one too slow (`/slow`: `3 · SERVICE`), behind a
/// layer deciding `toml`'s rules on `engine`.
fn app(toml: &str) -> (Router, Arc<Engine<MemoryStore>>) {
    let config = ratewarden_policy::config::parse("a.toml", toml).unwrap();
    let engine = Arc::new(Engine::new(
        config,
        MemoryStore::new(StoreConfig::default()),
    ));
    let layer =
        RateLimitLayer::from_engine(Arc::clone(&engine)).clock(Arc::new(TokioClock::new(BASE)));
    let workers = Arc::new(Semaphore::new(WORKERS));
    let work = move || {
        let workers = Arc::clone(&workers);
        async move {
            let _worker = workers.acquire().await.unwrap();
            tokio::time::sleep(SERVICE).await;
            "done"
        }
    };
    let router = Router::new()
        .route("/work", get(work))
        .route(
            "/fail",
            get(|| async {
                // Time passes (under paused time, only when slept): a window is a time too.
                tokio::time::sleep(SERVICE / 10).await;
                (StatusCode::INTERNAL_SERVER_ERROR, "failed")
            }),
        )
        .route(
            "/grpc/unavailable",
            get(|| grpc_answer(http::HeaderMap::new(), [("grpc-status", "14")])),
        )
        .route(
            "/grpc/not-found",
            get(|| grpc_answer(http::HeaderMap::new(), [("grpc-status", "5")])),
        )
        .route(
            "/grpc/internal-in-trailers",
            get(|| {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("13"));
                grpc_answer(trailers, std::iter::empty())
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(SERVICE * 3).await;
                "late"
            }),
        )
        .layer(layer);
    (router, engine)
}

/// A gRPC answer in an HTTP 200, as gRPC services give their errors: `headers` on the
/// response (a trailers-only answer) and `trailers` after an empty body.
async fn grpc_answer(
    trailers: http::HeaderMap,
    headers: impl IntoIterator<Item = (&'static str, &'static str)>,
) -> http::Response<Body> {
    tokio::time::sleep(SERVICE / 10).await;
    let mut response = http::Response::new(Body::new(Trailers(Some(trailers))));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(name, http::HeaderValue::from_static(value));
    }
    response
}

/// A body of nothing but trailers (none when empty).
struct Trailers(Option<http::HeaderMap>);

impl http_body::Body for Trailers {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let trailers = self.0.take().filter(|t| !t.is_empty());
        std::task::Poll::Ready(trailers.map(|t| Ok(http_body::Frame::trailers(t))))
    }
}

fn request(path: &str, tenant: &str) -> Request<Body> {
    Request::get(path)
        .header("x-tenant-id", tenant)
        .body(Body::empty())
        .unwrap()
}

/// The status of `path`, its body read to the end (which gives its place back).
async fn status(app: &Router, path: &str, tenant: &str) -> StatusCode {
    let response = app.clone().oneshot(request(path, tenant)).await.unwrap();
    let status = response.status();
    let _ = axum::body::to_bytes(response.into_body(), usize::MAX).await;
    status
}

fn limit(engine: &Engine<MemoryStore>) -> u64 {
    engine.adaptive_states(1)[0].limit
}

#[tokio::test(start_paused = true)]
async fn the_layer_learns_from_the_inner_services_latency_and_failures() {
    // Every answer is a window; a round trip above 150 ms is a timeout.
    let (app, engine) = app(&format!(
        "{RULE}[limit.adaptive]\ninitial = 10\nmin = 1\nmax = 20\nwindow = \"1ns\"\nwindow_samples = 1\nmin_rtt = \"0s\"\ntimeout = \"150ms\"\nreserve = 0\n"
    ));
    // A 5xx from the inner service is a drop: ⌊10 · 0.9⌋ = 9.
    assert_eq!(
        status(&app, "/fail", "a").await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(limit(&engine), 9);
    // A round trip of 300 ms (measured on the layer's clock) is past the timeout: 8.
    assert_eq!(status(&app, "/slow", "a").await, StatusCode::OK);
    assert_eq!(limit(&engine), 8);
    // 100 ms is not; one in flight of 8 (1 · 2 < 8) does not grow it either.
    assert_eq!(status(&app, "/work", "a").await, StatusCode::OK);
    assert_eq!(limit(&engine), 8);
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn past_the_limit_the_layer_sheds_and_with_a_queue_the_excess_waits() {
    let pinned = format!(
        "{RULE}[limit.adaptive]\ninitial = {WORKERS}\nmin = {WORKERS}\nmax = {WORKERS}\nreserve = 0\n"
    );
    let burst = |app: Router| async move {
        let began = Instant::now();
        let calls: Vec<_> = (0..6)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { status(&app, "/work", "a").await })
            })
            .collect();
        let mut statuses = Vec::new();
        for call in calls {
            statuses.push(call.await.unwrap());
        }
        (statuses, began.elapsed())
    };

    // Without a queue: two places, four 503s at once.
    let (router, _) = app(&pinned);
    let (statuses, _) = burst(router).await;
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, WORKERS, "{statuses:?}");
    assert!(statuses.contains(&StatusCode::SERVICE_UNAVAILABLE));

    // With one: all six, two at a time, in three rounds of the service.
    let (router, engine) = app(&format!("{pinned}[limit.queue]\nmax_wait = \"1s\"\n"));
    let (statuses, took) = burst(router).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(took >= SERVICE * 3 && took < SERVICE * 4, "{took:?}");
    let queues = engine.adaptive_queues();
    assert_eq!(queues[0].waits.count, 4);

    // Past max_wait: the last two would wait two rounds, longer than 150 ms.
    let (router, _) = app(&format!("{pinned}[limit.queue]\nmax_wait = \"150ms\"\n"));
    let (statuses, _) = burst(router).await;
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 4, "{statuses:?}");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_leaves_the_layers_queue() {
    let (app, engine) = app(&format!(
        "{RULE}[limit.adaptive]\ninitial = 1\nmin = 1\nmax = 1\nreserve = 0\n[limit.queue]\nmax_wait = \"10s\"\n"
    ));
    let holder = {
        let app = app.clone();
        tokio::spawn(async move { status(&app, "/work", "a").await })
    };
    tokio::task::yield_now().await;
    // A caller that gives up after 10 ms: its future is dropped while it waits.
    let gave_up = tokio::time::timeout(Duration::from_millis(10), status(&app, "/work", "b")).await;
    assert!(gave_up.is_err());
    assert_eq!(engine.adaptive_states(1)[0].waiting, 0, "it left the queue");
    let next = {
        let app = app.clone();
        tokio::spawn(async move { status(&app, "/work", "c").await })
    };
    assert_eq!(holder.await.unwrap(), StatusCode::OK);
    assert_eq!(next.await.unwrap(), StatusCode::OK);
    let state = &engine.adaptive_states(1)[0];
    assert_eq!((state.in_flight, state.waiting), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_grpc_server_failure_inside_an_http_200_is_a_drop() {
    // A gRPC service answers its errors with a 200 and a `grpc-status`: only the 5xx was
    // read, so an `UNAVAILABLE` service looked healthy to the limit.
    let (app, engine) = app(&format!(
        "{RULE}[limit.adaptive]\ninitial = 10\nmin = 1\nmax = 20\nwindow = \"1ns\"\nwindow_samples = 1\nmin_rtt = \"0s\"\nreserve = 0\n"
    ));
    let grpc = |path: &str| {
        Request::get(path)
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap()
    };
    let call = |path: &'static str| {
        let app = app.clone();
        async move {
            let response = app.oneshot(grpc(path)).await.unwrap();
            let status = response.status();
            let _ = axum::body::to_bytes(response.into_body(), usize::MAX).await;
            status
        }
    };
    // `UNAVAILABLE` in a trailers-only answer: a drop, ⌊10 · 0.9⌋ = 9.
    assert_eq!(call("/grpc/unavailable").await, StatusCode::OK);
    assert_eq!(limit(&engine), 9);
    // `NOT_FOUND` is the caller's mistake, as a 404 is: not a drop.
    assert_eq!(call("/grpc/not-found").await, StatusCode::OK);
    assert_eq!(limit(&engine), 9);
    // `INTERNAL` in the trailers, after the body: a drop, ⌊9 · 0.9⌋ = 8.
    assert_eq!(call("/grpc/internal-in-trailers").await, StatusCode::OK);
    assert_eq!(limit(&engine), 8);
    assert_eq!(engine.adaptive_states(1)[0].in_flight, 0);
}
