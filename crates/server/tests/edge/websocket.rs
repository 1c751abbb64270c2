//! WebSocket through the gateway, over real sockets: a tungstenite echo server behind it
//! and tungstenite clients in front. The upgrade is decided as any request; the joined
//! connection carries messages both ways, holds a concurrency rule's permit until it
//! closes, and is closed when idle.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use ratewarden_server::serve::Running;
use tokio_tungstenite::tungstenite::Message;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_000_000_000_000;

/// An echo server: every text or binary message comes back as it was sent.
async fn echo() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = ws.next().await {
                    if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A gateway in front of the echo server, one WebSocket at a time per client on `/live`.
async fn gateway(extra: &str) -> Running {
    let upstream = echo().await;
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "off"
upstream = "http://{upstream}"
{extra}

[[limit]]
name = "one-socket"
match = {{ path = "/live" }}
key = ["ip"]
algorithm = "concurrency"
limit = 1
"#
    );
    common::start_at(&toml, T0).await
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(server: &Running) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let url = format!("ws://{}/live", server.listen);
    tokio_tungstenite::connect_async(url)
        .await
        .map(|(ws, _)| ws)
}

#[tokio::test]
async fn messages_cross_both_ways_and_the_socket_holds_its_permit_until_it_closes() {
    let server = gateway("").await;
    let mut first = open(&server).await.expect("the upgrade goes through");
    for text in ["hello", "through the gateway"] {
        first.send(Message::text(text)).await.unwrap();
        let back = first.next().await.unwrap().unwrap();
        assert_eq!(back.into_text().unwrap().as_str(), text);
    }
    first
        .send(Message::binary(vec![0u8, 1, 2, 255]))
        .await
        .unwrap();
    assert_eq!(
        first.next().await.unwrap().unwrap().into_data().as_ref(),
        [0u8, 1, 2, 255]
    );
    // The permit is held while the socket is open: a second is refused, as any request
    // over a concurrency limit is (429 with Retry-After).
    match open(&server).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429);
            assert!(response.headers().get("retry-after").is_some());
        }
        other => panic!("a second socket is refused, not {other:?}"),
    }
    // Closed, the permit goes back: the next socket is let in.
    first.close(None).await.unwrap();
    while first.next().await.is_some() {}
    let mut again = None;
    for _ in 0..200 {
        if let Ok(ws) = open(&server).await {
            again = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut again = again.expect("after the first closed, a new socket is let in");
    again.send(Message::text("again")).await.unwrap();
    assert_eq!(
        again
            .next()
            .await
            .unwrap()
            .unwrap()
            .into_text()
            .unwrap()
            .as_str(),
        "again"
    );
    server.shutdown();
}

#[tokio::test]
async fn an_idle_socket_is_closed_and_gives_its_permit_back() {
    let server = gateway("upgraded_idle_timeout = \"200ms\"").await;
    let mut idle = open(&server).await.unwrap();
    // Nothing crosses: the gateway closes both sides.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = idle.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the idle socket was closed");
    let next = open(&server).await;
    assert!(next.is_ok(), "its permit came back: {next:?}");
    server.shutdown();
}

#[tokio::test]
async fn a_plain_get_to_the_same_path_is_an_ordinary_request() {
    // No `Upgrade`: the echo server answers as an HTTP server does to a non-WebSocket
    // request, and the gateway relays it (the permit is held for the request alone).
    let server = gateway("").await;
    let answer = common::get(server.listen, "/live", &[]).await;
    assert_ne!(answer.status, 101);
    let second = common::get(server.listen, "/live", &[]).await;
    assert_ne!(
        second.status, 429,
        "the first request's permit was given back"
    );
    server.shutdown();
}
