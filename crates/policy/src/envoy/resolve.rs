//! Request descriptors resolved to rules exactly as envoyproxy/ratelimit's `GetLimit` does,
//! and its statuses combined as it combines them.

use std::collections::HashSet;
use std::time::Duration;

use ratewarden_core::{FixedWindow, Limit};

use super::model::push_composite;
use super::{Descriptor, EnvoyConfig, RateLimitOverride, Resolved, Unit};

/// Drops (sets to `None`) every rule whose `name` is in the `replaces` of a rule resolved for
/// the same request (README Example 7). Names are collected from every rule first, so a rule
/// that is itself replaced still replaces others.
pub fn apply_replaces(resolved: &mut [Option<Resolved>]) {
    // A set: every descriptor of a call may name rules it replaces, and a list searched
    // per descriptor would make the call quadratic in what it carries.
    let replaced: HashSet<String> = resolved
        .iter()
        .flatten()
        .flat_map(|r| r.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    for slot in resolved.iter_mut() {
        let gone = slot
            .as_ref()
            .and_then(|r| r.name.as_ref())
            .is_some_and(|n| replaced.contains(n));
        if gone {
            *slot = None;
        }
    }
}

/// The overall code of a request, true for OVER_LIMIT, as envoyproxy/ratelimit combines its
/// descriptors: each item is a descriptor's rule (after [`apply_replaces`]) and whether its
/// counter went over the limit. A shadow-mode rule always reports OK; the request is over
/// when any other rule without `quota_mode` is over, or when there is at least one
/// quota-mode rule and every quota-mode rule reports over. Descriptors without a rule and
/// unlimited rules are OK. The global `SHADOW_MODE` / `QUOTA_MODE` switches are the caller's.
pub fn overall<'a>(statuses: impl IntoIterator<Item = (Option<&'a Resolved>, bool)>) -> bool {
    let (mut quota_rules, mut quota_over) = (0usize, 0usize);
    for (rule, over) in statuses {
        let Some(rule) = rule else { continue };
        let reported = over && !rule.shadow_mode && !rule.unlimited;
        if rule.quota_mode {
            quota_rules += 1;
            quota_over += usize::from(reported);
        } else if reported {
            return true;
        }
    }
    quota_rules > 0 && quota_over == quota_rules
}

impl EnvoyConfig {
    /// The rule for one request descriptor of `domain`, as envoyproxy/ratelimit's `GetLimit`
    /// finds it from configuration (see the module docs); `None` for no limit (unknown
    /// domain, no match, a depth mismatch, a whitelisting node, no entries).
    pub fn resolve(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Resolved> {
        let d = self.domains.get(domain)?;
        let (mut nodes, mut exact, mut wildcards) = (&d.descriptors, &d.exact, &d.wildcards);
        let mut found: Option<&Descriptor> = None;
        let mut shared: Vec<Option<&str>> = Vec::with_capacity(entries.len());
        // Sized once for the usual path: each string is built without growing.
        let length: usize = entries.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let mut stats = String::with_capacity(domain.len() + length + 1);
        stats.push_str(domain);
        let mut label = String::with_capacity(domain.len() + length);
        label.push_str(domain);
        let mut wanted = String::with_capacity(length);
        let last = entries.len().checked_sub(1)?;
        for (i, (key, value)) in entries.iter().enumerate() {
            wanted.clear();
            wanted.push_str(key);
            wanted.push('_');
            wanted.push_str(value);
            let by_value = exact.get(&wanted).map(|&n| &nodes[n]);
            let by_pattern = || {
                wildcards
                    .iter()
                    .map(|&n| &nodes[n])
                    .find(|n| glob(&n.composite(), &wanted))
            };
            let by_key = || exact.get(*key).map(|&n| &nodes[n]);
            let Some(node) = by_value.or_else(by_pattern).or_else(by_key) else {
                break;
            };
            shared
                .push((node.share_threshold && node.is_wildcard()).then_some(node.value.as_str()));
            stats.push('.');
            label.push('/');
            node.push_label_step(&mut label);
            if node.value_to_metric {
                push_composite(&mut stats, key, value);
            } else {
                push_composite(&mut stats, &node.key, &node.value);
            }
            if node.rule.is_some() && i == last {
                found = Some(node);
            }
            if node.descriptors.is_empty() {
                if found.is_some() && node.detailed_metric {
                    stats.push('_');
                    stats.push_str(value);
                }
                break;
            }
            (nodes, exact, wildcards) = (&node.descriptors, &node.exact, &node.wildcards);
        }
        let node = found?;
        let rule = node.rule.as_ref()?;
        let mut key = String::with_capacity(domain.len() + 1 + length);
        key.push_str(domain);
        key.push('_');
        for (i, (k, v)) in entries.iter().enumerate() {
            key.push_str(k);
            key.push('_');
            key.push_str(shared.get(i).copied().flatten().unwrap_or(v));
            key.push('_');
        }
        Some(Resolved {
            name: rule.name.clone(),
            unit: rule.unit,
            requests_per_unit: rule.requests_per_unit,
            unlimited: rule.unlimited,
            shadow_mode: node.shadow_mode,
            quota_mode: node.quota_mode,
            replaces: rule.replaces.clone(),
            detailed_metric: node.detailed_metric,
            value_to_metric: node.value_to_metric,
            limit: rule.limit.clone(),
            always_charge: rule.always_charge,
            key,
            stats_key: stats,
            label: Some(label),
        })
    }

    /// The rule for a request descriptor that carries its own `limit`: it bypasses the
    /// configuration (no shadow mode, no name, no replaces; envoyproxy/ratelimit's fixed
    /// window), keyed by the descriptor's entries. `None` when `domain` is not configured, as
    /// envoyproxy/ratelimit looks the domain up first.
    pub fn resolve_override(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        limit: RateLimitOverride,
    ) -> Option<Resolved> {
        self.domains.get(domain)?;
        let mut key = format!("{domain}_");
        let mut stats = format!("{domain}.");
        for (i, (k, v)) in entries.iter().enumerate() {
            key.push_str(k);
            key.push('_');
            key.push_str(v);
            key.push('_');
            if i > 0 {
                stats.push('.');
            }
            push_composite(&mut stats, k, v);
        }
        Some(Resolved {
            name: None,
            unit: Some(limit.unit),
            requests_per_unit: limit.requests_per_unit,
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            replaces: Vec::new(),
            detailed_metric: false,
            value_to_metric: false,
            limit: fixed_window(limit.requests_per_unit, limit.unit),
            always_charge: false,
            key,
            stats_key: stats,
            // Its values come from the request: a label each would let callers grow the
            // metrics without bound.
            label: None,
        })
    }
}

/// envoyproxy/ratelimit's fixed window: `None` for a limit of 0.
pub(super) fn fixed_window(requests: u32, unit: Unit) -> Option<Limit> {
    FixedWindow::new(u64::from(requests), Duration::from_secs(unit.divider()))
        .ok()
        .map(Limit::from)
}

/// Whether `text` matches `pattern`, each `*` standing for zero or more characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut tail: Option<&str> = None;
    for part in parts {
        if let Some(middle) = tail {
            match rest.find(middle) {
                Some(at) => rest = &rest[at + middle.len()..],
                None => return false,
            }
        }
        tail = Some(part);
    }
    match tail {
        None => rest.is_empty(),
        Some(end) => rest.ends_with(end),
    }
}
