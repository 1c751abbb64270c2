//! The edge's clients: TLS with rustls, trusting the test CA of `fixtures/tls` (written by
//! `scripts/tls-fixtures`), and HTTP/2 with hyper's client, over TLS (ALPN) or in clear
//! text by prior knowledge.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::raw::{read_response, Raw};
use super::Reply;

/// The path of a file of `fixtures/tls`.
pub fn fixture(name: &str) -> String {
    format!("{}/../../fixtures/tls/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A `[tls.<listener>]` section serving the `gateway` certificate (for `gateway.test`,
/// `localhost` and 127.0.0.1).
pub fn section(listener: &str) -> String {
    format!(
        "[tls.{listener}]\ncert = \"{}\"\nkey = \"{}\"\n",
        fixture("gateway-chain.pem"),
        fixture("gateway.key")
    )
}

/// A client trusting the test CA, offering `alpn`, presenting the client certificate
/// `client` (`"client"` for the fixtures' `client.pem`) when given.
pub fn client_config(alpn: &[&str], client: Option<&str>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(name) => {
            let chain = CertificateDer::pem_file_iter(fixture(&format!("{name}.pem")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(fixture(&format!("{name}.key"))).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr`, asking for `name` by SNI.
pub async fn connect(
    addr: SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

/// The protocol the server chose in ALPN.
pub fn alpn(stream: &TlsStream<TcpStream>) -> Option<Vec<u8>> {
    stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// Sends `request` as written (`\n` becomes CRLF) on `stream` and reads one response.
pub async fn raw_on<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, request: &str) -> Raw {
    stream
        .write_all(request.replace('\n', "\r\n").as_bytes())
        .await
        .unwrap();
    read_response(stream).await
}

/// An HTTP/2 connection on `io` (TLS after ALPN chose `h2`, or a TCP stream by prior
/// knowledge).
pub async fn h2<S>(io: S) -> hyper::client::conn::http2::SendRequest<Full<Bytes>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

/// Sends `request` on an HTTP/2 connection and reads the whole response.
pub async fn h2_send(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Reply {
    sender
        .ready()
        .await
        .expect("the connection takes a request");
    let response = sender.send_request(request).await.expect("a response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A gRPC channel to `addr` over TLS (ALPN `h2`), presenting the client certificate
/// `client` when given.
pub async fn grpc_channel(
    addr: SocketAddr,
    client: Option<&str>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let connector = GrpcTls {
        addr,
        config: client_config(&["h2"], client),
    };
    tonic::transport::Endpoint::from_static("https://localhost")
        .connect_with_connector(connector)
        .await
}

/// Connects tonic's channel over TLS with rustls.
#[derive(Clone)]
struct GrpcTls {
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
}

impl tower_service::Service<http::Uri> for GrpcTls {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let (addr, config) = (self.addr, Arc::clone(&self.config));
        Box::pin(async move { Ok(TokioIo::new(connect(addr, "localhost", config).await?)) })
    }
}
