//! A request a proxy asks about before forwarding it (forward-auth over HTTP, Envoy's
//! `ext_authz` over gRPC): decided by the one engine and answered by the one contract, as
//! the gateway decides and answers the requests it forwards.
//!
//! What differs from the gateway: the proxy never tells us when the request it forwarded
//! has ended, so a concurrency rule could take a permit here and never give it back. Such
//! a rule is refused on these doors, naming it, rather than turned silently into "N per
//! lease" (a lease is a safety net for crashed callers, not a measure of a request).

use std::sync::atomic::{AtomicU64, Ordering};

use http::StatusCode;
use ratewarden_core::Limit;

use crate::serve::app::{Answer, App};

/// The rule set version whose concurrency rule was last logged as refused here (0: none;
/// versions start at 1).
static WARNED: AtomicU64 = AtomicU64::new(0);

/// Why a proxied request was not decided: what the proxy (or its operator) must fix.
pub(crate) struct Undecided {
    /// 400 or 422 for a request the rules cannot read, 500 for a rule this door cannot
    /// enforce.
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

/// Decides `request` for a proxy: refuses it when a concurrency rule applies, otherwise
/// the engine's verdict as the gateway would answer it.
pub(crate) async fn decide(
    app: &App,
    request: &ratewarden_policy::Request<'_>,
) -> Result<Answer, Undecided> {
    if let Some(name) = concurrency_rule(app, request) {
        // Once per rule set: every request it matches is refused, and the log must not
        // carry each of them.
        let version = app.engine.version();
        if WARNED.swap(version, Ordering::Relaxed) != version {
            tracing::error!(
                rule = name,
                version,
                "a concurrency rule applies to forward-auth requests; they are refused (500)"
            );
        }
        return Err(Undecided {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            detail: format!(
                "rule `{name}` is a concurrency limit, and a forward-auth proxy never says when \
                 the request it forwards ends, so its permit could not be given back; limit \
                 concurrency at the gateway (`[server] upstream`) or narrow the rule's \
                 `match` so that it does not apply to requests checked through forward-auth"
            ),
        });
    }
    let started = app.clock.now();
    let verdict = app
        .engine
        .decide(request, started)
        .await
        .map_err(|e| Undecided {
            status: crate::serve::api::request_error_status(&e),
            detail: e.to_string(),
        })?;
    app.metrics
        .decision_seconds
        .observe(app.clock.now().saturating_sub(started) as f64 / 1e9);
    Ok(app.answer(&verdict))
}

/// The name of a concurrency rule that applies to `request`, if one does. Rules are
/// filtered by kind first: most configs have none, and then nothing is matched twice.
fn concurrency_rule(app: &App, request: &ratewarden_policy::Request<'_>) -> Option<String> {
    app.engine
        .rule_list()
        .iter()
        .filter(|rule| matches!(rule.limit, Limit::Concurrency(_)))
        .find(|rule| rule.matches.matches(request))
        .map(|rule| rule.name.clone())
}
