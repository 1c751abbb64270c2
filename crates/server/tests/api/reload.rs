//! Reloads read and parse off the async workers: a 10k-rule config must not stall
//! decisions (issue 12, item 10: decision latency went from 13 ms to about 1 s).

use std::sync::Arc;

use ratewarden_core::ManualClock;
use ratewarden_server::serve::Options;

#[path = "../common/mod.rs"]
mod common;

const T0: u64 = 1_700_000_000_000_000_000;

#[tokio::test]
async fn decisions_go_on_while_a_10k_rule_config_reloads() {
    let dir = std::env::temp_dir().join(format!("ratewarden-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.toml");
    let mut toml = String::from("[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n");
    for i in 0..10_000 {
        toml.push_str(&format!(
            "\n[[limit]]\nname = \"r{i}\"\nmatch = {{ path = \"/r{i}\" }}\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1m\"\n"
        ));
    }
    std::fs::write(&path, &toml).unwrap();
    // The test's runtime is the server's only one (one worker): a parse on it would hold
    // every decision until it finished.
    let running = common::start(Options {
        config_path: Some(path.clone()),
        ..common::options(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n",
            Arc::new(ManualClock::new(T0)),
        )
    })
    .await;
    let listen = running.listen;
    let decide = async move {
        common::post(listen, "/v1/check", r#"{"path": "/r7"}"#)
            .await
            .status
    };
    let reload = running.reload();
    tokio::pin!(reload);
    tokio::select! {
        biased;
        _ = &mut reload => panic!("the reload finished before a decision could run beside it"),
        status = decide => assert_eq!(status, http::StatusCode::OK),
    }
    let version = reload.await.expect("the big config is valid");
    assert_eq!(version, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
