//! `ratewarden serve`'s logs as an operator's pipe or file sees them: no colour codes, and
//! no line an attacker wrote (issues 11 and 12).

use std::ffi::OsStr;
use std::path::PathBuf;

#[path = "../common/mod.rs"]
mod common;

use common::Served;

/// A config file in a folder of its own, removed with it.
struct Config {
    dir: PathBuf,
    file: PathBuf,
}

impl Config {
    fn new(name: &str, toml: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("ratewarden-logs-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.toml");
        std::fs::write(&file, toml).unwrap();
        Self { dir, file }
    }

    /// `serve` on this file with one worker.
    fn serve(&self) -> [&OsStr; 5] {
        [
            OsStr::new("serve"),
            OsStr::new("--config"),
            self.file.as_os_str(),
            OsStr::new("--workers"),
            OsStr::new("1"),
        ]
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_and_escape_forged_lines() {
    let config = Config::new(
        "pipe",
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n\n[[limit]]\nname = \"watch\"\nkey = [\"header:x-user\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\nmode = \"shadow\"\n",
    );
    let mut child = Served::spawn(config.serve()).await;
    // The shadow rule logs "would have rejected" with the key, which holds the header.
    let body = r#"{"headers": {"x-user": "evil\r\nERROR forged: admin logged in\u001b[31m"}}"#;
    for _ in 0..2 {
        common::post(child.listen, "/v1/check", body).await;
    }
    let logged = loop {
        let line = child.lines.recv().await.expect("the shadow rule logs");
        if line.contains("would have rejected") {
            break line;
        }
    };
    let log = child.log();
    let seen: Vec<&str> = log.lines().collect();
    assert!(logged.contains(r"evil\r\nERROR forged"), "{logged}");
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "no escape sequence reaches a pipe: {seen:#?}"
    );
    assert!(
        seen.iter().all(|l| !l.starts_with("ERROR forged")),
        "{seen:#?}"
    );
}

/// Waits for a log line containing `needle`, for up to 10 s.
async fn line_with(child: &mut Served, needle: &str) -> String {
    let wait = async {
        loop {
            let line = child.lines.recv().await.expect("the server logs");
            if line.contains(needle) {
                return line;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no log line with `{needle}`"))
}

#[tokio::test]
async fn logs_read_plainly_name_the_store_and_say_each_thing_once() {
    // Nothing listens on port 1: every call to the store fails, fast.
    let toml = "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n\
        [store]\nkind = \"redis\"\nurl = \"redis://app:hunter2@127.0.0.1:1/0\"\n\n\
        [[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1m\"\n\n\
        [[limit]]\nname = \"login\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1m\"\non_store_failure = \"local\"\nlocal_divide_by = 3\n";
    let config = Config::new("plain", toml);
    let mut child = Served::spawn(config.serve()).await;
    let admin = child.admin.unwrap();

    // The proxy's 403 may be shown as another answer (nginx's `error_page 403`): the log
    // says why, once, however many requests come.
    for _ in 0..3 {
        let refused = common::get(child.listen, "/v1/auth/nginx", &[]).await;
        assert_eq!(refused.status, http::StatusCode::FORBIDDEN);
    }
    let untrusted = line_with(&mut child, "refused a proxy not in").await;
    assert!(untrusted.contains("door=\"/v1/auth/nginx\""), "{untrusted}");

    // A store failure names its policy as the file spells it.
    common::post(child.listen, "/v1/check", r#"{"ip": "203.0.113.7"}"#).await;
    let failed = line_with(&mut child, "store failed").await;

    // A reload without Envoy configs does not mention them.
    std::fs::write(&config.file, "[server]\nlisten = 1\n").unwrap();
    let reload = common::post(admin, "/reload", "").await;
    assert_eq!(reload.status.as_u16(), 422, "{}", reload.body);
    let rejected = line_with(&mut child, "reload rejected").await;
    assert!(!rejected.contains("Envoy"), "{rejected}");

    let log = child.log();
    let started = log
        .lines()
        .find(|l| l.contains("ratewarden serving"))
        .expect("a start line");
    for part in [
        "api=off",
        "grpc=off",
        "store=redis redis://127.0.0.1:1/0",
        "rules=2",
    ] {
        assert!(started.contains(part), "no `{part}` in: {started}");
    }
    for line in log.lines() {
        assert!(!line.contains("hunter2"), "a credential logged: {line}");
        assert!(
            !line.contains("Some(") && !line.contains("=None"),
            "a Rust debug form: {line}"
        );
    }
    assert!(
        log.contains("`[server] trusted_proxies` is empty"),
        "a warning at start:\n{log}"
    );
    assert_eq!(
        log.matches("refused a proxy not in").count(),
        1,
        "once per period:\n{log}"
    );
    assert!(
        failed.contains("policy=open") || failed.contains("policy=local / 3"),
        "{failed}"
    );
}

#[tokio::test]
async fn a_key_reset_is_logged_once() {
    let config = Config::new(
        "reset",
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\n[[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1m\"\n",
    );
    let mut child = Served::spawn(config.serve()).await;
    common::post(child.listen, "/v1/check", r#"{"ip": "203.0.113.7"}"#).await;
    let reset = common::post(
        child.admin.unwrap(),
        "/v1/keys/reset",
        r#"{"rule": "per-ip", "key": "203.0.113.7/32"}"#,
    )
    .await;
    assert!(reset.status.is_success(), "{}", reset.body);
    line_with(&mut child, "key reset").await;
    // Anything after it is logged by now: a second line would come with the first.
    let status = common::get(child.admin.unwrap(), "/ready", &[])
        .await
        .status;
    assert!(status.is_success());
    let log = child.log();
    assert_eq!(log.matches("key reset").count(), 1, "logged once:\n{log}");
}

#[tokio::test]
async fn the_refusal_log_is_off_until_turned_on() {
    let config = Config::new(
        "refusals",
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n\n[[limit]]\nname = \"per-ip\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1h\"\n",
    );
    for on in [false, true] {
        let env: &[(&str, &str)] = if on {
            &[("RUST_LOG", "info,ratewarden::refusals=debug")]
        } else {
            &[]
        };
        let mut child = Served::spawn_with_env(config.serve(), env).await;
        for _ in 0..3 {
            common::post(child.listen, "/v1/check", r#"{"ip": "203.0.113.7"}"#).await;
        }
        if on {
            let line = line_with(&mut child, "request refused").await;
            assert!(line.contains("per-ip (per-ip@"), "{line}");
            assert!(line.contains("203.0.113.7/32"), "{line}");
            assert!(line.contains("status=429"), "{line}");
            let log = child.log();
            assert_eq!(log.matches("request refused").count(), 2, "{log}");
        } else {
            let log = child.log();
            assert!(!log.contains("request refused"), "{log}");
        }
    }
}
