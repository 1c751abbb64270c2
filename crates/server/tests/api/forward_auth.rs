//! Forward-auth (`/v1/auth`, `/v1/auth/nginx`) over real sockets: first asked as a proxy
//! asks, then behind real nginx (`auth_request`) and Caddy (`forward_auth`) processes started
//! here, in front of a test upstream that counts what reaches it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ratewarden_server::serve::Running;

#[path = "../common/mod.rs"]
mod common;
use common::{get, Reply};

/// A minute's start: fixed windows are aligned to the epoch, so each starts whole here.
const T0: u64 = 1_699_999_980_000_000_000;

/// Three requests a minute per API key on `/orders` (and what is under it).
const ORDERS: &str = r#"
[[limit]]
name = "orders"
match = { path = "/orders*" }
key = ["header:x-api-key"]
algorithm = "fixed-window"
limit = 3
window = "1m"
"#;

async fn serve(trusted: &str, rules: &str) -> Running {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\ntrusted_proxies = [{trusted}]\n{rules}"
    );
    common::start_at(&toml, T0).await
}

/// Asks `path` at `addr` as a proxy would about `GET uri` by the client with `key`.
async fn ask(addr: SocketAddr, path: &str, uri: &str, key: &str) -> Reply {
    get(
        addr,
        path,
        &[
            ("x-forwarded-method", "GET"),
            ("x-forwarded-uri", uri),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-host", "shop.example"),
            ("x-api-key", key),
        ],
    )
    .await
}

