//! The codec against hyper: heads and bodies hyper writes read here, and heads and bodies
//! written here read by hyper, compared as messages (status, method, target, each name's
//! values, the body's data), not as bytes, so they hold whatever order a hyper release
//! writes its lines in.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::answer::{self, Answer};
use super::body::{framing, Decoder, Encode, Encoder};
use super::head::{request_line, status_line, write_in_order, write_line, Groups, Line};
use super::{request, response};

/// A body of frames whose length is not known ahead: hyper's server sends it chunked.
struct Frames(VecDeque<Bytes>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|data| Ok(Frame::data(data))))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Names that come again in other cases; none that frames a message.
fn name() -> impl Strategy<Value = String> {
    proptest::sample::select(vec![
        "x-a",
        "X-A",
        "X-b",
        "accept-ranges",
        "ETag",
        "vary",
        "Vary",
        "x-request-id",
    ])
    .prop_map(str::to_owned)
}

/// A value as a client or upstream may send one: visible ASCII, inner spaces.
fn value() -> impl Strategy<Value = String> {
    "[!-~]([ -~]{0,12}[!-~])?"
}

fn map_of(lines: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (n, v) in lines {
        map.append(
            HeaderName::from_bytes(n.as_bytes()).expect("a name"),
            HeaderValue::from_str(v).expect("a value"),
        );
    }
    map
}

/// `map` without the lines that frame or date a message, which each side writes its own.
fn message_lines(mut map: HeaderMap) -> HeaderMap {
    for name in ["date", "content-length", "transfer-encoding", "connection"] {
        map.remove(name);
    }
    map
}

/// Reads one answer from `io` with the codec: its status, lines and body's data.
async fn read_answer(io: &mut DuplexStream, head_only: bool) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut buf = Vec::new();
    let mut scan = response::Scan::default();
    let mut read = [0u8; 4096];
    while !scan.found(&buf).expect("a well-formed head") {
        let n = io.read(&mut read).await.expect("read");
        assert!(n > 0, "closed mid-head");
        buf.extend_from_slice(&read[..n]);
    }
    let buf = buf.split_off(scan.start());
    let mut storage = response::lines();
    let head = response::parse(&buf, &mut storage).expect("a final head");
    let lines: Vec<Line<'_>> = head
        .headers
        .iter()
        .map(|h| (h.name.as_bytes(), h.value))
        .collect();
    let mut map = HeaderMap::new();
    for (n, v) in &lines {
        map.append(
            HeaderName::from_bytes(n).expect("a name"),
            HeaderValue::from_bytes(v).expect("a value"),
        );
    }
    let framing = framing(&lines, head.status, head_only, head.http10).expect("framed");
    let mut decoder = Decoder::new(framing);
    let (mut data, mut scratch) = (Vec::new(), Vec::new());
    let mut next = buf[head.len..].to_vec();
    loop {
        let decoded = decoder.decode(&next, &mut scratch);
        assert!(decoded.malformed.is_none(), "{:?}", decoded.malformed);
        data.extend_from_slice(decoded.data);
        if decoded.ended.is_some() {
            break;
        }
        let n = io.read(&mut read).await.expect("read");
        if n == 0 {
            assert!(decoder.close(), "closed mid-body");
        }
        next = read[..n].to_vec();
    }
    (head.status, map, data)
}

/// What hyper's server sends for a response of `status`, `lines` and a body of `chunks`
/// (sent chunked when `streamed`, else with its length), read by the codec.
fn through_hyper_server(
    status: StatusCode,
    lines: &[(String, String)],
    chunks: Vec<Vec<u8>>,
    streamed: bool,
    method: &str,
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut built = Response::builder().status(status);
    *built.headers_mut().expect("a builder") = map_of(lines);
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let service = service_fn(move |_: Request<Incoming>| {
            let mut response = Response::builder().status(status);
            *response.headers_mut().expect("a builder") =
                built.headers_ref().cloned().unwrap_or_default();
            let body = if streamed {
                Frames(chunks.iter().map(|c| Bytes::from(c.clone())).collect()).boxed()
            } else {
                Full::new(Bytes::from(chunks.concat())).boxed()
            };
            async move { Ok::<_, Infallible>(response.body(body).expect("a response")) }
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), service),
        );
        let request = format!("{method} / HTTP/1.1\r\nhost: a\r\n\r\n");
        client.write_all(request.as_bytes()).await.expect("write");
        read_answer(&mut client, method == "HEAD").await
    })
}

