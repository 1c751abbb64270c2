//! A YAML map's fields read as envoyproxy/ratelimit's schema says: known keys only, each
//! once, each of its type, every error at its line and column.

use std::collections::HashMap;

use super::errors::Errors;
use super::yaml::{Node, Yaml};
use crate::hint::did_you_mean;

pub(super) const RATE_LIMIT_KEYS: &[&str] =
    &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
pub(super) const REPLACES_KEYS: &[&str] = &["name"];
pub(super) const EXTENSION_KEYS: &[&str] = &["algorithm", "burst", "timezone", "always_charge"];

/// A map's entries by key, after rejecting unknown and repeated keys. `what` names the map in
/// messages ("a descriptor").
pub(super) fn fields<'n>(
    node: &'n Node,
    what: &str,
    known: &[&str],
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<HashMap<&'n str, &'n Node>> {
    let Yaml::Map(pairs) = &node.yaml else {
        errors.at(node.at, rule, format!("{what} must be a map"));
        return None;
    };
    let mut found: HashMap<&str, &Node> = HashMap::new();
    let mut first: HashMap<&str, (usize, usize)> = HashMap::new();
    for (k, v) in pairs {
        let Yaml::Scalar { text, .. } = &k.yaml else {
            errors.at(k.at, rule, format!("{what} has a key that is not a string"));
            continue;
        };
        let name = text.as_str();
        if !known.contains(&name) {
            let hint = did_you_mean(name, known.iter().copied());
            errors.at(
                k.at,
                rule,
                format!(
                    "unknown key `{name}` in {what}; expected one of {}{hint}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        }
        if let Some((line, col)) = first.get(name) {
            errors.at(
                k.at,
                rule,
                format!("`{name}` is given twice in {what} (first at line {line}, column {col})"),
            );
            continue;
        }
        first.insert(name, k.at);
        found.insert(name, v);
    }
    Some(found)
}

pub(super) fn is_null(text: &str, plain: bool) -> bool {
    plain && matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A string field: any scalar's text (Go's yaml.v2 reads `123` into a string as "123"); null
/// is empty.
pub(super) fn string(
    node: &Node,
    field: &str,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<String> {
    match &node.yaml {
        Yaml::Scalar { text, plain } if is_null(text, *plain) => Some(String::new()),
        Yaml::Scalar { text, .. } => Some(text.clone()),
        _ => {
            errors.at(node.at, rule, format!("`{field}` must be a string"));
            None
        }
    }
}

/// A boolean field, with YAML 1.1's spellings as Go's yaml.v2 reads them.
pub(super) fn boolean(
    node: &Node,
    field: &str,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> bool {
    if let Yaml::Scalar { text, plain: true } = &node.yaml {
        match text.as_str() {
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
                return true
            }
            "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
            | "N" | "" | "~" | "null" | "Null" | "NULL" => return false,
            _ => {}
        }
    }
    let shown = match &node.yaml {
        Yaml::Scalar { text, .. } => format!("`{text}`"),
        _ => "a list or map".to_owned(),
    };
    errors.at(
        node.at,
        rule,
        format!("`{field}` must be true or false, not {shown}"),
    );
    false
}

/// A whole number in `0..=max`.
pub(super) fn number(
    node: &Node,
    field: &str,
    max: u64,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<u64> {
    let text = match &node.yaml {
        Yaml::Scalar { text, .. } => text.as_str(),
        _ => "",
    };
    let digits = text.strip_prefix('+').unwrap_or(text).replace('_', "");
    match digits.parse::<u64>() {
        Ok(n) if n <= max => Some(n),
        _ => {
            let shown = if text.is_empty() {
                "nothing".to_owned()
            } else {
                text.to_owned()
            };
            errors.at(
                node.at,
                rule,
                format!("`{field}` must be a whole number from 0 to {max}, not {shown}"),
            );
            None
        }
    }
}
