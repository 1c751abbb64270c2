//! A rule's key for a request (`name@fingerprint|part|part`) and its cost.

use std::net::IpAddr;

use super::hash::{bounded_part, push_api_key_digest};
use super::request::Repeated;
use super::{Request, RequestError};
use crate::config::{Cost, KeyPart, KeySources, Mode};
use crate::Rule;

/// `prefix|part|part`; `Ok(None)` when a part is missing from the request (the rule does
/// not apply), an error when a header it keys on is ambiguous.
pub(super) fn build_key(
    prefix: &str,
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'_>,
    client: IpAddr,
) -> Result<Option<String>, RequestError> {
    // Room for the usual parts (an address, a digest, a short name) from the start: grown
    // from the prefix's length, the key was copied twice more (500 instructions a request).
    let mut key = String::with_capacity(prefix.len() + 24 * rule.key.len());
    key.push_str(prefix);
    for part in &rule.key {
        key.push('|');
        if !push_part(&mut key, part, rule, sources, request, client)? {
            return Ok(None);
        }
    }
    Ok(Some(key))
}

/// Appends `part`'s value for `request` to `key`; false when the request lacks it, an error
/// when a header it is read from is ambiguous.
pub(super) fn push_part(
    key: &mut String,
    part: &KeyPart,
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'_>,
    client: IpAddr,
) -> Result<bool, RequestError> {
    let repeated = |header: &str| RequestError::RepeatedHeader {
        rule: rule.name.clone(),
        header: header.to_owned(),
    };
    let single = |name: &str| {
        request
            .single_header(name)
            .map_err(|Repeated| repeated(name))
    };
    match part {
        KeyPart::Ip(grouping) => crate::ip::push_ip_net(key, grouping.key(client)),
        KeyPart::Header(name) => {
            let Some(value) = single(name)?.filter(|v| !v.is_empty()) else {
                return Ok(false);
            };
            key.push_str(&bounded_part(value));
        }
        KeyPart::ApiKey => {
            let Some(token) = api_key(rule, sources, request)? else {
                return Ok(false);
            };
            push_api_key_digest(key, token);
        }
        KeyPart::Tenant => {
            let tenant = match request.tenant {
                Some(tenant) => Some(tenant),
                None => single(&sources.tenant_header)?,
            };
            let Some(tenant) = tenant.filter(|v| !v.is_empty()) else {
                return Ok(false);
            };
            key.push_str(&bounded_part(tenant));
        }
        KeyPart::Route => {
            key.push_str(&request.method.to_ascii_uppercase());
            key.push(' ');
            // The aliases the rule matches as one path share one budget too.
            if rule.matches.path_exact {
                key.push_str(&bounded_part(request.path));
            } else {
                key.push_str(&bounded_part(&crate::path::fold(request.path)));
            }
        }
        KeyPart::Global => key.push('*'),
        // Descriptors come over Envoy's protocol, never with an HTTP request.
        KeyPart::Descriptor => return Ok(false),
        KeyPart::Literal(text) => key.push_str(text),
    }
    Ok(true)
}

/// The request's API key: the caller's own `api_key`, else the bearer token or the
/// configured header. Both headers carrying different keys is an error, as is either one
/// repeated: the upstream may authenticate the other one.
pub(super) fn api_key<'a>(
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'a>,
) -> Result<Option<&'a str>, RequestError> {
    if let Some(key) = request.api_key {
        return Ok(Some(key).filter(|k| !k.is_empty()));
    }
    let repeated = |header: &str| RequestError::RepeatedHeader {
        rule: rule.name.clone(),
        header: header.to_owned(),
    };
    let bearer = request
        .single_header("authorization")
        .map_err(|Repeated| repeated("authorization"))?
        .and_then(|auth| {
            auth.strip_prefix("Bearer ")
                .or_else(|| auth.strip_prefix("bearer "))
                .map(str::trim)
        })
        .filter(|t| !t.is_empty());
    let configured = match sources.api_key_header.as_deref() {
        Some(name) => request
            .single_header(name)
            .map_err(|Repeated| repeated(name))?
            .filter(|t| !t.is_empty()),
        None => None,
    };
    match (bearer, configured) {
        (Some(a), Some(b)) if a != b => Err(RequestError::ConflictingApiKeys {
            rule: rule.name.clone(),
            header: sources.api_key_header.clone().unwrap_or_default(),
        }),
        (Some(token), _) | (None, Some(token)) => Ok(Some(token)),
        (None, None) => Ok(None),
    }
}

/// What `request` costs under `rule`.
pub(super) fn cost_of(rule: &Rule, request: &Request<'_>) -> Result<u64, RequestError> {
    match &rule.cost {
        Cost::Fixed(n) => Ok(*n),
        Cost::Header { name, max } => {
            let text =
                request
                    .single_header(name)
                    .map_err(|Repeated| RequestError::RepeatedHeader {
                        rule: rule.name.clone(),
                        header: name.clone(),
                    })?;
            let Some(text) = text else {
                return Ok(1);
            };
            let n: u64 = text.parse().map_err(|_| RequestError::Cost {
                rule: rule.name.clone(),
                header: name.clone(),
                value: text.to_owned(),
            })?;
            if n > *max {
                return Err(RequestError::CostOverMax {
                    rule: rule.name.clone(),
                    header: name.clone(),
                    claimed: n,
                    max: *max,
                });
            }
            Ok(n)
        }
    }
}

/// Whether `rule` enforces for `key`: always, never (shadow), or for a stable share of keys
/// (see [`rollout_bucket`](super::rollout_bucket)).
pub(super) fn enforces(rule: &Rule, key: &str) -> bool {
    match rule.mode {
        Mode::Enforce => true,
        Mode::Shadow => false,
        Mode::Rollout { basis_points } => u32::from(super::rollout_bucket(key)) < basis_points,
    }
}
