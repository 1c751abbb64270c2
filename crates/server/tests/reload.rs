//! Reloads read and parse off the async workers: a 10k-rule config must not stall
//! decisions (issue 12, item 10: decision latency went from 13 ms to about 1 s).

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewarden_core::ManualClock;
use ratewarden_server::serve::{self, Options};

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
    let running = serve::start(Options {
        config: ratewarden_policy::config::parse(
            "small.toml",
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n",
        )
        .unwrap(),
        config_path: Some(path.clone()),
        clock: Arc::new(ManualClock::new(T0)),
        workers: 1,
        envoy: Default::default(),
        envoy_path: None,
    })
    .await
    .unwrap();
    let listen = running.listen;
    let decide = async move {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let request = http::Request::post(format!("http://{listen}/v1/check"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(br#"{"path": "/r7"}"#)))
            .unwrap();
        let response = client.request(request).await.unwrap();
        let status = response.status();
        let _ = response.into_body().collect().await;
        status
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
