//! The policy crate's layout, held as `docs/architecture.md` ("The engine's rooms") says: no
//! two modules import each other in a circle, no module reaches its own crate through the
//! root's re-exports (`crate::Rule` rather than `crate::config::Rule`), the quota board
//! sits below the engine, and the engine's rooms import only the rooms below them.
//!
//! `cargo test -p ratewarden-policy --test layout -- --nocapture` prints the graph.

use ratewarden_layout::Crate;

fn policy() -> Crate {
    Crate::read(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
}

#[test]
fn no_two_modules_import_each_other_in_a_circle() {
    let policy = policy();
    println!(
        "{} modules, {} imports\n{}",
        policy.modules.len(),
        policy.arrows(),
        policy.arrow_lines()
    );
    let circles = policy.circles();
    assert!(
        circles.is_empty(),
        "modules importing each other: {circles:?}"
    );
}

#[test]
fn no_module_imports_its_own_crate_through_the_root() {
    let policy = policy();
    let through_root: Vec<&String> = policy
        .imports
        .iter()
        .filter(|(module, tos)| !module.is_empty() && tos.contains(""))
        .map(|(module, _)| module)
        .collect();
    assert!(
        through_root.is_empty(),
        "modules importing through lib.rs's re-exports (name the module that defines it): \
         {through_root:?}"
    );
}

#[test]
fn the_quota_board_sits_below_the_engine() {
    let policy = policy();
    for (module, tos) in &policy.imports {
        if !Crate::within(module, "quota") {
            continue;
        }
        for to in tos {
            assert!(
                !Crate::within(to, "engine"),
                "{module} imports {to}: the quota board is below the engine"
            );
        }
    }
}

/// The engine's rooms, lowest first: each imports only the rooms before it (and itself).
/// The engine itself (`engine`, and `engine::explain`, which reads every room) composes
/// them and sits above all.
const ROOMS: [&str; 6] = [
    "engine::error",
    "engine::request",
    "engine::verdict",
    "engine::rules",
    "engine::charge",
    "engine::adaptive",
];

fn room_of(module: &str) -> Option<usize> {
    ROOMS.iter().position(|room| Crate::within(module, room))
}

#[test]
fn each_room_of_the_engine_imports_only_the_rooms_below_it() {
    let policy = policy();
    let mut upward = Vec::new();
    for (module, tos) in &policy.imports {
        let Some(room) = room_of(module) else {
            continue;
        };
        for to in tos.iter().filter(|to| Crate::within(to, "engine")) {
            match room_of(to) {
                Some(other) if other <= room => {}
                _ => upward.push(format!("{module} -> {to}")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports up the engine's rooms ({ROOMS:?}, lowest first): {upward:?}"
    );
}

#[test]
fn every_engine_module_is_in_a_room_or_composes_them() {
    let policy = policy();
    for module in policy.modules.keys() {
        if Crate::within(module, "engine") {
            assert!(
                room_of(module).is_some() || module == "engine" || module == "engine::explain",
                "{module} is in no room of the engine: add it to one (or to ROOMS)"
            );
        }
    }
}

#[test]
fn the_request_reading_modules_sit_below_the_engine() {
    let policy = policy();
    for module in ["ip", "host", "path", "method_override", "usage"] {
        assert!(policy.modules.contains_key(module), "no module {module}");
        for to in &policy.imports[module] {
            assert!(
                !Crate::within(to, "engine"),
                "{module} imports {to}: what reads a request sits below the engine"
            );
        }
    }
}
