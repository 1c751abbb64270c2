//! A crate's module graph, read from its sources as text, for the layout tests that hold
//! the architecture (`docs/architecture.md`): which module imports which, and the circles.
//!
//! A module is a file, and it imports another when it names a path into it
//! (`crate::serve::app::App`, `super::shed::Slot`). A path through the crate root's
//! re-exports (`crate::Rule` where `Rule` is defined in `config`) is an import of the root.
//! Test modules (`#[cfg(test)] mod …` and what follows it) and comments are cut off:
//! only what the crate builds counts.
//!
//! # Examples
//!
//! ```
//! let crate_ = ratewarden_layout::Crate::read(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
//! assert!(crate_.modules.contains_key(""));
//! assert!(crate_.circles().is_empty());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules and the imports between them.
#[derive(Debug, Default)]
pub struct Crate {
    /// Every module by its path (`serve::api::auth`; the root is ""), with its source,
    /// tests and comments cut off.
    pub modules: BTreeMap<String, String>,
    /// Each module's imports of the crate's other modules.
    pub imports: BTreeMap<String, BTreeSet<String>>,
}

impl Crate {
    /// Reads the crate whose sources are under `src` (its `lib.rs` or `main.rs` there).
    ///
    /// # Panics
    ///
    /// When a file under `src` cannot be read: a layout test has nothing to say then.
    pub fn read(src: impl AsRef<Path>) -> Self {
        let modules = modules(src.as_ref());
        let imports = graph(&modules);
        Crate { modules, imports }
    }

    /// How many import arrows the graph has.
    pub fn arrows(&self) -> usize {
        self.imports.values().map(BTreeSet::len).sum()
    }

    /// The circles of the graph: its strongly connected components of more than one
    /// module, each sorted.
    pub fn circles(&self) -> Vec<Vec<String>> {
        circles(&self.imports)
    }

    /// Every arrow, `from -> to`, one a line: what a test prints for a reader.
    pub fn arrow_lines(&self) -> String {
        let mut out = String::new();
        for (from, tos) in &self.imports {
            for to in tos {
                out.push_str(from);
                out.push_str(" -> ");
                out.push_str(if to.is_empty() { "(crate root)" } else { to });
                out.push('\n');
            }
        }
        out
    }

    /// Whether `module` is `parent` or lies below it.
    pub fn within(module: &str, parent: &str) -> bool {
        module == parent
            || parent.is_empty()
            || module
                .strip_prefix(parent)
                .is_some_and(|rest| rest.starts_with("::"))
    }
}

/// Every module under `root`: its path and its source, tests and comments cut off.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .expect("below the root")
                .with_extension("");
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
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let code = source
                .split("#[cfg(test)]\nmod ")
                .next()
                .unwrap_or_default()
                .lines()
                .map(|l| l.split("//").next().unwrap_or_default())
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

/// Each module's imports of the crate's other modules. A `use` group (`use super::{a, b}`)
/// imports each module it names.
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
                let mut targets = Vec::new();
                if code[end..].starts_with('{') {
                    // `use crate::config::{Cost, KeyPart}`: each name in the group, one
                    // level deep, may be a module of its own.
                    let close = code[end..].find('}').map_or(code.len(), |n| end + n);
                    for name in code[end + 1..close].split(',') {
                        let name = name.trim().split([' ', ':']).next().unwrap_or_default();
                        if name.is_empty() || name == "self" {
                            continue;
                        }
                        let mut named = path.clone();
                        named.push(name);
                        targets.extend(resolve(modules, module, &named));
                    }
                }
                if targets.is_empty() {
                    targets.extend(resolve(modules, module, &path));
                }
                for target in targets {
                    if &target != module {
                        entry.insert(target);
                    }
                }
            }
        }
    }
    edges
}

/// The strongly connected components of more than one module.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> Crate {
        let modules: BTreeMap<String, String> = files
            .iter()
            .map(|(m, code)| ((*m).to_owned(), (*code).to_owned()))
            .collect();
        let imports = graph(&modules);
        Crate { modules, imports }
    }

    #[test]
    fn a_use_group_imports_each_module_it_names() {
        let c = crate_of(&[
            ("", "mod a; mod b;"),
            ("a", "use crate::b::{c, d::Thing, Other};"),
            ("b", ""),
            ("b::c", ""),
            ("b::d", ""),
        ]);
        let a: Vec<&str> = c.imports["a"].iter().map(String::as_str).collect();
        assert_eq!(a, ["b", "b::c", "b::d"]);
    }

    #[test]
    fn a_path_through_the_root_is_an_import_of_the_root() {
        let c = crate_of(&[
            ("", "pub use a::Rule;"),
            ("a", ""),
            ("b", "use crate::Rule;"),
        ]);
        assert!(c.imports["b"].contains(""));
    }

    #[test]
    fn two_modules_that_import_each_other_are_a_circle() {
        let c = crate_of(&[
            ("", ""),
            ("a", "use super::b::X;"),
            ("b", "use super::a::Y;"),
        ]);
        assert_eq!(c.circles(), [["a".to_owned(), "b".to_owned()]]);
        let d = crate_of(&[("", ""), ("a", "use super::b::X;"), ("b", "")]);
        assert!(d.circles().is_empty());
    }

    #[test]
    fn within_is_the_module_or_below_it() {
        assert!(Crate::within("engine::charge::settle", "engine::charge"));
        assert!(Crate::within("engine::charge", "engine::charge"));
        assert!(!Crate::within("engine::charged", "engine::charge"));
        assert!(Crate::within("anything", ""));
    }
}
