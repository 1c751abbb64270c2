//! An upstream of a fixed number of workers, each request holding one for its service
//! time and the rest queueing in front of them, first come first served (so latency grows
//! with the queue, as a real server's does): the adaptive tests' upstream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The upstream, what it served, and how long its workers were busy: a loaded machine
/// oversleeps, so its capacity is measured, not assumed.
pub struct Workers {
    pub addr: SocketAddr,
    pub workers: usize,
    /// Requests waiting for a worker now.
    pub queued: Arc<AtomicUsize>,
    pub served: Arc<AtomicU64>,
    pub busy_ns: Arc<AtomicU64>,
}

impl Workers {
    /// `workers` workers; the `n`th request to arrive is served in `service(n)`.
    pub async fn start(workers: usize, service: fn(u64) -> Duration) -> Self {
        let pool = Arc::new(Semaphore::new(workers));
        let arrivals = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicU64::new(0));
        let busy_ns = Arc::new(AtomicU64::new(0));
        let (q, sv, b) = (
            Arc::clone(&queued),
            Arc::clone(&served),
            Arc::clone(&busy_ns),
        );
        let addr = super::upstream(move |_request| {
            let (pool, queued) = (Arc::clone(&pool), Arc::clone(&q));
            let (served, busy_ns) = (Arc::clone(&sv), Arc::clone(&b));
            let n = arrivals.fetch_add(1, Ordering::Relaxed);
            async move {
                queued.fetch_add(1, Ordering::SeqCst);
                // tokio's semaphore is fair: first come, first served, as a server's
                // accept queue is.
                let worker = pool.acquire().await.unwrap();
                queued.fetch_sub(1, Ordering::SeqCst);
                let began = Instant::now();
                tokio::time::sleep(service(n)).await;
                let took = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
                busy_ns.fetch_add(took, Ordering::SeqCst);
                served.fetch_add(1, Ordering::SeqCst);
                drop(worker);
                Response::new(Full::new(Bytes::from_static(b"ok")))
            }
        })
        .await;
        Self {
            addr,
            workers,
            queued,
            served,
            busy_ns,
        }
    }

    /// A count of what it served and of its workers' busy time, to take differences of.
    pub fn reading(&self) -> (u64, u64) {
        (
            self.served.load(Ordering::SeqCst),
            self.busy_ns.load(Ordering::SeqCst),
        )
    }

    /// Requests a second its workers could serve at the service time they really took.
    pub fn capacity(&self) -> f64 {
        let (served, busy_ns) = self.reading();
        let mean = busy_ns as f64 / served.max(1) as f64 / 1e9;
        self.workers as f64 / mean
    }
}
