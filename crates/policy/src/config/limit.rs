//! A rule's algorithm and its numbers, and the share of it a local fallback decides on.

use std::ops::Range;

use ratewarden_core::{AlgorithmKind, CalendarUnit, Limit, Numbers, Rate};

use super::error::Errors;
use super::raw::RawLimit;

/// The rule's limit, `None` after recording what was wrong. `span` is the whole
/// `[[limit]]` table, for what is missing from it.
pub(super) fn limit(
    raw: &RawLimit,
    span: &Range<usize>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<Limit> {
    let kind = algorithm(raw, span, rule, errors);
    let whole = |errors: &mut Errors<'_>, field: &str, value| {
        errors.whole(Option::as_ref(value)?, &format!("`{field}`"), rule, false)
    };
    let burst = whole(errors, "burst", &raw.burst);
    let count = whole(errors, "limit", &raw.limit);
    let mut duration = |field: &str, value: &Option<_>| {
        errors.duration(value.as_ref(), &format!("`{field}`"), rule, false)
    };
    let window = duration("window", &raw.window);
    let lease = duration("lease", &raw.lease);
    let sub_windows = sub_windows(raw, rule, errors);
    let rate = raw
        .rate
        .as_ref()
        .and_then(|r| match r.get_ref().parse::<Rate>() {
            Ok(rate) => Some(rate),
            Err(e) => {
                errors.at(Some(r.span()), rule, format!("`rate`: {e}"));
                None
            }
        });
    let kind = kind?;

    // Each algorithm takes some fields and not others: a stray one is a mistake to point out,
    // and a missing one (but for the defaulted zone and lease) is named.
    let given: &[(&str, bool)] = &[
        ("rate", raw.rate.is_some()),
        ("burst", raw.burst.is_some()),
        ("limit", raw.limit.is_some()),
        ("window", raw.window.is_some()),
        ("period", raw.period.is_some()),
        ("timezone", raw.timezone.is_some()),
        ("lease", raw.lease.is_some()),
        ("sub_windows", raw.sub_windows.is_some()),
    ];
    let takes = kind.fields();
    for (field, _) in given.iter().filter(|(f, g)| *g && !takes.contains(f)) {
        errors.at(
            Some(span.clone()),
            rule,
            format!(
                "`{field}` does not apply to `{kind}`, which takes {}",
                match takes.split_last() {
                    Some((last, rest)) if rest.len() > 1 =>
                        format!("{} and {last}", rest.join(", ")),
                    _ => takes.join(" and "),
                }
            ),
        );
    }
    let mut missing = false;
    for field in takes {
        let required = !matches!(*field, "timezone" | "lease" | "sub_windows");
        if required && !given.iter().any(|(f, g)| f == field && *g) {
            errors.at(
                Some(span.clone()),
                rule,
                format!("`{kind}` needs `{field}`"),
            );
            missing = true;
        }
    }
    if missing {
        return None;
    }
    let period = raw.period.as_ref().and_then(|p| {
        p.get_ref()
            .parse::<CalendarUnit>()
            .map_err(|e| errors.at(Some(p.span()), rule, format!("`period`: {e}")))
            .ok()
    });
    let numbers = Numbers {
        limit: count,
        window,
        rate,
        burst,
        period,
        timezone: raw.timezone.as_ref().map(|t| t.get_ref().clone()),
        lease,
        sub_windows,
    };
    // A number already found wrong is absent here: its error is recorded, not repeated.
    if takes
        .iter()
        .any(|f| *f != "timezone" && *f != "lease" && absent(&numbers, f))
    {
        return None;
    }
    match Limit::build(kind, &numbers) {
        Ok(limit) => Some(limit),
        Err(e @ ratewarden_core::Error::TimeZone { .. }) => {
            let at = raw.timezone.as_ref().map(|t| t.span());
            errors.at(at, rule, format!("`timezone`: {e}"));
            None
        }
        Err(
            e @ ratewarden_core::Error::TooLarge {
                field: "sub_windows",
                ..
            },
        ) => {
            let at = raw.sub_windows.as_ref().map(|t| t.span());
            errors.at(at, rule, format!("`sub_windows`: {e}"));
            None
        }
        Err(e) => {
            errors.at(Some(span.clone()), rule, e.to_string());
            None
        }
    }
}

/// `sub_windows`, from 1 to [`MAX_SUB_WINDOWS`](ratewarden_core::algorithm::MAX_SUB_WINDOWS),
/// `None` after recording what was wrong (or when absent).
fn sub_windows(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> Option<u32> {
    let value = raw.sub_windows.as_ref()?;
    let max = ratewarden_core::algorithm::MAX_SUB_WINDOWS;
    match u32::try_from(*value.get_ref()) {
        Ok(n @ 1..) if n <= max => Some(n),
        _ => {
            errors.at(
                Some(value.span()),
                rule,
                format!(
                    "`sub_windows` must be a whole number from 1 to {max}, got {}",
                    value.get_ref()
                ),
            );
            None
        }
    }
}

fn absent(numbers: &Numbers, field: &str) -> bool {
    match field {
        "limit" => numbers.limit.is_none(),
        "window" => numbers.window.is_none(),
        "rate" => numbers.rate.is_none(),
        "burst" => numbers.burst.is_none(),
        "period" => numbers.period.is_none(),
        _ => false,
    }
}

fn algorithm(
    raw: &RawLimit,
    span: &Range<usize>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<AlgorithmKind> {
    let names = || {
        AlgorithmKind::ALL
            .map(|k| k.as_str())
            .into_iter()
            .chain([super::adaptive::ADAPTIVE_CONCURRENCY])
            .collect::<Vec<_>>()
    };
    let Some(a) = &raw.algorithm else {
        let message = format!("`algorithm` is missing; one of: {}", names().join(", "));
        errors.at(Some(span.clone()), rule, message);
        return None;
    };
    let given = a.get_ref();
    let kind = crate::hint::algorithm(given);
    if kind.is_none() {
        let hint = crate::hint::algorithm_hint(given, names());
        let message = format!(
            "`algorithm`: unknown algorithm `{given}`; known algorithms: {}{hint}",
            names().join(", ")
        );
        errors.at(Some(a.span()), rule, message);
    }
    kind
}

/// `limit` at `1 / n` of its size (never below one unit), for a local fallback shared by `n`
/// instances.
pub(super) fn divided(limit: &Limit, n: u32) -> Limit {
    let n = u64::from(n.max(1));
    let share = |x: u64| (x / n).max(1);
    let rate = |r: Rate| {
        // The same period, a share of the count; a count below one per period becomes one
        // per `n` periods.
        if r.count() >= n {
            Rate::new(r.count() / n, r.period())
        } else {
            Rate::new(
                1,
                r.period()
                    .saturating_mul(u32::try_from(n / r.count()).unwrap_or(u32::MAX)),
            )
        }
        .unwrap_or(r)
    };
    let mut numbers = limit.numbers();
    numbers.limit = numbers.limit.map(share);
    numbers.rate = numbers.rate.map(rate);
    // A leaky queue's burst is how many may wait, and none waiting is a valid share.
    numbers.burst = match limit {
        Limit::LeakyQueue(_) => numbers.burst.map(|b| b / n),
        _ => numbers.burst.map(share),
    };
    Limit::build(limit.kind(), &numbers).unwrap_or_else(|_| limit.clone())
}
