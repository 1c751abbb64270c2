//! The dashboard in a real browser: Debian's headless Chromium loads the page from the
//! admin listener, runs its script, and prints the DOM it built (`--dump-dom`), its console
//! (`--enable-logging=stderr`) and a screenshot. `scripts/test` installs `chromium`.
//!
//! The page must load without a console message (an exception, a refused script or style,
//! a failed fetch), show the running config's rules, count a burst of rejections, and show
//! a failed reload's located errors. The screenshots are written under `target/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use http::StatusCode;
use ratewarden_core::ManualClock;
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
algorithm = "gcra"
rate = "1/s"
burst = 3

[[limit]]
name = "global-cap"
key = ["global"]
algorithm = "token-bucket"
rate = "5/s"
burst = 5
mode = "shadow"
"#;

/// What Chromium showed: the DOM after the script ran, and its log.
struct Shown {
    dom: String,
    log: String,
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let path = Path::new(dir).join(name);
            if path.is_file() {
                return path;
            }
        }
    }
    panic!("this test needs Debian's `chromium` (apt-get install -y chromium; scripts/test installs it)");
}

/// Where the screenshots go: the build's target directory.
fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Loads the dashboard in a fresh headless Chromium, lets its script run for a few
/// seconds of virtual time (network waits do not count), and returns the DOM and the
/// log; with `screenshot`, also writes one there.
async fn show(admin: SocketAddr, screenshot: Option<PathBuf>) -> Shown {
    show_at(admin, "", screenshot).await
}

/// [`show`] with `fragment` after the page's address (`#token=…`).
async fn show_at(admin: SocketAddr, fragment: &str, screenshot: Option<PathBuf>) -> Shown {
    let profile = std::env::temp_dir().join(format!(
        "ratewarden-chromium-{}-{}",
        std::process::id(),
        admin.port()
    ));
    let url = format!("http://{admin}/{fragment}");
    let run = move || {
        let mut command = Command::new(chromium());
        command.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--window-size=1400,900",
            "--hide-scrollbars",
        ]);
        command.arg(format!("--user-data-dir={}", profile.display()));
        match &screenshot {
            Some(path) => command.arg(format!("--screenshot={}", path.display())),
            None => command.arg("--dump-dom"),
        };
        let out = command.arg(&url).output().expect("chromium runs");
        let _ = std::fs::remove_dir_all(&profile);
        assert!(out.status.success(), "chromium failed: {out:?}");
        Shown {
            dom: String::from_utf8_lossy(&out.stdout).into_owned(),
            log: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    // Chromium asks this test's server: wait for it off the runtime that serves.
    tokio::task::spawn_blocking(run).await.unwrap()
}

/// The page's console lines (Chromium logs each as `CONSOLE`); the script writes none.
fn console(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("CONSOLE")).collect()
}

