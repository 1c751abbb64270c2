//! The server crate's layout, held as its architecture says (`docs/architecture.md`, "The
//! server"): no two modules import each other in a circle; imports in `serve` point one
//! way (the connection layer is handed the door it serves and names none, no front door
//! imports another, and nothing in `serve` imports the command-line files above it); the
//! HTTP/1.1 codec (`serve::h1`) imports nothing of the server around it; every front door
//! reaches the engine through the admission pipeline; and no source file cites an issue.
//!
//! The codec's files are also read line by line (`trespasses`): a path out of `serve::h1`,
//! the rules' crate or `super::super` in them fails.
//!
//! `cargo test -p ratewarden-server --test layout -- --nocapture` prints the module graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ratewarden_layout::Crate;

fn server() -> Crate {
    Crate::read(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
}

/// The front doors: each parses what it is asked, hands it to the admission pipeline and
/// renders the answer. What two of them share lives below them all.
const DOORS: [&str; 4] = [
    "serve::api",
    "serve::admin",
    "serve::envoy",
    "serve::gateway",
];

/// The command-line files, above `serve`: what runs it, and the commands beside it.
const COMMAND_LINE: [&str; 4] = ["cli", "check_config", "explain", "run"];

fn door_of(module: &str) -> Option<&'static str> {
    DOORS.into_iter().find(|door| Crate::within(module, door))
}

/// The arrows that break the one-way rules of `serve`, each as `from -> to: why`.
fn wrong_way(server: &Crate) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, tos) in &server.imports {
        for to in tos {
            let why = if Crate::within(from, "serve::conn") && door_of(to).is_some() {
                "the connection layer is handed its door, it never names one"
            } else if door_of(from).is_some_and(|d| door_of(to).is_some_and(|e| d != e)) {
                "a door imports another: move what they share below both"
            } else if Crate::within(from, "serve")
                && COMMAND_LINE.iter().any(|c| Crate::within(to, c))
            {
                "serve imports a command-line file: the command sits above serve"
            } else {
                continue;
            };
            wrong.push(format!("{from} -> {to}: {why}"));
        }
    }
    wrong
}

#[test]
fn no_two_modules_import_each_other_in_a_circle() {
    let server = server();
    println!(
        "{} modules, {} imports\n{}",
        server.modules.len(),
        server.arrows(),
        server.arrow_lines()
    );
    let circles = server.circles();
    assert!(
        circles.is_empty(),
        "modules importing each other: {circles:?}"
    );
}

#[test]
fn imports_in_serve_point_one_way() {
    let server = server();
    for door in DOORS {
        assert!(server.modules.contains_key(door), "no door {door}");
    }
    for file in COMMAND_LINE {
        assert!(
            server.modules.contains_key(file),
            "no command-line file {file}"
        );
    }
    let wrong = wrong_way(&server);
    assert!(
        wrong.is_empty(),
        "imports the wrong way:\n{}",
        wrong.join("\n")
    );
}

/// A crate of the named modules and arrows, as `Crate::read` would have found them.
fn made(arrows: &[(&str, &str)]) -> Crate {
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in arrows {
        imports
            .entry((*from).to_owned())
            .or_default()
            .insert((*to).to_owned());
        imports.entry((*to).to_owned()).or_default();
    }
    Crate {
        modules: imports.keys().map(|m| (m.clone(), String::new())).collect(),
        imports,
    }
}

#[test]
fn the_one_way_rules_see_what_they_must_refuse() {
    for bad in [
        ("serve::conn::listen", "serve::gateway"),
        ("serve::conn", "serve::api::check"),
        ("serve::api::auth", "serve::gateway::passage"),
        ("serve::admin::endpoints", "serve::api"),
        ("serve::gateway::lean", "serve::envoy::authz"),
        ("serve::start", "cli"),
        ("serve::admin", "explain"),
        ("serve::metrics", "run::logs"),
    ] {
        assert_eq!(wrong_way(&made(&[bad])).len(), 1, "{bad:?} is refused");
    }
    for good in [
        ("serve::gateway::lean", "serve::gateway::passage"),
        ("serve::api::auth", "serve::guard"),
        ("serve::workers", "serve::gateway"),
        ("serve::conn::listen", "serve::app"),
        ("run", "serve"),
        ("serve::admin::endpoints", "describe::explanation"),
    ] {
        assert!(wrong_way(&made(&[good])).is_empty(), "{good:?} is allowed");
    }
}

#[test]
fn only_the_admission_pipeline_asks_the_engine_to_decide() {
    let server = server();
    for (module, code) in &server.modules {
        if module == "serve::admission" {
            continue;
        }
        for call in [
            "engine.decide(",
            ".decide_waiting_at(",
            ".decide_waiting(",
            ".decide_descriptors(",
            "shedder.enter(",
        ] {
            assert!(
                !code.contains(call),
                "{module} calls `{call}`: every front door goes through `serve::admission`"
            );
        }
    }
}

#[test]
fn no_source_file_cites_an_issue() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stack = vec![root.clone()];
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let in_src = path.components().any(|c| c.as_os_str() == "src");
            if !in_src || path.extension().is_none_or(|e| e != "rs" && e != "lua") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for (n, line) in source.lines().enumerate() {
                let lower = line.to_ascii_lowercase();
                let cites = ["issue ", "issues ", "(#"].iter().any(|word| {
                    lower.match_indices(word).any(|(at, _)| {
                        lower[at + word.len()..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_digit())
                    })
                });
                if cites {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "history belongs in commits and docs/benchmarks.md, not in src:\n{}",
        found.join("\n")
    );
}

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
