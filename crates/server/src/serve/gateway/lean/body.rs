//! An answer's body relayed: read from the upstream as its framing delimits it, and sent to
//! the client as hyper's server frames it, each read streamed on as it comes.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::relay::{race, Raced, Relay, Sending};

impl Relay<'_> {
    /// Relays the body that starts at `bufs.answer[sending.head]` (read up to `filled`),
    /// each further read of `stream` within `idle` of the last: `None` when the client's
    /// answer could not be finished (its connection is to be dropped), `Some(ended)` when it
    /// is whole, `ended` when the upstream's answer ended exactly there (no byte past it,
    /// not at its close).
    pub(super) async fn body(
        &mut self,
        stream: &mut TcpStream,
        sending: Sending,
        filled: usize,
        idle: Duration,
    ) -> Option<bool> {
        let Sending {
            head,
            mut decoder,
            mut encoder,
            ..
        } = sending;
        let (mut lo, mut hi) = (head, filled);
        loop {
            let decoded = decoder.decode(&self.bufs.answer[lo..hi], &mut self.bufs.decoded);
            if let Some(error) = decoded.malformed {
                tracing::warn!(%error, "the upstream's chunked answer is malformed");
            }
            // Written as the client's framing has it; `whole` once it has all it was told
            // of.
            let whole = encoder.encode(decoded.data, &mut self.conn.out);
            if decoded.malformed.is_some() && !whole {
                let _ = self.conn.flush().await;
                return None;
            }
            if let Some(end) = decoded.ended {
                if !whole && encoder.is_length() {
                    // The upstream's body ended short of the length the client was told:
                    // hyper's server aborts such an answer.
                    tracing::warn!("the upstream's body ended short of its `content-length`");
                    let _ = self.conn.flush().await;
                    return None;
                }
                encoder.finish(&mut self.conn.out);
                // Bytes past the answer are nobody's: that connection is not reused.
                return Some(!decoder.closed() && lo + end == hi);
            }
            if whole {
                // The client has the length it was told (a `Content-Length` beside
                // `Transfer-Encoding`): the rest is not relayed, as hyper's server sends no
                // more; the upstream's connection, mid-answer, goes.
                return Some(false);
            }
            // The client has what there is while the upstream sends the rest: a body
            // streams.
            if !self.conn.flush().await {
                return None;
            }
            let read = race(
                self.conn,
                || Instant::now() + idle,
                stream.read(&mut self.bufs.answer[..]),
            )
            .await;
            match read {
                Raced::Done(Ok(0)) if decoder.close() => (lo, hi) = (0, 0),
                Raced::Done(Ok(n)) if n > 0 => (lo, hi) = (0, n),
                // Closed short, failed, stalled, or the client went away: the client's
                // answer cannot be finished.
                _ => {
                    tracing::warn!(
                        "the upstream's body was cut, or stalled past upstream_idle_timeout"
                    );
                    let _ = self.conn.flush().await;
                    return None;
                }
            }
        }
    }
}
