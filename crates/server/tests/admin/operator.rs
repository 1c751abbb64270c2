//! The operator's view on the admin listener, over real sockets: top offenders (JSON and
//! the Prometheus gauge), explain against the live state, a key's state and reset, the
//! dashboard's page and data, a failed reload's located errors; and `ratewarden explain`.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use ratewarden_core::ManualClock;
use ratewarden_policy::api_key_digest;
use ratewarden_server::serve::Options;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_700_000_000_000_000_000;

const RULES: &str = r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 2
window = "1m"

[[limit]]
name = "global"
key = ["global"]
algorithm = "token-bucket"
rate = "1/s"
burst = 1
mode = "shadow"

[[limit]]
name = "login"
match = { method = "POST", path = "/login" }
key = ["ip"]
algorithm = "sliding-log"
limit = 1
window = "1m"
"#;

#[tokio::test]
async fn top_explain_keys_and_reset_on_the_admin_listener() {
    let running = common::start_at(RULES, T0).await;
    let (api, admin) = (running.listen, running.admin.unwrap());
    let check = |key: &'static str| async move {
        let body = format!(r#"{{"ip": "203.0.113.7", "api_key": "{key}"}}"#);
        common::post(api, "/v1/check", &body).await.json()["allowed"] == true
    };
    let sent: Vec<bool> = futures_of(6, || check("secret-a")).await;
    assert_eq!(sent, [true, true, false, false, false, false]);
    check("secret-b").await;

    // Top offenders: the digest, never the key.
    let top = common::get(admin, "/v1/top?rule=per-key", &[]).await;
    assert_eq!(top.status, StatusCode::OK, "{}", top.body);
    assert!(!top.body.contains("secret-a"), "{}", top.body);
    let top = top.json();
    let digest = api_key_digest("secret-a");
    assert_eq!(top["limited"]["keys"][0]["key"], digest.as_str());
    assert_eq!(top["limited"]["keys"][0]["count"], 4.0);
    assert_eq!(top["limited"]["error_bound"], 0.04);
    // The shadow rule would have rejected all but the first request.
    let shadow = common::get(admin, "/v1/top?rule=global", &[]).await.json();
    assert_eq!(shadow["shadow"]["keys"][0]["key"], "*");
    assert_eq!(shadow["shadow"]["keys"][0]["count"], 6.0);
    let all = common::get(admin, "/v1/top", &[]).await.json();
    assert_eq!(all["rules"].as_array().unwrap().len(), 3);
    let unknown = common::get(admin, "/v1/top?rule=per-kye", &[]).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(
        unknown.body.contains("per-key, global, login"),
        "{}",
        unknown.body
    );

    // The Prometheus gauge: the top few, by rule and kind.
    let metrics = common::get(admin, "/metrics", &[]).await.body;
    let line = format!(
        "ratewarden_top_offender{{rule=\"per-key\",kind=\"limited\",rank=\"1\",key=\"{digest}\"}} 4.0"
    );
    assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    assert!(!metrics.contains("secret-a"));

    // Explain against the live state: per-key is spent, login does not match.
    let explained = common::post(
        admin,
        "/v1/explain",
        r#"{"ip": "203.0.113.7", "api_key": "secret-a"}"#,
    )
    .await;
    assert_eq!(explained.status, StatusCode::OK, "{}", explained.body);
    let explained = explained.json();
    assert_eq!(explained["allowed"], false);
    let rules = explained["rules"].as_array().unwrap();
    assert_eq!(rules[0]["rule"], "per-key");
    assert_eq!(rules[0]["says_no"], true);
    assert_eq!(rules[0]["state"]["remaining"], 0);
    // The window is aligned to the clock: T0 is 20 s into its minute.
    assert_eq!(rules[0]["decision"], "reject (retry after 40s)");
    assert_eq!(rules[1]["enforced"], false);
    assert_eq!(rules[2]["matched"], false);
    assert_eq!(rules[2]["field"], "method");
    // Explaining charged nothing: the shadow rule's count did not move.
    let shadow = common::get(admin, "/v1/top?rule=global", &[]).await.json();
    assert_eq!(shadow["shadow"]["keys"][0]["count"], 6.0);

    // A key's state, then its reset (by the parts /v1/top showed).
    let path = format!("/v1/keys?rule=per-key&key={}", digest.replace(':', "%3A"));
    let state = common::get(admin, &path, &[]).await;
    assert_eq!(state.status, StatusCode::OK, "{}", state.body);
    let state = state.json();
    assert_eq!(
        (state["limited"].clone(), state["remaining"].clone()),
        (true.into(), 0.into())
    );
    let body = format!(r#"{{"rule": "per-key", "key": "{digest}"}}"#);
    let reset = common::post(admin, "/v1/keys/reset", &body).await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.body);
    assert_eq!(reset.json()["cleared"], true);
    let state = common::get(admin, &path, &[]).await.json();
    assert_eq!(state["remaining"], 1, "{state}");
    assert!(check("secret-a").await, "the customer is unblocked");

    // Bad asks get a clear answer, never a panic.
    let missing = common::get(admin, "/v1/keys?rule=per-key", &[]).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert!(missing.body.contains("`key`"), "{}", missing.body);
    let bad = common::post(admin, "/v1/explain", r#"{"ip": "nowhere"}"#).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.contains("`ip`"), "{}", bad.body);
    let get_reset = common::get(admin, "/v1/keys/reset", &[]).await;
    assert_eq!(get_reset.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// Runs `f` `n` times, one after the other.
async fn futures_of<F: std::future::Future<Output = bool>>(
    n: usize,
    mut f: impl FnMut() -> F,
) -> Vec<bool> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(f().await);
    }
    out
}

#[tokio::test]
async fn a_reset_from_another_site_is_refused() {
    let running = common::start_at(RULES, T0).await;
    let admin = running.admin.unwrap();
    let body = r#"{"rule": "per-key", "key": "x"}"#;
    // A form post (no JSON type): what a page may send without asking.
    let plain = common::send(
        Request::post(format!("http://{admin}/v1/keys/reset"))
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(body)))
            .unwrap(),
    )
    .await;
    assert_eq!(
        plain.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        plain.body
    );
    // A page whose name was rebound to this address: its name is in `Host`.
    let rebound = common::get(admin, "/v1/dashboard", &[("host", "evil.example:9090")]).await;
    assert_eq!(rebound.status, StatusCode::FORBIDDEN, "{}", rebound.body);
    let page = common::get(admin, "/", &[("host", "evil.example")]).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_dashboard_serves_its_page_and_shows_a_failed_reloads_errors() {
    let dir = std::env::temp_dir().join(format!("ratewarden-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    std::fs::write(&path, RULES).unwrap();
    let running = common::start(Options {
        config_path: Some(path.clone()),
        ..common::options(RULES, Arc::new(ManualClock::new(T0)))
    })
    .await;
    let admin = running.admin.unwrap();
    let page = common::get(admin, "/", &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(page
        .header("content-security-policy")
        .unwrap()
        .contains("script-src 'self'"));
    assert!(page.body.contains("/dashboard.js"));
    let script = common::get(admin, "/dashboard.js", &[]).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(script
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));

    let data = common::get(admin, "/v1/dashboard", &[]).await.json();
    assert_eq!(data["config_version"], 1);
    let names: Vec<&str> = data["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["per-key", "global", "login"]);
    assert_eq!(data["rules"][1]["mode"], "shadow");
    assert_eq!(data["rules"][0]["algorithm"], "fixed-window 2 per 1m");
    assert_eq!(data["store"]["kind"], "memory");
    assert!(data["last_reload"].is_null());

    // A bad file: refused, with its located errors on the dashboard.
    std::fs::write(&path, RULES.replace("limit = 2", "limit = -2")).unwrap();
    let refused = common::post(admin, "/reload", "{}").await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let data = common::get(admin, "/v1/dashboard", &[]).await.json();
    let reload = &data["last_reload"];
    assert_eq!(reload["ok"], false, "{data}");
    assert_eq!(reload["config_version"], 1);
    let error = reload["errors"][0].as_str().unwrap();
    assert!(
        error.contains("rules.toml") && error.contains("per-key"),
        "{error}"
    );
    // A good one clears it.
    std::fs::write(&path, RULES).unwrap();
    assert_eq!(
        common::post(admin, "/reload", "{}").await.status,
        StatusCode::OK
    );
    let data = common::get(admin, "/v1/dashboard", &[]).await.json();
    assert_eq!(data["last_reload"]["ok"], true);
    assert_eq!(data["config_version"], 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_explain_command_prints_every_rule_and_why() {
    let dir = std::env::temp_dir().join(format!("ratewarden-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    std::fs::write(&path, RULES).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
            .arg("explain")
            .arg("--config")
            .arg(&path)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "--request",
        r#"{"ip": "203.0.113.7", "method": "GET", "path": "/"}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "client 203.0.113.7, rules version 1: the request would be allowed",
        "per-key (fixed-window 2 per 1m; enforce)",
        "~client|203.0.113.7/32; cost 1",
        "global (token-bucket 1/s, burst 1; shadow)",
        "  matched; key global@",
        "  would allow, but does not enforce (shadow or outside its rollout)",
        "  not matched: `method`: the rule takes POST, the request is GET",
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    let out = run(&[
        "--json",
        "--request",
        r#"{"api_key": "k1", "method": "POST", "path": "/login"}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["client"], "127.0.0.1");
    assert_eq!(
        json["rules"][0]["key"].as_str().unwrap().split('|').nth(1),
        Some(api_key_digest("k1").as_str())
    );
    assert_eq!(json["rules"][2]["state"]["remaining"], 0);
    // A bad request names its field; a bad config its errors.
    let out = run(&["--request", r#"{"ip": "x"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--request: `ip` must be"),
        "{out:?}"
    );
    let out = run(&["--request", "{"]);
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_reset_clears_the_key_in_redis_and_in_the_hybrid_bucket() {
    let redis = ratewarden_redis::testing::Server::start();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
deadline = "2s"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 2
window = "1h"
local_first = true
"#,
        url = redis.url()
    );
    let running = common::start_at(&toml, T0).await;
    let (api, admin) = (running.listen, running.admin.unwrap());
    let check = || async move {
        let body = r#"{"ip": "203.0.113.7", "api_key": "customer"}"#;
        common::post(api, "/v1/check", body).await.json()["allowed"] == true
    };
    assert_eq!(futures_of(4, check).await, [true, true, false, false]);
    let digest = api_key_digest("customer");
    let path = format!("/v1/keys?rule=per-key&key={}", digest.replace(':', "%3A"));
    let state = common::get(admin, &path, &[]).await.json();
    assert_eq!(state["limited"], true, "{state}");
    let stored = state["stored_key"].as_str().unwrap().to_owned();
    // Its Redis key: the stored key with the parts as its hash tag.
    let (rule, parts) = stored.split_once('|').unwrap();
    let prefix = ratewarden_core::shared_store::KEY_PREFIX;
    let redis_key = format!("{prefix}{rule}|{{{parts}}}");
    assert_eq!(
        redis.cli(&["EXISTS", &redis_key]).trim(),
        "1",
        "{redis_key}"
    );
    let body = format!(r#"{{"rule": "per-key", "key": "{digest}"}}"#);
    let reset = common::post(admin, "/v1/keys/reset", &body).await.json();
    assert_eq!(reset["cleared"], true, "{reset}");
    // Gone from Redis...
    assert_eq!(
        redis.cli(&["EXISTS", &redis_key]).trim(),
        "0",
        "{redis_key}"
    );
    // ...and from this process's own bucket, which would refuse the key without asking.
    assert_eq!(futures_of(3, check).await, [true, true, false]);
}

/// Sends `raw` (a whole HTTP/1.1 request) to `addr` and returns the status of its answer.
async fn raw_status(addr: std::net::SocketAddr, raw: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(raw.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).await.unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

#[tokio::test]
async fn every_admin_route_refuses_a_rebound_host() {
    let running = common::start_at(RULES, T0).await;
    let admin = running.admin.unwrap();
    // A page under a name rebound to this address reads it as its own origin: `/metrics`
    // carries top offenders (addresses, tenants), the probes and `/reload` answer too.
    for path in [
        "/metrics",
        "/live",
        "/ready",
        "/v1/top",
        "/v1/dashboard",
        "/",
        "/nope",
    ] {
        for host in [
            "evil.example",
            "evil.example:9090",
            "127.0.0.1.evil.example",
        ] {
            let rebound = common::get(admin, path, &[("host", host)]).await;
            assert_eq!(
                rebound.status,
                StatusCode::FORBIDDEN,
                "{path} with Host {host}: {}",
                rebound.body
            );
            assert!(
                rebound.body.contains(host.split(':').next().unwrap()),
                "{}",
                rebound.body
            );
        }
    }
    let reload = common::send(
        Request::post(format!("http://{admin}/reload"))
            .header("host", "evil.example")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from("{}")))
            .unwrap(),
    )
    .await;
    assert_eq!(reload.status, StatusCode::FORBIDDEN, "{}", reload.body);
    // An absolute-form target names its host too, and a second `Host` is refused.
    let absolute = format!(
        "GET http://evil.example/metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_status(admin, &absolute).await, 403);
    let twice = format!(
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_status(admin, &twice).await, 400);
    // Addresses and localhost are answered.
    let port = admin.port();
    for host in [
        admin.to_string(),
        format!("localhost:{port}"),
        "127.0.0.1".to_owned(),
    ] {
        let metrics = common::get(admin, "/metrics", &[("host", host.as_str())]).await;
        assert_eq!(
            metrics.status,
            StatusCode::OK,
            "Host {host}: {}",
            metrics.body
        );
    }
}

#[tokio::test]
async fn admin_hosts_names_the_listener_may_be_reached_by() {
    let toml = RULES.replace(
        "admin = \"127.0.0.1:0\"",
        "admin = \"127.0.0.1:0\"\nadmin_hosts = [\"ratewarden-admin.internal\"]",
    );
    let running = common::start_at(&toml, T0).await;
    let admin = running.admin.unwrap();
    let named = common::get(
        admin,
        "/metrics",
        &[("host", "Ratewarden-Admin.internal:9090")],
    )
    .await;
    assert_eq!(named.status, StatusCode::OK, "{}", named.body);
    let other = common::get(admin, "/metrics", &[("host", "admin.internal")]).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.body);
    assert!(other.body.contains("admin_hosts"), "{}", other.body);
}

const TOKEN: &str = "0123456789abcdef-operator";

/// `RULES` with an admin token read from a file in `dir`.
fn with_token(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let file = dir.join("admin-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let toml = RULES.replace(
        "admin = \"127.0.0.1:0\"",
        &format!(
            "admin = \"127.0.0.1:0\"\nadmin_token_file = {:?}",
            file.display().to_string()
        ),
    );
    (toml, file)
}

/// `method` `path` on `admin`, with `token` as a bearer token if given.
async fn ask(
    admin: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> common::Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{admin}{path}"))
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    common::send(
        request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn with_a_token_every_admin_route_with_data_or_effect_takes_it() {
    let dir = std::env::temp_dir().join(format!("ratewarden-admin-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (toml, file) = with_token(&dir);
    let path = dir.join("rules.toml");
    std::fs::write(&path, &toml).unwrap();
    let running = common::start(Options {
        config_path: Some(path.clone()),
        ..common::options(&toml, Arc::new(ManualClock::new(T0)))
    })
    .await;
    let admin = running.admin.unwrap();
    let reset = r#"{"rule": "per-key", "key": "key:0123456789abcdef"}"#;
    let guarded = [
        ("POST", "/v1/keys/reset", reset),
        ("POST", "/reload", "{}"),
        ("POST", "/v1/explain", r#"{"ip": "203.0.113.7"}"#),
        ("GET", "/metrics", ""),
        ("GET", "/v1/dashboard", ""),
        ("GET", "/v1/top", ""),
        ("GET", "/v1/keys?rule=per-key&key=x", ""),
    ];
    for (method, route, body) in guarded {
        for token in [None, Some("0123456789abcdef-operatoR"), Some("")] {
            let refused = ask(admin, method, route, token, body).await;
            assert_eq!(
                refused.status,
                StatusCode::UNAUTHORIZED,
                "{method} {route} with {token:?}: {}",
                refused.body
            );
            assert_eq!(
                refused.header("www-authenticate"),
                Some("Bearer realm=\"ratewarden admin\"")
            );
            assert!(!refused.body.contains(TOKEN));
        }
        let allowed = ask(admin, method, route, Some(TOKEN), body).await;
        assert_ne!(
            allowed.status,
            StatusCode::UNAUTHORIZED,
            "{method} {route}: {}",
            allowed.body
        );
        assert!(
            allowed.status.is_success() || route.starts_with("/v1/keys?"),
            "{method} {route}: {}",
            allowed.body
        );
    }
    // The probes and the page's own files hold no data: open to whoever passes the Host check.
    for route in ["/live", "/ready", "/", "/dashboard.js", "/dashboard.css"] {
        assert_eq!(
            ask(admin, "GET", route, None, "").await.status,
            StatusCode::OK,
            "{route}"
        );
    }
    // The scheme is case-insensitive, as RFC 9110 says.
    let lower = common::get(
        admin,
        "/metrics",
        &[("authorization", &format!("bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(lower.status, StatusCode::OK);

    // A new token goes into force with a reload; the old one stops working.
    let rotated = "fedcba9876543210-rotated";
    std::fs::write(&file, rotated).unwrap();
    assert_eq!(
        ask(admin, "POST", "/reload", Some(TOKEN), "{}")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        ask(admin, "GET", "/metrics", Some(TOKEN), "").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        ask(admin, "GET", "/metrics", Some(rotated), "")
            .await
            .status,
        StatusCode::OK
    );
    // A token file gone at a reload: refused where it is named, the token in force stays.
    std::fs::remove_file(&file).unwrap();
    let refused = ask(admin, "POST", "/reload", Some(rotated), "{}").await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("admin_token_file"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("rules.toml:"),
        "located: {}",
        refused.body
    );
    assert_eq!(
        ask(admin, "GET", "/metrics", Some(rotated), "")
            .await
            .status,
        StatusCode::OK
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_config_built_in_code_cannot_start_an_open_admin_listener_off_loopback() {
    let mut options = common::options(RULES, Arc::new(ManualClock::new(T0)));
    // TEST-NET-1: never bound, the check comes first.
    options.config.server.admin = Some("192.0.2.1:0".parse().unwrap());
    let error = match ratewarden_server::serve::start(options).await {
        Ok(_) => panic!("an open admin listener off loopback started"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("admin_token_file"), "{error}");
    assert!(error.contains("admin_insecure"), "{error}");
}

#[tokio::test]
async fn reset_and_retry_times_read_in_human_units_beside_the_integers() {
    let toml = "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n[[limit]]\nname = \"hourly\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1h\"\n";
    // 800 s into its hour, and a few odd nanoseconds: no unit divides the reset.
    let clock = ManualClock::new(T0 + 18_658_614_785);
    let running = common::start_on(toml, Arc::new(clock)).await;
    let (api, admin) = (running.listen, running.admin.unwrap());
    let body = r#"{"ip": "203.0.113.7"}"#;
    assert_eq!(
        common::post(api, "/v1/check", body).await.json()["allowed"],
        true
    );

    let state = common::get(admin, "/v1/keys?rule=hourly&key=203.0.113.7%2F32", &[]).await;
    assert_eq!(state.status, StatusCode::OK, "{}", state.body);
    let state = state.json();
    assert_eq!(state["reset_after_ms"], 2_781_342, "{state}");
    assert_eq!(state["reset_after"], "46m21.342s", "{state}");
    assert_eq!(state["retry_after"], "46m21.342s", "{state}");
    assert_eq!(state["retry_after_ms"], 2_781_342, "{state}");

    let explained = common::post(admin, "/v1/explain", body).await.json();
    let shown = &explained["rules"][0]["state"];
    assert_eq!(shown["reset_after"], "46m21.342s", "{explained}");
    assert_eq!(shown["reset_after_ms"], 2_781_342, "{explained}");
}

#[test]
fn the_explain_command_says_the_reset_in_human_units() {
    let dir = std::env::temp_dir().join(format!("ratewarden-explain-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    // The real clock: the window's reset is some odd number of nanoseconds away.
    std::fs::write(
        &path,
        "[[limit]]\nname = \"hourly\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1h\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["explain", "--config"])
        .arg(&path)
        .args(["--request", r#"{"ip": "203.0.113.7"}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let reset = text
        .lines()
        .find_map(|l| l.split_once("fully reset in ").map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| panic!("no reset in:\n{text}"));
    assert!(
        !reset.ends_with("ns") && !reset.ends_with("us"),
        "a reset an hour off in human units, not `{reset}`"
    );
    assert!(
        reset
            .chars()
            .all(|c| c.is_ascii_digit() || "hms.".contains(c)),
        "{reset}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
