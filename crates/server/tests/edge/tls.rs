//! TLS on the listeners, over real sockets: rustls clients and independent ones (`openssl
//! s_client`, curl), protocol versions and ALPN, certificates chosen by SNI, reloaded
//! without dropping a connection (a bad one rejected at its line, the old one kept),
//! sessions resumed by ticket, and client certificates required on the admin listener.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use ratewarden_core::ManualClock;
use ratewarden_server::serve::Running;
use rustls::HandshakeKind;

#[path = "../common/mod.rs"]
mod common;

use common::edge::{alpn, client_config, connect, fixture, raw_on};

const T0: u64 = 1_000_000_000_000;

/// An upstream answering `ok` to every request.
async fn ok_upstream() -> std::net::SocketAddr {
    common::upstream(|_| async {
        http::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"ok")))
    })
    .await
}

/// A gateway in front of an upstream answering `ok`, with two requests a minute per client
/// on `/orders`, and `tls` (its `[tls.*]` sections).
async fn config(tls: &str) -> String {
    let upstream = ok_upstream().await;
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"
upstream = "http://{upstream}"

[[limit]]
name = "per-client"
match = {{ path = "/orders" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 2
window = "1m"

{tls}
"#
    )
}

async fn gateway(tls: &str) -> Running {
    common::start_at(&config(tls).await, T0).await
}

const GET: &str = "GET /orders HTTP/1.1\nHost: shop.example\n\n";

#[tokio::test]
async fn the_gateway_speaks_tls_and_alpn_chooses_h2_or_http1() {
    let server = gateway(&common::edge::section("listen")).await;
    // ALPN: h2 when the client offers it, HTTP/1.1 when that is all it offers.
    let both = connect(
        server.listen,
        "gateway.test",
        client_config(&["h2", "http/1.1"], None),
    )
    .await
    .expect("a TLS handshake");
    assert_eq!(alpn(&both).as_deref(), Some(&b"h2"[..]));
    let mut one = connect(
        server.listen,
        "localhost",
        client_config(&["http/1.1"], None),
    )
    .await
    .unwrap();
    assert_eq!(alpn(&one).as_deref(), Some(&b"http/1.1"[..]));
    let answer = raw_on(&mut one, GET).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer
        .header("ratelimit")
        .is_some_and(|r| r.contains("r=1")));
    // No ALPN at all is HTTP/1.1, and the second request on the connection is refused as
    // over HTTP/1.1 in clear text.
    let mut none = connect(server.listen, "localhost", client_config(&[], None))
        .await
        .unwrap();
    assert_eq!(alpn(&none), None);
    let _ = raw_on(&mut none, GET).await;
    let refused = raw_on(&mut none, GET).await;
    assert!(refused.is_problem(429), "{}", refused.head);
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.header("cache-control"), Some("no-store"));
    // TLS 1.2 too.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        rustls::pki_types::pem::PemObject::pem_file_iter(fixture("ca.pem"))
            .unwrap()
            .map(Result::unwrap),
    );
    let tls12 = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let old = connect(server.listen, "localhost", Arc::new(tls12))
        .await
        .expect("a TLS 1.2 handshake");
    assert_eq!(
        old.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    server.shutdown();
}

