//! `ratewarden serve`'s logs as an operator's pipe or file sees them: no colour codes, and
//! no line an attacker wrote (issues 11 and 12).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Kills the server when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_and_escape_forged_lines() {
    let dir = std::env::temp_dir().join(format!("ratewarden-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("r.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"off\"\n\n[[limit]]\nname = \"watch\"\nkey = [\"header:x-user\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\nmode = \"shadow\"\n",
    )
    .unwrap();
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_ratewarden"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--workers", "1"])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (lines, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { return };
            let _ = lines.send(String::from_utf8_lossy(&line).into_owned());
        }
    });
    let mut seen = Vec::new();
    let listen = loop {
        let line = rx.recv().await.expect("the server logs that it serves");
        seen.push(line.clone());
        if let Some(at) = line.find("listen=") {
            let addr: String = line[at + 7..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            break addr;
        }
    };
    // The shadow rule logs "would have rejected" with the key, which holds the header.
    let body = r#"{"headers": {"x-user": "evil\r\nERROR forged: admin logged in\u001b[31m"}}"#;
    for _ in 0..2 {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let request = http::Request::post(format!("http://{listen}/v1/check"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        let response = client.request(request).await.unwrap();
        let _ = response.into_body().collect().await;
    }
    let logged = loop {
        let line = rx.recv().await.expect("the shadow rule logs");
        seen.push(line.clone());
        if line.contains("would have rejected") {
            break line;
        }
    };
    drop(child);
    while let Ok(line) = rx.try_recv() {
        seen.push(line);
    }
    assert!(logged.contains(r"evil\r\nERROR forged"), "{logged}");
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "no escape sequence reaches a pipe: {seen:#?}"
    );
    assert!(
        seen.iter().all(|l| !l.starts_with("ERROR forged")),
        "{seen:#?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
