//! A quota bucket rule's `match.bucket` and `weights`: which Envoy quota bucket ids the rule
//! takes, and how much each weighs in the split of the rule's rate among the Envoys.
//!
//! ```toml
//! [[limit]]
//! name = "api"
//! match = { domain = "edge", bucket = "name=api,tier" }   # these entries, among any others
//! key = ["global"]                                         # one budget for all its buckets
//! weights = { "tier=gold" = 3, "tier=silver" = 2 }        # exact entries; the rest weigh 1
//! algorithm = "gcra"
//! rate = "600/s"
//! burst = 60
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use ratewarden_core::{Algorithm, Limit};
use toml::Spanned;

use super::error::Errors;
use super::raw::RawLimit;
use super::{BucketMatch, MAX_WEIGHT};

/// The rule's `match.bucket` with its `weights`; `None` when it has none, or when anything
/// was wrong with them (all of which is recorded).
pub(super) fn bucket(
    raw: &RawLimit,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<BucketMatch> {
    let given = raw.matches.as_ref().and_then(|m| m.bucket.as_ref());
    let Some(given) = given else {
        if let Some(w) = &raw.weights {
            let message = "`weights` applies only to a rule with `match.bucket`: it weighs Envoy quota buckets in the split of the rule's rate";
            errors.at(Some(w.span()), rule, message.to_owned());
        }
        return None;
    };
    let failures = errors.found.len();
    let at = given.span();
    let m = raw.matches.as_ref()?;
    if m.domain.is_none() {
        let message = "`match.bucket` needs `match.domain`: quota buckets come over Envoy's quota service, for a domain";
        errors.at(Some(at.clone()), rule, message.to_owned());
    }
    if m.descriptor.is_some() {
        let message = "`match.bucket` and `match.descriptor` are both given: a rule takes quota buckets (`bucket`, entries in any order) or descriptors (`descriptor`, entries in order), not both";
        errors.at(Some(at.clone()), rule, message.to_owned());
    }
    let entries = match entries(given.get_ref()) {
        Ok(entries) => entries,
        Err(message) => {
            errors.at(Some(at), rule, message);
            Vec::new()
        }
    };
    let weights = raw
        .weights
        .as_ref()
        .map_or_else(Vec::new, |w| weights(w, rule, errors));
    if errors.found.len() > failures {
        return None;
    }
    Some(BucketMatch { entries, weights })
}

/// `name=api,tier`: each entry a `key=value` (the value may hold `*` globs) or a bare `key`
/// (any value), keys unique; an error message otherwise.
fn entries(text: &str) -> Result<Vec<(String, Option<String>)>, String> {
    if text.trim().is_empty() {
        return Err("`match.bucket` lists no entries: write `key=value` or a bare `key` (any value), comma-separated, such as \"name=api,tier\"".to_owned());
    }
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for (n, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        let (key, value) = match entry.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
            None => (entry, None),
        };
        if key.is_empty() {
            return Err(format!(
                "`match.bucket` entry {} (`{}`) has no key: each entry is `key=value` or a bare `key`",
                n + 1,
                entry.escape_debug()
            ));
        }
        if out.iter().any(|(k, _)| k == key) {
            return Err(format!(
                "`match.bucket` names `{}` twice: a bucket id holds one value per key, so no bucket could match",
                key.escape_debug()
            ));
        }
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

/// `weights = { "tier=gold" = 3 }`: each entry `key=value` with a weight from 1 to
/// [`MAX_WEIGHT`]; the wrong ones are recorded and left out.
fn weights(
    raw: &Spanned<BTreeMap<String, Spanned<i64>>>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    for (entry, weight) in raw.get_ref() {
        let shown = entry.escape_debug();
        let pair = entry
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, _)| !k.is_empty());
        let Some((key, value)) = pair else {
            let message = format!("`weights` entry `{shown}` is no `key=value`: a bucket weighs this much when its id holds that entry, value matched exactly (no `*` glob)");
            errors.at(Some(weight.span()), rule, message);
            continue;
        };
        let what = format!("the weight of `{shown}` in `weights`");
        match errors.whole::<u64>(weight, &what, rule, false) {
            Some(w) if w <= MAX_WEIGHT => out.push((key.to_owned(), value.to_owned(), w)),
            Some(w) => {
                let message = format!("{what} is at most {MAX_WEIGHT}, not {w}");
                errors.at(Some(weight.span()), rule, message);
            }
            None => {}
        }
    }
    // In entry order, whatever spacing the file's keys had.
    out.sort();
    out
}

/// Where a rule taking quota buckets has no rate to split: its algorithm is not one of
/// [`split_rate`]'s.
pub(super) fn no_rate(
    limit: &Limit,
    at: Range<usize>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) {
    if split_rate(limit).is_none() {
        let message = format!(
            "`match.bucket` needs an algorithm with a rate to split among the Envoys (gcra, token-bucket, leaky-bucket, fixed-window or sliding-window), not `{}`",
            limit.kind()
        );
        errors.at(Some(at), rule, message);
    }
}

/// What of `limit` Envoy's quota service splits: units per period, the period, and the
/// burst; `None` for an algorithm with no such rate (a sliding log, a queue, a quota, a
/// concurrency limit).
pub(crate) fn split_rate(limit: &Limit) -> Option<(u64, Duration, u64)> {
    match limit {
        Limit::Gcra(g) => Some((g.rate().count(), g.rate().period(), g.burst())),
        Limit::TokenBucket(t) => Some((t.rate().count(), t.rate().period(), t.burst())),
        Limit::LeakyBucket(l) => Some((l.rate().count(), l.rate().period(), l.burst())),
        Limit::FixedWindow(w) => Some((w.limit(), w.window(), w.limit())),
        Limit::SlidingWindow(w) => Some((w.limit(), w.window(), w.limit())),
        _ => None,
    }
}
