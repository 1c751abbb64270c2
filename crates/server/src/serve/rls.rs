//! Envoy's global rate limit service: `envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit`, deciding descriptors against envoyproxy/ratelimit configs.
//!
//! What differs from envoyproxy/ratelimit, on purpose: the descriptors of one request are
//! decided all or nothing (a request over one limit is charged on none), and any of our
//! algorithms can stand behind a descriptor (`ratewarden:` in the YAML).

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratewarden_core::{Algorithm, AsyncStore, Check, Decision, Limit, Outcome, NANOS_PER_SEC};
use ratewarden_policy::envoy::{self, RateLimitOverride, Resolved, Unit};
use ratewarden_policy::OnStoreFailure;
use tonic::{Request, Response, Status};

use super::app::{policy_state, App};

/// The service, over the server's store and the loaded envoyproxy/ratelimit configs.
pub(crate) struct Rls {
    pub(crate) app: Arc<App>,
}

/// One descriptor's part: its resolved rule (if any), cost, and decision.
struct Part {
    resolved: Option<Resolved>,
    hits: u64,
    decision: Option<Decision>,
    /// A native rule's failure policy, and its local share; envoyproxy/ratelimit rules
    /// have none (their store failures are UNAVAILABLE, for Envoy to decide).
    on_failure: Option<(OnStoreFailure, Option<Limit>)>,
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        decide(&self.app, request.into_inner())
            .await
            .map(Response::new)
    }
}

