//! The dashboard: one page at `GET /` on the admin listener (HTML, CSS and a small script,
//! compiled into the binary: no build step, no outside request), polling
//! `GET /v1/dashboard` for what it shows.

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use ratewarden_policy::{OnStoreFailure, RuleStats};
use ratewarden_redis::BreakerState;
use serde_json::{json, Value};

use crate::describe::row;
use crate::serve::admin::endpoints::top_json;
use crate::serve::app::App;
use crate::serve::operator::{Sample, SAMPLE_EVERY};
use crate::serve::reply::{self, Body};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// Top offenders shown per rule and kind.
const TOP_SHOWN: usize = 5;

/// The page and its two files, by path; `None` for any other path.
pub(crate) fn asset(path: &str) -> Option<Response<Body>> {
    let (body, kind) = match path {
        "/" => (PAGE, "text/html; charset=utf-8"),
        "/dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut response = Response::new(reply::full(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The page runs its own script and asks its own listener, nothing else; no other site
    // may frame it.
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    Some(response)
}

/// Per second, between consecutive samples, of one rule's `pick`ed counter.
fn rates(samples: &[Sample], rule: &str, pick: fn(&RuleStats) -> u64) -> Vec<f64> {
    let of = |s: &Sample| {
        s.rules
            .iter()
            .find(|(n, _)| n == rule)
            .map(|(_, r)| pick(r))
    };
    samples
        .windows(2)
        .map(|w| {
            let seconds = w[1].at_ns.saturating_sub(w[0].at_ns) as f64 / 1e9;
            match (of(&w[0]), of(&w[1])) {
                (Some(a), Some(b)) if seconds > 0.0 => b.saturating_sub(a) as f64 / seconds,
                _ => 0.0,
            }
        })
        .collect()
}

/// `GET /v1/dashboard`: everything the page shows.
pub(crate) fn data(app: &App) -> Value {
    let now = app.clock.now();
    let rules = app.engine.rule_list();
    let stats = app.engine.stats();
    let samples = app.operator.samples();
    let tops = app.engine.top_all(now);
    let mut failures = 0;
    let rules_out: Vec<Value> = rules
        .iter()
        .zip(&stats)
        .map(|(rule, (_, s))| {
            failures += s.store_failures;
            let [name, applies, key, algorithm, mode, on_failure] = row(rule);
            let top = tops.iter().find(|t| t.rule == name);
            let fallback = match rule.on_store_failure {
                OnStoreFailure::Open => "failed_open",
                OnStoreFailure::Closed => "failed_closed",
                OnStoreFailure::Local { .. } => "fell_back",
            };
            json!({
                "name": name,
                "applies_to": applies,
                "key": key,
                "algorithm": algorithm,
                "mode": mode,
                "on_store_failure": on_failure,
                "counts": {
                    "allowed": s.allowed,
                    "rejected": s.rejected,
                    "skipped": s.skipped,
                    "shadow_allowed": s.shadow_allowed,
                    "shadow_rejected": s.would_have_rejected,
                    fallback: s.store_failures,
                },
                "rates": {
                    "allowed": rates(&samples, &name, |r| r.allowed),
                    "rejected": rates(&samples, &name, |r| r.rejected),
                    "shadow_allowed": rates(&samples, &name, |r| r.shadow_allowed),
                    "shadow_rejected": rates(&samples, &name, |r| r.would_have_rejected),
                },
                "top": top.map(|t| top_json(t, TOP_SHOWN)),
            })
        })
        .collect();
    let store = app.engine.store();
    let memory = store.memory_stats();
    let breaker = store.breaker().map(|b| match b {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half-open",
    });
    let settings = app.started();
    let reload = app.operator.last_reload().map(|r| {
        json!({
            "ago_s": now.saturating_sub(r.at_ns) / 1_000_000_000,
            "ok": r.errors.is_empty(),
            "config_version": r.version,
            "errors": r.errors,
            "needs_restart": r.needing_restart,
        })
    });
    let shed: serde_json::Map<String, Value> = app
        .metrics
        .shed_counts()
        .into_iter()
        .map(|(reason, n)| (reason.to_owned(), json!(n)))
        .collect();
    json!({
        "config_version": app.engine.version(),
        "sample_every_s": SAMPLE_EVERY.as_secs(),
        "rules": rules_out,
        "store": {
            "kind": if memory.is_some() { "memory" } else { "redis" },
            "keys": memory.as_ref().map(|m| m.keys),
            "evicted": memory.as_ref().map(|m| m.evicted_fresh + m.evicted_live + m.evicted_limited),
            "breaker": breaker,
            "late_timeouts": store.late_timeouts(),
            "failures": failures,
        },
        "last_reload": reload,
        "in_flight": app.shedder.in_flight(),
        "max_in_flight": settings.max_in_flight,
        "shed": shed,
    })
}

/// The answer to `GET /v1/dashboard`.
pub(crate) fn answer(app: &App) -> Response<Body> {
    reply::json(StatusCode::OK, &data(app))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, rejected: u64) -> Sample {
        Sample {
            at_ns: at_s * 1_000_000_000,
            rules: vec![(
                "r".to_owned(),
                RuleStats {
                    rejected,
                    ..RuleStats::default()
                },
            )],
        }
    }

    #[test]
    fn rates_are_per_second_between_samples() {
        let samples = [sample(0, 0), sample(5, 50), sample(10, 50), sample(15, 60)];
        assert_eq!(rates(&samples, "r", |r| r.rejected), [10.0, 0.0, 2.0]);
        assert_eq!(rates(&samples, "other", |r| r.rejected), [0.0, 0.0, 0.0]);
        assert!(rates(&samples[..1], "r", |r| r.rejected).is_empty());
    }

    #[test]
    fn the_page_loads_its_script_and_style_from_this_listener() {
        assert!(PAGE.contains(r#"src="/dashboard.js""#));
        assert!(PAGE.contains(r#"href="/dashboard.css""#));
        assert!(SCRIPT.contains("/v1/dashboard"));
        for path in ["/", "/dashboard.js", "/dashboard.css"] {
            assert!(asset(path).is_some(), "{path}");
        }
        assert!(asset("/other").is_none());
    }
}
