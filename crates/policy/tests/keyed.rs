//! `Engine::decide_keyed`: rules of the engine, keys from the caller, decided all or nothing
//! under the same keys the descriptor path builds.

mod common;

use ratewarden_core::now_or_panic;
use ratewarden_memory::MemoryStore;
use ratewarden_policy::{Engine, RequestDescriptor};

const RULES: &str = r#"
[[limit]]
name = "per-user"
match = { domain = "svc", descriptor = "per-user" }
key = ["descriptor"]
algorithm = "fixed-window"
limit = 3
window = "1m"

[[limit]]
name = "per-document"
match = { domain = "svc", descriptor = "per-document" }
key = ["descriptor"]
algorithm = "fixed-window"
limit = 1
window = "1m"
"#;

fn engine() -> Engine<MemoryStore> {
    common::engine(RULES)
}

#[test]
fn caller_keys_are_decided_all_or_nothing() {
    let engine = engine();
    let first = now_or_panic(engine.decide_keyed(&[(0, "ada", 1), (1, "ada/doc-1", 1)], 0));
    assert!(first.allowed);
    assert_eq!(first.outcomes.len(), 2);
    // The document's limit refuses; the user's is not charged for it.
    let second = now_or_panic(engine.decide_keyed(&[(0, "ada", 1), (1, "ada/doc-1", 1)], 0));
    assert!(!second.allowed);
    assert_eq!(
        second.violated().map(|o| o.rule).collect::<Vec<_>>(),
        vec![1]
    );
    for document in ["ada/doc-2", "ada/doc-3"] {
        let verdict = now_or_panic(engine.decide_keyed(&[(0, "ada", 1), (1, document, 1)], 0));
        assert!(verdict.allowed, "{document}");
    }
    let fourth = now_or_panic(engine.decide_keyed(&[(0, "ada", 1)], 0));
    assert!(!fourth.allowed, "three for ada, whatever the documents");
    // An index past the rules is skipped.
    assert!(now_or_panic(engine.decide_keyed(&[(9, "ada", 1)], 0))
        .outcomes
        .is_empty());
}

#[test]
fn caller_keys_are_the_keys_descriptors_build() {
    let engine = engine();
    let keyed = now_or_panic(engine.decide_keyed(&[(0, "ada", 1)], 0));
    let descriptor = RequestDescriptor {
        entries: vec![("per-user", "ada")],
        hits: None,
        limit: None,
    };
    let described =
        now_or_panic(engine.decide_descriptors("svc", &[descriptor], 1, 0)).expect("decided");
    assert_eq!(keyed.outcomes[0].key, described.outcomes[0].key);
    // One budget: the descriptor's request took the second of three.
    assert_eq!(described.outcomes[0].decision.remaining, 1);
}
