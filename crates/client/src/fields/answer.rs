//! Finding the fields the policy reads from every answer in one pass over its header map.
//!
//! The policy reads up to four fields of every answer (`Retry-After`, `RateLimit`,
//! `RateLimit-Policy`, and `X-RateLimit-Remaining` when there is no `RateLimit`). A lookup
//! hashes the name it looks for; an answer's map is mostly a handful of fields, and walking
//! it once comparing names costs a third of four lookups. A larger map, or one with a field
//! the walk does not keep on more than one line, is looked up name by name.

use std::option;

use http::header::{GetAll, ValueIter, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};
use ratewarden_http::{RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_REMAINING};

/// The most fields (names) an answer's map may hold to be walked rather than looked up in:
/// past this, comparing every name costs about what the lookups do.
const MOST_WALKED: usize = 12;

/// OpenAI's fields of what remains, whose families are read as quotas beside the legacy
/// trio's.
const OPENAI_REMAINING: [&str; 2] = [
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
];

/// The lines of one field of an answer, in order.
#[derive(Debug)]
pub(crate) enum Lines<'a> {
    /// Found by the walk: a field on one line at most.
    One(Option<&'a HeaderValue>),
    /// Looked up: any number of lines.
    All(GetAll<'a, HeaderValue>),
}

/// The lines of a [`Lines`].
pub(crate) enum LinesIter<'a> {
    One(option::IntoIter<&'a HeaderValue>),
    All(ValueIter<'a, HeaderValue>),
}

impl<'a> Iterator for LinesIter<'a> {
    type Item = &'a HeaderValue;

    fn next(&mut self) -> Option<&'a HeaderValue> {
        match self {
            Self::One(one) => one.next(),
            Self::All(all) => all.next(),
        }
    }
}

impl<'a> Lines<'a> {
    /// The field's lines, in order.
    pub(crate) fn iter(&self) -> LinesIter<'a> {
        match self {
            Self::One(one) => LinesIter::One((*one).into_iter()),
            Self::All(all) => LinesIter::All(all.iter()),
        }
    }

    /// Whether the answer carries the field at all.
    pub(crate) fn any(&self) -> bool {
        match self {
            Self::One(one) => one.is_some(),
            Self::All(all) => all.iter().next().is_some(),
        }
    }
}

/// The fields the policy reads from one answer: what [`HeaderMap::get`],
/// [`HeaderMap::get_all`] and [`HeaderMap::contains_key`] answer for them, found by one walk
/// over a small map.
#[derive(Debug)]
pub(crate) struct AnswerFields<'a> {
    /// `Retry-After`'s first line (as [`HeaderMap::get`]).
    pub(crate) retry_after: Option<&'a HeaderValue>,
    /// `RateLimit`.
    pub(crate) state: Lines<'a>,
    /// `RateLimit-Policy`.
    pub(crate) policy: Lines<'a>,
    /// Whether `X-RateLimit-Remaining` or one of OpenAI's `x-ratelimit-remaining-requests`
    /// and `-tokens` is there (quotas outside the `RateLimit` field).
    pub(crate) legacy: bool,
}

impl<'a> AnswerFields<'a> {
    /// `headers`' fields, walked when the map is small and each rate limit field is on one
    /// line at most, looked up otherwise: the same either way.
    pub(crate) fn of(headers: &'a HeaderMap) -> Self {
        Self::walked(headers).unwrap_or_else(|| Self::looked_up(headers))
    }

    /// Each field looked up by name.
    pub(crate) fn looked_up(headers: &'a HeaderMap) -> Self {
        Self {
            retry_after: headers.get(RETRY_AFTER),
            state: Lines::All(headers.get_all(RATELIMIT)),
            policy: Lines::All(headers.get_all(RATELIMIT_POLICY)),
            legacy: headers.contains_key(X_RATELIMIT_REMAINING)
                || OPENAI_REMAINING.iter().any(|n| headers.contains_key(*n)),
        }
    }

