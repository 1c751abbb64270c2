//! `explain`: what every rule would do with one request, and why, charging nothing.
//!
//! The same steps as [`Engine::decide`](super::Engine::decide) (match, key, cost, mode), stopped at the first one a
//! rule fails and told in words, then the store's `peek` where `decide` would charge.

use ratewarden_core::{AsyncStore, Decision, Outcome};

use super::adaptive::Limiters;
use super::error::RequestError;
use super::request::{api_key, build_key, client_of, cost_of, enforces, part_words, Request};
use super::rules::RuleSet;
use crate::config::{KeyPart, KeySources, Match, Rule};

/// What one rule would do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleExplanation {
    /// The rule's name.
    pub rule: String,
    /// How far the request got with it.
    pub finding: Finding,
}

/// How far a request gets with one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A condition of the rule's `match` failed: the rule does not apply.
    NotMatched {
        /// The `match` field that failed: `method`, `path`, `host`, `header` or `domain`.
        field: &'static str,
        /// Why, with the rule's value and the request's.
        reason: String,
    },
    /// The rule matched, but a part of its key is missing from the request, and the rule
    /// says `when_key_missing = "skip"`: it does not apply. (Under `client`, the default,
    /// the rule applies with the client's address in the part's place; under `refuse`, the
    /// request is refused.)
    MissingKeyPart {
        /// The part, as the config spells it (`header:x-team`, `api_key`, `tenant`).
        part: String,
    },
    /// The rule matched, but the request cannot be decided under it (a cost that is not a
    /// number, a repeated header): the whole request would be refused as a bad request.
    Refused {
        /// Why.
        error: String,
    },
    /// The rule applies: its key, cost, and what its state says now.
    Applies {
        /// The key its state is kept under (API keys as their digest).
        key: String,
        /// What the request would cost.
        cost: u64,
        /// Whether it may reject (false in shadow mode, and for keys outside a rollout's
        /// share).
        enforced: bool,
        /// What the store's `peek` says: the decision it would make, with the key's
        /// remaining units and reset; or why the store could not say.
        decision: Result<Decision, String>,
    },
}

/// What the engine would do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The version of the rule set asked.
    pub version: u64,
    /// The client address the keys were built with (after trusted proxies).
    pub client: std::net::IpAddr,
    /// Whether the request would go through: no rule refuses it, and no enforced rule's
    /// state says no (a store that cannot say counts as allowing).
    pub allowed: bool,
    /// Every rule, in order.
    pub rules: Vec<RuleExplanation>,
}

impl Finding {
    /// Whether the rule would say no to the request (enforced or in shadow).
    pub fn says_no(&self) -> bool {
        match self {
            Finding::Refused { .. } => true,
            Finding::Applies {
                decision: Ok(decision),
                ..
            } => !decision.is_allowed(),
            _ => false,
        }
    }
}

/// What every rule of `set` would do with `request` at `now`, charging nothing: `store`
/// is peeked, and adaptive rules' `limiters`.
pub(crate) async fn explain<S: AsyncStore>(
    set: &RuleSet,
    store: &S,
    limiters: &Limiters,
    request: &Request<'_>,
    now: u64,
) -> Explanation {
    // A client that cannot be known refuses the request under every rule it meets, as
    // `decide` refuses it; the proxy's address is then the one the keys would have had.
    let (client, unknown) = match client_of(request, &set.config.trusted_proxies) {
        Ok(client) => (client, None),
        Err(error) => (error.proxy, Some(error.to_string())),
    };
    let class = set.criticality(request);
    let mut rules = Vec::with_capacity(set.rules.len());
    // A host that is not a host refuses the request under every rule, as `decide` does.
    let bad_host = request
        .host
        .and_then(|h| crate::host::name(h).err())
        .map(|e| RequestError::Host(e).to_string());
    for (i, rule) in set.rules.iter().enumerate() {
        let refused = bad_host.as_ref().or(unknown.as_ref());
        let finding = match (&bad_host, mismatch(&rule.matches, request), refused) {
            (Some(error), _, _) => Finding::Refused {
                error: error.clone(),
            },
            (None, Some((field, reason)), _) => Finding::NotMatched { field, reason },
            (None, None, Some(error)) => Finding::Refused {
                error: error.clone(),
            },
            (None, None, None) => {
                applies(
                    (store, limiters),
                    rule,
                    &set.prefixes[i],
                    &set.config.keys,
                    request,
                    (client, class),
                    now,
                )
                .await
            }
        };
        rules.push(RuleExplanation {
            rule: rule.name.clone(),
            finding,
        });
    }
    let allowed = rules.iter().all(|r| match &r.finding {
        Finding::Refused { .. } => false,
        Finding::Applies { enforced, .. } => !enforced || !r.finding.says_no(),
        _ => true,
    });
    Explanation {
        version: set.version,
        client,
        allowed,
        rules,
    }
}

