//! The gateway's lean path to the upstream: a worker's pool of plain TCP connections, a
//! request head sent on one, and the response head read back (found by the codec's
//! [`Scan`]), with the bounds hyper-util's client has (`upstream/mod.rs`): the connect
//! timeout, and a head of at most hyper's client buffer.
//!
//! A connection is pooled only after a complete, well-framed response (the caller says);
//! one taken from the pool is checked first (closed by the upstream, or with bytes nobody
//! asked for: dropped), and a request whose reused connection closes before any byte of
//! the answer is sent again once on a new one, as hyper-util's client retries: the lean
//! path only forwards `GET` and `HEAD`, which may be repeated.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use http::uri::Authority;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::serve::h1::response::{Scan, MAX_RESPONSE_HEAD};

/// The most idle connections a worker keeps (hyper-util keeps any number; a bound keeps a
/// burst's connections from staying open for `upstream_pool_idle`).
const MAX_IDLE: usize = 256;

/// A worker's idle connections to the upstream.
#[derive(Debug)]
pub(crate) struct Pool {
    /// Where to connect: `host:port`.
    target: String,
    idle: Mutex<Vec<Idle>>,
}

#[derive(Debug)]
struct Idle {
    stream: TcpStream,
    since: Instant,
}

/// Why an exchange failed, as the gateway answers it.
#[derive(Debug)]
pub(crate) enum Failed {
    /// No connection within `upstream_connect_timeout`: 504.
    ConnectTimeout,
    /// Not reached, or no well-formed answer: 502.
    Broken(String),
}

/// A response head read whole (not yet parsed): its connection, and `buf[..filled]` holds
/// the head and the start of its body.
pub(crate) struct Answered {
    pub(crate) stream: TcpStream,
    pub(crate) filled: usize,
}

impl Pool {
    /// The pool of connections to `authority` (port 80 when it names none).
    pub(crate) fn new(authority: &Authority) -> Self {
        let target = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:80", authority.as_str()),
        };
        Self {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Gives back a connection whose last response was complete and well framed, its idle
    /// time counted from `now`.
    pub(crate) fn put(&self, stream: TcpStream, now: Instant) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(Idle { stream, since: now });
        }
    }

    /// The most recently pooled connection still open and idle less than `keep` at `now`.
    fn take(&self, keep: Duration, now: Instant) -> Option<TcpStream> {
        loop {
            // Only the pop under the lock: the probe's read and the closes are system calls.
            let stream = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                let Idle { stream, since } = idle.pop()?;
                if now.saturating_duration_since(since) >= keep {
                    // The rest are older still: closed once the lock is let go.
                    let stale = std::mem::take(&mut *idle);
                    drop(idle);
                    drop((stream, stale));
                    return None;
                }
                stream
            };
            let mut probe = [0u8; 1];
            match stream.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(stream),
                // Closed by the upstream, failed, or sending what nobody asked for.
                _ => {}
            }
        }
    }

    /// Sends `request` (a whole head, no body) and reads the response head into `buf`,
    /// skipping interim (1xx) answers; a new connection within `connect_timeout`. The
    /// caller times the whole (`upstream_response_timeout`) and may drop it at any point:
    /// the connection goes with it, never back to the pool.
    pub(crate) async fn exchange(
        &self,
        request: &[u8],
        buf: &mut Vec<u8>,
        connect_timeout: Duration,
        keep_idle: Duration,
        now: Instant,
    ) -> Result<Answered, Failed> {
        if let Some(stream) = self.take(keep_idle, now) {
            match send(stream, request, buf).await {
                Ok(answered) => return Ok(answered),
                // Closed before any byte of an answer: the upstream dropped it while it
                // idled. Sent once more below; never once an answer has begun.
                Err(Sent::Unanswered) => {}
                Err(Sent::Failed(why)) => return Err(Failed::Broken(why)),
            }
        }
        let stream =
            match tokio::time::timeout(connect_timeout, TcpStream::connect(self.target.as_str()))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(Failed::Broken(format!("connecting: {e}"))),
                Err(_) => return Err(Failed::ConnectTimeout),
            };
        let _ = stream.set_nodelay(true);
        match send(stream, request, buf).await {
            Ok(answered) => Ok(answered),
            Err(Sent::Unanswered) => Err(Failed::Broken("closed without an answer".into())),
            Err(Sent::Failed(why)) => Err(Failed::Broken(why)),
        }
    }
}

/// How one attempt failed.
enum Sent {
    /// The connection closed or failed before any byte of an answer.
    Unanswered,
    Failed(String),
}

async fn send(mut stream: TcpStream, request: &[u8], buf: &mut Vec<u8>) -> Result<Answered, Sent> {
    if stream.write_all(request).await.is_err() {
        return Err(Sent::Unanswered);
    }
    // The head being looked for starts at `scan.start()`: interim answers before it are
    // skipped, and the buffer compacted once a read, not once an answer (a flood of them in
    // one read would otherwise copy the rest of the read for each).
    let mut scan = Scan::default();
    let mut filled = 0;
    let mut answered_any = false;
    loop {
        if scan
            .found(&buf[..filled])
            .map_err(|e| Sent::Failed(e.to_string()))?
        {
            let start = scan.start();
            buf.copy_within(start..filled, 0);
            // Parsed once, by the caller.
            return Ok(Answered {
                stream,
                filled: filled - start,
            });
        }
        let start = scan.start();
        if start > 0 {
            buf.copy_within(start..filled, 0);
            filled -= start;
            scan.dropped_skipped();
        }
        if filled >= MAX_RESPONSE_HEAD {
            return Err(Sent::Failed("a response head past its bound".into()));
        }
        if buf.len() == filled {
            let grown = (buf.len() * 2).clamp(4096, MAX_RESPONSE_HEAD);
            buf.resize(grown, 0);
        }
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) if !answered_any => return Err(Sent::Unanswered),
            Ok(0) => return Err(Sent::Failed("closed mid-head".into())),
            Err(e) => return Err(Sent::Failed(format!("reading: {e}"))),
            Ok(n) => {
                filled += n;
                answered_any = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pooled connection is reused within `upstream_pool_idle`, never at it, and the
    /// expired ones go with it; one the upstream closed is not handed out.
    #[tokio::test]
    async fn the_pool_hands_out_open_connections_younger_than_its_idle_bound() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pool = Pool::new(&addr.to_string().parse().unwrap());
        let keep = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut accepted = Vec::new();
        for _ in 0..3 {
            pool.put(TcpStream::connect(addr).await.unwrap(), t0);
            accepted.push(listener.accept().await.unwrap().0);
        }
        assert!(pool
            .take(keep, t0 + keep - Duration::from_millis(1))
            .is_some());
        assert!(
            pool.take(keep, t0 + keep).is_none(),
            "at the bound: expired"
        );
        assert!(
            pool.take(keep, t0).is_none(),
            "the expired ones were dropped with it"
        );
        // Closed by the upstream while idle: not handed out.
        pool.put(TcpStream::connect(addr).await.unwrap(), t0);
        let (peer, _) = listener.accept().await.unwrap();
        drop(peer);
        let mut closed = false;
        for _ in 0..1000 {
            // The close reaches the pooled socket's readiness once the runtime has polled
            // its I/O driver, which it does every few dozen tasks run.
            tokio::task::yield_now().await;
            let stream = pool.take(keep, t0);
            if let Some(stream) = stream {
                pool.put(stream, t0);
            } else {
                closed = true;
                break;
            }
        }
        assert!(closed, "a connection the upstream closed was handed out");
    }
}
