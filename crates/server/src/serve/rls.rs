//! Envoy's rate limit protocol decided: a `RateLimitRequest` through the admission
//! pipeline ([`Engine::decide_descriptors`]) and its verdict back to a `RateLimitResponse`.
//! What the gRPC service (`envoy::grpc`) and envoyproxy/ratelimit's `POST /json` on the
//! decision API (`api::envoy_json`) both run, below both.
//!
//! [`Engine::decide_descriptors`]: ratewarden_policy::Engine::decide_descriptors

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus as Status_, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;
use http::header::{HeaderName, CACHE_CONTROL, CONTENT_TYPE};
use ratewarden_core::NANOS_PER_SEC;
use ratewarden_policy::config::CallBounds;
use ratewarden_policy::envoy::{RateLimitOverride, Unit};
use ratewarden_policy::{
    Answer, DescriptorStatus, DescriptorVerdict, RequestDescriptor, ServerSettings, Verdict,
};
use tonic::Status;

use crate::serve::admission::{self, Ask, Ruling};
use crate::serve::app::App;

/// Why a `RateLimitRequest` got no `RateLimitResponse`.
pub(crate) enum Refusal {
    /// Every place in flight is taken (the contract's 503): a shed call is Envoy's to
    /// decide (its `failure_mode_deny`), as any unavailable service is.
    Shed(ratewarden_http::Response),
    /// The request cannot be taken as it is.
    Invalid(String),
    /// The store failed and a rule fails closed.
    Unavailable,
}

impl Refusal {
    /// As the gRPC service answers it.
    pub(crate) fn status(self) -> Status {
        match self {
            Self::Shed(_) => Status::unavailable("overloaded: too many requests in flight"),
            Self::Invalid(detail) => Status::invalid_argument(detail),
            Self::Unavailable => {
                Status::unavailable("the rate limit store failed and a rule fails closed")
            }
        }
    }
}

/// Decides one `RateLimitRequest` through the admission pipeline; also what `POST /json`
/// runs.
pub(crate) async fn decide(
    app: &Arc<App>,
    settings: &ServerSettings,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Refusal> {
    within_bounds(&settings.envoy, request)
        .map_err(|s| Refusal::Invalid(s.message().to_owned()))?;
    let descriptors = descriptors(request).map_err(|s| Refusal::Invalid(s.message().to_owned()))?;
    // proto3 cannot tell 0 from unset: at the request level 0 means 1.
    let hits = u64::from(request.hits_addend.max(1));
    let ask = Ask::Descriptors {
        domain: &request.domain,
        descriptors: &descriptors,
        hits,
    };
    match admission::admit(app, admission::RLS, ask, settings).await {
        Ruling::Shed(response) => Err(Refusal::Shed(response)),
        Ruling::Undecided(undecided) => Err(Refusal::Invalid(undecided.detail)),
        Ruling::Decided(decided) if decided.verdict.unavailable => Err(Refusal::Unavailable),
        Ruling::Decided(decided) => Ok(response(&decided.verdict, &decided.answer)),
    }
}

/// The request's descriptors as the engine reads them; `INVALID_ARGUMENT` naming what
/// cannot be taken.
fn descriptors(request: &RateLimitRequest) -> Result<Vec<RequestDescriptor<'_>>, Status> {
    request
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            // A refund Envoy asks for would be silently charged as a cost if read as one:
            // refused by name instead, as `POST /json` refuses the unknown field.
            if d.is_negative_hits {
                return Err(Status::invalid_argument(format!(
                    "descriptor {i}: `is_negative_hits` (giving hits back) is not supported"
                )));
            }
            let limit = match &d.limit {
                Some(o) => Some(RateLimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit: Unit::from_override_number(o.unit).ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "descriptor limit override: unknown unit {}",
                            o.unit
                        ))
                    })?,
                }),
                None => None,
            };
            Ok(RequestDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect(),
                // A descriptor's own addend wins, and there 0 checks without counting.
                hits: d.hits_addend.as_ref().map(|h| h.value),
                limit,
            })
        })
        .collect()
}

/// Refuses a request carrying more than `[envoy]` allows, before anything is resolved or
/// charged: `INVALID_ARGUMENT` naming the bound, its setting and what was sent.
fn within_bounds(bounds: &CallBounds, request: &RateLimitRequest) -> Result<(), Status> {
    let sent = request.descriptors.len();
    if sent > bounds.max_descriptors {
        return Err(Status::invalid_argument(format!(
            "{sent} descriptors in one request, more than `[envoy] max_descriptors` ({})",
            bounds.max_descriptors
        )));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.len() > bounds.max_entries {
            return Err(Status::invalid_argument(format!(
                "descriptor {i}: {} entries, more than `[envoy] max_entries` ({})",
                d.entries.len(),
                bounds.max_entries
            )));
        }
    }
    Ok(())
}

/// The verdict in Envoy's terms, its headers the contract's answer as every HTTP door
/// gives it (without `Cache-Control` and `Content-Type`, which belong to our own 429's body,
/// not to the upstream's response Envoy adds them to).
fn response(verdict: &Verdict, answer: &Answer) -> RateLimitResponse {
    let headers: Vec<(&HeaderName, std::borrow::Cow<'_, str>)> = match answer {
        Answer::Go { headers, .. } => headers
            .iter()
            // Ours are visible ASCII.
            .map(|(name, value)| (name, String::from_utf8_lossy(value.as_bytes())))
            .collect(),
        Answer::Stop(refused) => refused
            .headers
            .iter()
            .map(|(name, value)| (name, value.as_str().into()))
            .collect(),
    };
    RateLimitResponse {
        overall_code: if verdict.allowed {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        statuses: verdict
            .descriptors
            .iter()
            .map(|d| status(verdict, d))
            .collect(),
        response_headers_to_add: headers
            .into_iter()
            .filter(|(name, _)| **name != CACHE_CONTROL && **name != CONTENT_TYPE)
            .map(|(key, value)| HeaderValue {
                key: key.as_str().to_owned(),
                value: value.into_owned(),
                ..HeaderValue::default()
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}

fn status(verdict: &Verdict, d: &DescriptorVerdict) -> Status_ {
    if d.no_rule {
        return Status_ {
            code: Code::Ok as i32,
            ..Status_::default()
        };
    }
    let current_limit = d.unit.map(|unit| RateLimit {
        name: d.name.clone().unwrap_or_default(),
        requests_per_unit: d.requests_per_unit,
        unit: unit.response_number(),
    });
    if d.unlimited {
        return Status_ {
            code: Code::Ok as i32,
            current_limit,
            limit_remaining: u32::MAX,
            ..Status_::default()
        };
    }
    let (remaining, reset) = d.outcome.map_or((0, 0), |o| {
        let decision = &verdict.outcomes[o].decision;
        (
            u32::try_from(decision.remaining).unwrap_or(u32::MAX),
            decision.reset_after_ns,
        )
    });
    Status_ {
        code: match d.status {
            DescriptorStatus::Ok => Code::Ok,
            DescriptorStatus::OverLimit => Code::OverLimit,
        } as i32,
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: Some(Duration {
            seconds: i64::try_from(reset / NANOS_PER_SEC).unwrap_or(i64::MAX),
            nanos: i32::try_from(reset % NANOS_PER_SEC).unwrap_or(0),
        }),
        ..Status_::default()
    }
}