/// What `rule` would decide for `request`, its state read from the store or, for an
/// adaptive rule, its limiter.
async fn applies<S: AsyncStore>(
    (store, limiters): (&S, &Limiters),
    rule: &Rule,
    prefix: &str,
    sources: &KeySources,
    request: &Request<'_>,
    (client, class): (std::net::IpAddr, ratewarden_core::adaptive::Criticality),
    now: u64,
) -> Finding {
    let key = match build_key(prefix, rule, sources, request, client) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Finding::MissingKeyPart {
                part: missing_part(rule, sources, request),
            }
        }
        Err(error) => {
            return Finding::Refused {
                error: error.to_string(),
            }
        }
    };
    let cost = match request.cost.map_or_else(|| cost_of(rule, request), Ok) {
        Ok(cost) => cost,
        Err(error) => {
            return Finding::Refused {
                error: error.to_string(),
            }
        }
    };
    // An adaptive rule is decided in this process, on its limiter, not on the store.
    let decision = match &rule.adaptive {
        Some(config) => Ok(limiters.peek_decision(&key, config, class, now)),
        None => store
            .peek(&rule.limit, &key, now, cost)
            .await
            .map_err(|e| e.to_string()),
    };
    Finding::Applies {
        enforced: enforces(rule, &key),
        key,
        cost,
        decision,
    }
}

/// The first condition of `m` that `request` fails, and why; `None` when it matches. The
/// same conditions as [`Match::matches`], in the same order.
fn mismatch(m: &Match, request: &Request<'_>) -> Option<(&'static str, String)> {
    if let Some(domain) = &m.domain {
        let what = if m.bucket.is_some() {
            "Envoy quota buckets"
        } else {
            "Envoy descriptors"
        };
        return Some((
            "domain",
            format!("the rule is for {what} of domain `{domain}`, not HTTP requests"),
        ));
    }
    if let Some(method) = &m.method {
        if !request.method.eq_ignore_ascii_case(method) {
            return Some((
                "method",
                format!("the rule takes {method}, the request is {}", request.method),
            ));
        }
    }
    if let Some(path) = &m.path {
        let hit = match (path.strip_suffix('*'), m.path_exact) {
            (Some(prefix), true) => request.path.starts_with(prefix),
            (None, true) => request.path == path,
            (Some(prefix), false) => crate::path::path_under(request.path, prefix),
            (None, false) => crate::path::same_path(request.path, path),
        };
        if !hit {
            let how = match (path.ends_with('*'), m.path_exact) {
                (true, _) => "paths under",
                (false, true) => "exactly the path",
                (false, false) => "the path (any case, trailing slash or format suffix or not)",
            };
            return Some((
                "path",
                format!(
                    "the rule takes {how} `{path}`, the request's is `{}`",
                    request.path
                ),
            ));
        }
    }
    if let Some(host) = &m.host {
        if !request.host.is_some_and(|h| crate::host::names(h, host)) {
            return Some((
                "host",
                match request.host {
                    Some(given) => {
                        format!("the rule takes host `{host}` (any case, a trailing dot or not, any port), the request's is `{given}`")
                    }
                    None => format!("the rule takes host `{host}`, the request has none"),
                },
            ));
        }
    }
    if let Some((name, value)) = &m.header {
        match (request.header(name), value) {
            (None, _) => {
                return Some((
                    "header",
                    format!("the rule takes requests with header `{name}`, the request has none"),
                ))
            }
            (Some(given), Some(want)) if given != want => {
                return Some((
                    "header",
                    format!("the rule takes `{name}: {want}`, the request has `{name}: {given}`"),
                ))
            }
            _ => {}
        }
    }
    None
}

