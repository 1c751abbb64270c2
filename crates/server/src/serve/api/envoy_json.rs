//! envoyproxy/ratelimit's HTTP face on the decision API: `POST /json` (a `RateLimitRequest` in the proto3 JSON
//! mapping in, the `RateLimitResponse` out; 200 OK, 429 OVER_LIMIT, 500 UNKNOWN, 400 for a
//! request it cannot take) and `GET /healthcheck`.

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use http::{Response, StatusCode};
use serde::{Deserialize, Serialize};

use ratewarden_policy::envoy::Unit;
use ratewarden_policy::ServerSettings;

use crate::serve::app::App;
use crate::serve::reply::{self, Body};
use crate::serve::rls::{self, Refusal};

/// A number as proto3 JSON writes it: 64-bit integers may come as strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Text(String),
}

impl Number {
    fn get(&self, field: &str) -> Result<u64, String> {
        match self {
            Number::Int(n) => Ok(*n),
            Number::Text(t) => t
                .parse()
                .map_err(|_| format!("`{field}` must be a whole number, not `{t}`")),
        }
    }
}

/// An enum as proto3 JSON writes it: its name, or its number.
#[derive(Deserialize)]
#[serde(untagged)]
enum EnumValue {
    Number(i32),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    domain: Option<String>,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    limit: Option<JsonOverride>,
    #[serde(alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(alias = "requests_per_unit", rename = "requestsPerUnit")]
    requests_per_unit: Option<Number>,
    unit: Option<EnumValue>,
}

/// A unit's number in a request's `RateLimitOverride` (`envoy.type.v3.RateLimitUnit`), by
/// its name in any case; `UNKNOWN` is 0 (refused when deciding, as a number would be).
fn override_number(name: &str) -> Option<i32> {
    if name.eq_ignore_ascii_case("UNKNOWN") {
        return Some(0);
    }
    let unit = Unit::parse(name)?;
    (1..=6).find(|&n| Unit::from_override_number(n) == Some(unit))
}

/// A response unit's name (`RateLimitResponse.RateLimit.Unit`), uppercase as proto3 JSON
/// writes enums.
fn response_unit(number: i32) -> String {
    Unit::ALL
        .into_iter()
        .find(|u| u.response_number() == number)
        .map_or_else(|| "UNKNOWN".to_owned(), |u| u.as_str().to_ascii_uppercase())
}

fn to_proto(request: JsonRequest) -> Result<RateLimitRequest, String> {
    let hits_addend = match &request.hits_addend {
        Some(n) => u32::try_from(n.get("hitsAddend")?)
            .map_err(|_| "`hitsAddend` must fit 32 bits".to_owned())?,
        None => 0,
    };
    let descriptors = request
        .descriptors
        .into_iter()
        .map(|d| {
            let limit = match d.limit {
                Some(o) => {
                    let requests_per_unit = match &o.requests_per_unit {
                        Some(n) => u32::try_from(n.get("requestsPerUnit")?)
                            .map_err(|_| "`requestsPerUnit` must fit 32 bits".to_owned())?,
                        None => 0,
                    };
                    let unit = match o.unit {
                        None => 0,
                        Some(EnumValue::Number(n)) => n,
                        Some(EnumValue::Name(name)) => override_number(&name)
                            .ok_or_else(|| format!("`unit`: unknown unit `{name}`"))?,
                    };
                    Some(RateLimitOverride {
                        requests_per_unit,
                        unit,
                    })
                }
                None => None,
            };
            let hits_addend = match &d.hits_addend {
                Some(n) => Some(UInt64Value {
                    value: n.get("hitsAddend")?,
                }),
                None => None,
            };
            Ok(RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        key: e.key,
                        value: e.value,
                    })
                    .collect(),
                limit,
                hits_addend,
                ..RateLimitDescriptor::default()
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(RateLimitRequest {
        domain: request.domain.unwrap_or_default(),
        descriptors,
        hits_addend,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: String,
}

#[derive(Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

fn to_json(response: &RateLimitResponse) -> JsonResponse {
    JsonResponse {
        overall_code: code_name(response.overall_code),
        statuses: response
            .statuses
            .iter()
            .map(|s| JsonStatus {
                code: code_name(s.code),
                current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: response_unit(l.unit),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.as_ref().map(|d| {
                    if d.nanos == 0 {
                        format!("{}s", d.seconds)
                    } else {
                        // proto3 JSON: seconds with up to nine fractional digits.
                        let text = format!("{}.{:09}", d.seconds, d.nanos);
                        format!("{}s", text.trim_end_matches('0'))
                    }
                }),
            })
            .collect(),
        response_headers_to_add: response
            .response_headers_to_add
            .iter()
            .map(|h| JsonHeader {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
    }
}

/// `POST /json`.
pub(crate) async fn handle(
    app: &Arc<App>,
    settings: &ServerSettings,
    body: Bytes,
) -> Response<Body> {
    let request: JsonRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return reply::problem(
                StatusCode::BAD_REQUEST,
                format!("not a RateLimitRequest in JSON: {e}"),
            )
        }
    };
    let request = match to_proto(request) {
        Ok(r) => r,
        Err(e) => return reply::problem(StatusCode::BAD_REQUEST, e),
    };
    let response = match rls::decide(app, settings, &request).await {
        Ok(r) => r,
        Err(Refusal::Shed(response)) => return reply::contract(response),
        Err(Refusal::Invalid(detail)) => return reply::problem(StatusCode::BAD_REQUEST, detail),
        // A store failure is the server's (500, as envoyproxy/ratelimit answers).
        Err(Refusal::Unavailable) => {
            return reply::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the rate limit store failed and a rule fails closed",
            )
        }
    };
    let status = match Code::try_from(response.overall_code) {
        Ok(Code::Ok) => StatusCode::OK,
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    match serde_json::to_vec(&to_json(&response)) {
        Ok(bytes) => reply::json_bytes(status, bytes),
        Err(e) => reply::problem(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
