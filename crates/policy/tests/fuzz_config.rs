//! What strangers write into a config file never panics the parser: random text, and the
//! example config with random bytes changed, both come back as a config or as errors that
//! say where.

use proptest::prelude::*;
use ratewarden_policy::config::parse;

const EXAMPLE: &str = include_str!("../../../examples/ratewarden.toml");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,400}") {
        if let Err(errors) = parse("fuzz.toml", &text) {
            for e in &errors.0 {
                prop_assert!(e.to_string().starts_with("fuzz.toml"));
            }
        }
    }

    #[test]
    fn a_mutated_example_never_panics(
        edits in prop::collection::vec((0usize..EXAMPLE.len(), any::<char>()), 1..6),
    ) {
        let mut text: Vec<char> = EXAMPLE.chars().collect();
        for (at, c) in edits {
            let at = at % text.len();
            text[at] = c;
        }
        let text: String = text.into_iter().collect();
        if let Err(errors) = parse("fuzz.toml", &text) {
            prop_assert!(!errors.0.is_empty());
            for e in &errors.0 {
                prop_assert!(e.to_string().starts_with("fuzz.toml"));
            }
        }
    }
}