/// The number shown in `class` of the rule card `rule`.
fn shown_count(dom: &str, rule: &str, class: &str) -> u64 {
    let card = dom
        .split(&format!(r#"data-rule="{rule}""#))
        .nth(1)
        .unwrap_or_else(|| panic!("no card for {rule} in:\n{dom}"));
    let after = card
        .split(&format!(r#"class="{class}">"#))
        .nth(1)
        .unwrap_or_else(|| panic!("no {class} count for {rule} in:\n{card}"));
    let text: String = after.chars().take_while(|c| *c != '<').collect();
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{rule} {class}: `{text}` is not a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_rules_rejections_and_a_failed_reload_in_a_browser() {
    let dir = std::env::temp_dir().join(format!("ratewarden-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    std::fs::write(&path, RULES).unwrap();
    let running = common::start(Options {
        config_path: Some(path.clone()),
        ..common::options(RULES, Arc::new(ManualClock::new(T0)))
    })
    .await;
    let (api, admin) = (running.listen, running.admin.unwrap());

    let before = show(admin, None).await;
    assert!(
        console(&before.log).is_empty(),
        "console: {:?}",
        console(&before.log)
    );
    for rule in ["per-key", "global-cap"] {
        assert!(
            before.dom.contains(&format!(r#"data-rule="{rule}""#)),
            "{}",
            before.dom
        );
    }
    assert!(before.dom.contains("gcra 1/s, burst 3"), "{}", before.dom);
    assert!(before.dom.contains(">shadow<"), "{}", before.dom);
    assert_eq!(shown_count(&before.dom, "per-key", "rejected"), 0);

    // A burst: 3 allowed, 7 rejected (the clock stands still).
    for _ in 0..10 {
        let body = r#"{"ip": "203.0.113.7", "api_key": "burst-key"}"#;
        assert_eq!(
            common::post(api, "/v1/check", body).await.status,
            StatusCode::OK
        );
    }
    let after = show(admin, None).await;
    assert!(
        console(&after.log).is_empty(),
        "console: {:?}",
        console(&after.log)
    );
    assert_eq!(shown_count(&after.dom, "per-key", "rejected"), 7);
    assert_eq!(shown_count(&after.dom, "per-key", "allowed"), 3);
    let digest = ratewarden_policy::api_key_digest("burst-key");
    assert!(
        after.dom.contains(&digest),
        "the top offender: {}",
        after.dom
    );
    assert!(!after.dom.contains("burst-key"), "an API key in the clear");
    let screenshot = artifacts().join("dashboard.png");
    show(admin, Some(screenshot.clone())).await;
    assert!(std::fs::metadata(&screenshot).unwrap().len() > 10_000);

    // A failed reload: its located errors appear, and the rules stay.
    std::fs::write(&path, RULES.replace("burst = 3", "burst = 0")).unwrap();
    let refused = common::post(admin, "/reload", "{}").await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let failed = show(admin, None).await;
    assert!(
        console(&failed.log).is_empty(),
        "console: {:?}",
        console(&failed.log)
    );
    let errors = failed
        .dom
        .split(r#"id="reload-errors""#)
        .nth(1)
        .expect("the reload errors' section");
    assert!(
        !errors.starts_with(" hidden"),
        "the errors are hidden: {errors}"
    );
    assert!(
        errors.contains("rules.toml:"),
        "no located error in: {errors}"
    );
    assert!(errors.contains("per-key"), "{errors}");
    assert!(failed.dom.contains("refused"), "{}", failed.dom);
    assert!(failed.dom.contains(r#"data-rule="per-key""#));
    show(
        admin,
        Some(artifacts().join("dashboard-reload-refused.png")),
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_admin_token_the_dashboard_asks_for_it_and_then_shows_the_rules() {
    let dir = std::env::temp_dir().join(format!("ratewarden-browser-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = "0123456789abcdef-dashboard";
    let file = dir.join("admin-token");
    std::fs::write(&file, token).unwrap();
    let toml = RULES.replace(
        "admin = \"127.0.0.1:0\"",
        &format!(
            "admin = \"127.0.0.1:0\"\nadmin_token_file = {:?}",
            file.display().to_string()
        ),
    );
    let running = common::start_at(&toml, T0).await;
    let admin = running.admin.unwrap();

    // Without the token: the page loads, asks for it, and shows no data.
    let asked = show(admin, None).await;
    let prompt = asked
        .dom
        .split(r#"id="token-prompt""#)
        .nth(1)
        .expect("the token prompt");
    assert!(
        !prompt.starts_with(" hidden"),
        "the prompt is hidden: {}",
        asked.dom
    );
    assert!(
        !asked.dom.contains(r#"data-rule="per-key""#),
        "{}",
        asked.dom
    );
    show_at(
        admin,
        "",
        Some(artifacts().join("dashboard-token-prompt.png")),
    )
    .await;

    // With it, given in the fragment (never sent to the server): the rules, no console line.
    let shown = show_at(admin, &format!("#token={token}"), None).await;
    assert!(
        console(&shown.log).is_empty(),
        "console: {:?}",
        console(&shown.log)
    );
    assert!(
        shown.dom.contains(r#"data-rule="per-key""#),
        "{}",
        shown.dom
    );
    let prompt = shown.dom.split(r#"id="token-prompt""#).nth(1).unwrap();
    assert!(prompt.starts_with(" hidden"), "{}", shown.dom);
    std::fs::remove_dir_all(&dir).unwrap();
}
