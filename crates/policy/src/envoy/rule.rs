//! A `rate_limit` block and its `ratewarden` extension, validated into a rule.

use std::collections::HashMap;
use std::time::Duration;

use ratewarden_core::{AlgorithmKind, CalendarUnit, Limit, Numbers, Rate};

use super::errors::Errors;
use super::fields::{
    boolean, fields, is_null, number, string, EXTENSION_KEYS, RATE_LIMIT_KEYS, REPLACES_KEYS,
};
use super::resolve::fixed_window;
use super::yaml::{Node, Yaml};
use super::{EnvoyRule, Unit};
use crate::hint::did_you_mean;

pub(super) fn rate_limit(
    node: &Node,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<EnvoyRule> {
    let failures = errors.found.len();
    let fields = fields(node, "`rate_limit`", RATE_LIMIT_KEYS, rule, errors)?;
    let unlimited = fields
        .get("unlimited")
        .is_some_and(|n| boolean(n, "unlimited", rule, errors));
    let unit = match fields.get("unit") {
        Some(u) => match string(u, "unit", rule, errors) {
            // An empty unit is no unit, as for envoyproxy/ratelimit.
            Some(text) if text.is_empty() => None,
            Some(text) => match Unit::parse(&text) {
                Some(unit) if unlimited => {
                    errors.at(
                        u.at,
                        rule,
                        format!("`unit: {unit}` must not be given with `unlimited: true`"),
                    );
                    None
                }
                Some(unit) => Some(unit),
                None => {
                    let hint =
                        did_you_mean(&text.to_ascii_lowercase(), Unit::ALL.map(|u| u.as_str()));
                    errors.at(
                        u.at,
                        rule,
                        format!(
                            "unknown `unit` `{text}`: use second, minute, hour, day, week, month or year{hint}"
                        ),
                    );
                    None
                }
            },
            None => None,
        },
        None => None,
    };
    if unit.is_none() && !unlimited && errors.found.len() == failures {
        errors.at(
            node.at,
            rule,
            "`rate_limit` needs a `unit` (second, minute, hour, day, week, month or year), or `unlimited: true`".to_owned(),
        );
    }
    let requests_per_unit = fields
        .get("requests_per_unit")
        .and_then(|n| number(n, "requests_per_unit", u64::from(u32::MAX), rule, errors))
        .map_or(0, |n| n as u32);
    let name = fields
        .get("name")
        .and_then(|n| string(n, "name", rule, errors))
        .filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    if let Some(list) = fields.get("replaces") {
        match &list.yaml {
            Yaml::List(items) => {
                for item in items {
                    let before = errors.found.len();
                    let Some(f) = fields_of_replaces(item, rule, errors) else {
                        continue;
                    };
                    if errors.found.len() > before {
                        continue;
                    }
                    let replaced = f
                        .get("name")
                        .and_then(|n| string(n, "name", rule, errors))
                        .unwrap_or_default();
                    if replaced.is_empty() {
                        errors.at(
                            item.at,
                            rule,
                            "a `replaces` entry needs a non-empty `name`".to_owned(),
                        );
                    } else if name.as_deref() == Some(replaced.as_str()) {
                        errors.at(
                            f.get("name").map_or(item.at, |n| n.at),
                            rule,
                            format!("`replaces` names this rule's own name `{replaced}`"),
                        );
                    } else {
                        replaces.push(replaced);
                    }
                }
            }
            Yaml::Scalar { text, plain } if is_null(text, *plain) => {}
            _ => errors.at(
                list.at,
                rule,
                "`replaces` must be a list of `- name: …` entries".to_owned(),
            ),
        }
    }
    if errors.found.len() > failures {
        return None;
    }
    let limit = match unit {
        Some(unit) if !unlimited => fixed_window(requests_per_unit, unit),
        _ => None,
    };
    Some(EnvoyRule {
        name,
        unit,
        requests_per_unit,
        unlimited,
        replaces,
        limit,
        always_charge: false,
    })
}

fn fields_of_replaces<'n>(
    item: &'n Node,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<HashMap<&'n str, &'n Node>> {
    fields(item, "a `replaces` entry", REPLACES_KEYS, rule, errors)
}