    /// The fields found in one walk over `headers`, or `None` when the map is large or
    /// `RateLimit` or `RateLimit-Policy` has more than one line (the walk keeps one).
    ///
    /// A map yields each name's lines together, the first first: the first `Retry-After`
    /// seen is the one [`HeaderMap::get`] answers.
    fn walked(headers: &'a HeaderMap) -> Option<Self> {
        if headers.keys_len() > MOST_WALKED {
            return None;
        }
        let (mut retry_after, mut state, mut policy, mut legacy) = (None, None, None, false);
        for (name, value) in headers {
            // `Retry-After` is a standard name: compared by its tag, no bytes.
            if *name == RETRY_AFTER {
                retry_after = retry_after.or(Some(value));
            } else if *name == RATELIMIT {
                if state.replace(value).is_some() {
                    return None;
                }
            } else if *name == RATELIMIT_POLICY {
                if policy.replace(value).is_some() {
                    return None;
                }
            } else if *name == X_RATELIMIT_REMAINING || OPENAI_REMAINING.contains(&name.as_str()) {
                legacy = true;
            }
        }
        Some(Self {
            retry_after,
            state: Lines::One(state),
            policy: Lines::One(policy),
            legacy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use http::HeaderName;

    /// `Retry-After`, the lines of `RateLimit` and `RateLimit-Policy`, whether each is
    /// there, and whether the legacy field is.
    type Seen = (Option<Vec<u8>>, [Vec<Vec<u8>>; 2], [bool; 2], bool);

    /// What a reader sees of the fields: the same from the walk and from lookups.
    fn seen(f: &AnswerFields<'_>) -> Seen {
        let lines = |l: &Lines<'_>| l.iter().map(|v| v.as_bytes().to_vec()).collect();
        (
            f.retry_after.map(|v| v.as_bytes().to_vec()),
            [lines(&f.state), lines(&f.policy)],
            [f.state.any(), f.policy.any()],
            f.legacy,
        )
    }

    const NAMES: [&str; 8] = [
        "retry-after",
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-remaining",
        "date",
        "content-length",
        "x-ratelimit-limit",
        "ratelimit-policies",
    ];

    /// Maps of 0 to 20 fields drawn from the names the walk compares, their neighbours and
    /// others, one to three lines each, in any order: the walk (when it answers) and the
    /// lookups see the same lines; small maps with one line per rate limit field are walked.
    #[test]
    fn the_walk_finds_what_the_lookups_find() {
        let mut rng = SplitMix64::new(15);
        let mut walked = 0;
        for case in 0..20_000 {
            let mut h = HeaderMap::new();
            let fields = rng.next_u64() % 21;
            for i in 0..fields {
                let pick = rng.next_u64() as usize % (NAMES.len() + 4);
                let name = match NAMES.get(pick) {
                    Some(name) => HeaderName::from_static(name),
                    None => HeaderName::try_from(format!("x-other-{pick}-{i}")).unwrap(),
                };
                for line in 0..1 + rng.next_u64() % 3 {
                    let value = HeaderValue::try_from(format!("{case}-{i}-{line}")).unwrap();
                    h.append(name.clone(), value);
                }
            }
            let looked_up = seen(&AnswerFields::looked_up(&h));
            match AnswerFields::walked(&h) {
                Some(w) => {
                    walked += 1;
                    assert_eq!(seen(&w), looked_up, "case {case}: {h:?}");
                }
                None => assert!(
                    h.keys_len() > MOST_WALKED
                        || h.get_all(RATELIMIT).iter().count() > 1
                        || h.get_all(RATELIMIT_POLICY).iter().count() > 1,
                    "case {case}: a map the walk could read was looked up: {h:?}"
                ),
            }
            assert_eq!(seen(&AnswerFields::of(&h)), looked_up, "case {case}");
        }
        assert!(walked > 2_000, "only {walked} maps walked");
    }

    #[test]
    fn the_benchmarks_answer_is_walked() {
        let mut h = crate::fields::answer_with(&[r#""a";r=4;t=1"#], &[r#""a";q=5;w=1"#]);
        h.insert("date", "Thu, 03 Dec 2026 16:00:00 GMT".parse().unwrap());
        h.insert("content-length", "5".parse().unwrap());
        let w = AnswerFields::walked(&h).expect("walked");
        assert_eq!(seen(&w), seen(&AnswerFields::looked_up(&h)));
        assert!(matches!(w.state, Lines::One(Some(_))));
    }
}
