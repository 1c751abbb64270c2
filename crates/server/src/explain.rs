//! `ratewarden explain`: what every rule of a config would do with one request, and why,
//! charging nothing; and the same explanation as JSON, which the admin listener's
//! `POST /v1/explain` answers against the live state.

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;

use ratewarden_core::{AsyncStore, Decision, Outcome, RealClock};
use ratewarden_policy::{outcome_words, Engine, Explanation, Finding, Rule};
use serde_json::{json, Value};

use crate::check_config::{load_or_report, row};
use crate::serve::CheckBody;

/// Explains `request` (a `/v1/check` body) against the rules of `path`, on a store as the
/// config's `[store]` says: a shared store's live state, or a fresh in-memory one. Prints
/// text, or with `json` the admin API's JSON.
///
/// # Errors
///
/// A shared store that cannot be built, or standard output that cannot be written.
pub fn main(path: &Path, request: &str, json: bool) -> anyhow::Result<ExitCode> {
    let Some(config) = load_or_report(path) else {
        return Ok(ExitCode::from(1));
    };
    let body = match CheckBody::parse(request.as_bytes()) {
        Ok(body) => body,
        Err(problem) => {
            eprintln!("error: --request: {}", problem.detail);
            return Ok(ExitCode::from(1));
        }
    };
    // Without `ip`, the request is a local one, as the decision API takes its caller's.
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let resolved = match body.resolve(peer) {
        Ok(resolved) => resolved,
        Err(problem) => {
            eprintln!("error: --request: {}", problem.detail);
            return Ok(ExitCode::from(1));
        }
    };
    let now = ratewarden_core::Clock::now(&RealClock::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shared = crate::check_config::shared_store(&config.store)?;
    let (explained, rules) = match shared {
        Some(redis) => runtime.block_on(explain(config, redis, &resolved.request(), now)),
        None => {
            let memory = ratewarden_memory::MemoryStore::new(Default::default());
            runtime.block_on(explain(config, memory, &resolved.request(), now))
        }
    };
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{:#}", to_json(&explained, &rules))?;
    } else {
        write!(out, "{}", to_text(&explained, &rules))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn explain<S: AsyncStore>(
    config: ratewarden_policy::Config,
    store: S,
    request: &ratewarden_policy::Request<'_>,
    now: u64,
) -> (Explanation, Vec<Rule>) {
    let engine = Engine::new(config, store);
    (engine.explain(request, now).await, engine.rules())
}

fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

/// A measured duration for people (`1m10.342s`), beside the integer a machine reads.
pub(crate) fn readable(ns: u64) -> String {
    ratewarden_core::ReadableDuration(std::time::Duration::from_nanos(ns)).to_string()
}

fn state(d: &Decision) -> Value {
    let retry_after_ns = match d.outcome {
        Outcome::Limited { retry_after_ns } => Some(retry_after_ns),
        _ => None,
    };
    json!({
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after_ms": ms(d.reset_after_ns),
        "reset_after": readable(d.reset_after_ns),
        "retry_after_ms": retry_after_ns.map(ms),
        "retry_after": retry_after_ns.map(readable),
    })
}

/// The explanation as the admin API answers it: per rule, whether it matched and why not,
/// its key, its state and its decision.
pub(crate) fn to_json(explained: &Explanation, rules: &[Rule]) -> Value {
    let rules: Vec<Value> = explained
        .rules
        .iter()
        .map(|r| {
            let shown = rules.iter().find(|rule| rule.name == r.rule).map(row);
            let (algorithm, mode) = shown
                .map(|[_, _, _, algorithm, mode, _]| (algorithm, mode))
                .unwrap_or_default();
            let mut out = json!({
                "rule": r.rule,
                "algorithm": algorithm,
                "mode": mode,
            });
            let fields = match &r.finding {
                Finding::NotMatched { field, reason } => json!({
                    "matched": false, "applies": false, "field": field, "why": reason,
                }),
                Finding::MissingKeyPart { part } => json!({
                    "matched": true, "applies": false, "missing_key_part": part,
                    "why": format!("the request has no {part}: the rule does not apply"),
                }),
                Finding::Refused { error } => json!({
                    "matched": true, "applies": false, "refused": error,
                    "why": format!("the request would be refused: {error}"),
                }),
                Finding::Applies {
                    key,
                    cost,
                    enforced,
                    decision,
                } => match decision {
                    Ok(d) => json!({
                        "matched": true, "applies": true, "key": key, "cost": cost,
                        "enforced": enforced, "state": state(d),
                        "decision": outcome_words(d), "says_no": !d.is_allowed(),
                    }),
                    Err(e) => json!({
                        "matched": true, "applies": true, "key": key, "cost": cost,
                        "enforced": enforced, "store_error": e,
                    }),
                },
            };
            if let (Value::Object(out), Value::Object(fields)) = (&mut out, fields) {
                out.extend(fields);
            }
            out
        })
        .collect();
    json!({
        "config_version": explained.version,
        "client": explained.client.to_string(),
        "allowed": explained.allowed,
        "rules": rules,
    })
}

/// The explanation in lines for people.
pub(crate) fn to_text(explained: &Explanation, rules: &[Rule]) -> String {
    let mut text = String::new();
    let mut line = |s: String| {
        text.push_str(&s);
        text.push('\n');
    };
    line(format!(
        "client {}, rules version {}: the request would be {}",
        explained.client,
        explained.version,
        if explained.allowed {
            "allowed"
        } else {
            "refused"
        }
    ));
    for r in &explained.rules {
        let shown = rules.iter().find(|rule| rule.name == r.rule).map(row);
        let (algorithm, mode) = shown
            .map(|[_, _, _, algorithm, mode, _]| (algorithm, mode))
            .unwrap_or_default();
        line(String::new());
        line(format!("{} ({algorithm}; {mode})", r.rule));
        match &r.finding {
            Finding::NotMatched { field, reason } => {
                line(format!("  not matched: `{field}`: {reason}"));
            }
            Finding::MissingKeyPart { part } => {
                line(format!(
                    "  matched, but the request has no {part}: the rule does not apply"
                ));
            }
            Finding::Refused { error } => line(format!("  matched, but refused: {error}")),
            Finding::Applies {
                key,
                cost,
                enforced,
                decision,
            } => {
                line(format!("  matched; key {key}; cost {cost}"));
                match decision {
                    Ok(d) => {
                        line(format!(
                            "  state: {} of {} left, fully reset in {}",
                            d.remaining,
                            d.limit,
                            readable(d.reset_after_ns)
                        ));
                        let verdict = outcome_words(d);
                        if *enforced {
                            line(format!("  would {verdict}"));
                        } else {
                            line(format!("  would {verdict}, but does not enforce (shadow or outside its rollout)"));
                        }
                    }
                    Err(e) => line(format!("  the store could not say: {e}")),
                }
            }
        }
    }
    text
}
