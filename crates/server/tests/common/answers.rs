//! A raw HTTP/1.1 client for comparing two servers' answers byte for byte: the lean paths'
//! tests (`lean.rs`, `lean_gateway.rs`) send the same bytes to a server on its lean path and
//! to one serving through hyper, and compare what comes back.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection's answers, read one at a time (bytes read past one are kept for the next).
pub struct Answers {
    pub stream: TcpStream,
    /// Bytes read and not yet taken as an answer.
    pub buf: Vec<u8>,
}

impl Answers {
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// A connection hyper serves: its first request, `first`, is one the lean path hands
    /// over, answered with a status line starting `answered`.
    pub async fn handed_over(addr: SocketAddr, first: &[u8], answered: &str) -> Self {
        let mut answers = Self::connect(addr).await;
        answers.send(first).await;
        let answer = answers.next(false).await;
        assert!(answer.starts_with(answered), "{answer}");
        answers
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads once more (within 60 s: longer than any bound of the server's, which a paused
    /// clock would race); 0 when the connection closed.
    pub async fn more(&mut self) -> usize {
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
    pub async fn next(&mut self, bodiless: bool) -> String {
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
                // A list of one length (`2, 2`) is that length.
                .map_or(0, |v| v.split(',').next().unwrap().trim().parse().unwrap())
        };
        while self.buf.len() < head_end + length {
            assert!(self.more().await > 0, "closed mid-body");
        }
        let answer: Vec<u8> = self.buf.drain(..head_end + length).collect();
        blank_date(&String::from_utf8(answer).unwrap())
    }

    /// A chunked body, decoded (its chunk extensions and trailers dropped).
    pub async fn chunked(&mut self) -> String {
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
    pub async fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.more().await == 0
    }
}

/// `answer` with its `date` value blanked: the one line that may differ.
pub fn blank_date(answer: &str) -> String {
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
