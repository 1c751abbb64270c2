//! `POST /v1/check`: the body's client through the admission pipeline, and the verdict as
//! JSON.

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use ratewarden_core::Outcome;
use ratewarden_policy::{Answer, ServerSettings};

use crate::serve::admission::{self, Ask, Decided, Ruling};
use crate::serve::app::App;
use crate::serve::reply::{Plain, Problem};

use crate::serve::bodies::subject::{subject, Subject};
use crate::serve::bodies::{parse_check, too_costly, CheckJson, MAX_COST};

use super::decision_json::{DecisionOut, PolicyOut};

/// `/v1/check` once its body is read whole: the body read, the request through the
/// admission pipeline, the verdict as JSON. Both hyper's path (`handle`) and the lean one
/// (`lean.rs`) answer through this.
pub(crate) async fn check(
    app: &Arc<App>,
    settings: &ServerSettings,
    peer: SocketAddr,
    body: &[u8],
) -> Plain {
    match parse_check(body) {
        Ok(check) => decide(app, settings, peer, check).await,
        Err(problem) => problem.plain(),
    }
}

async fn decide(
    app: &Arc<App>,
    settings: &ServerSettings,
    peer: SocketAddr,
    check: CheckJson<'_>,
) -> Plain {
    if let Some(cost) = check.cost.filter(|&c| c > MAX_COST) {
        return too_costly(cost).plain();
    }
    let resolved = match subject!(check).resolve(peer) {
        Ok(resolved) => resolved,
        Err(refused) => return refused.plain(),
    };
    let request = resolved.request(check.cost);
    let decided = admission::admit(app, admission::CHECK, Ask::Request(&request), settings).await;
    let (verdict, answer) = match decided {
        Ruling::Decided(Decided {
            verdict,
            answer,
            slot: _slot,
        }) => (verdict, answer),
        Ruling::Shed(response) => return Plain::contract(response),
        Ruling::Undecided(undecided) => {
            return Problem::new(undecided.status, undecided.detail).plain()
        }
    };
    let policies: Vec<PolicyOut<'_>> = verdict
        .outcomes
        .iter()
        .map(|o| {
            let d = &o.decision;
            let (outcome, retry_after_ms, delay_ms) = match d.outcome {
                Outcome::Allowed => ("allowed", None, None),
                Outcome::Delayed { delay_ns } => ("delayed", None, Some(ms(delay_ns))),
                Outcome::Limited { retry_after_ns } => ("limited", Some(ms(retry_after_ns)), None),
                Outcome::CostTooHigh => ("cost_too_high", None, None),
            };
            PolicyOut {
                name: &verdict.rules[o.rule].name,
                key: &o.key,
                outcome,
                enforced: o.enforced,
                limit: d.limit,
                remaining: d.remaining,
                reset_after_ms: ms(d.reset_after_ns),
                retry_after_ms,
                delay_ms,
                store_failed: o.store_failed,
            }
        })
        .collect();
    let name = |o: &ratewarden_policy::RuleOutcome| verdict.rules[o.rule].name.as_str();
    let (status, headers, body, delay_ms): (_, Vec<(&str, &str)>, _, _) = match &answer {
        Answer::Go { headers, delay } => (
            200,
            headers
                .iter()
                // Ours are visible ASCII.
                .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or_default()))
                .collect(),
            None,
            ms_duration(*delay),
        ),
        Answer::Stop(response) => (
            response.status,
            response
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            Some(response.body.as_str()).filter(|b| !b.is_empty()),
            0,
        ),
    };
    let out = DecisionOut {
        allowed: verdict.allowed,
        status,
        retry_after_ms: verdict.retry_after_ns.map(ms),
        delay_ms,
        policies,
        violated_policies: verdict.violated().map(name).collect(),
        would_have_rejected: verdict.would_have_rejected().map(name).collect(),
        reservation: verdict.reservation.map(|id| id.to_string()),
        permit: verdict.permit.map(|id| id.to_string()),
        config_version: verdict.version,
        headers,
        body,
    };
    Plain::json(StatusCode::OK, out.to_json())
}

/// Milliseconds, rounded up so a client waiting them is never early.
fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

fn ms_duration(d: std::time::Duration) -> u64 {
    ms(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::bodies::parse;
    use std::borrow::Cow;

    #[test]
    fn body_strings_are_borrowed_and_escaped_ones_still_read() {
        let check: CheckJson<'_> =
            parse(br#"{"api_key":"k-1","tenant":"a\"b\u00e9","path":"/x"}"#).expect("a check");
        let api_key = check.api_key.as_ref().expect("an api_key");
        assert!(
            matches!(api_key.0, Cow::Borrowed("k-1")),
            "no copy of a plain string"
        );
        assert_eq!(check.tenant.as_deref(), Some("a\"b\u{e9}"));
        assert_eq!(check.path.as_deref(), Some("/x"));
        assert_eq!(check.ip.as_deref(), None);
    }
}