/// Decides one `RateLimitRequest`; also what `POST /json` runs.
pub(crate) async fn decide(
    app: &App,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    let config = app.envoy();
    let now = app.clock.now();
    // proto3 cannot tell 0 from unset: at the request level 0 means 1.
    let request_hits = if request.hits_addend == 0 {
        1
    } else {
        u64::from(request.hits_addend)
    };
    let native = app.engine.rule_list();
    let mut on_failure = Vec::new();
    let mut resolved: Vec<Option<Resolved>> = Vec::new();
    for d in &request.descriptors {
        let (r, policy) = match resolve(&config, &request.domain, d)? {
            Some(r) => (Some(r), None),
            // No YAML rule: a native rule of this domain may address the descriptor.
            None if d.limit.is_none() => match native_rule(&native, &request.domain, d) {
                Some((r, policy)) => (Some(r), Some(policy)),
                None => (None, None),
            },
            None => (None, None),
        };
        resolved.push(r);
        on_failure.push(policy);
    }
    envoy::apply_replaces(&mut resolved);
    let mut parts: Vec<Part> = resolved
        .into_iter()
        .zip(&request.descriptors)
        .zip(on_failure)
        .map(|((resolved, d), on_failure)| Part {
            resolved,
            // A descriptor's own addend wins, and there 0 checks without counting.
            hits: d.hits_addend.as_ref().map_or(request_hits, |h| h.value),
            decision: None,
            on_failure,
        })
        .collect();

    // Keys: the rule's counter key, under a prefix of their own.
    let keys: Vec<Option<String>> = parts
        .iter()
        .map(|p| p.resolved.as_ref().map(|r| format!("envoy:{}", r.key)))
        .collect();
    let store = app.engine.store();
    let enforced: Vec<usize> = (0..parts.len())
        .filter(|&i| {
            parts[i]
                .resolved
                .as_ref()
                .is_some_and(|r| r.limit.is_some() && !r.shadow_mode && parts[i].hits > 0)
        })
        .collect();
    let checks: Vec<Check<'_>> = enforced
        .iter()
        .filter_map(|&i| {
            let limit = parts[i].resolved.as_ref()?.limit.as_ref()?;
            Some(Check {
                limit,
                key: keys[i].as_deref()?,
                cost: parts[i].hits,
            })
        })
        .collect();
    let decided = match store.decide_all(&checks, now).await {
        Ok(decided) => decided,
        // Native rules answer with their own failure policy when every one that failed
        // has one that answers (open, or its local share); otherwise Envoy decides.
        Err(error) => {
            let answers = enforced.iter().all(|&i| {
                matches!(
                    parts[i].on_failure,
                    Some((OnStoreFailure::Open, _)) | Some((OnStoreFailure::Local { .. }, Some(_)))
                )
            });
            if !answers {
                return Err(unavailable(error));
            }
            tracing::warn!(%error, "store failed; the rules' failure policies answer");
            enforced
                .iter()
                .zip(&keys_of(&enforced, &keys))
                .map(|(&i, key)| {
                    let size = parts[i]
                        .resolved
                        .as_ref()
                        .and_then(|r| r.limit.as_ref())
                        .map_or(0, Algorithm::limit);
                    match &parts[i].on_failure {
                        Some((OnStoreFailure::Local { .. }, Some(local))) => {
                            app.fallback.decide(local, key, now, parts[i].hits)
                        }
                        _ => Decision::new(Outcome::Allowed, size, size, 0),
                    }
                })
                .collect()
        }
    };
    let all_allowed = decided.iter().all(Decision::is_allowed);
    for (&i, d) in enforced.iter().zip(decided) {
        parts[i].decision = Some(d);
    }
    // Checks without counting (an addend of 0), and shadow rules: counted when the
    // request goes through, never refusing it.
    for i in 0..parts.len() {
        if parts[i].decision.is_some() {
            continue;
        }
        let (Some(r), Some(key)) = (&parts[i].resolved, &keys[i]) else {
            continue;
        };
        let Some(limit) = &r.limit else { continue };
        let hits = parts[i].hits;
        let d = if hits > 0 && r.shadow_mode && all_allowed {
            store.decide(limit, key, now, hits).await
        } else {
            store.peek(limit, key, now, hits).await
        };
        match d {
            Ok(d) => parts[i].decision = Some(d),
            // A shadow rule never decides a request, nor does a failing store through it.
            Err(_) if r.shadow_mode => {}
            Err(error) => return Err(unavailable(error)),
        }
    }

    let over: Vec<bool> = parts
        .iter()
        .map(|p| match (&p.resolved, &p.decision) {
            (Some(r), None) => r.limit.is_none() && !r.unlimited,
            (_, Some(d)) => !d.is_allowed(),
            (None, None) => false,
        })
        .collect();
    let overall_over = envoy::overall(
        parts
            .iter()
            .map(|p| p.resolved.as_ref())
            .zip(over.iter().copied()),
    );
    let statuses: Vec<DescriptorStatus> = parts
        .iter()
        .zip(&over)
        .map(|(p, &over)| status(p, over))
        .collect();

    // The fields Envoy passes on to the client.
    let names: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.resolved
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_else(|| format!("descriptor-{i}"))
        })
        .collect();
    let shown: Vec<_> = parts
        .iter()
        .zip(&names)
        .filter_map(|(p, name)| {
            let r = p.resolved.as_ref()?;
            if r.shadow_mode {
                return None;
            }
            Some(policy_state(name, r.limit.as_ref()?, p.decision.as_ref()?))
        })
        .collect();
    let mut headers = ratewarden_http::allowed_headers(&shown, false);
    headers.retain(|(name, _)| *name != "Cache-Control");
    if overall_over {
        let retry = parts
            .iter()
            .filter_map(|p| p.decision.as_ref()?.retry_after_ns())
            .max()
            .unwrap_or(NANOS_PER_SEC);
        headers.push((
            "Retry-After",
            ratewarden_http::retry_after_secs(app.jittered(retry)).to_string(),
        ));
    }
    Ok(RateLimitResponse {
        overall_code: if overall_over {
            Code::OverLimit as i32
        } else {
            Code::Ok as i32
        },
        statuses,
        response_headers_to_add: headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key: key.to_ascii_lowercase(),
                value,
                ..HeaderValue::default()
            })
            .collect(),
        ..RateLimitResponse::default()
    })
}

