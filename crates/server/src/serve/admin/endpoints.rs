//! The admin listener's operator endpoints: `GET /v1/top`, `POST /v1/explain`,
//! `GET /v1/keys` and `POST /v1/keys/reset`.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use ratewarden_core::{Decision, Outcome};
use ratewarden_policy::{outcome_words, KeyStateError, RuleTop, TopReport};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::describe::explanation::{readable, to_json};
use crate::serve::app::App;
use crate::serve::bodies::CheckBody;
use crate::serve::reply::{self, Body, Problem};

/// The most an operator's request body may hold.
const MAX_BODY: usize = 64 * 1024;

fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

/// A report's keys as JSON (at most `n`), with the summary's error bound.
pub(crate) fn report_json(report: &TopReport, n: usize) -> Value {
    let keys: Vec<Value> = report
        .keys
        .iter()
        .take(n)
        .map(|o| json!({ "key": o.key, "count": o.count, "error": o.error }))
        .collect();
    json!({ "keys": keys, "total": report.total, "error_bound": report.error_bound })
}

/// A rule's top offenders as JSON.
pub(crate) fn top_json(top: &RuleTop, n: usize) -> Value {
    json!({
        "rule": top.rule,
        "limited": report_json(&top.limited, n),
        "shadow": report_json(&top.shadow, n),
    })
}

/// `GET /v1/top[?rule=NAME][&n=N]`: the top offenders of one rule, or of all.
pub(crate) fn top(app: &App, query: Option<&str>) -> Result<Value, Problem> {
    let params = parse_query(query)?;
    let n = match param(&params, "n") {
        Some(text) => text.parse::<usize>().map_err(|_| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                format!("`n` must be a whole number of keys, not `{text}`"),
            )
        })?,
        None => 20,
    };
    let now = app.clock.now();
    let about = "decayed hits (halved every minute): `count` is at most `error` too high, and \
                 `error` at most `error_bound` (1% of `total`)";
    match param(&params, "rule") {
        Some(rule) => match app.engine.top(rule, now) {
            Some(top) => {
                let mut value = top_json(&top, n);
                value["about"] = json!(about);
                Ok(value)
            }
            None => Err(unknown_rule(app, rule)),
        },
        None => {
            let rules: Vec<Value> = app
                .engine
                .top_all(now)
                .iter()
                .map(|t| top_json(t, n))
                .collect();
            Ok(json!({ "rules": rules, "about": about }))
        }
    }
}

fn unknown_rule(app: &App, rule: &str) -> Problem {
    let known: Vec<String> = app.engine.stats().into_iter().map(|(n, _)| n).collect();
    Problem::new(
        StatusCode::NOT_FOUND,
        format!(
            "no rule named `{rule}` is in force; the rules are: {}",
            known.join(", ")
        ),
    )
}

