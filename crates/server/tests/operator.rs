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
    let running = common::start(common::options(RULES, Arc::new(ManualClock::new(T0)))).await;
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
    let running = common::start(common::options(RULES, Arc::new(ManualClock::new(T0)))).await;
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
    let running = common::start(common::options(&toml, Arc::new(ManualClock::new(T0)))).await;
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
