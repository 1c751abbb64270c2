//! A rule's key for a request (`name@fingerprint|part|part`) and its cost.

use std::borrow::Cow;
use std::net::IpAddr;

use super::credentials::{self, Credentials};
use super::hash::{bounded_part, push_api_key_digest};
use super::{Repeated, Request};
use crate::config::{BodyTerm, Cost, KeyPart, KeySources, Mode, Rule, WhenKeyMissing};
use crate::engine::error::RequestError;

/// `prefix|part|part`; when a part is missing from the request, what the rule's
/// `when_key_missing` says: the client's address in its place under `prefix~client`
/// (`Some`), the rule does not apply (`Ok(None)`), or an error. An error too when a header
/// it keys on is ambiguous.
pub(crate) fn build_key(
    prefix: &str,
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'_>,
    client: IpAddr,
) -> Result<Option<String>, RequestError> {
    // Room for the usual parts (an address, a digest, a short name) from the start, so the
    // key is not copied again as it grows past the prefix's length.
    let mut key = String::with_capacity(prefix.len() + 24 * rule.key.len());
    key.push_str(prefix);
    let mut stood_in = false;
    for part in &rule.key {
        key.push('|');
        let at = key.len();
        if push_part(&mut key, part, rule, sources, request, client)? {
            continue;
        }
        key.truncate(at);
        match rule.when_key_missing {
            // Descriptors come over Envoy's protocol, never with an HTTP request: such a
            // rule never counts HTTP traffic.
            _ if matches!(part, KeyPart::Descriptor | KeyPart::Bucket) => return Ok(None),
            WhenKeyMissing::Skip => return Ok(None),
            WhenKeyMissing::Refuse => {
                return Err(RequestError::MissingKeyPart {
                    rule: rule.name.clone(),
                    part: part_words(part, sources),
                })
            }
            WhenKeyMissing::Client(grouping) => {
                crate::ip::push_ip_net(&mut key, grouping.key(client));
                stood_in = true;
            }
        }
    }
    if stood_in {
        // Marked before the first `|`, where nothing a request sends is written: a header
        // holding an address must not share the budget of the client without the header.
        key.insert_str(prefix.len(), STOOD_IN);
    }
    Ok(Some(key))
}

/// What follows a rule's `name@fingerprint` in a key where the client's address stood in
/// for a missing part.
pub(crate) const STOOD_IN: &str = "~client";

/// A key part in words, for a request that lacks it: what to send.
pub(crate) fn part_words(part: &KeyPart, sources: &KeySources) -> String {
    match part {
        KeyPart::ApiKey => {
            match &sources.api_key_header {
                Some(header) => {
                    format!("api_key (an `Authorization` credential such as `Bearer TOKEN`, or `{header}`)")
                }
                None => "api_key (an `Authorization` credential such as `Bearer TOKEN`)".to_owned(),
            }
        }
        KeyPart::Tenant => format!("tenant (the `{}` header)", sources.tenant_header),
        KeyPart::Descriptor => "descriptor (only Envoy descriptors carry one)".to_owned(),
        KeyPart::Bucket => "bucket (only Envoy quota buckets carry one)".to_owned(),
        KeyPart::ClientCert => "client_cert (a TLS client certificate, on a listener whose \
             `[tls.*]` section has a `client_ca`)"
            .to_owned(),
        other => other.to_string(),
    }
}

/// Appends `part`'s value for `request` to `key`; false when the request lacks it, an error
/// when a header it is read from is ambiguous.
pub(crate) fn push_part(
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
            push_api_key_digest(key, &token);
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
        KeyPart::ClientCert => {
            let Some(subject) = request.client_cert.filter(|s| !s.is_empty()) else {
                return Ok(false);
            };
            key.push_str(&bounded_part(subject));
        }
        // Descriptors and quota buckets come over Envoy's protocols, never with an HTTP
        // request.
        KeyPart::Descriptor | KeyPart::Bucket => return Ok(false),
        KeyPart::Literal(text) => key.push_str(text),
        KeyPart::Json(path) => {
            let Some(value) = json_part(path, request) else {
                return Ok(false);
            };
            key.push_str(&bounded_part(&value));
        }
    }
    Ok(true)
}

