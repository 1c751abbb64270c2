//! `ratewarden serve`'s logs as an operator's pipe or file sees them: no colour codes, and
//! no line an attacker wrote (issues 11 and 12).

use std::ffi::OsStr;

mod common;

use common::Served;

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
    let mut child = Served::spawn([
        OsStr::new("serve"),
        "--config".as_ref(),
        config.as_ref(),
        "--workers".as_ref(),
        "1".as_ref(),
    ])
    .await;
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
    std::fs::remove_dir_all(&dir).unwrap();
}
