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
pub(super) const MAX_RESPONSE_HEAD: usize = 8192 + 4096 * 100;

/// The most header lines a response may have, as hyper's client.
pub(super) const MAX_RESPONSE_HEADERS: usize = 100;

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
pub(super) enum Failed {
    /// No connection within `upstream_connect_timeout`: 504.
    ConnectTimeout,
    /// No response head within `upstream_response_timeout`: 504.
    Timeout,
    /// Not reached, or no well-formed answer: 502.
    Broken(String),
}

/// A response head read whole: its connection, and `buf[..head]` is the head, the bytes
/// after it (up to `filled`) the start of its body.
pub(super) struct Answered {
    pub(super) stream: TcpStream,
    pub(super) head: usize,
    pub(super) filled: usize,
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

    /// Gives back a connection whose last response was complete and well framed.
    pub(super) fn put(&self, stream: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                stream,
                since: Instant::now(),
            });
        }
    }

    /// The most recently pooled connection still open and idle less than `keep`.
    fn take(&self, keep: Duration) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(Idle { stream, since }) = idle.pop() {
            if since.elapsed() >= keep {
                // The rest are older still.
                idle.clear();
                return None;
            }
            let mut probe = [0u8; 1];
            match stream.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(stream),
                // Closed by the upstream, failed, or sending what nobody asked for.
                _ => {}
            }
        }
        None
    }

    /// Sends `request` (a whole head, no body) and reads the response head into `buf`,
    /// skipping interim (1xx) answers; the whole within `response_timeout`, a new
    /// connection within `connect_timeout`.
    pub(super) async fn exchange(
        &self,
        request: &[u8],
        buf: &mut Vec<u8>,
        connect_timeout: Duration,
        response_timeout: Duration,
        keep_idle: Duration,
    ) -> Result<Answered, Failed> {
        let exchange = async {
            if let Some(stream) = self.take(keep_idle) {
                match send(stream, request, buf).await {
                    Ok(answered) => return Ok(answered),
                    // Closed before answering: the upstream dropped it while it idled.
                    Err(Sent::Unanswered) => {}
                    Err(Sent::Failed(why)) => return Err(Failed::Broken(why)),
                }
            }
            let stream = match tokio::time::timeout(
                connect_timeout,
                TcpStream::connect(self.target.as_str()),
            )
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
        };
        tokio::time::timeout(response_timeout, exchange)
            .await
            .unwrap_or(Err(Failed::Timeout))
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
    let mut filled = 0;
    let mut answered_any = false;
    loop {
        match head_len(&buf[..filled]) {
            Ok(Some((len, interim))) if interim => {
                // An interim answer (`100 Continue`, `103 Early Hints`): not relayed, as
                // hyper's client does not.
                buf.copy_within(len..filled, 0);
                filled -= len;
                continue;
            }
            Ok(Some((head, _))) => {
                return Ok(Answered {
                    stream,
                    head,
                    filled,
                })
            }
            Ok(None) => {}
            Err(why) => return Err(Sent::Failed(why)),
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

/// The length of the response head at the start of `buf`, and whether it is an interim
/// (1xx) one; `None` while not whole.
fn head_len(buf: &[u8]) -> Result<Option<(usize, bool)>, String> {
    // Not zeroed first: 100 empty lines were 600 instructions a response.
    let mut headers =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(len)) => {
            let code = response.code.unwrap_or(0);
            if code == 101 {
                // Nothing the lean path forwards asks to switch protocols.
                return Err("an unasked `101 Switching Protocols`".into());
            }
            Ok(Some((len, (100..200).contains(&code))))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(format!("a malformed response head: {e}")),
    }
}