fn resolve(
    config: &envoy::EnvoyConfig,
    domain: &str,
    d: &RateLimitDescriptor,
) -> Result<Option<Resolved>, Status> {
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    Ok(match &d.limit {
        Some(o) => {
            let unit = Unit::from_override_number(o.unit).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "descriptor limit override: unknown unit {}",
                    o.unit
                ))
            })?;
            config.resolve_override(
                domain,
                &entries,
                RateLimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit,
                },
            )
        }
        None => config.resolve(domain, &entries),
    })
}

fn keys_of(enforced: &[usize], keys: &[Option<String>]) -> Vec<String> {
    enforced
        .iter()
        .map(|&i| keys[i].clone().unwrap_or_default())
        .collect()
}

/// The first native (TOML) rule of `domain` whose `match.descriptor` fits `d`, as a
/// resolved limit (its key is the rule and the descriptor's values), with its failure
/// policy and local share.
fn native_rule(
    rules: &[ratewarden_policy::Rule],
    domain: &str,
    d: &RateLimitDescriptor,
) -> Option<(Resolved, (OnStoreFailure, Option<Limit>))> {
    let rule = rules.iter().find(|r| {
        r.matches.domain.as_deref() == Some(domain)
            && (r.matches.descriptor.is_empty()
                || (r.matches.descriptor.len() == d.entries.len()
                    && r.matches
                        .descriptor
                        .iter()
                        .zip(&d.entries)
                        .all(|((k, v), e)| {
                            *k == e.key && v.as_deref().is_none_or(|p| envoy::glob(p, &e.value))
                        })))
    })?;
    let mut key = format!("native:{}", rule.name);
    for part in &rule.key {
        key.push('|');
        match part {
            ratewarden_policy::KeyPart::Descriptor => {
                let values: Vec<&str> = d.entries.iter().map(|e| e.value.as_str()).collect();
                key.push_str(&values.join("|"));
            }
            ratewarden_policy::KeyPart::Literal(text) => key.push_str(text),
            // Request attributes (ip, headers, …) do not come with a descriptor: the part
            // stands for everyone.
            _ => key.push('*'),
        }
    }
    let window = ratewarden_http::window_secs(&rule.limit);
    let unit = [
        (1, Unit::Second),
        (60, Unit::Minute),
        (3_600, Unit::Hour),
        (86_400, Unit::Day),
    ]
    .into_iter()
    .find(|(secs, _)| Some(*secs) == window)
    .map(|(_, unit)| unit);
    let policy = (rule.on_store_failure, rule.local.clone());
    let resolved = Resolved {
        name: Some(rule.name.clone()),
        unit,
        requests_per_unit: u32::try_from(rule.limit.limit()).unwrap_or(u32::MAX),
        unlimited: false,
        shadow_mode: rule.mode == ratewarden_policy::Mode::Shadow,
        quota_mode: false,
        replaces: Vec::new(),
        detailed_metric: false,
        value_to_metric: false,
        limit: Some(rule.limit.clone()),
        stats_key: key.clone(),
        key,
    };
    Some((resolved, policy))
}

fn status(p: &Part, over: bool) -> DescriptorStatus {
    let Some(r) = &p.resolved else {
        return DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
    };
    let current_limit = r.unit.map(|unit| RateLimit {
        name: r.name.clone().unwrap_or_default(),
        requests_per_unit: r.requests_per_unit,
        unit: unit.response_number(),
    });
    if r.unlimited {
        return DescriptorStatus {
            code: Code::Ok as i32,
            current_limit,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        };
    }
    let (remaining, reset) = p.decision.as_ref().map_or((0, 0), |d| {
        (
            u32::try_from(d.remaining).unwrap_or(u32::MAX),
            d.reset_after_ns,
        )
    });
    DescriptorStatus {
        code: if over && !r.shadow_mode {
            Code::OverLimit as i32
        } else {
            Code::Ok as i32
        },
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: i64::try_from(reset / NANOS_PER_SEC).unwrap_or(i64::MAX),
            nanos: i32::try_from(reset % NANOS_PER_SEC).unwrap_or(0),
        }),
        ..DescriptorStatus::default()
    }
}

/// A store failure: Envoy's `failure_mode_deny` decides, as it should for an error.
fn unavailable(error: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("the rate limit store failed: {error}"))
}
