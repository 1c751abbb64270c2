//! The server crate's layout, held as its architecture says (`docs/architecture.md`, "The
//! server"): no two modules import each other in a circle, the HTTP/1.1 codec (`serve::h1`)
//! imports nothing of the server around it, every front door reaches the engine through
//! the admission pipeline, and no source file cites an issue.
//!
//! The module graph is read from the sources as text: a module is a file, and it imports
//! another when it names a path into it (`crate::serve::app::App`, `super::shed::Slot`).
//! `cargo test -p ratewarden-server --test layout -- --nocapture` prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of the crate: its path (`serve::api::auth`) and its source, tests cut off.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let code = source
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap()
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            modules.insert(parts.join("::"), code);
        }
    }
    modules
}

/// The module a path names from `current` (`crate::…`, `super::…`, `self::…`): the longest
/// prefix of it that is a module.
fn resolve(modules: &BTreeMap<String, String>, current: &str, path: &[&str]) -> Option<String> {
    let mut base: Vec<&str> = if current.is_empty() {
        Vec::new()
    } else {
        current.split("::").collect()
    };
    let mut rest = path;
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(&"self") => rest = &rest[1..],
        _ => return None,
    }
    let full: Vec<&str> = base.into_iter().chain(rest.iter().copied()).collect();
    (0..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| modules.contains_key(m))
}

/// Each module's imports of the crate's other modules.
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in modules {
        let entry = edges.entry(module.clone()).or_default();
        let bytes = code.as_bytes();
        for start in ["crate::", "super::", "self::"] {
            let mut from = 0;
            while let Some(at) = code[from..].find(start) {
                let at = from + at;
                from = at + start.len();
                if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                    continue;
                }
                let end = code[at..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .map_or(code.len(), |n| at + n);
                let path: Vec<&str> = code[at..end]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .collect();
                if let Some(target) = resolve(modules, module, &path) {
                    if &target != module {
                        entry.insert(target);
                    }
                }
            }
        }
    }
    edges
}

/// The circles of the graph: its strongly connected components of more than one module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then components on its reverse.
    fn visit<'a>(
        node: &'a str,
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<&'a str>,
        order: &mut Vec<&'a str>,
    ) {
        if !seen.insert(node) {
            return;
        }
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, seen, order);
        }
        order.push(node);
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for node in edges.keys() {
        visit(node, edges, &mut seen, &mut order);
    }
    let mut reverse: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reverse.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut circles = Vec::new();
    for node in order.into_iter().rev() {
        let mut component = Vec::new();
        visit(node, &reverse, &mut assigned, &mut component);
        if component.len() > 1 {
            component.sort();
            circles.push(component.into_iter().map(str::to_owned).collect());
        }
    }
    circles
}

#[test]
fn no_two_modules_import_each_other_in_a_circle() {
    let modules = modules();
    let edges = graph(&modules);
    let count: usize = edges.values().map(BTreeSet::len).sum();
    println!("{} modules, {count} imports", modules.len());
    for (from, tos) in &edges {
        for to in tos {
            println!("{from} -> {to}");
        }
    }
    let circles = circles(&edges);
    assert!(
        circles.is_empty(),
        "modules importing each other: {circles:?}"
    );
}

#[test]
fn the_codec_imports_nothing_of_the_server_around_it() {
    let modules = modules();
    let edges = graph(&modules);
    for (module, code) in &modules {
        if !module.starts_with("serve::h1") {
            continue;
        }
        for target in &edges[module] {
            assert!(
                target.starts_with("serve::h1"),
                "{module} imports {target}: the codec must stand on its own"
            );
        }
        assert!(
            !code.contains("ratewarden_policy") && !code.contains("ratewarden_core"),
            "{module} names the engine's crates"
        );
    }
}

#[test]
fn only_the_admission_pipeline_asks_the_engine_to_decide() {
    let modules = modules();
    for (module, code) in &modules {
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