#[tokio::test]
async fn a_clear_text_client_on_a_tls_listener_is_closed_and_counted() {
    let server = gateway(&common::edge::section("listen")).await;
    let mut tcp = tokio::net::TcpStream::connect(server.listen).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(GET.replace('\n', "\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tcp.read_to_end(&mut buf).await;
    assert!(!buf.starts_with(b"HTTP/1.1 200"), "no answer in clear text");
    let admin = server.admin.unwrap();
    assert!(
        common::eventually(|| async {
            common::get(admin, "/metrics", &[])
                .await
                .body
                .contains("ratewarden_tls_handshakes_failed_total{listener=\"gateway\"} 1")
        })
        .await
    );
    server.shutdown();
}

#[tokio::test]
async fn sni_chooses_the_certificate_valid_for_the_name_and_the_first_otherwise() {
    let tls = format!(
        "[tls.listen]\ncertificates = [\n  {{ cert = \"{}\", key = \"{}\" }},\n  {{ cert = \"{}\", key = \"{}\" }},\n]\n",
        fixture("gateway-chain.pem"),
        fixture("gateway.key"),
        fixture("other.pem"),
        fixture("other.key"),
    );
    let server = gateway(&tls).await;
    // A client verifies the certificate against the name it asked for: each handshake
    // succeeds only if the certificate for that name was chosen.
    for name in ["gateway.test", "localhost", "other.test", "api.other.test"] {
        let mut stream = connect(server.listen, name, client_config(&[], None))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let answer = raw_on(&mut stream, "GET / HTTP/1.1\nHost: shop.example\n\n").await;
        assert_eq!(answer.status, 200, "{name}");
    }
    // A name no certificate has gets the first one, which the client then refuses.
    let error = connect(server.listen, "unknown.test", client_config(&[], None))
        .await
        .expect_err("the first certificate is not for unknown.test");
    assert!(error.to_string().contains("certificate"), "{error}");
    server.shutdown();
}

#[tokio::test]
async fn openssl_and_curl_speak_to_it_and_old_protocol_versions_are_refused() {
    let server = gateway(&common::edge::section("listen")).await;
    let port = server.listen.port();
    let s_client = move |args: &[&str]| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-servername", "gateway.test", "-CAfile", &fixture("ca.pem")])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl runs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let server_port = server.listen;
    let answered = tokio::task::spawn_blocking(move || {
        let h2 = s_client(&["-alpn", "h2,http/1.1"]);
        let tls13 = s_client(&["-tls1_3", "-brief"]);
        let tls11 = s_client(&["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
        let curl = |args: &[&str]| {
            let out = Command::new("curl")
                .args(["-s", "-i", "--cacert", &fixture("ca.pem")])
                .args(args)
                .arg(format!("https://localhost:{}/orders", server_port.port()))
                .output()
                .expect("curl runs");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let curls = [curl(&["--http2"]), curl(&["--http1.1"]), curl(&["--http2"])];
        (h2, tls13, tls11, curls)
    })
    .await
    .unwrap();
    let (h2, tls13, tls11, [curl2, curl1, refused]) = answered;
    assert!(h2.contains("ALPN protocol: h2"), "{h2}");
    assert!(h2.contains("Verify return code: 0 (ok)"), "{h2}");
    assert!(tls13.contains("Protocol version: TLSv1.3"), "{tls13}");
    // The client offers TLS 1.1 (at security level 0, where OpenSSL still may), and the
    // server ends the handshake with an alert: no certificate was sent, no cipher chosen.
    assert!(
        tls11.contains("no peer certificate available")
            && tls11.contains("Cipher is (NONE)")
            && tls11.contains("alert"),
        "TLS 1.1 is refused: {tls11}"
    );
    assert!(curl2.starts_with("HTTP/2 200"), "{curl2}");
    assert!(curl2.contains("ratelimit: "), "{curl2}");
    assert!(curl1.starts_with("HTTP/1.1 200"), "{curl1}");
    assert!(curl1.contains("\"per-client\";r=0;"), "{curl1}");
    assert!(refused.starts_with("HTTP/2 429"), "{refused}");
    assert!(refused.contains("retry-after: "), "{refused}");
    assert!(
        refused.contains("content-type: application/problem+json"),
        "{refused}"
    );
    server.shutdown();
}

/// A config file in `dir` serving `cert` and `key` (copies in `dir`) on the gateway.
fn write_config(dir: &Path, base: &str, cert: &str, key: &str) -> PathBuf {
    std::fs::copy(fixture(cert), dir.join("served.pem")).unwrap();
    std::fs::copy(fixture(key), dir.join("served.key")).unwrap();
    let path = dir.join("ratewarden.toml");
    let tls = format!(
        "[tls.listen]\ncert = \"{}\"\nkey = \"{}\"\n",
        dir.join("served.pem").display(),
        dir.join("served.key").display()
    );
    std::fs::write(&path, base.replace("{tls}", &tls)).unwrap();
    path
}

/// A server started from the config file at `path`, which its reloads read again.
async fn from_file(path: &Path) -> Running {
    let text = std::fs::read_to_string(path).unwrap();
    common::start(ratewarden_server::serve::Options {
        config_path: Some(path.to_owned()),
        ..common::options(&text, Arc::new(ManualClock::new(T0)))
    })
    .await
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratewarden-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_reload_takes_new_certificates_keeps_open_connections_and_keeps_the_old_on_error() {
    let dir = temp_dir("reload");
    let base = config("{tls}").await;
    let path = write_config(&dir, &base, "gateway-chain.pem", "gateway.key");
    let server = from_file(&path).await;
    let mut open = connect(server.listen, "gateway.test", client_config(&[], None))
        .await
        .unwrap();
    assert_eq!(raw_on(&mut open, GET).await.status, 200);

    // Renewed in place: the files the config names now hold `other.test`'s certificate.
    write_config(&dir, &base, "other.pem", "other.key");
    server
        .reload()
        .await
        .expect("the reload takes the new certificate");
    connect(server.listen, "other.test", client_config(&[], None))
        .await
        .expect("the new certificate is served");
    assert!(
        connect(server.listen, "gateway.test", client_config(&[], None))
            .await
            .is_err(),
        "the old one is not"
    );
    // The connection accepted before the reload is still served.
    assert_eq!(raw_on(&mut open, GET).await.status, 200);

    // A key that is not the certificate's: the reload is refused at the line naming it,
    // and the certificate in force stays.
    write_config(&dir, &base, "gateway-chain.pem", "unrelated.key");
    let errors = server
        .reload()
        .await
        .expect_err("a mismatched key is refused")
        .to_string();
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("key = \""))
        .unwrap()
        + 1;
    assert!(
        errors.contains(&format!("ratewarden.toml:{line}:7: `[tls.listen]`: `key`")),
        "{errors}"
    );
    assert!(errors.contains("is not the key of `cert`"), "{errors}");
    let mut after = connect(server.listen, "other.test", client_config(&[], None))
        .await
        .expect("the old certificate is still served");
    assert_eq!(raw_on(&mut after, GET).await.status, 429);
    // A file that is gone is refused as well.
    std::fs::remove_file(dir.join("served.pem")).unwrap();
    let errors = server.reload().await.expect_err("no file").to_string();
    assert!(
        errors.contains("`cert`") && errors.contains("cannot read"),
        "{errors}"
    );
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_certificate_that_cannot_be_used_stops_the_start_at_its_line() {
    let base = config("{tls}").await;
    for (cert, key, expected) in [
        ("missing.pem", "gateway.key", "`cert`: "),
        ("gateway.key", "gateway.key", "holds no certificate"),
        ("gateway.pem", "other.key", "is not the key of `cert`"),
        ("gateway.pem", "gateway.pem", "holds no private key"),
    ] {
        let tls = format!(
            "[tls.listen]\ncert = \"{}\"\nkey = \"{}\"\n",
            fixture(cert),
            fixture(key)
        );
        let toml = base.replace("{tls}", &tls);
        let options = common::options(&toml, Arc::new(ManualClock::new(T0)));
        let error = ratewarden_server::serve::start(options)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(error.contains("test.toml:"), "{cert} {key}: {error}");
        assert!(error.contains(expected), "{cert} {key}: {error}");
    }
}

#[tokio::test]
async fn sessions_are_resumed_by_ticket_and_after_a_reload() {
    let dir = temp_dir("resume");
    let base = config("{tls}").await;
    let path = write_config(&dir, &base, "gateway-chain.pem", "gateway.key");
    let server = from_file(&path).await;
    // One client config: its session store holds the tickets it was given.
    let client = client_config(&["http/1.1"], None);
    let handshake = |stream: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>| {
        stream.get_ref().1.handshake_kind()
    };
    let mut first = connect(server.listen, "gateway.test", Arc::clone(&client))
        .await
        .unwrap();
    assert_eq!(handshake(&first), Some(HandshakeKind::Full));
    // TLS 1.3 tickets come after the handshake: read an answer to receive them.
    assert_eq!(raw_on(&mut first, GET).await.status, 200);
    let second = connect(server.listen, "gateway.test", Arc::clone(&client))
        .await
        .unwrap();
    assert_eq!(handshake(&second), Some(HandshakeKind::Resumed));
    // The ticket key outlives a reload.
    server.reload().await.unwrap();
    let mut third = connect(server.listen, "gateway.test", Arc::clone(&client))
        .await
        .unwrap();
    assert_eq!(handshake(&third), Some(HandshakeKind::Resumed));
    assert_eq!(raw_on(&mut third, GET).await.status, 200);
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_admin_listener_can_require_a_client_certificate_from_its_ca() {
    let tls = format!(
        "{}client_ca = \"{}\"\n",
        common::edge::section("admin"),
        fixture("client-ca.pem")
    );
    let server = gateway(&tls).await;
    let admin = server.admin.unwrap();
    let metrics = "GET /metrics HTTP/1.1\nHost: localhost\n\n";
    let mut with = connect(admin, "localhost", client_config(&[], Some("client")))
        .await
        .expect("a client with a certificate from the CA");
    let answer = raw_on(&mut with, metrics).await;
    assert_eq!(answer.status, 200);
    // Without one, or with one from another CA, the handshake fails: in TLS 1.3 the
    // client learns it when it reads.
    for client in [None, Some("stranger")] {
        let refused = match connect(admin, "localhost", client_config(&[], client)).await {
            Err(_) => true,
            Ok(mut stream) => {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = stream
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await;
                let mut buf = [0u8; 64];
                !matches!(stream.read(&mut buf).await, Ok(n) if n > 0)
            }
        };
        assert!(refused, "{client:?} is refused");
    }
    let mut again = connect(admin, "localhost", client_config(&[], Some("client")))
        .await
        .unwrap();
    let metrics = raw_on(&mut again, metrics).await;
    let failed = "ratewarden_tls_handshakes_failed_total{listener=\"admin\"} 2";
    // The body is read by length: the failures are counted before this request.
    let mut body = metrics.body;
    if !body.contains(failed) {
        body = raw_on(&mut again, "GET /metrics HTTP/1.1\nHost: localhost\n\n")
            .await
            .body;
    }
    assert!(body.contains(failed), "{body}");
    server.shutdown();
}

#[tokio::test]
async fn envoys_rate_limit_service_is_served_over_tls_to_clients_with_a_certificate() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n\
         [[limit]]\nname = \"edge\"\nmatch = {{ domain = \"edge\", descriptor = \"remote_address\" }}\n\
         key = [\"descriptor\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\n\n\
         {}client_ca = \"{}\"\n",
        common::edge::section("grpc"),
        fixture("client-ca.pem")
    );
    let server = common::start_at(&toml, T0).await;
    let grpc = server.grpc.unwrap();
    let request = || RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".to_owned(),
                value: "203.0.113.7".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    };
    let channel = common::edge::grpc_channel(grpc, Some("client"))
        .await
        .expect("a TLS channel with a client certificate");
    let mut client = RateLimitServiceClient::new(channel);
    let codes: Vec<i32> = [
        client.should_rate_limit(request()).await.unwrap(),
        client.should_rate_limit(request()).await.unwrap(),
    ]
    .iter()
    .map(|r| r.get_ref().overall_code)
    .collect();
    assert_eq!(codes, [Code::Ok as i32, Code::OverLimit as i32]);
    // Without a certificate the call never reaches the service.
    let refused = match common::edge::grpc_channel(grpc, None).await {
        Err(_) => true,
        Ok(channel) => RateLimitServiceClient::new(channel)
            .should_rate_limit(request())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate is refused");
    server.shutdown();
}

#[tokio::test]
async fn the_client_certificate_subject_keys_a_budget_of_its_own() {
    let upstream = ok_upstream().await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\n\n\
         [[limit]]\nname = \"per-service\"\nmatch = {{ path = \"/orders\" }}\n\
         key = [\"client_cert\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\n\n\
         {}client_ca = \"{}\"\n",
        common::edge::section("listen"),
        fixture("client-ca.pem")
    );
    let server = common::start_at(&toml, T0).await;
    let mut answers = Vec::new();
    // Two services behind one address (one connection each, then a new connection):
    // each subject has its own budget, whatever connection it comes on.
    for client in ["client", "batch", "client", "batch"] {
        for alpn in [&["http/1.1"][..], &["h2"][..]] {
            let stream = connect(
                server.listen,
                "localhost",
                client_config(alpn, Some(client)),
            )
            .await
            .unwrap();
            let status = if alpn == ["h2"] {
                let mut h2 = common::edge::h2(stream).await;
                let request = http::Request::get("https://localhost/orders")
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                common::edge::h2_send(&mut h2, request)
                    .await
                    .status
                    .as_u16()
            } else {
                let mut stream = stream;
                raw_on(&mut stream, GET).await.status
            };
            answers.push((client, status));
        }
    }
    assert_eq!(
        answers,
        [
            ("client", 200),
            ("client", 429),
            ("batch", 200),
            ("batch", 429),
            ("client", 429),
            ("client", 429),
            ("batch", 429),
            ("batch", 429),
        ]
    );
    server.shutdown();
}

#[tokio::test]
async fn without_a_client_certificate_the_client_cert_part_is_missing_and_named() {
    // `client_ca` absent: no certificate is asked for, the part is missing, and the rule
    // does what `when_key_missing` says (here: refuse, naming the part).
    let upstream = ok_upstream().await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\n\n\
         [[limit]]\nname = \"per-service\"\nmatch = {{ path = \"/orders\" }}\n\
         key = [\"client_cert\"]\nwhen_key_missing = \"refuse\"\nalgorithm = \"fixed-window\"\n\
         limit = 1\nwindow = \"1m\"\n\n{}",
        common::edge::section("listen"),
    );
    let server = common::start_at(&toml, T0).await;
    let mut stream = connect(server.listen, "localhost", client_config(&[], None))
        .await
        .unwrap();
    let refused = raw_on(&mut stream, GET).await;
    assert!(refused.is_problem(400), "{} {}", refused.head, refused.body);
    assert!(refused.body.contains("client_cert"), "{}", refused.body);
    server.shutdown();
}

#[tokio::test]
async fn http1_over_tls_takes_the_lean_path_and_every_path_forwards_it_as_https() {
    // The upstream answers with what it was told of the client's protocol.
    let upstream = common::upstream(|request: http::Request<hyper::body::Incoming>| async move {
        let seen = |name: &str| {
            let value = request.headers().get(name).map(|v| v.to_str().unwrap());
            value.unwrap_or("-").to_owned()
        };
        let told = format!("{} | {}", seen("x-forwarded-proto"), seen("forwarded"));
        http::Response::new(http_body_util::Full::new(bytes::Bytes::from(told)))
    })
    .await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"http://{upstream}\"\n\n\
         [[limit]]\nname = \"per-client\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\n\
         limit = 100\nwindow = \"1m\"\n\n{}",
        common::edge::section("listen"),
    );
    let server = common::start_at(&toml, T0).await;
    let https = "https | for=127.0.0.1;proto=https";
    let mut one = connect(
        server.listen,
        "localhost",
        client_config(&["http/1.1"], None),
    )
    .await
    .unwrap();
    // Two plain GETs on one connection: the gateway's own path, kept alive.
    for _ in 0..2 {
        let answer = raw_on(&mut one, GET).await;
        assert_eq!(answer.status, 200, "{}", answer.head);
        assert_eq!(answer.body, https);
        assert!(answer.header("ratelimit").is_some(), "{}", answer.head);
    }
    assert_eq!(common::gateway_paths(&server).await, (2, 0));
    // A request with a body is hyper's, on the same connection, and told the same.
    let post = "POST /orders HTTP/1.1\nHost: shop.example\nContent-Length: 2\n\nhi";
    let answer = raw_on(&mut one, post).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, https));
    assert_eq!(common::gateway_paths(&server).await, (2, 1));
    // HTTP/2 over TLS too.
    let stream = connect(server.listen, "localhost", client_config(&["h2"], None))
        .await
        .unwrap();
    let mut h2 = common::edge::h2(stream).await;
    let request = http::Request::get("https://localhost/orders")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let answer = common::edge::h2_send(&mut h2, request).await;
    assert_eq!((answer.status.as_u16(), answer.body.as_str()), (200, https));
    server.shutdown();
}
