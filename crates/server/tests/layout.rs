//! The server crate's layout keeps its promises: the HTTP/1.1 codec (`src/serve/h1`)
//! knows nothing of the server around it, so the lean paths' policy stays on top of it.

use std::path::{Path, PathBuf};

/// The `.rs` files below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// What a codec file names that it may not: the server's other modules, or the rules.
fn trespasses(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let outside = line
                .match_indices("crate::serve::")
                .any(|(at, _)| !line[at + "crate::serve::".len()..].starts_with("h1"));
            // `super::super` climbs out of the codec as surely as a path does.
            outside || line.contains("ratewarden_policy") || line.contains("super::super")
        })
        .map(|(n, line)| (n + 1, line.trim().to_owned()))
        .collect()
}

#[test]
fn the_codec_names_nothing_of_the_server_or_the_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/h1");
    let files = sources(&root);
    assert!(
        files.len() >= 6,
        "the codec's files are read: {}",
        root.display()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable file");
        for (line, what) in trespasses(&text) {
            found.push(format!("{}:{line}: {what}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "the codec reaches outside serve::h1:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_must_refuse() {
    for bad in [
        "use crate::serve::app::App;",
        "use crate::serve::{h1, reply};",
        "let x = crate::serve::reply::Plain::json(s, b);",
        "use ratewarden_policy::Identity;",
        "use super::super::reply::Plain;",
    ] {
        assert_eq!(trespasses(bad).len(), 1, "{bad} is refused");
    }
    for good in [
        "use crate::serve::h1::head::Line;",
        "use super::chunked::Chunked;",
        "use ratewarden_core::Clock;",
    ] {
        assert!(trespasses(good).is_empty(), "{good} is allowed");
    }
}