/// The request's API key: the caller's own `api_key`, else the bearer token or the
/// configured header, else another scheme's credential (`basic dXNlcjpwYXNz`: the scheme
/// lowercase). Both headers carrying different keys is an error, as is either one
/// repeated (the upstream may authenticate the other one), and an `Authorization` that
/// cannot be read one way (see [`credentials`](super::credentials)).
pub(crate) fn api_key<'a>(
    rule: &Rule,
    sources: &KeySources,
    request: &Request<'a>,
) -> Result<Option<Cow<'a, str>>, RequestError> {
    if let Some(key) = request.api_key {
        return Ok(Some(Cow::Borrowed(key)).filter(|k| !k.is_empty()));
    }
    let repeated = |header: &str| RequestError::RepeatedHeader {
        rule: rule.name.clone(),
        header: header.to_owned(),
    };
    let credentials = match request
        .single_header("authorization")
        .map_err(|Repeated| repeated("authorization"))?
    {
        Some(value) if !value.is_empty() => {
            credentials::parse(value).map_err(|reason| RequestError::Credentials {
                rule: rule.name.clone(),
                reason,
            })?
        }
        _ => Credentials::Nameless,
    };
    let configured = match sources.api_key_header.as_deref() {
        Some(name) => request
            .single_header(name)
            .map_err(|Repeated| repeated(name))?
            .filter(|t| !t.is_empty()),
        None => None,
    };
    match (credentials, configured) {
        (Credentials::Bearer(a), Some(b)) if a != b => Err(RequestError::ConflictingApiKeys {
            rule: rule.name.clone(),
            header: sources.api_key_header.clone().unwrap_or_default(),
        }),
        (Credentials::Bearer(token), _) | (_, Some(token)) => Ok(Some(Cow::Borrowed(token))),
        (Credentials::Other(key), None) => Ok(Some(key)),
        (Credentials::Nameless, None) => Ok(None),
    }
}

/// What `request` costs under `rule`.
pub(crate) fn cost_of(rule: &Rule, request: &Request<'_>) -> Result<u64, RequestError> {
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
        Cost::Body { terms, max } => {
            let Some(claimed) = request.body.and_then(|body| body_estimate(terms, body)) else {
                return Ok(*max);
            };
            if claimed > *max {
                let estimate: Vec<String> = terms.iter().map(ToString::to_string).collect();
                return Err(RequestError::BodyCostOverMax {
                    rule: rule.name.clone(),
                    estimate: estimate.join(" + "),
                    claimed,
                    max: *max,
                });
            }
            Ok(claimed)
        }
    }
}

/// The text of the JSON body's string or number at `path`, for a key part: `None` when the
/// body was not read, is not JSON, or holds no such value (or an empty string).
pub(crate) fn json_part(path: &crate::usage::UsagePath, request: &Request<'_>) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(request.body?).ok()?;
    match path.value(&body)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The estimate `terms` add up to for `body`: `None` when a field is missing or not a
/// whole number (or the body is not JSON), and the rule then charges its `max_cost`.
fn body_estimate(terms: &[BodyTerm], body: &[u8]) -> Option<u64> {
    let mut json: Option<Option<serde_json::Value>> = None;
    let mut sum: u64 = 0;
    for term in terms {
        let n = match term {
            BodyTerm::Fixed(n) => *n,
            BodyTerm::Bytes(per) => (body.len() as u64).div_ceil(*per),
            BodyTerm::Field(path) => {
                let value = json.get_or_insert_with(|| serde_json::from_slice(body).ok());
                path.read(value.as_ref()?)?
            }
        };
        sum = sum.saturating_add(n);
    }
    Some(sum)
}

/// Whether `rule` enforces for `key`: always, never (shadow), or for a stable share of keys
/// (see [`rollout_bucket`](super::rollout_bucket)).
pub(crate) fn enforces(rule: &Rule, key: &str) -> bool {
    match rule.mode {
        Mode::Enforce => true,
        Mode::Shadow => false,
        Mode::Rollout { basis_points } => u32::from(super::rollout_bucket(key)) < basis_points,
    }
}