/// What hyper's server reads of `head` (a `HEAD` when `head_only`): its method, target and
/// lines.
fn hyper_reads_request(head: Vec<u8>, head_only: bool) -> (Method, String, HeaderMap) {
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(None));
        let keep = Arc::clone(&seen);
        let service = service_fn(move |request: Request<Incoming>| {
            let (parts, _) = request.into_parts();
            *keep.lock().expect("not poisoned") =
                Some((parts.method, parts.uri.to_string(), parts.headers));
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::new()))) }
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), service),
        );
        client.write_all(&head).await.expect("write");
        let (status, _, _) = read_answer(&mut client, head_only).await;
        assert_eq!(status, StatusCode::OK, "hyper took the head");
        let seen = seen.lock().expect("not poisoned").take();
        seen.expect("the request reached the service")
    })
}

/// What hyper's client reads of `answer` (a whole response, head and body) sent to it.
fn hyper_reads_answer(answer: Vec<u8>, method: Method) -> (StatusCode, HeaderMap, Vec<u8>) {
    runtime().block_on(async move {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client))
            .await
            .expect("a handshake");
        tokio::spawn(connection);
        tokio::spawn(async move {
            let mut read = [0u8; 4096];
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = server.read(&mut read).await.expect("read");
                assert!(n > 0, "the request's head");
                head.extend_from_slice(&read[..n]);
            }
            server.write_all(&answer).await.expect("write");
            // Held open: a body framed by its length or chunks ends without a close.
            let _ = server.read(&mut read).await;
        });
        let request = Request::builder()
            .method(method)
            .uri("/")
            .header("host", "a")
            .body(Full::new(Bytes::new()))
            .expect("a request");
        let response = sender.send_request(request).await.expect("an answer");
        let (parts, body) = response.into_parts();
        let data = body
            .collect()
            .await
            .expect("a whole body")
            .to_bytes()
            .to_vec();
        (parts.status, parts.headers, data)
    })
}

