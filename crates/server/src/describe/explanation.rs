//! An explanation for people (`to_text`) and for machines (`to_json`): per rule, whether it
//! matched and why not, its key, its state and its decision.

use ratewarden_core::{Decision, Outcome};
use ratewarden_policy::{outcome_words, Explanation, Finding, Rule};
use serde_json::{json, Value};

use super::row;

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
