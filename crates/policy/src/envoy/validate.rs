//! The file's shape checked against envoyproxy/ratelimit's: its keys, their types, and the
//! descriptor tree with its duplicates.

use std::collections::HashMap;

use super::errors::Errors;
use super::fields::{boolean, fields, is_null, string};
use super::model::composite;
use super::rule::{extension, rate_limit};
use super::yaml::{Node, Yaml};
use super::{Descriptor, Domain};

const ROOT_KEYS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "ratewarden",
];

pub(super) fn validate_root(root: &Node, errors: &mut Errors<'_>) -> Option<(String, Domain)> {
    let fields = fields(root, "the file", ROOT_KEYS, None, errors)?;
    let domain = match fields.get("domain") {
        None => {
            errors.at(root.at, None, "`domain` is missing".to_owned());
            None
        }
        Some(node) => match string(node, "domain", None, errors) {
            Some(name) if name.is_empty() => {
                errors.at(node.at, None, "`domain` must not be empty".to_owned());
                None
            }
            Some(name) => Some((name, node.at)),
            None => None,
        },
    };
    let parent = domain.as_ref().map_or("?", |(d, _)| d.as_str()).to_owned();
    let (descriptors, exact, wildcards) = match fields.get("descriptors") {
        None => (Vec::new(), HashMap::new(), Vec::new()),
        Some(list) => level(list, &parent, errors),
    };
    let (name, position) = domain?;
    Some((
        name,
        Domain {
            file: errors.file.to_owned(),
            position,
            descriptors,
            exact,
            wildcards,
        },
    ))
}

type Level = (Vec<Descriptor>, HashMap<String, usize>, Vec<usize>);

/// A `descriptors` list under `parent` (the parent's full key, `domain.key_value`).
fn level(list: &Node, parent: &str, errors: &mut Errors<'_>) -> Level {
    let mut nodes = Vec::new();
    let mut exact = HashMap::new();
    let mut wildcards = Vec::new();
    let items: &[Node] = match &list.yaml {
        Yaml::List(items) => items,
        Yaml::Scalar { text, plain } if is_null(text, *plain) => &[],
        _ => {
            errors.at(
                list.at,
                Some(parent),
                "`descriptors` must be a list of descriptors".to_owned(),
            );
            &[]
        }
    };
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    for item in items {
        let Some(node) = descriptor(item, parent, errors) else {
            continue;
        };
        let composite = node.composite();
        if let Some((line, col)) = seen.get(&composite) {
            errors.at(
                node.position,
                Some(&format!("{parent}.{composite}")),
                format!(
                    "duplicate descriptor: another one with key `{}`{} is at line {line}, column {col}",
                    node.key,
                    if node.value.is_empty() {
                        " and no value".to_owned()
                    } else {
                        format!(" and value `{}`", node.value)
                    }
                ),
            );
            continue;
        }
        seen.insert(composite.clone(), node.position);
        if node.is_wildcard() {
            wildcards.push(nodes.len());
        }
        exact.insert(composite, nodes.len());
        nodes.push(node);
    }
    (nodes, exact, wildcards)
}

fn descriptor(item: &Node, parent: &str, errors: &mut Errors<'_>) -> Option<Descriptor> {
    let failures = errors.found.len();
    let parent_rule = Some(parent);
    let fields = fields(item, "a descriptor", DESCRIPTOR_KEYS, parent_rule, errors)?;
    let key = match fields.get("key") {
        None => {
            errors.at(
                item.at,
                parent_rule,
                "a descriptor needs a `key`".to_owned(),
            );
            None
        }
        Some(node) => match string(node, "key", parent_rule, errors) {
            Some(k) if k.is_empty() => {
                errors.at(node.at, parent_rule, "`key` must not be empty".to_owned());
                None
            }
            other => other,
        },
    };
    let value = fields
        .get("value")
        .and_then(|v| string(v, "value", parent_rule, errors))
        .unwrap_or_default();
    let full = format!(
        "{parent}.{}",
        composite(key.as_deref().unwrap_or("?"), &value)
    );
    let rule_name = Some(full.as_str());
    let flag = |errors: &mut Errors<'_>, name: &str| {
        fields
            .get(name)
            .is_some_and(|n| boolean(n, name, rule_name, errors))
    };
    let shadow_mode = flag(errors, "shadow_mode");
    let quota_mode = flag(errors, "quota_mode");
    let detailed_metric = flag(errors, "detailed_metric");
    let value_to_metric = flag(errors, "value_to_metric");
    let share_threshold = flag(errors, "share_threshold");
    let mut rule = fields
        .get("rate_limit")
        .and_then(|r| rate_limit(r, rule_name, errors));
    if let Some(ext) = fields.get("ratewarden") {
        match &mut rule {
            Some(rule) if rule.limit.is_some() => {
                if let Some((limit, always_charge)) = extension(ext, rule, rule_name, errors) {
                    rule.limit = Some(limit);
                    rule.always_charge = always_charge;
                }
            }
            Some(rule) => {
                let why = if rule.unlimited {
                    "an unlimited rule"
                } else {
                    "a rule of 0 requests"
                };
                errors.at(
                    ext.at,
                    rule_name,
                    format!("`ratewarden` cannot choose an algorithm for {why}"),
                );
            }
            None if fields.contains_key("rate_limit") => {}
            None => errors.at(
                ext.at,
                rule_name,
                "`ratewarden` needs a `rate_limit` on the same descriptor".to_owned(),
            ),
        }
    }
    let (descriptors, exact, wildcards) = match fields.get("descriptors") {
        Some(list) => level(list, &full, errors),
        None => (Vec::new(), HashMap::new(), Vec::new()),
    };
    if errors.found.len() > failures {
        return None;
    }
    Some(Descriptor {
        key: key?,
        value,
        rule,
        descriptors,
        shadow_mode,
        quota_mode,
        detailed_metric,
        value_to_metric,
        share_threshold,
        position: item.at,
        exact,
        wildcards,
    })
}