#[tokio::test]
async fn allowed_then_limited_with_the_contract_and_nginx_gets_a_403() {
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    for remaining in [2, 1, 0] {
        let r = ask(server.listen, "/v1/auth", "/orders?page=1", "k1").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.header("ratelimit-policy"), Some(r#""orders";q=3;w=60"#));
        assert_eq!(
            r.header("ratelimit"),
            Some(format!(r#""orders";r={remaining};t=60"#).as_str())
        );
    }
    let r = ask(server.listen, "/v1/auth", "/orders", "k1").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("ratelimit"), Some(r#""orders";r=0;t=60"#));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["violated-policies"][0], "orders");
    // nginx's flavour: the same decision and headers, as a 403 `auth_request` accepts.
    let r = ask(server.listen, "/v1/auth/nginx", "/orders", "k1").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("ratelimit-policy"), Some(r#""orders";q=3;w=60"#));
    // The client's own key decides: another key has its own budget.
    let r = ask(server.listen, "/v1/auth/nginx", "/orders", "k2").await;
    assert_eq!(r.status, StatusCode::OK);
    // A path no rule matches is allowed, with nothing to show.
    let r = ask(server.listen, "/v1/auth", "/about", "k1").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("ratelimit"), None);
}

#[tokio::test]
async fn envoys_http_ext_authz_names_the_path_after_its_prefix() {
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    // Envoy asks with the request's method, `path_prefix` + its path, and the client's
    // headers: a client's own `X-Forwarded-Uri` does not move it to another path.
    let envoy = |path: &'static str| async move {
        get(
            server.listen,
            path,
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("x-forwarded-uri", "/about"),
                ("x-api-key", "k1"),
            ],
        )
        .await
    };
    for path in [
        "/v1/auth/envoy/orders?page=1",
        "/v1/auth/envoy/orders/7",
        "/v1/auth/envoy//orders",
    ] {
        let r = envoy(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(r.header("ratelimit").is_some(), "{path}");
    }
    let r = envoy("/v1/auth/envoy/%6Frders").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.json()["violated-policies"][0], "orders");
    // A path that is not under the prefix is not this door.
    assert_eq!(envoy("/v1/auth/envoyx").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn forwarded_headers_from_an_untrusted_peer_are_refused() {
    let server = serve(r#""10.0.0.0/8""#, ORDERS).await;
    for path in ["/v1/auth", "/v1/auth/nginx", "/v1/auth/envoy/orders"] {
        let r = ask(server.listen, path, "/orders", "k1").await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert!(
            r.json()["detail"]
                .as_str()
                .unwrap()
                .contains("127.0.0.1 is not a trusted proxy"),
            "{}",
            r.body
        );
    }
    // Nothing was charged: trusted later, the key has its whole budget.
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    let r = ask(server.listen, "/v1/auth", "/orders", "k1").await;
    assert_eq!(r.header("ratelimit"), Some(r#""orders";r=2;t=60"#));
}

#[tokio::test]
async fn a_path_alias_of_a_limited_path_is_limited() {
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    for _ in 0..3 {
        let r = ask(server.listen, "/v1/auth", "/orders", "k1").await;
        assert_eq!(r.status, StatusCode::OK);
    }
    for alias in [
        "//orders",
        "/%6Frders",
        "/x/../orders?y",
        "/./orders/",
        "/ORDERS",
    ] {
        let r = ask(server.listen, "/v1/auth", alias, "k1").await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{alias}");
    }
    // nginx names the URI in `X-Original-URI`: the same path, the same limit.
    let r = get(
        server.listen,
        "/v1/auth/nginx",
        &[
            ("x-original-uri", "/orders/../orders"),
            ("x-original-method", "GET"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-api-key", "k1"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // ingress-nginx names it absolute, in `X-Original-URL`.
    let r = get(
        server.listen,
        "/v1/auth/nginx",
        &[
            ("x-original-url", "https://shop.example//orders?page=3"),
            ("x-original-method", "GET"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-api-key", "k1"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_request_the_door_cannot_read_is_a_located_400() {
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    // A client behind Traefik adding an `X-Original-URI` of its own to pick a cheaper path.
    let r = get(
        server.listen,
        "/v1/auth",
        &[
            ("x-forwarded-uri", "/orders"),
            ("x-original-uri", "/about"),
            ("x-forwarded-for", "203.0.113.7"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("x-original-uri: /about"), "{}", r.body);
    // No client address: every client would share the proxy's budget.
    let r = get(server.listen, "/v1/auth", &[("x-forwarded-uri", "/orders")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("X-Forwarded-For"), "{}", r.body);
    // A key header sent twice could be read either way upstream.
    let r = get(
        server.listen,
        "/v1/auth",
        &[
            ("x-forwarded-uri", "/orders"),
            ("x-forwarded-for", "203.0.113.7"),
            ("x-api-key", "k1"),
            ("x-api-key", "k2"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("two `x-api-key` headers"), "{}", r.body);
}

#[tokio::test]
async fn the_client_address_is_read_through_the_proxy() {
    let rule = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1m"
"#;
    let server = serve(r#""127.0.0.1""#, rule).await;
    let from = |ip: &'static str| async move {
        get(
            server.listen,
            "/v1/auth",
            &[("x-forwarded-uri", "/"), ("x-forwarded-for", ip)],
        )
        .await
        .status
    };
    assert_eq!(from("203.0.113.7").await, StatusCode::OK);
    assert_eq!(from("203.0.113.7").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(from("198.51.100.4").await, StatusCode::OK);
}

#[tokio::test]
async fn a_concurrency_rule_is_refused_on_this_door_by_name() {
    let rule = r#"
[[limit]]
name = "reports-in-flight"
match = { path = "/reports" }
key = ["ip"]
algorithm = "concurrency"
limit = 2
lease = "30s"
"#;
    let server = serve(r#""127.0.0.1""#, &format!("{rule}{ORDERS}")).await;
    let r = ask(server.listen, "/v1/auth", "/reports", "k1").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        r.body
            .contains("rule `reports-in-flight` is a concurrency limit"),
        "{}",
        r.body
    );
    // Paths it does not match are decided as usual.
    assert_eq!(
        ask(server.listen, "/v1/auth", "/orders", "k1").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_store_failure_follows_the_rules_failure_policy() {
    // A port nothing listens on: every store call fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let rules = format!(
        r#"
[store]
kind = "redis"
url = "{url}"
deadline = "100ms"

[[limit]]
name = "browse"
match = {{ path = "/browse" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "open"

[[limit]]
name = "pay"
match = {{ path = "/pay" }}
key = ["ip"]
algorithm = "fixed-window"
limit = 100
window = "1m"
on_store_failure = "closed"
"#
    );
    let server = serve(r#""127.0.0.1""#, &rules).await;
    let r = ask(server.listen, "/v1/auth", "/browse", "k1").await;
    assert_eq!(r.status, StatusCode::OK, "open: allowed: {}", r.body);
    for path in ["/v1/auth", "/v1/auth/nginx"] {
        let r = ask(server.listen, path, "/pay", "k1").await;
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "closed: {path}: {}",
            r.body
        );
        assert!(r.header("retry-after").is_some());
    }
}

// ---------------------------------------------------------------------------------------
// Real proxies

/// A temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratewarden-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // nginx's workers run as `nobody` under root: they must reach the directory.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A proxy process, killed when dropped however the test ends (a panic included).
struct Proxy {
    child: std::process::Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Proxy {
    fn spawn(command: &mut std::process::Command, addr: SocketAddr, log: PathBuf) -> Self {
        let stderr = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(stderr.try_clone().unwrap())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        Self { child, addr, log }
    }

    /// Waits until the proxy takes connections (polling the socket, never a clock).
    async fn ready(&mut self) {
        let up = common::eventually(|| async {
            tokio::net::TcpStream::connect(self.addr).await.is_ok()
        })
        .await;
        if !up {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("the proxy did not come up on {}:\n{log}", self.addr);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Debian path of a proxy's binary; `scripts/test` installs the package.
fn binary(path: &str, package: &str) -> PathBuf {
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{} is missing: `apt-get install -y {package}` (scripts/test does)",
        path.display()
    );
    path
}

/// A free port on 127.0.0.1 for a proxy that cannot report the one it took.
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// An upstream answering 200 `hello`, counting the requests that reach it.
async fn counted_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let addr = common::upstream(move |_request| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::from_static(b"hello")))
        }
    })
    .await;
    (addr, seen)
}

/// Through `proxy`, three requests of key `k1` pass with the RateLimit fields, the fourth
/// is a 429 with `Retry-After` and the fields, and the upstream never sees it.
async fn client_sees_the_contract(proxy: SocketAddr, upstream_seen: &AtomicUsize) {
    for remaining in [2, 1, 0] {
        let r = get(proxy, "/orders/7", &[("x-api-key", "k1")]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body, "hello");
        assert_eq!(r.header("ratelimit-policy"), Some(r#""orders";q=3;w=60"#));
        assert_eq!(
            r.header("ratelimit"),
            Some(format!(r#""orders";r={remaining};t=60"#).as_str())
        );
    }
    assert_eq!(upstream_seen.load(Ordering::SeqCst), 3);
    for alias in ["/orders/7", "//orders/7?x=1"] {
        let r = get(proxy, alias, &[("x-api-key", "k1")]).await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{alias}: {}",
            r.body
        );
        assert_eq!(r.header("retry-after"), Some("60"));
        assert_eq!(r.header("ratelimit-policy"), Some(r#""orders";q=3;w=60"#));
        assert_eq!(r.header("ratelimit"), Some(r#""orders";r=0;t=60"#));
        assert!(r.body.contains("quota-exceeded"), "{}", r.body);
    }
    assert_eq!(
        upstream_seen.load(Ordering::SeqCst),
        3,
        "a limited request went through"
    );
    // Another client's key has its own budget.
    let r = get(proxy, "/orders/7", &[("x-api-key", "k2")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(upstream_seen.load(Ordering::SeqCst), 4);
}

/// nginx's config for `auth_request` to `/v1/auth/nginx`: `examples/nginx/nginx.conf`, the
/// whole file the docs give, with the addresses filled in and its files in `dir` (nginx
/// runs unprivileged in the foreground here).
fn nginx_conf(
    dir: &Path,
    listen: SocketAddr,
    ratewarden: SocketAddr,
    upstream: SocketAddr,
) -> String {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nginx/nginx.conf");
    let example = std::fs::read_to_string(example).unwrap();
    let dir = dir.display();
    let replaced = example
        .replace("worker_processes auto;", "worker_processes 1;")
        .replace("server 127.0.0.1:8080;", &format!("server {ratewarden};"))
        .replace("server 127.0.0.1:3000;", &format!("server {upstream};"))
        .replace("listen 80;", &format!("listen {listen};"))
        .replace(
            "http {\n",
            &format!(
                "http {{\n    access_log off;\n    client_body_temp_path {dir}/body;\n    \
                 proxy_temp_path {dir}/proxy;\n    fastcgi_temp_path {dir}/fastcgi;\n    \
                 uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n"
            ),
        );
    for placed in [
        ratewarden.to_string(),
        upstream.to_string(),
        listen.to_string(),
    ] {
        assert!(
            replaced.contains(&placed),
            "the example changed: {placed} not placed"
        );
    }
    format!(
        "daemon off;\nmaster_process off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log info;\n{replaced}"
    )
}

#[tokio::test]
async fn nginx_auth_request_limits_in_front_of_an_upstream() {
    let nginx = binary("/usr/sbin/nginx", "nginx");
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("nginx");
    let listen = free_addr();
    let conf = scratch.path().join("nginx.conf");
    std::fs::write(
        &conf,
        nginx_conf(scratch.path(), listen, server.listen, upstream),
    )
    .unwrap();
    let mut proxy = Proxy::spawn(
        std::process::Command::new(nginx)
            .arg("-p")
            .arg(scratch.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(scratch.path().join("error.log")),
        listen,
        scratch.path().join("stderr.log"),
    );
    proxy.ready().await;
    client_sees_the_contract(listen, &seen).await;
}

/// Caddy's config: `forward_auth` to `/v1/auth` written out (as the docs give it), so the
/// RateLimit fields of an allowed answer reach the client's response; a refusal is passed
/// on to the client as it is.
fn caddyfile(listen: SocketAddr, ratewarden: SocketAddr, upstream: SocketAddr) -> String {
    format!(
        r#"{{
    admin off
    auto_https off
}}

http://{listen} {{
    reverse_proxy {ratewarden} {{
        method GET
        rewrite /v1/auth
        header_up X-Forwarded-Method {{method}}
        header_up X-Forwarded-Uri {{uri}}
        @allowed status 2xx
        handle_response @allowed {{
            # Caddy names the answer's headers as Go spells them (`Ratelimit-Policy`).
            header RateLimit-Policy {{http.reverse_proxy.header.Ratelimit-Policy}}
            header RateLimit {{http.reverse_proxy.header.Ratelimit}}
        }}
    }}
    reverse_proxy {upstream}
}}
"#
    )
}

/// The server on a rule set, with Caddy's `forward_auth` in front of a counting upstream,
/// as `docs/front-doors.md` configures it; each part lives as long as this.
struct Caddy {
    listen: SocketAddr,
    seen: Arc<AtomicUsize>,
    _proxy: Proxy,
    _scratch: Scratch,
    _server: Running,
}

impl Caddy {
    async fn start(rules: &str) -> Self {
        let caddy = binary("/usr/bin/caddy", "caddy");
        let server = serve(r#""127.0.0.1""#, rules).await;
        let (upstream, seen) = counted_upstream().await;
        let scratch = Scratch::new("caddy");
        let listen = free_addr();
        let conf = scratch.path().join("Caddyfile");
        std::fs::write(&conf, caddyfile(listen, server.listen, upstream)).unwrap();
        let mut proxy = Proxy::spawn(
            std::process::Command::new(caddy)
                .args(["run", "--adapter", "caddyfile", "--config"])
                .arg(&conf)
                .env("HOME", scratch.path())
                .env("XDG_DATA_HOME", scratch.path().join("data"))
                .env("XDG_CONFIG_HOME", scratch.path().join("config")),
            listen,
            scratch.path().join("caddy.log"),
        );
        proxy.ready().await;
        Self {
            listen,
            seen,
            _proxy: proxy,
            _scratch: scratch,
            _server: server,
        }
    }
}

#[tokio::test]
async fn caddy_forward_auth_limits_in_front_of_an_upstream() {
    let caddy = Caddy::start(ORDERS).await;
    client_sees_the_contract(caddy.listen, &caddy.seen).await;
}

/// HAProxy's config: `examples/haproxy/ratewarden.lua` (HAProxy's own HTTP client, no
/// other library) asks `/v1/auth` and leaves the answer in variables; the config refuses by
/// them and copies the RateLimit fields onto allowed responses, as the docs give it.
fn haproxy_cfg(listen: SocketAddr, ratewarden: SocketAddr, upstream: SocketAddr) -> String {
    let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/haproxy/ratewarden.lua");
    let lua = lua.display();
    format!(
        r#"global
    lua-load {lua}

defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend shop
    bind {listen}
    http-request lua.ratewarden http://{ratewarden}/v1/auth x-api-key,x-tenant
    http-request return status 429 content-type application/problem+json lf-string "%[var(txn.ratewarden_body)]" hdr Retry-After "%[var(txn.ratewarden_retry_after)]" hdr RateLimit-Policy "%[var(txn.ratewarden_policy)]" hdr RateLimit "%[var(txn.ratewarden_ratelimit)]" hdr Cache-Control no-store if {{ var(txn.ratewarden_status) -m int 429 }}
    http-request return status 503 content-type application/problem+json lf-string "%[var(txn.ratewarden_body)]" hdr Retry-After "%[var(txn.ratewarden_retry_after)]" unless {{ var(txn.ratewarden_status) -m int 200 }}
    http-response set-header RateLimit-Policy "%[var(txn.ratewarden_policy)]" if {{ var(txn.ratewarden_policy) -m found }}
    http-response set-header RateLimit "%[var(txn.ratewarden_ratelimit)]" if {{ var(txn.ratewarden_ratelimit) -m found }}
    default_backend app

backend app
    server app1 {upstream}
"#
    )
}

/// Starts HAProxy in the foreground with `cfg`.
async fn haproxy(scratch: &Scratch, listen: SocketAddr, cfg: String) -> Proxy {
    let haproxy = binary("/usr/sbin/haproxy", "haproxy");
    let conf = scratch.path().join("haproxy.cfg");
    std::fs::write(&conf, cfg).unwrap();
    let mut proxy = Proxy::spawn(
        std::process::Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&conf),
        listen,
        scratch.path().join("haproxy.log"),
    );
    proxy.ready().await;
    proxy
}

#[tokio::test]
async fn haproxy_lua_forward_auth_limits_in_front_of_an_upstream() {
    let server = serve(r#""127.0.0.1""#, ORDERS).await;
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("haproxy");
    let listen = free_addr();
    let _proxy = haproxy(
        &scratch,
        listen,
        haproxy_cfg(listen, server.listen, upstream),
    )
    .await;
    client_sees_the_contract(listen, &seen).await;
    // A path no rule matches passes with nothing added.
    let r = get(listen, "/about", &[("x-api-key", "k1")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("ratelimit"), None);
    assert_eq!(r.header("ratelimit-policy"), None);
}

#[tokio::test]
async fn haproxy_refuses_when_ratewarden_cannot_be_asked() {
    // A port nothing listens on: a limiter that cannot be asked is no pass.
    let closed = free_addr();
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("haproxy");
    let listen = free_addr();
    let _proxy = haproxy(&scratch, listen, haproxy_cfg(listen, closed, upstream)).await;
    let r = get(listen, "/orders/7", &[("x-api-key", "k1")]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.json()["status"], 503);
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the upstream was reached");
}

// ---------------------------------------------------------------------------------------
// The client's own forwarding headers behind a real proxy

/// Three `POST /login`s a minute per client address.
const LOGIN: &str = r#"
[[limit]]
name = "login"
match = { method = "POST", path = "/login" }
key = ["ip"]
algorithm = "fixed-window"
limit = 3
window = "1m"
"#;

/// Forwarding headers a client writes of itself, the `N`th of twenty: each names another
/// address, or none, in a header the proxy passes through, or in the one it appends to.
fn spoofed(n: usize) -> String {
    match n % 5 {
        0 => format!("Forwarded: for=198.51.100.{n}\r\n"),
        1 => format!("X-Forwarded-For: 198.51.100.{n}\r\nX-Real-IP: 198.51.100.{n}\r\n"),
        2 => format!("True-Client-IP: 198.51.100.{n}\r\nCF-Connecting-IP: 198.51.100.{n}\r\n"),
        3 => "Forwarded: for=unknown\r\n".to_owned(),
        _ => format!(
            "Forwarded: for=\"[2001:db8::{n}]\";proto=https\r\nX-Forwarded-For: unknown\r\n"
        ),
    }
}

/// `POST /login` to `addr` from the loopback address `from` (not a trusted proxy: only
/// 127.0.0.1 is), with `headers`; the status.
async fn login_from(from: [u8; 4], addr: SocketAddr, headers: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("a loopback address of 127.0.0.0/8");
    let mut stream = socket.connect(addr).await.unwrap();
    let head = format!(
        "POST /login HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n{headers}Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer:?}"))
}

/// Behind `proxy`, twenty logins of one client writing its own forwarding headers reach
/// the upstream three times, and another client still has its own three.
async fn only_the_proxy_names_the_client(proxy: SocketAddr, upstream_seen: &AtomicUsize) {
    let mut passed = 0;
    for n in 0..20 {
        let status = login_from([127, 0, 0, 2], proxy, &spoofed(n)).await;
        assert!(
            [200, 429].contains(&status),
            "{}: {status}",
            spoofed(n).trim()
        );
        passed += usize::from(status == 200);
    }
    assert_eq!(
        (passed, upstream_seen.load(Ordering::SeqCst)),
        (3, 3),
        "a client's own forwarding headers gave it budgets of its own"
    );
    assert_eq!(login_from([127, 0, 0, 3], proxy, "").await, 200);
    assert_eq!(upstream_seen.load(Ordering::SeqCst), 4);
}

/// Starts nginx with `conf(scratch directory)`.
async fn nginx(scratch: &Scratch, listen: SocketAddr, conf: String) -> Proxy {
    let nginx = binary("/usr/sbin/nginx", "nginx");
    let path = scratch.path().join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let mut proxy = Proxy::spawn(
        std::process::Command::new(nginx)
            .arg("-p")
            .arg(scratch.path())
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(scratch.path().join("error.log")),
        listen,
        scratch.path().join("stderr.log"),
    );
    proxy.ready().await;
    proxy
}

#[test]
fn the_docs_show_the_nginx_conf_the_tests_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = std::fs::read_to_string(root.join("examples/nginx/nginx.conf")).unwrap();
    let docs = std::fs::read_to_string(root.join("docs/front-doors.md")).unwrap();
    assert!(
        docs.contains(&format!("```nginx\n{example}```")),
        "docs/front-doors.md must show examples/nginx/nginx.conf whole"
    );
}

#[tokio::test]
async fn behind_nginx_a_refused_proxy_is_no_quota_exceeded() {
    // Ratewarden trusts another address than nginx's: every question is refused with 403,
    // which the example's `error_page 403` must not show clients as a 429.
    let server = serve(r#""10.9.9.9""#, ORDERS).await;
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("nginx");
    let listen = free_addr();
    let conf = nginx_conf(scratch.path(), listen, server.listen, upstream);
    let _proxy = nginx(&scratch, listen, conf).await;
    let r = get(listen, "/orders/7", &[("x-api-key", "k1")]).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.body);
    assert!(!r.body.contains("quota-exceeded"), "{}", r.body);
    assert_eq!(seen.load(Ordering::SeqCst), 0, "nothing reached the app");
}

#[tokio::test]
async fn behind_nginx_auth_request_a_client_s_own_forwarding_headers_are_not_its_address() {
    let server = serve(r#""127.0.0.1""#, LOGIN).await;
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("nginx");
    let listen = free_addr();
    let conf = nginx_conf(scratch.path(), listen, server.listen, upstream);
    let _proxy = nginx(&scratch, listen, conf).await;
    only_the_proxy_names_the_client(listen, &seen).await;
}

#[tokio::test]
async fn behind_caddy_forward_auth_a_client_s_own_forwarding_headers_are_not_its_address() {
    let caddy = Caddy::start(LOGIN).await;
    only_the_proxy_names_the_client(caddy.listen, &caddy.seen).await;
}

/// HAProxy's Lua action names the client in `X-Forwarded-For` and copies only the headers
/// it is told to: a regression guard, as no forwarding header of the client's reaches us.
#[tokio::test]
async fn behind_haproxy_lua_a_client_s_own_forwarding_headers_are_not_its_address() {
    let server = serve(r#""127.0.0.1""#, LOGIN).await;
    let (upstream, seen) = counted_upstream().await;
    let scratch = Scratch::new("haproxy");
    let listen = free_addr();
    let _proxy = haproxy(
        &scratch,
        listen,
        haproxy_cfg(listen, server.listen, upstream),
    )
    .await;
    only_the_proxy_names_the_client(listen, &seen).await;
}

/// nginx in front of the gateway, as `docs/front-doors.md` gives it: `X-Forwarded-For`
/// appended to, the client's other headers passed through untouched.
fn nginx_before_gateway(dir: &Path, listen: SocketAddr, gateway: SocketAddr) -> String {
    let dir = dir.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    server {{
        listen {listen};
        location / {{
            proxy_pass http://{gateway};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"#
    )
}

#[tokio::test]
async fn behind_nginx_the_gateway_keys_and_forwards_the_client_nginx_saw() {
    let seen = Arc::new(AtomicUsize::new(0));
    let told = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (counter, heard) = (Arc::clone(&seen), Arc::clone(&told));
    let upstream = common::upstream(move |request: http::Request<hyper::body::Incoming>| {
        counter.fetch_add(1, Ordering::SeqCst);
        // Every line naming the client, as the upstream reads them.
        let mut lines: Vec<String> = request
            .headers()
            .iter()
            .filter(|(name, _)| {
                [
                    "forwarded",
                    "x-forwarded-for",
                    "x-real-ip",
                    "true-client-ip",
                    "cf-connecting-ip",
                ]
                .contains(&name.as_str())
            })
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap()))
            .collect();
        lines.sort();
        heard.lock().unwrap().push(lines.join("\n"));
        async { Response::new(Full::new(Bytes::from_static(b"hello"))) }
    })
    .await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\nupstream = \"http://{upstream}\"\n\
         trusted_proxies = [\"127.0.0.1\"]\n{LOGIN}"
    );
    let server = common::start_at(&toml, T0).await;
    let scratch = Scratch::new("nginx");
    let listen = free_addr();
    let conf = nginx_before_gateway(scratch.path(), listen, server.listen);
    let _proxy = nginx(&scratch, listen, conf).await;
    only_the_proxy_names_the_client(listen, &seen).await;
    // The upstream is told the client that was keyed, and nothing the client wrote of
    // itself as if a proxy had.
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 4);
    for lines in told.iter() {
        for line in lines.lines() {
            assert!(
                !line.contains("198.51.100.")
                    && !line.contains("2001:db8::")
                    && !line.contains("unknown")
                    || line.starts_with("x-forwarded-for: "),
                "the upstream was told a client's own header: {lines}"
            );
        }
    }
    assert!(
        told[0].contains("forwarded: for=127.0.0.2, for=127.0.0.1"),
        "{}",
        told[0]
    );
}
