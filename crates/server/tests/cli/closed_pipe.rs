//! Every command that prints, its reader gone (`ratewarden simulate load | head -1`): it
//! exits quietly and successfully, as the trace simulator always did, rather than panic
//! (`simulate load` printed with `println!`) or report "Broken pipe" as an error.

use std::process::{Command, Stdio};

/// Runs the binary with `args`, its standard output a pipe whose reading end is closed
/// before it writes a byte; its status and what it wrote to its standard error.
fn with_closed_pipe(args: &[&str]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // The reader goes away at once: every write the command makes meets a closed pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it ends");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn printing_commands_exit_quietly_when_the_reader_closes_the_pipe() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/ratewarden.toml"
    );
    let svg = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("closed-pipe.svg");
    let _ = std::fs::remove_file(&svg);
    let svg_arg = svg.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["simulate", "load", "--scenario", "spike", "--svg", svg_arg],
        &["simulate", "retries"],
        &["simulate", "--trace", "figure1", "--all"],
        &["check-config", example],
        &[
            "explain",
            "--config",
            example,
            "--request",
            r#"{"ip": "203.0.113.7", "method": "GET", "path": "/"}"#,
        ],
    ];
    for args in commands {
        let (ok, stderr) = with_closed_pipe(args);
        assert!(ok, "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("error"),
            "{args:?}: {stderr}"
        );
    }
    // The table's reader left, but the picture asked for is still drawn.
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}
