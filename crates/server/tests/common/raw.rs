//! One response read off a raw socket: for requests hyper's client would not send as
//! written (two `Host` lines, an absolute-form target, a malformed header), and answers
//! whose head is checked line by line.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response read off a raw socket.
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A 4xx must say what was wrong, as problem+json.
    pub fn is_problem(&self, status: u16) -> bool {
        self.status == status
            && self.header("content-type") == Some("application/problem+json")
            && self.json()["status"] == status
    }
}

/// Reads one response (head, then a `Content-Length` body) off `stream`.
pub async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> Raw {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.expect("a response");
        assert!(n > 0, "the connection closed before a response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head[9..12].parse().expect("a status");
    let mut raw = Raw {
        status,
        head,
        body: String::new(),
    };
    let length: usize = raw
        .header("content-length")
        .map_or(0, |v| v.parse().unwrap());
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    raw.body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    raw
}

/// Sends `request` as written (`\n` becomes CRLF) on a new connection and reads the one
/// response.
pub async fn raw(addr: SocketAddr, request: &str) -> Raw {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(request.replace('\n', "\r\n").as_bytes())
        .await
        .unwrap();
    read_response(&mut stream).await
}
