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

/// The folders the end-to-end tests are grouped in, one per door or part they drive; the
/// harness they share is in `common/` (and the clients' in `client_common/`).
const TEST_GROUPS: [&str; 10] = [
    "admin", "api", "cli", "client", "deploy", "doors", "edge", "envoy", "gateway", "store",
];

/// What is wrong with the test files' layout: a test at the top of `tests/` (other than
/// this file), in a folder no group names, or not declared as a `[[test]]` in the crate's
/// manifest (a file in a folder is a test only when declared, so an undeclared one would
/// never run); and a test file that starts a server or an upstream its own way instead of
/// through the shared harness.
fn misplaced_tests(tests: &Path, manifest: &str) -> Vec<String> {
    let declared: BTreeSet<&str> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("path = \"tests/"))
        .filter_map(|rest| rest.strip_suffix('"'))
        .collect();
    let mut found = Vec::new();
    for file in sources(tests) {
        let relative = file.strip_prefix(tests).expect("below tests/");
        let name = relative.to_string_lossy().replace('\\', "/");
        let mut parts = name.split('/');
        let group = parts.next().unwrap_or_default();
        if name == "layout.rs" || group == "common" || group == "client_common" {
            continue;
        }
        if parts.next().is_none() {
            found.push(format!("tests/{name}: a test belongs in its door's folder"));
            continue;
        }
        if !TEST_GROUPS.contains(&group) {
            found.push(format!("tests/{name}: `{group}` is not a test group"));
        }
        if !declared.contains(name.as_str()) {
            found.push(format!(
                "tests/{name}: not a [[test]] in Cargo.toml, so never run"
            ));
        }
        let text = std::fs::read_to_string(&file).expect("a readable file");
        if text.contains("Semaphore::new(WORKERS)") {
            found.push(format!(
                "tests/{name}: a worker pool of its own (common::workers)"
            ));
        }
        if text.contains("start(common::options(") || text.contains("start(options(") {
            found.push(format!(
                "tests/{name}: starts a server its own way (common::start_at)"
            ));
        }
    }
    found
}

#[test]
fn the_tests_are_grouped_by_door_and_share_one_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the manifest");
    let tests = root.join("tests");
    assert!(
        sources(&tests).len() > 30,
        "the tests are read: {}",
        tests.display()
    );
    let found = misplaced_tests(&tests, &manifest);
    assert!(found.is_empty(), "the tests' layout:\n{}", found.join("\n"));
}

#[test]
fn the_tests_layout_check_sees_what_it_must_refuse() {
    let dir = std::env::temp_dir().join(format!("rw-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (file, text) in [
        ("flat.rs", ""),
        ("gateway/undeclared.rs", ""),
        ("elsewhere/declared.rs", ""),
        ("gateway/pool.rs", "let w = Semaphore::new(WORKERS);"),
        ("api/own.rs", "common::start(common::options(toml, clock))"),
        (
            "common/mod.rs",
            "common::start(common::options(toml, clock))",
        ),
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let manifest = "[[test]]\nname = \"d\"\npath = \"tests/elsewhere/declared.rs\"\n\
                    path = \"tests/gateway/pool.rs\"\npath = \"tests/api/own.rs\"\n";
    let mut found = misplaced_tests(&dir, manifest);
    found.sort();
    let _ = std::fs::remove_dir_all(&dir);
    let expected = [
        "tests/api/own.rs: starts a server its own way (common::start_at)",
        "tests/elsewhere/declared.rs: `elsewhere` is not a test group",
        "tests/flat.rs: a test belongs in its door's folder",
        "tests/gateway/pool.rs: a worker pool of its own (common::workers)",
        "tests/gateway/undeclared.rs: not a [[test]] in Cargo.toml, so never run",
    ];
    assert_eq!(found, expected);
}