/// `POST /v1/explain`: a `/v1/check` body explained against the live state.
pub(crate) async fn explain(
    app: &App,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Value, Problem> {
    let body = read_body(app, request).await?;
    let check = CheckBody::parse(&body)?;
    let resolved = check.resolve(peer)?;
    let explained = app
        .engine
        .explain(&resolved.request(), app.clock.now())
        .await;
    Ok(to_json(&explained, &app.engine.rule_list()))
}

fn state_json(rule: &str, parts: &str, stored_key: &str, d: &Decision) -> Value {
    let retry_after_ns = match d.outcome {
        Outcome::Limited { retry_after_ns } => Some(retry_after_ns),
        _ => None,
    };
    json!({
        "rule": rule,
        "key": parts,
        "stored_key": stored_key,
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after_ms": ms(d.reset_after_ns),
        "reset_after": readable(d.reset_after_ns),
        "limited": !d.is_allowed(),
        "retry_after_ms": retry_after_ns.map(ms),
        "retry_after": retry_after_ns.map(readable),
        "next_request": outcome_words(d),
    })
}

fn key_problem(error: KeyStateError) -> Problem {
    let status = match error {
        KeyStateError::UnknownRule { .. } => StatusCode::NOT_FOUND,
        KeyStateError::EmptyKey => StatusCode::BAD_REQUEST,
        KeyStateError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    Problem::new(status, error.to_string())
}

/// `GET /v1/keys?rule=NAME&key=PARTS`: one key's state, charging nothing.
pub(crate) async fn key_state(app: &App, query: Option<&str>) -> Result<Value, Problem> {
    let params = parse_query(query)?;
    let (rule, parts) = rule_and_key(param(&params, "rule"), param(&params, "key"))?;
    let state = app
        .engine
        .key_state(rule, parts, app.clock.now())
        .await
        .map_err(key_problem)?;
    Ok(state_json(rule, parts, &state.stored_key, &state.decision))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reset {
    rule: Option<String>,
    key: Option<String>,
}

/// `POST /v1/keys/reset` with `{"rule": NAME, "key": PARTS}`: forgets the key's state.
pub(crate) async fn reset(
    app: &App,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Value, Problem> {
    let body = read_body(app, request).await?;
    let reset: Reset = serde_json::from_slice(&body).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            format!("the body must be {{\"rule\": NAME, \"key\": PARTS}}: {e}"),
        )
    })?;
    let (rule, parts) = rule_and_key(reset.rule.as_deref(), reset.key.as_deref())?;
    let cleared = app
        .engine
        .reset_key(rule, parts)
        .await
        .map_err(key_problem)?;
    tracing::warn!(%peer, rule, key = parts, cleared, "key reset on the admin listener");
    Ok(json!({ "rule": rule, "key": parts, "cleared": cleared }))
}

fn rule_and_key<'a>(
    rule: Option<&'a str>,
    key: Option<&'a str>,
) -> Result<(&'a str, &'a str), Problem> {
    match (rule, key) {
        (Some(rule), Some(key)) => Ok((rule, key)),
        _ => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "give `rule` (a rule's name) and `key` (its key parts as GET /v1/top shows them, \
             such as `203.0.113.7/32` or `key:0123456789abcdef`)",
        )),
    }
}

/// The body, within [`MAX_BODY`] bytes and `[server] api_body_timeout`.
async fn read_body(app: &App, request: Request<Incoming>) -> Result<Bytes, Problem> {
    let timeout = app.settings().bounds.api_body_timeout;
    let read = Limited::new(request.into_body(), MAX_BODY).collect();
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(e)) => Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body could not be read within {MAX_BODY} bytes: {e}"),
        )),
        Err(_) => Err(Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive within `[server] api_body_timeout`",
        )),
    }
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A query string's `name=value` pairs, percent-decoded (`+` a space).
pub(crate) fn parse_query(query: Option<&str>) -> Result<Vec<(String, String)>, Problem> {
    let Some(query) = query else {
        return Ok(Vec::new());
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

fn decode(text: &str) -> Result<String, Problem> {
    let bad = || {
        Problem::new(
            StatusCode::BAD_REQUEST,
            format!("the query's `{text}` is not percent-encoded UTF-8"),
        )
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// A JSON answer, or the problem.
pub(crate) fn answer(result: Result<Value, Problem>) -> Response<Body> {
    match result {
        Ok(value) => reply::json(StatusCode::OK, &value),
        Err(problem) => problem.response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let params = parse_query(Some("rule=per-ip&key=key%3Aab%7Ccd+x&n=")).unwrap();
        assert_eq!(
            params,
            [
                ("rule".to_owned(), "per-ip".to_owned()),
                ("key".to_owned(), "key:ab|cd x".to_owned()),
                ("n".to_owned(), String::new()),
            ]
        );
        for bad in ["key=%4", "key=%zz", "key=%ff"] {
            let problem = parse_query(Some(bad)).unwrap_err();
            assert_eq!(problem.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
