//! The gateway's own HTTP/1.1 path (`serve/http/lean_gateway.rs`): its answers are those
//! of hyper's gateway byte for byte (but the date), the upstream receives the same heads
//! from both, and every request it does not take is handed to hyper.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratewarden_core::{Clock, ManualClock};
use ratewarden_server::serve::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T0: u64 = 1_700_000_000_000_000_000;

/// `/limited` once an hour per client; `/secret` likewise, and sensitive (a bare 429).
const RULES: &str = r#"
[[limit]]
name = "limited"
match = { path = "/limited" }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"

[[limit]]
name = "secret"
match = { path = "/secret" }
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1h"
sensitive = true
"#;

async fn start(upstream: SocketAddr, extra: &str) -> Running {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\nretry_after_jitter = \"0s\"\n{extra}\n{RULES}"
    );
    common::start(common::options(&toml, clock)).await
}

/// An upstream that answers by path, and records each request head it receives.
struct Upstream {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&heads);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(upstream_connection(stream, Arc::clone(&recorded)));
            }
        });
        Self { addr, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn upstream_connection(mut stream: TcpStream, heads: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8(buf.drain(..end).collect()).unwrap();
        heads.lock().unwrap().push(head.clone());
        let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let path = target.split('?').next().unwrap_or("/");
        let answer: &[u8] = match path {
            "/nocontent" => b"HTTP/1.1 204 No Content\r\nX-Up: 1\r\n\r\n",
            "/reason" => b"HTTP/1.1 200 Fine Thanks\r\nContent-Length: 2\r\n\r\nok",
            "/dated" => b"HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 2\r\n\r\nok",
            "/hop" => b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\nContent-Length: 2\r\n\r\nok",
            "/empty" => b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            "/error" => b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 7\r\n\r\ndown",
            "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5\r\nhello\r\n7;e=1\r\n, world\r\n0\r\n\r\n",
            "/until-close" => {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nall of it, until the close")
                    .await;
                return;
            }
            "/slow" => {
                std::future::pending::<()>().await;
                return;
            }
            _ => b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\n\r\nhello",
        };
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

/// A connection's answers, read one at a time (bytes read past one are kept for the next).
struct Answers {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Answers {
    async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// A connection hyper serves: its first request (two `Host` lines) is one the lean
    /// path hands over, and hyper's guard refuses without asking the upstream.
    async fn through_hyper(addr: SocketAddr) -> Self {
        let mut answers = Self::connect(addr).await;
        answers
            .send(b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            .await;
        let refused = answers.next(false).await;
        assert!(refused.starts_with("HTTP/1.1 400 "), "{refused}");
        answers
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    async fn more(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(60), self.stream.read(&mut chunk))
            .await
            .expect("an answer within 60 s")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// The next answer, whole (no body when `bodiless`, as for `HEAD`), its `date` value
    /// blanked: `""` if the connection closed.
    async fn next(&mut self, bodiless: bool) -> String {
        let head_end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if self.more().await == 0 {
                assert!(self.buf.is_empty(), "closed mid-head: {:?}", self.buf);
                return String::new();
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).unwrap();
        if !bodiless && head.contains("\r\ntransfer-encoding: chunked\r\n") {
            // The chunks may be cut anywhere: compared decoded.
            self.buf.drain(..head_end);
            let body = self.chunked().await;
            return format!("{}\n\n{body}", blank_date(head.trim_end()));
        }
        let length: usize = if bodiless {
            0
        } else {
            head.lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.parse().unwrap())
        };
        while self.buf.len() < head_end + length {
            assert!(self.more().await > 0, "closed mid-body");
        }
        let answer: Vec<u8> = self.buf.drain(..head_end + length).collect();
        blank_date(&String::from_utf8(answer).unwrap())
    }

    /// A chunked body, decoded (its chunk extensions and trailers dropped).
    async fn chunked(&mut self) -> String {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                assert!(self.more().await > 0, "closed mid-chunk");
            };
            let line = String::from_utf8(self.buf.drain(..line_end + 2).collect()).unwrap();
            let size = line.trim_end().split(';').next().unwrap();
            let size = usize::from_str_radix(size, 16).unwrap();
            if size == 0 {
                while !self.buf.starts_with(b"\r\n") {
                    assert!(self.more().await > 0, "closed in the trailers");
                }
                self.buf.drain(..2);
                return String::from_utf8(body).unwrap();
            }
            while self.buf.len() < size + 2 {
                assert!(self.more().await > 0, "closed mid-chunk");
            }
            body.extend(self.buf.drain(..size));
            assert_eq!(self.buf.drain(..2).collect::<Vec<_>>(), b"\r\n");
        }
    }

    /// Whether the server closed the connection (within 60 s).
    async fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.more().await == 0
    }
}

/// `answer` with its `date` value blanked: the one line that may differ.
fn blank_date(answer: &str) -> String {
    answer
        .lines()
        .map(|line| match line.strip_prefix("date: ") {
            Some(date) => {
                assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
                "date: <date>"
            }
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn get(target: &str, headers: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: example.com\r\n{headers}\r\n").into_bytes()
}

/// The cases both gateways are held to, in order, and whether each answer has no body.
fn cases() -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        (
            "allowed",
            get("/a/./b/../c?x=1&y", "Accept: */*\r\nX-Team: t\r\n"),
            false,
        ),
        ("limited: first", get("/limited", ""), false),
        ("limited: refused", get("/limited", ""), false),
        ("sensitive: first", get("/secret", ""), false),
        ("sensitive: refused", get("/secret", ""), false),
        (
            "repeated header, connection kept",
            get(
                "/",
                "Accept: a\r\nConnection: keep-alive\r\nUser-Agent: t\r\nAccept: b\r\n",
            ),
            false,
        ),
        (
            "HEAD",
            b"HEAD /page HTTP/1.1\r\nHost: example.com\r\n\r\n".to_vec(),
            true,
        ),
        ("204", get("/nocontent", ""), false),
        ("own reason", get("/reason", ""), false),
        ("upstream date", get("/dated", ""), false),
        ("hop-by-hop answer", get("/hop", ""), false),
        ("empty", get("/empty", ""), false),
        ("upstream 503", get("/error", ""), false),
        ("chunked", get("/chunked", ""), false),
        ("until the upstream closes", get("/until-close", ""), false),
        ("after those", get("/", ""), false),
    ]
}

#[tokio::test]
async fn the_lean_gateway_answers_and_forwards_as_hyper_does_but_the_date() {
    let (lean_up, hyper_up) = (Upstream::start().await, Upstream::start().await);
    let lean = start(lean_up.addr, "").await;
    let hyper = start(hyper_up.addr, "").await;
    let mut ours = Answers::connect(lean.listen).await;
    let mut theirs = Answers::through_hyper(hyper.listen).await;
    for (name, request, bodiless) in cases() {
        ours.send(&request).await;
        theirs.send(&request).await;
        let (a, b) = (ours.next(bodiless).await, theirs.next(bodiless).await);
        assert!(!a.is_empty(), "{name}");
        assert_eq!(a, b, "{name}");
    }
    // `Connection: close`: answered so, then closed, by both.
    let close = get("/", "Connection: close\r\n");
    ours.send(&close).await;
    theirs.send(&close).await;
    let answer = ours.next(false).await;
    assert!(answer.contains("\nconnection: close\n"), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
    assert!(ours.closed().await && theirs.closed().await);
    // The upstream saw the same heads from both (hyper's first, refused, never reached it).
    assert_eq!(lean_up.heads(), hyper_up.heads());
    let first = &lean_up.heads()[0];
    assert!(
        first.starts_with("GET /a/c?x=1&y HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\nx-team: t\r\nx-forwarded-for: 127.0.0.1\r\nforwarded: for=127.0.0.1;proto=http\r\nx-forwarded-proto: http\r\n\r\n"),
        "{first}"
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_and_one_it_does_not_take_goes_to_hyper() {
    let up = Upstream::start().await;
    let server = start(up.addr, "").await;
    let stream = [
        get("/limited", ""),
        get("/limited", ""),
        get("/", "X-Forwarded-For: 203.0.113.9\r\n"),
        get("/limited", ""),
    ]
    .concat();
    let mut answers = Answers::connect(server.listen).await;
    answers.send(&stream).await;
    let first = answers.next(false).await;
    assert!(first.starts_with("HTTP/1.1 200 OK\n"), "{first}");
    let second = answers.next(false).await;
    assert!(second.starts_with("HTTP/1.1 429 "), "{second}");
    let third = answers.next(false).await;
    assert!(third.starts_with("HTTP/1.1 200 OK\n"), "{third}");
    let fourth = answers.next(false).await;
    assert!(
        fourth.starts_with("HTTP/1.1 429 "),
        "hyper's, after: {fourth}"
    );
    // Hyper forwarded the third with the client's address replaced (not a trusted proxy).
    let heads = up.heads();
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert!(
        heads[1].contains("x-forwarded-for: 127.0.0.1\r\n"),
        "{}",
        heads[1]
    );
    assert!(!heads[1].contains("203.0.113.9"), "{}", heads[1]);
}

#[tokio::test]
async fn an_upstream_down_is_a_502_and_one_too_slow_a_504_as_hyper_answers_them() {
    // Down: a port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down = closed.local_addr().unwrap();
    drop(closed);
    let lean = start(down, "").await;
    let hyper = start(down, "").await;
    let mut ours = Answers::connect(lean.listen).await;
    let mut theirs = Answers::through_hyper(hyper.listen).await;
    let request = get("/", "");
    ours.send(&request).await;
    theirs.send(&request).await;
    let answer = ours.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
    // Slow: no answer within `upstream_response_timeout`.
    let up = Upstream::start().await;
    let slow = "upstream_response_timeout = \"1s\"";
    let lean = start(up.addr, slow).await;
    let hyper = start(up.addr, slow).await;
    let mut ours = Answers::connect(lean.listen).await;
    let mut theirs = Answers::through_hyper(hyper.listen).await;
    let request = get("/slow", "");
    ours.send(&request).await;
    theirs.send(&request).await;
    let answer = ours.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 504 "), "{answer}");
    assert_eq!(answer, theirs.next(false).await);
    // And the connection goes on.
    ours.send(&get("/", "")).await;
    let answer = ours.next(false).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\n"), "{answer}");
}

#[tokio::test]
async fn upstream_connections_are_reused_across_requests_and_clients() {
    let up = Upstream::start().await;
    let server = start(up.addr, "").await;
    for _ in 0..3 {
        let mut answers = Answers::connect(server.listen).await;
        for _ in 0..3 {
            answers.send(&get("/", "")).await;
            let answer = answers.next(false).await;
            assert!(answer.ends_with("\n\nhello"), "{answer}");
        }
    }
    assert_eq!(up.heads().len(), 9);
}

/// The raw bytes of the answer to `GET /chunked` on a new connection: the lean path relays
/// the upstream's chunks as they came, its extension (`;e=1`) with them, where hyper
/// decodes and encodes them again without it.
async fn chunked_raw(gateway: SocketAddr) -> String {
    let mut answers = Answers::connect(gateway).await;
    answers.send(&get("/chunked", "")).await;
    while !answers.buf.ends_with(b"0\r\n\r\n") {
        assert!(answers.more().await > 0, "closed mid-answer");
    }
    String::from_utf8(answers.buf).unwrap()
}

#[tokio::test]
async fn rules_the_lean_path_does_not_serve_whole_hand_every_connection_to_hyper() {
    let up = Upstream::start().await;
    let lean = start(up.addr, "").await;
    assert!(
        chunked_raw(lean.listen).await.contains("7;e=1\r\n"),
        "the lean path's"
    );
    // A concurrency rule holds a permit the lean path does not serve yet: hyper's.
    let concurrency = "[[limit]]\nname = \"reports\"\nmatch = { path = \"/reports\" }\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 2\nlease = \"30s\"\n";
    let hyper = start(up.addr, concurrency).await;
    let raw = chunked_raw(hyper.listen).await;
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(!raw.contains(";e=1"), "hyper's: {raw}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_head_is_cut_at_the_header_timeout_as_hyper_cuts_it() {
    // An upstream is configured, never reached.
    let up = Upstream::start().await;
    let server = start(up.addr, "").await;
    // A head a few bytes at a time (slowloris): cut 10 s after the accept.
    let mut slow = Answers::connect(server.listen).await;
    let started = tokio::time::Instant::now();
    slow.send(b"GET / HTTP/1.1\r\nHo").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    slow.send(b"st: x\r\n").await;
    assert!(slow.closed().await);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited <= Duration::from_secs(11),
        "{waited:?}"
    );
    assert!(up.heads().is_empty());
}

#[tokio::test]
async fn a_reload_bringing_a_rule_the_lean_path_does_not_serve_applies_to_open_connections() {
    let up = Upstream::start().await;
    let toml = |extra: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{}\"\n{extra}\n{RULES}",
            up.addr
        )
    };
    let dir = std::env::temp_dir().join(format!("ratewarden-leangw-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratewarden.toml");
    std::fs::write(&path, toml("")).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T0));
    let server = common::start(ratewarden_server::serve::Options {
        config_path: Some(path.clone()),
        ..common::options(&toml(""), clock)
    })
    .await;
    let mut kept = Answers::connect(server.listen).await;
    kept.send(&get("/chunked", "")).await;
    while !kept.buf.ends_with(b"0\r\n\r\n") {
        assert!(kept.more().await > 0);
    }
    assert!(String::from_utf8(std::mem::take(&mut kept.buf))
        .unwrap()
        .contains("7;e=1\r\n"));
    let concurrency = "[[limit]]\nname = \"reports\"\nmatch = { path = \"/reports\" }\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 2\nlease = \"30s\"\n";
    std::fs::write(&path, toml(concurrency)).unwrap();
    server.reload().await.expect("the new rules load");
    // The same connection: its next request is hyper's.
    kept.send(&get("/chunked", "")).await;
    while !kept.buf.ends_with(b"0\r\n\r\n") {
        assert!(kept.more().await > 0);
    }
    let answer = String::from_utf8(std::mem::take(&mut kept.buf)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(!answer.contains(";e=1"), "hyper's: {answer}");
    std::fs::remove_dir_all(dir).unwrap();
}