fn status() -> impl Strategy<Value = StatusCode> {
    proptest::sample::select(vec![200u16, 201, 204, 206, 404, 429, 503])
        .prop_map(|code| StatusCode::from_u16(code).expect("a status"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A response hyper's server writes (its length, or chunked) is read here as the message
    /// it sent: the status, every line, and the body's data.
    #[test]
    fn what_hyper_s_server_writes_is_read_as_sent(
        status in status(),
        lines in proptest::collection::vec((name(), value()), 0..8),
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 0..5),
        streamed in any::<bool>(),
        head_only in any::<bool>(),
    ) {
        let method = if head_only { "HEAD" } else { "GET" };
        let (read_status, read_lines, data) =
            through_hyper_server(status, &lines, chunks.clone(), streamed, method);
        prop_assert_eq!(read_status, status);
        prop_assert_eq!(message_lines(read_lines), map_of(&lines));
        let sent = if head_only || status == StatusCode::NO_CONTENT { Vec::new() } else { chunks.concat() };
        prop_assert_eq!(data, sent);
    }

    /// A request head written here (a name removed as a map removes it) is read by hyper's
    /// server as the request it stands for.
    #[test]
    fn a_request_head_written_here_is_read_by_hyper_as_meant(
        method in proptest::sample::select(vec!["GET", "HEAD", "DELETE", "PURGE"]),
        path in "/[a-z0-9/._~%-]{0,20}",
        query in proptest::option::of("[a-z0-9=&]{0,12}"),
        lines in proptest::collection::vec((name(), value()), 0..8),
        removed in proptest::option::of(name()),
    ) {
        let mut all: Vec<(String, String)> = vec![("Host".into(), "a".into())];
        all.extend(lines);
        let borrowed: Vec<Line<'_>> = all.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
        let mut head = Vec::new();
        request_line(&mut head, method, &path, query.as_deref());
        let mut wanted = map_of(&all);
        match &removed {
            Some(name) => {
                let mut groups = Groups::of(&borrowed);
                groups.remove(&borrowed, name.to_ascii_lowercase().as_bytes());
                groups.write(&mut head, &borrowed, None);
                wanted.remove(name.as_str());
            }
            None => write_in_order(&mut head, &borrowed, |l| *l, None),
        }
        head.extend_from_slice(b"\r\n");
        // Parsed back here too: the head in is the head out's inverse.
        let mut storage = request::lines();
        let request::Parsed::Complete(ours) = request::parse(&head, &mut storage) else {
            panic!("not a head: {}", String::from_utf8_lossy(&head));
        };
        prop_assert_eq!((ours.method, ours.minor, ours.len), (method, 1, head.len()));
        let (read_method, target, read_lines) = hyper_reads_request(head.clone(), method == "HEAD");
        prop_assert_eq!(read_method.as_str(), method);
        let sent_target = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        prop_assert_eq!(target, sent_target);
        prop_assert_eq!(read_lines, wanted);
    }

    /// A relayed answer written here (a status line, the lines, a body framed by length or
    /// chunks) is read by hyper's client as the message it stands for.
    #[test]
    fn a_relayed_answer_written_here_is_read_by_hyper_s_client(
        status in status(),
        reason in "[A-Za-z ]{0,12}",
        lines in proptest::collection::vec((name(), value()), 0..8),
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..64), 0..5),
        chunked in any::<bool>(),
    ) {
        let borrowed: Vec<Line<'_>> = lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
        let empty = status == StatusCode::NO_CONTENT;
        let data = if empty { Vec::new() } else { chunks.concat() };
        let mut out = Vec::new();
        status_line(&mut out, status, &reason);
        write_in_order(&mut out, &borrowed, |l| *l, None);
        let encode = match (empty, chunked) {
            (true, _) => Encode::None,
            (false, true) => {
                write_line(&mut out, b"transfer-encoding", b"chunked");
                Encode::Chunked
            }
            (false, false) => {
                super::head::write_length(&mut out, b"content-length", data.len() as u64);
                Encode::Length(data.len() as u64)
            }
        };
        out.extend_from_slice(b"\r\n");
        let mut encoder = Encoder::new(encode);
        for chunk in &chunks {
            if !empty {
                encoder.encode(chunk, &mut out);
            }
        }
        encoder.finish(&mut out);
        let (read_status, read_lines, read_data) = hyper_reads_answer(out, Method::GET);
        prop_assert_eq!(read_status, status);
        prop_assert_eq!(message_lines(read_lines), map_of(&lines));
        prop_assert_eq!(read_data, data);
    }

    /// An answer the lean paths make themselves is read by hyper's client as made.
    #[test]
    fn an_answer_written_here_is_read_by_hyper_s_client(
        status in status(),
        lines in proptest::collection::vec((name(), value()), 0..6),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        close in any::<bool>(),
    ) {
        let headers: Vec<(HeaderName, String)> = lines
            .iter()
            .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).expect("a name"), v.clone()))
            .collect();
        let body = if status == StatusCode::NO_CONTENT { Vec::new() } else { body };
        let mut out = Vec::new();
        let typed = [("content-type", "application/json")];
        answer::write(
            &mut out,
            &Answer { status, first: &typed, headers: &headers, body: &body },
            close,
        );
        let (read_status, read_lines, read_data) = hyper_reads_answer(out, Method::GET);
        prop_assert_eq!(read_status, status);
        let mut wanted = map_of(&lines);
        wanted.insert("content-type", HeaderValue::from_static("application/json"));
        let mut read_lines = message_lines(read_lines);
        // Written first, then the others: as a map holds them, each name's values in order.
        let typed: Vec<_> = read_lines.get_all("content-type").iter().cloned().collect();
        prop_assert_eq!(typed.first().map(HeaderValue::as_bytes), Some(&b"application/json"[..]));
        read_lines.remove("content-type");
        wanted.remove("content-type");
        prop_assert_eq!(read_lines, wanted);
        prop_assert_eq!(read_data, body);
    }
}
