//! The binary's own documentation: shell completions and the man page, generated from the
//! arguments `--help` prints, so they name every command and flag there is.

use std::process::{Command, Output};

fn ratewarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

/// Every subcommand, and a flag of `serve` and of `simulate`, as a shell must complete them.
const NAMES: [&str; 8] = [
    "serve",
    "simulate",
    "check-config",
    "explain",
    "completions",
    "man",
    "--envoy-config",
    "--algorithm",
];

#[test]
fn completions_name_every_command_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _ratewarden"),
        ("zsh", "#compdef ratewarden"),
        ("fish", "complete -c ratewarden"),
        ("elvish", "edit:completion:arg-completer[ratewarden]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = stdout(&ratewarden(&["completions", shell]));
        assert!(script.contains(marker), "{shell}: no `{marker}`");
        for name in NAMES {
            assert!(script.contains(name), "{shell}: `{name}` is not completed");
        }
    }
}

#[test]
fn an_unknown_shell_is_refused_naming_the_ones_there_are() {
    let output = ratewarden(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("tcsh") && error.contains("bash"), "{error}");
}

#[test]
fn the_man_page_is_roff_and_names_every_command() {
    let page = stdout(&ratewarden(&["man"]));
    assert!(page.contains(".TH ratewarden 1"), "{page}");
    for name in [
        "serve",
        "simulate",
        "check\\-config",
        "explain",
        "completions",
    ] {
        assert!(page.contains(name), "the man page does not name `{name}`");
    }
    // The version the binary reports, so an installed page says which release it documents.
    assert!(page.contains(env!("CARGO_PKG_VERSION")), "{page}");
}

#[test]
fn a_page_for_each_command_is_written_into_a_folder_and_renders_cleanly() {
    let dir = std::env::temp_dir().join(format!("ratewarden-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    stdout(&ratewarden(&["man", "--dir", dir.to_str().unwrap()]));
    let serve = std::fs::read_to_string(dir.join("ratewarden-serve.1")).expect("serve's page");
    assert!(serve.contains("envoy\\-config"), "{serve}");
    for page in [
        "ratewarden.1",
        "ratewarden-check-config.1",
        "ratewarden-completions.1",
    ] {
        assert!(dir.join(page).exists(), "no {page}");
    }
    // groff (Debian's, where `man` is) reads every page without a warning.
    if std::path::Path::new("/usr/bin/groff").exists() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rendered = Command::new("/usr/bin/groff")
                .args(["-man", "-Tutf8", "-ww", "-z"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                rendered.status.success() && rendered.stderr.is_empty(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&rendered.stderr)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let missing = ratewarden(&["man", "--dir", "/nonexistent/man1"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/man1"));
}
