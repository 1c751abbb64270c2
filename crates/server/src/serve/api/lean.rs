//! The decision API's own HTTP/1.1 path for `POST /v1/check`: the request parsed from, and
//! the answer written to, the connection's buffers by the codec (`serve::h1`), with no
//! hyper `Request`, `Response`, header map or boxed body in between (why, and what it costs
//! beside hyper: `docs/benchmarks.md`, "The decision API's lean path").
//!
//! It serves only what `lean_head` recognises exactly (HTTP/1.1, `POST /v1/check`, one
//! plain `Content-Length`, no `Transfer-Encoding`, `Expect` or `Upgrade`). Any other head
//! hands the connection to hyper for good, the bytes read so far first (`rewind.rs`), and
//! hyper serves it as it serves every listener: every other endpoint, error and protocol
//! corner stays hyper's. The check itself goes through the same functions as hyper's path
//! (`api::check` and the 415, 413 and 408 of `api/mod.rs`), and the codec writes the same
//! lines hyper writes.
//!
//! Bounds, as hyper's path has them: the buffer holds at most `max_header_bytes` while a
//! head is read (a head reaching it goes to hyper, which answers 431) and then the head and
//! a body of at most `max_body` (413 before reading when declared over); the first head
//! must be whole within `header_read_timeout` of the accept, a kept-alive connection's next
//! request must begin within `idle_timeout` and its head be whole within
//! `header_read_timeout` of that (as `idle.rs` times hyper's), and the body must be whole
//! within `api_body_timeout` of the first wait for it (408). One timer entry per
//! connection, set only when a read would block. Pipelined requests are answered in order;
//! answers are written when the next read would block (or past `FLUSH_AT` bytes).
//! Shutdown: a connection waiting for a head closes at once, one with a body or a decision
//! in flight answers it with `connection: close` first.

use std::net::SocketAddr;
use std::sync::Arc;

use ratewarden_policy::config::Bounds;

use crate::serve::api;
use crate::serve::api::lean_head::{self, Head};
use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::lean::{Conn, Filled, MoreHead, Wait, FLUSH_AT};
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::Wire;

/// Serves `stream` (an API listener's connection, just accepted) until it closes; or hands
/// it back, with what was read of it, for hyper to serve the rest.
pub(crate) async fn serve(
    stream: Wire,
    app: &Arc<App>,
    peer: SocketAddr,
    bounds: Bounds,
    stop: &mut Stop<'_>,
) -> Option<Rewind<Wire>> {
    let mut conn = Conn::new(stream, bounds);
    loop {
        let check = match lean_head::read(&conn.buf[conn.start..conn.end]) {
            Head::Check(check) => check,
            Head::Other => return conn.hand_off().await,
            Head::Partial => match conn.more_head(stop).await {
                MoreHead::Read => continue,
                more => return conn.end(more).await,
            },
        };
        let (head_len, body_len, close) = (check.len, check.body, check.close);
        let settings = app.settings();
        let refused = api::json_content_type(check.kind)
            .and_then(|()| api::declared_length(body_len, settings.max_body));
        // Used as a length only within max_body, checked below first.
        let whole = head_len.saturating_add(usize::try_from(body_len).unwrap_or(usize::MAX));
        if let Err(problem) = refused {
            // Answered before the body is read, as hyper's path does; the connection is
            // kept only when the body is here already to skip (hyper drains what it can,
            // then closes without saying so in the answer).
            let keep = conn.end - conn.start >= whole;
            conn.answer(app, "api", &problem.plain(), close || stop.now());
            if close || !keep {
                conn.close().await;
                return None;
            }
            conn.start += whole;
            conn.next();
            continue;
        }
        if conn.end - conn.start < whole {
            // Read per request, as hyper's path reads it: a reload changes the next body's
            // bound, not only a new connection's.
            conn.bounds.api_body_timeout = settings.bounds.api_body_timeout;
            conn.begin(Wait::Body);
            // The body arrives into the buffer after the head: room for both.
            conn.make_room(whole);
            while conn.end - conn.start < whole {
                match conn.fill(whole, stop).await {
                    Filled::Read => {}
                    Filled::TimedOut => {
                        let timed_out = api::body_timed_out(conn.bounds.api_body_timeout);
                        conn.answer(app, "api", &timed_out.plain(), false);
                        conn.close().await;
                        return None;
                    }
                    Filled::Closed | Filled::Stopped => {
                        conn.close().await;
                        return None;
                    }
                }
            }
        }
        let body = &conn.buf[conn.start + head_len..conn.start + whole];
        let answer = api::check(app, &settings, peer, body).await;
        let close = close || stop.now();
        conn.answer(app, "api", &answer, close);
        if close {
            conn.close().await;
            return None;
        }
        conn.start += whole;
        conn.next();
        if conn.out.len() >= FLUSH_AT && !conn.flush().await {
            return None;
        }
    }
}
