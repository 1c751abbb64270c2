//! The gateway's lean path (`lean_gateway.rs`) to the upstream: a worker's pool of plain
//! TCP connections, a request head sent on one, and the response head read back, with the
//! bounds hyper-util's client has (`upstream.rs`): the connect timeout, and a head of at
//! most hyper's client buffer.
//!
//! A connection is pooled only after a complete, well-framed response (the caller says);
//! one taken from the pool is checked first (closed by the upstream, or with bytes nobody
//! asked for: dropped), and a request whose reused connection closes before any byte of
//! the answer is sent again once on a new one, as hyper-util's client retries: the lean
//! path only forwards `GET` and `HEAD`, which may be repeated.

use std::mem::MaybeUninit;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use http::uri::Authority;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The most idle connections a worker keeps (hyper-util keeps any number; a bound keeps a
/// burst's connections from staying open for `upstream_pool_idle`).
const MAX_IDLE: usize = 256;

/// The longest response head read: hyper's client buffer (8 KiB plus 100 lines of 4 KiB).
pub(crate) const MAX_RESPONSE_HEAD: usize = 8192 + 4096 * 100;

/// The most header lines a response may have, as hyper's client.
pub(crate) const MAX_RESPONSE_HEADERS: usize = 100;

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
    // The head being read is `buf[start..filled]`: interim answers before it are skipped
    // by moving `start`, and the buffer compacted once a read, not once an answer (a flood
    // of them in one read would otherwise copy the rest of the read for each).
    let mut start = 0;
    let mut filled = 0;
    // Where the search for the head's end resumes.
    let mut scanned = 0;
    let mut answered_any = false;
    loop {
        // Empty lines before a status line are skipped, as httparse skips them for hyper's
        // client: else one before an interim answer hid it, and it was relayed as the answer.
        loop {
            match &buf[start..filled] {
                [b'\n', ..] => start += 1,
                [b'\r', b'\n', ..] => start += 2,
                _ => break,
            }
        }
        scanned = scanned.max(start);
        if let Some(end) = head_end(buf, scanned, filled) {
            if !interim(&buf[start..end]) {
                buf.copy_within(start..filled, 0);
                // Parsed once, by the caller.
                return Ok(Answered {
                    stream,
                    filled: filled - start,
                });
            }
            // An interim answer (`100 Continue`, `103 Early Hints`): not relayed, as
            // hyper's client does not.
            start += interim_len(&buf[start..filled]).map_err(Sent::Failed)?;
            scanned = start;
            continue;
        }
        scanned = filled.saturating_sub(2).max(start);
        if start > 0 {
            buf.copy_within(start..filled, 0);
            (filled, scanned, start) = (filled - start, scanned - start, 0);
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

/// Where the head in `buf[..filled]` ends (after its empty line, CRLF or LF as httparse
/// takes them), looking from `from`; `None` while not whole.
fn head_end(buf: &[u8], from: usize, filled: usize) -> Option<usize> {
    let buf = &buf[..filled];
    memchr::memchr_iter(b'\n', &buf[from..]).find_map(|found| {
        let lf = from + found;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => Some(lf + 2),
            Some([b'\r', b'\n', ..]) => Some(lf + 3),
            _ => None,
        }
    })
}

/// Whether the head starting `buf` is an interim (1xx) answer other than a 101 (which is
/// the caller's to refuse).
fn interim(buf: &[u8]) -> bool {
    matches!(buf, [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', b'1', tens, ones, ..]
        if (*tens, *ones) != (b'0', b'1'))
}

/// The length of the interim answer at the start of `buf`, parsed whole.
fn interim_len(buf: &[u8]) -> Result<usize, String> {
    let mut headers =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => Ok(len),
        Ok(httparse::Status::Partial) => Err("a malformed interim answer".into()),
        Err(e) => Err(format!("a malformed response head: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_first_empty_line_crlf_or_lf() {
        let head = b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\nbody";
        assert_eq!(head_end(head, 0, head.len()), Some(head.len() - 4));
        assert_eq!(head_end(head, 0, head.len() - 6), None);
        let bare = b"HTTP/1.1 200 OK\nA: 1\n\nbody";
        assert_eq!(head_end(bare, 0, bare.len()), Some(bare.len() - 4));
        // Resumed two bytes back, an end cut between reads is found.
        assert_eq!(
            head_end(head, head.len() - 8, head.len()),
            Some(head.len() - 4)
        );
    }

    #[test]
    fn interim_answers_are_1xx_but_101() {
        assert!(interim(b"HTTP/1.1 100 Continue\r\n\r\n"));
        assert!(interim(b"HTTP/1.1 103 Early Hints\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 101 Switching Protocols\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!interim(b"HTTP/1.1 1"));
    }

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
