//! `RateLimit-Policy` and `RateLimit` are written by hand for speed: on any names and
//! numbers they must be byte for byte what a Structured Field serializer writes, and parse
//! back to the same members.

use proptest::prelude::*;
use ratewarden_core::{Decision, Outcome};
use ratewarden_http::{allowed_headers, PolicyState, RenderedPolicy, RATELIMIT, RATELIMIT_POLICY};
use sfv::{Integer, KeyRef, ListSerializer, StringRef};

fn sf_int(n: u64) -> Integer {
    Integer::try_from(n.min(999_999_999_999_999)).expect("15 digits")
}

/// The reference: both fields through `sfv`'s serializer, members that cannot be
/// sf-strings left out.
fn reference(policies: &[PolicyState<'_>]) -> (Option<String>, Option<String>) {
    let mut policy = ListSerializer::new();
    let mut state = ListSerializer::new();
    for p in policies {
        let Ok(name) = StringRef::from_str(p.name) else {
            continue;
        };
        let item = policy
            .bare_item(name)
            .parameter(KeyRef::constant("q"), sf_int(p.decision.limit));
        let item = match p.unit.and_then(|u| StringRef::from_str(u).ok()) {
            Some(unit) => item.parameter(KeyRef::constant("qu"), unit),
            None => item,
        };
        let _ = match p.window_secs {
            Some(w) => item.parameter(KeyRef::constant("w"), sf_int(w.max(1))),
            None => item,
        };
        let _ = state
            .bare_item(name)
            .parameter(KeyRef::constant("r"), sf_int(p.decision.remaining))
            .parameter(
                KeyRef::constant("t"),
                sf_int(p.decision.reset_after_ns.div_ceil(1_000_000_000)),
            );
    }
    (policy.finish(), state.finish())
}

fn value<'a>(
    headers: &'a [(http::HeaderName, http::HeaderValue)],
    name: &http::HeaderName,
) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.to_str().ok())
}

/// Names from printable ASCII with the escaped characters made likely, and now and then a
/// character no sf-string may hold.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[ -~]{0,12}",
        2 => "[a\"\\\\ ]{0,6}",
        1 => "[a-z\u{e9}\t]{1,6}",
    ]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..1000u64,
        any::<u64>(),
        Just(999_999_999_999_999u64),
        Just(1_000_000_000_000_000u64)
    ]
}

type Member = (String, u64, u64, u64, Option<u64>, Option<&'static str>);

fn member() -> impl Strategy<Value = Member> {
    (
        name(),
        number(),
        number(),
        number(),
        proptest::option::of(number()),
        proptest::option::of(prop_oneof![
            Just("concurrent-requests"),
            Just("bad\u{e9}unit")
        ]),
    )
}

proptest! {
    #[test]
    fn the_fields_are_what_sfv_writes(members in proptest::collection::vec(member(), 0..5)) {
        let decisions: Vec<Decision> = members
            .iter()
            .map(|&(_, limit, remaining, reset_after_ns, _, _)| {
                Decision::new(Outcome::Allowed, limit, remaining, reset_after_ns)
            })
            .collect();
        let policies: Vec<PolicyState<'_>> = members
            .iter()
            .zip(&decisions)
            .map(|((name, _, _, _, window, unit), decision)| PolicyState {
                name,
                decision,
                window_secs: *window,
                unit: *unit,
                policy: None,
            })
            .collect();
        let headers = allowed_headers(&policies, false);
        let (policy, state) = reference(&policies);
        // Rendered once and reused, each policy alone says what rendering it says.
        for p in &policies {
            let rendered = RenderedPolicy::default();
            for _ in 0..2 {
                let alone = [p.rendered(&rendered)];
                let cached = allowed_headers(&alone, false);
                let (expected, _) = reference(&alone);
                prop_assert_eq!(value(&cached, &RATELIMIT_POLICY), expected.as_deref());
            }
        }
        prop_assert_eq!(value(&headers, &RATELIMIT_POLICY), policy.as_deref());
        prop_assert_eq!(value(&headers, &RATELIMIT), state.as_deref());
        for field in [&RATELIMIT_POLICY, &RATELIMIT] {
            if let Some(v) = value(&headers, field) {
                let parsed = sfv::Parser::new(v).parse::<sfv::List>();
                prop_assert!(parsed.is_ok(), "{v:?} parses back");
            }
        }
    }
}
