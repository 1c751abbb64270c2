//! A small API with its limits inside the service, where the user, the document and the
//! cost are known.
//!
//! ```text
//! cargo run --release -p ratewarden-tower --example axum -- --listen 127.0.0.1:3000
//! ```
//!
//! - `GET /documents/{id}`: per user (`x-user`), GCRA 5/s with a burst of 5;
//! - `POST /documents/{id}`: per user and document, a sliding window of 2 a minute;
//! - `GET /reports`: 2 in flight per user (the handler takes 200 ms);
//! - `POST /search`: charged an estimate of 10 from 100 a minute per user, then settled by
//!   the handler to the number in its `x-actual-cost` header;
//! - `POST /chat`: LLM tokens, 1,000 a minute per user, each call reserving an estimate of
//!   200; the answer is a `text/event-stream` whose last event is the call's `usage`, and the
//!   handler settles at that total once the event is sent (here the model is a stand-in that
//!   spends the tokens its `x-tokens` header asks, 120 by default).
//!
//! Requests without `x-user` share the budget of user `anonymous`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::handler::Handler;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::request::Parts;
use http_body_util::channel::Channel;
use ratewarden_core::{Clock, Concurrency, Gcra, Rate, RealClock, SlidingWindow, TokenBucket};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer, Reservation};

/// The caller, as an authentication layer would have set it.
fn user(request: &Parts) -> String {
    header(request, "x-user").unwrap_or_else(|| "anonymous".to_owned())
}

/// The API, reading time from `clock` (the real one; tokio's paused one in tests).
///
/// # Panics
///
/// Never: the numbers below are valid.
pub fn router(clock: Arc<dyn Clock>) -> Router {
    let layer = |limit: KeyedLimit| {
        RateLimitLayer::builder()
            .limit(limit)
            .build()
            .expect("one named limit")
            .clock(Arc::clone(&clock))
    };
    let reads = layer(
        KeyedLimit::new(
            "document-reads",
            Gcra::new(Rate::per_second(5).expect("5/s"), 5).expect("burst 5"),
        )
        .key(|request| Some(user(request))),
    );
    let writes = layer(
        KeyedLimit::new(
            "document-writes",
            SlidingWindow::new(2, Duration::from_secs(60)).expect("2 a minute"),
        )
        .key(|request| {
            let document = request.uri.path().strip_prefix("/documents/")?;
            Some(format!("{}/{document}", user(request)))
        }),
    );
    let reports = layer(
        KeyedLimit::new(
            "reports-in-flight",
            Concurrency::new(2, Duration::from_secs(60)).expect("2 in flight"),
        )
        .key(|request| Some(user(request))),
    );
    let searches = layer(
        KeyedLimit::new(
            "search-cost",
            TokenBucket::new(
                Rate::new(100, Duration::from_secs(60)).expect("100 a minute"),
                100,
            )
            .expect("burst 100"),
        )
        .key(|request| Some(user(request)))
        .fixed_cost(10)
        .settle_within(Duration::from_secs(30)),
    );
    let tokens = layer(
        KeyedLimit::new(
            "chat-tokens",
            TokenBucket::new(
                Rate::new(1_000, Duration::from_secs(60)).expect("1,000 a minute"),
                1_000,
            )
            .expect("burst 1,000"),
        )
        .key(|request| Some(user(request)))
        .fixed_cost(CHAT_ESTIMATE)
        .settle_within(Duration::from_secs(60)),
    );
    Router::new()
        .route("/chat", post(chat.layer(tokens)))
        .route(
            "/documents/{id}",
            get(read_document.layer(reads)).post(write_document.layer(writes)),
        )
        .route("/reports", get(report.layer(reports)))
        .route("/search", post(search.layer(searches)))
}

async fn read_document(Path(id): Path<String>) -> String {
    format!("document {id}\n")
}

async fn write_document(Path(id): Path<String>) -> String {
    format!("saved document {id}\n")
}

async fn report() -> &'static str {
    tokio::time::sleep(Duration::from_millis(200)).await;
    "report\n"
}

/// Searches, then settles what the search really cost (here: what the client says).
async fn search(
    Extension(reservation): Extension<Reservation>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let Some(actual) = headers.get("x-actual-cost") else {
        return (StatusCode::OK, "searched; the estimate stands\n".to_owned());
    };
    let Some(actual) = actual.to_str().ok().and_then(|a| a.parse::<u64>().ok()) else {
        return (
            StatusCode::BAD_REQUEST,
            "header `x-actual-cost` must be a whole number\n".to_owned(),
        );
    };
    match reservation.settle(actual).await {
        Ok(()) => (StatusCode::OK, format!("searched; settled at {actual}\n")),
        Err(e) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e}\n")),
    }
}

/// The tokens a chat call reserves before the model has answered.
const CHAT_ESTIMATE: u64 = 200;

/// Streams a chat answer as server-sent events, the last one its `usage`, and settles the
/// reservation at that usage once it is sent: before the stream's end reaches the client,
/// so the client's next call sees the real cost charged. A stream cut before its usage
/// leaves the estimate charged.
async fn chat(
    Extension(reservation): Extension<Reservation>,
    headers: HeaderMap,
) -> (StatusCode, [(&'static str, &'static str); 1], Body) {
    let spent: u64 = headers
        .get("x-tokens")
        .and_then(|t| t.to_str().ok()?.parse().ok())
        .unwrap_or(120);
    let (mut events, body) = Channel::<Bytes, std::convert::Infallible>::new(4);
    tokio::spawn(async move {
        for word in ["Hello", " from", " a", " stand-in", " model"] {
            let event =
                format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{word}\"}}}}]}}\n\n");
            if events.send_data(Bytes::from(event)).await.is_err() {
                return; // The client left: the estimate stands.
            }
        }
        let usage = format!("data: {{\"choices\":[],\"usage\":{{\"total_tokens\":{spent}}}}}\n\n");
        if events.send_data(Bytes::from(usage)).await.is_ok() {
            // Settled before the stream ends: the sender's drop below ends it.
            let _ = reservation.settle(spent).await;
            let _ = events
                .send_data(Bytes::from_static(b"data: [DONE]\n\n"))
                .await;
        }
    });
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        Body::new(body),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let listen = match args.iter().position(|a| a == "--listen") {
        Some(i) => args.get(i + 1).map(String::as_str).unwrap_or(""),
        None => "127.0.0.1:3000",
    };
    let Ok(addr) = listen.parse::<SocketAddr>() else {
        eprintln!("error: --listen wants an address such as 127.0.0.1:3000, not `{listen}`");
        return ExitCode::from(2);
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("listening on http://{addr}");
    match axum::serve(listener, router(Arc::new(RealClock::new()))).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