/// The `ratewarden` map: another algorithm for `rule` (which has a unit and requests), and
/// whether refused calls are charged all the same.
pub(super) fn extension(
    node: &Node,
    rule: &EnvoyRule,
    name: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<(Limit, bool)> {
    let failures = errors.found.len();
    let fields = fields(node, "`ratewarden`", EXTENSION_KEYS, name, errors)?;
    let unit = rule.unit?;
    let n = u64::from(rule.requests_per_unit);
    let window = Duration::from_secs(unit.divider());
    let kind = match fields.get("algorithm") {
        None => AlgorithmKind::FixedWindow,
        Some(a) => {
            let text = string(a, "algorithm", name, errors)?;
            match crate::hint::algorithm(&text).ok_or(()) {
                Ok(AlgorithmKind::Concurrency) => {
                    errors.at(
                        a.at,
                        name,
                        "`algorithm: concurrency` is not a rate; use it in the native TOML config"
                            .to_owned(),
                    );
                    return None;
                }
                Ok(kind) => kind,
                Err(_) => {
                    let known: Vec<&str> = AlgorithmKind::ALL
                        .iter()
                        .filter(|k| **k != AlgorithmKind::Concurrency)
                        .map(|k| k.as_str())
                        .collect();
                    let hint = crate::hint::algorithm_hint(&text, known.iter().copied());
                    errors.at(
                        a.at,
                        name,
                        format!(
                            "unknown `algorithm` `{text}`: use {}{hint}",
                            known.join(", ")
                        ),
                    );
                    return None;
                }
            }
        }
    };
    let burst = fields.get("burst").and_then(|b| {
        if !kind.is_bucket() {
            errors.at(
                b.at,
                name,
                format!("`burst` does not apply to `{kind}`; only to token-bucket, leaky-bucket, leaky-queue and gcra"),
            );
            return None;
        }
        match number(b, "burst", u64::MAX, name, errors) {
            Some(0) => {
                errors.at(b.at, name, "`burst` must be above zero".to_owned());
                None
            }
            other => other,
        }
    });
    let timezone = fields.get("timezone").and_then(|t| {
        if kind != AlgorithmKind::Quota {
            errors.at(
                t.at,
                name,
                format!("`timezone` does not apply to `{kind}`; only to quota"),
            );
            return None;
        }
        string(t, "timezone", name, errors).map(|tz| (tz, t.at))
    });
    let always_charge = fields.get("always_charge").is_some_and(|a| {
        let given = boolean(a, "always_charge", name, errors);
        if given && kind == AlgorithmKind::LeakyQueue {
            errors.at(
                a.at,
                name,
                format!("`always_charge` does not apply to `{kind}`: its units are queued per request, not spent"),
            );
        }
        given
    });
    if errors.found.len() > failures {
        return None;
    }
    let at = fields.get("algorithm").map_or(node.at, |a| a.at);
    let (timezone, tz_at) = match timezone {
        Some((tz, tz_at)) => (Some(tz), tz_at),
        None => (None, at),
    };
    let numbers = Numbers {
        limit: Some(n),
        window: Some(window),
        // `n` is above zero here (a rule of 0 requests has no limit to choose for).
        rate: Rate::new(n, window).ok(),
        burst: Some(burst.unwrap_or(n)),
        period: Some(calendar(unit)),
        timezone,
        lease: None,
        sub_windows: None,
    };
    match Limit::build(kind, &numbers) {
        Ok(limit) => Some((limit, always_charge)),
        Err(e @ ratewarden_core::Error::TimeZone { .. }) => {
            errors.at(tz_at, name, format!("`timezone`: {e}"));
            None
        }
        Err(e) => {
            errors.at(at, name, format!("`ratewarden`: {e}"));
            None
        }
    }
}

/// The calendar unit a `quota` counts in: envoyproxy/ratelimit's unit, but a real month and
/// year rather than 30 and 365 days.
fn calendar(unit: Unit) -> CalendarUnit {
    match unit {
        Unit::Second => CalendarUnit::Second,
        Unit::Minute => CalendarUnit::Minute,
        Unit::Hour => CalendarUnit::Hour,
        Unit::Day => CalendarUnit::Day,
        Unit::Week => CalendarUnit::Week,
        Unit::Month => CalendarUnit::Month,
        Unit::Year => CalendarUnit::Year,
    }
}