/// The first key part of `rule` that `request` lacks (the key could not be built).
fn missing_part(rule: &Rule, sources: &KeySources, request: &Request<'_>) -> String {
    let empty = |v: Option<&str>| v.is_none_or(str::is_empty);
    for part in &rule.key {
        let missing = match part {
            KeyPart::Header(name) => empty(request.single_header(name).ok().flatten()),
            KeyPart::ApiKey => api_key(rule, sources, request).ok().flatten().is_none(),
            KeyPart::Tenant => {
                empty(request.tenant)
                    && empty(request.single_header(&sources.tenant_header).ok().flatten())
            }
            KeyPart::Descriptor | KeyPart::Bucket => true,
            KeyPart::ClientCert => empty(request.client_cert),
            KeyPart::Json(path) => crate::engine::request::json_part(path, request).is_none(),
            KeyPart::Ip(_) | KeyPart::Route | KeyPart::Global | KeyPart::Literal(_) => false,
        };
        if missing {
            return part_words(part, sources);
        }
    }
    "a key part".to_owned()
}

/// What a decision says, in words: for `explain`'s printout and the admin API.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Decision, Outcome};
///
/// let d = Decision::new(Outcome::Limited { retry_after_ns: 1_500_000_000 }, 5, 0, 60_000_000_000);
/// assert_eq!(ratewarden_policy::outcome_words(&d), "reject (retry after 1500ms)");
/// ```
pub fn outcome_words(decision: &Decision) -> String {
    let seconds = |ns: u64| ratewarden_core::DisplayDuration(std::time::Duration::from_nanos(ns));
    match decision.outcome {
        Outcome::Allowed => "allow".to_owned(),
        Outcome::Delayed { delay_ns } => format!("allow after a delay of {}", seconds(delay_ns)),
        Outcome::Limited { retry_after_ns } => {
            format!("reject (retry after {})", seconds(retry_after_ns))
        }
        _ => "reject (the cost is more than the limit could ever allow)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mismatch` restates `Match::matches` with reasons: the two must never disagree.
    #[test]
    fn mismatch_agrees_with_matches() {
        let rules = crate::config::parse(
            "m.toml",
            r#"
[[limit]]
name = "a"
match = { method = "POST", path = "/login" }
key = ["ip"]
algorithm = "gcra"
rate = "1/s"
burst = 1

[[limit]]
name = "b"
match = { path = "/api/*", host = "api.example.com", header = "x-beta" }
key = ["ip"]
algorithm = "gcra"
rate = "1/s"
burst = 1

[[limit]]
name = "c"
match = { path = "/Exact", path_exact = true, header = "x-plan", header_value = "gold" }
key = ["ip"]
algorithm = "gcra"
rate = "1/s"
burst = 1

[[limit]]
name = "d"
match = { path = "/files*", path_exact = true }
key = ["ip"]
algorithm = "gcra"
rate = "1/s"
burst = 1
"#,
        )
        .unwrap()
        .rules;
        let headers: [&[(&str, &str)]; 4] = [
            &[],
            &[("x-beta", "1")],
            &[("x-plan", "gold")],
            &[("X-Plan", "silver"), ("x-beta", "")],
        ];
        let mut seen = 0;
        for rule in &rules {
            for method in ["GET", "post", "POST"] {
                for path in [
                    "/login", "/LOGIN/", "/api/v1", "/api", "/Exact", "/exact", "/files/x",
                    "/filesx",
                ] {
                    for host in [
                        None,
                        Some("api.example.com:443"),
                        Some("API.example.com"),
                        Some("other"),
                    ] {
                        for headers in headers {
                            let request = Request {
                                peer: "192.0.2.1".parse().unwrap(),
                                method,
                                path,
                                host,
                                headers,
                                cost: None,
                                api_key: None,
                                tenant: None,
                                body: None,
                                client_cert: None,
                            };
                            let matched = rule.matches.matches(&request);
                            assert_eq!(
                                mismatch(&rule.matches, &request).is_none(),
                                matched,
                                "{} on {method} {path} {host:?} {headers:?}",
                                rule.name
                            );
                            seen += usize::from(matched);
                        }
                    }
                }
            }
        }
        assert!(seen > 10, "the grid must match some requests too");
    }
}
