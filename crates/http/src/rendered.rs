//! A rule's `RateLimit-Policy` value rendered once and shared by every response after.
//!
//! The field says a policy's name, quota, window and unit: the same bytes on every
//! response while the rule stands. Rendering it anew per request (escaping the name,
//! formatting two integers, allocating and validating a header value) was a sixth of the
//! tower layer's cost; a clone of a rendered `HeaderValue` is a reference count.

use std::sync::OnceLock;

use http::HeaderValue;

use crate::PolicyState;

/// One policy's `RateLimit-Policy` value, rendered the first time a response shows the
/// policy and reused for every later response with the same name and numbers.
///
/// It checks what it was rendered for on every use, so a policy whose numbers move (an
/// adaptive limit) is rendered afresh rather than shown stale. It is a cache, not part of
/// what it belongs to: a clone starts empty, and any two compare equal.
#[derive(Debug, Default)]
pub struct RenderedPolicy(OnceLock<Option<Rendered>>);

#[derive(Debug)]
struct Rendered {
    name: String,
    limit: u64,
    window_secs: Option<u64>,
    unit: Option<String>,
    value: HeaderValue,
}

impl RenderedPolicy {
    /// `state`'s `RateLimit-Policy` value as the only policy shown, when it is the one
    /// rendered here (the first state asked for fixes it); `None` for other numbers, or for
    /// a name that cannot be written as a Structured Field string.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{Algorithm, Gcra, Rate};
    /// use ratewarden_http::{PolicyState, RenderedPolicy};
    ///
    /// let gcra = Gcra::new(Rate::per_second(5)?, 5)?;
    /// let decision = gcra.decide(&mut Default::default(), 0, 1);
    /// let state = PolicyState { name: "per-key", decision: &decision, window_secs: Some(1), unit: None, policy: None };
    /// let rendered = RenderedPolicy::default();
    /// assert_eq!(rendered.value(&state).map(|v| v.to_str().unwrap()), Some(r#""per-key";q=5;w=1"#));
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    pub fn value(&self, state: &PolicyState<'_>) -> Option<&HeaderValue> {
        let rendered = self
            .0
            .get_or_init(|| {
                let state = PolicyState {
                    policy: None,
                    ..*state
                };
                let value = crate::fields::policy_field(std::slice::from_ref(&state))?;
                Some(Rendered {
                    name: state.name.to_owned(),
                    limit: state.decision.limit,
                    window_secs: state.window_secs,
                    unit: state.unit.map(str::to_owned),
                    value: HeaderValue::try_from(value).ok()?,
                })
            })
            .as_ref()?;
        (rendered.limit == state.decision.limit
            && rendered.window_secs == state.window_secs
            && rendered.unit.as_deref() == state.unit
            && rendered.name == state.name)
            .then_some(&rendered.value)
    }
}

impl Clone for RenderedPolicy {
    /// An empty cache: the clone's owner may change what the value was rendered from.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for RenderedPolicy {
    /// Always: a cache says nothing about what it belongs to.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RenderedPolicy {}

#[cfg(test)]
mod tests {
    use ratewarden_core::{Decision, Outcome};

    use super::*;

    fn state<'a>(name: &'a str, decision: &'a Decision, window: Option<u64>) -> PolicyState<'a> {
        PolicyState {
            name,
            decision,
            window_secs: window,
            unit: None,
            policy: None,
        }
    }

    #[test]
    fn other_numbers_or_another_name_are_not_shown_the_rendered_value() {
        let ten = Decision::new(Outcome::Allowed, 10, 9, 0);
        let twelve = Decision::new(Outcome::Allowed, 12, 9, 0);
        let rendered = RenderedPolicy::default();
        let first = rendered.value(&state("api", &ten, Some(60))).cloned();
        assert_eq!(
            first.as_ref().map(|v| v.to_str().unwrap()),
            Some(r#""api";q=10;w=60"#)
        );
        // An adaptive limit that moved, another window, another name: rendered afresh by
        // the caller, never the stale value.
        assert_eq!(rendered.value(&state("api", &twelve, Some(60))), None);
        assert_eq!(rendered.value(&state("api", &ten, Some(1))), None);
        assert_eq!(rendered.value(&state("web", &ten, Some(60))), None);
        assert_eq!(
            rendered.value(&state("api", &ten, Some(60))).cloned(),
            first
        );
        // A clone starts empty: what it belongs to may be changed.
        assert_eq!(
            rendered
                .clone()
                .value(&state("web", &ten, Some(60)))
                .map(|v| v.to_str().unwrap()),
            Some(r#""web";q=10;w=60"#)
        );
    }

    #[test]
    fn a_name_that_cannot_be_an_sf_string_is_never_rendered() {
        let ten = Decision::new(Outcome::Allowed, 10, 9, 0);
        assert_eq!(
            RenderedPolicy::default().value(&state("caf\u{e9}", &ten, None)),
            None
        );
    }
}
