//! The middleware benchmark's server, shared with the instruction counter
//! (`examples/count.rs`), so both figures are of the same exchange.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A server on its own thread and runtime, so it does not share the client's; every answer
/// carries the same `RateLimit` bytes.
pub fn server() -> SocketAddr {
    serve(false)
}

/// The same server, counting `r` down by one an answer as a real limiter does: every
/// `RateLimit` differs from the last (`RateLimit-Policy` stays the same).
#[allow(dead_code)] // The benchmark does not run it; `examples/count.rs` does.
pub fn counting_server() -> SocketAddr {
    serve(true)
}

fn serve(counting: bool) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
            tx.send(listener.local_addr().expect("an address"))
                .expect("the bench waits");
            let answered = Arc::new(AtomicU64::new(0));
            while let Ok((stream, _)) = listener.accept().await {
                let conn = hyper::server::conn::http1::Builder::new();
                // Two services rather than one that asks, so the unchanging one costs what
                // it did before the counting one was added (the figures stay comparable).
                if counting {
                    let answered = answered.clone();
                    let answer = service_fn(move |_| {
                        let r = 99_999_999 - answered.fetch_add(1, Ordering::Relaxed);
                        async move {
                            let response = Response::builder()
                                .header("ratelimit-policy", r#""per-key";q=100000000;w=60"#)
                                .header("ratelimit", format!(r#""per-key";r={r};t=1"#))
                                .body(Full::new(Bytes::from_static(b"hello")))
                                .expect("a response");
                            Ok::<_, Infallible>(response)
                        }
                    });
                    tokio::spawn(conn.serve_connection(TokioIo::new(stream), answer));
                } else {
                    let answer = service_fn(|_| async {
                        let response = Response::builder()
                            .header("ratelimit-policy", r#""per-key";q=100000000;w=60"#)
                            .header("ratelimit", r#""per-key";r=99999999;t=1"#)
                            .body(Full::new(Bytes::from_static(b"hello")))
                            .expect("a response");
                        Ok::<_, Infallible>(response)
                    });
                    tokio::spawn(conn.serve_connection(TokioIo::new(stream), answer));
                }
            }
        });
    });
    rx.recv().expect("the server's address")
}
