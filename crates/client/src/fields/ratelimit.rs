//! `RateLimit` and `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers, Structured
//! Fields), and the legacy `X-RateLimit-*` trio.

use std::time::Duration;

use http::HeaderMap;
use ratewarden_core::NANOS_PER_SEC;
use ratewarden_http::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use sfv::{BareItem, ListEntry, Parameters};

use crate::Error;

/// Reset values above this many seconds are Unix times, not delays (GitHub and others send
/// `X-RateLimit-Reset` as an epoch second; no window lasts thirty years).
const EPOCH_RESET_ABOVE: u64 = 1_000_000_000;

/// One policy's quota, as a response reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The policy's name (`None` for the legacy fields, which describe one unnamed limit).
    pub policy: Option<String>,
    /// Units the client may still spend (`r`).
    pub remaining: u64,
    /// Until the quota resets (`t`).
    pub reset: Duration,
    /// The quota (`q` of `RateLimit-Policy`, or `X-RateLimit-Limit`), when sent.
    pub limit: Option<u64>,
    /// The policy's window (`w`), when sent.
    pub window: Option<Duration>,
}

/// Every quota `headers` report, read at `now` (nanoseconds since the Unix epoch): the
/// `RateLimit` field's policies, each with its `RateLimit-Policy` entry when there is one;
/// otherwise the legacy `X-RateLimit-*` fields; otherwise none.
///
/// # Errors
///
/// [`Error::Field`] naming the field and value, when one is present but malformed.
///
/// # Examples
///
/// ```
/// use http::HeaderMap;
/// use ratewarden_client::quotas;
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit-policy", r#""per-key";q=5;w=1"#.parse()?);
/// headers.insert("ratelimit", r#""per-key";r=3;t=1"#.parse()?);
/// let q = &quotas(&headers, 0)?[0];
/// assert_eq!((q.policy.as_deref(), q.remaining, q.reset), (Some("per-key"), 3, Duration::from_secs(1)));
/// assert_eq!((q.limit, q.window), (Some(5), Some(Duration::from_secs(1))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn quotas(headers: &HeaderMap, now: u64) -> Result<Vec<Quota>, Error> {
    if let Some(state) = joined(headers, &RATELIMIT, "ratelimit")? {
        let policies = match joined(headers, &RATELIMIT_POLICY, "ratelimit-policy")? {
            Some(p) => list("ratelimit-policy", &p)?,
            None => Vec::new(),
        };
        return list("ratelimit", &state)?
            .into_iter()
            .map(|(name, params)| {
                let bad = |reason: String| Error::Field {
                    field: "ratelimit",
                    value: state.clone(),
                    reason,
                };
                let remaining = int(&params, "r")
                    .ok_or_else(|| bad(format!("policy {name:?} has no r=<integer>")))?;
                let policy = policies.iter().find(|(n, _)| *n == name).map(|(_, p)| p);
                let limit = policy.and_then(|p| int(p, "q"));
                let window = policy.and_then(|p| int(p, "w")).map(Duration::from_secs);
                // Without `t` the draft says the quota resets within its window.
                let reset = int(&params, "t")
                    .map(Duration::from_secs)
                    .or(window)
                    .unwrap_or_default();
                Ok(Quota {
                    policy: Some(name),
                    remaining,
                    reset,
                    limit,
                    window,
                })
            })
            .collect();
    }
    let Some(remaining) = legacy(headers, &X_RATELIMIT_REMAINING, "x-ratelimit-remaining")? else {
        return Ok(Vec::new());
    };
    let reset = match legacy(headers, &X_RATELIMIT_RESET, "x-ratelimit-reset")? {
        Some(at) if at > EPOCH_RESET_ABOVE => {
            Duration::from_nanos(at.saturating_mul(NANOS_PER_SEC).saturating_sub(now))
        }
        Some(secs) => Duration::from_secs(secs),
        None => Duration::ZERO,
    };
    Ok(vec![Quota {
        policy: None,
        remaining,
        reset,
        limit: legacy(headers, &X_RATELIMIT_LIMIT, "x-ratelimit-limit")?,
        window: None,
    }])
}

/// Every line of field `name`, joined as one list (RFC 9110 section 5.3).
fn joined(
    headers: &HeaderMap,
    name: &http::HeaderName,
    field: &'static str,
) -> Result<Option<String>, Error> {
    let mut all: Option<String> = None;
    for value in headers.get_all(name) {
        let text = value.to_str().map_err(|_| Error::Field {
            field,
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            reason: "not ASCII".to_owned(),
        })?;
        match &mut all {
            Some(all) => {
                all.push_str(", ");
                all.push_str(text);
            }
            None => all = Some(text.to_owned()),
        }
    }
    Ok(all)
}

/// A Structured Field list of named items (the name a String, or a Token as early drafts
/// sent) with their parameters.
fn list(field: &'static str, value: &str) -> Result<Vec<(String, Parameters)>, Error> {
    let bad = |reason: String| Error::Field {
        field,
        value: value.to_owned(),
        reason,
    };
    let parsed = sfv::Parser::new(value)
        .parse::<sfv::List>()
        .map_err(|e| bad(format!("not a Structured Field list: {e}")))?;
    parsed
        .into_iter()
        .map(|member| {
            let ListEntry::Item(item) = member else {
                return Err(bad("an inner list where a policy was expected".to_owned()));
            };
            let name = match &item.bare_item {
                BareItem::String(s) => s.as_str().to_owned(),
                BareItem::Token(t) => t.as_str().to_owned(),
                other => return Err(bad(format!("a policy named by {other:?}"))),
            };
            Ok((name, item.params))
        })
        .collect()
}

/// A non-negative integer parameter.
fn int(params: &Parameters, key: &str) -> Option<u64> {
    let n: i64 = params.get(key)?.as_integer()?.into();
    u64::try_from(n).ok()
}

fn legacy(
    headers: &HeaderMap,
    name: &http::HeaderName,
    field: &'static str,
) -> Result<Option<u64>, Error> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    text.parse::<u64>().map(Some).map_err(|_| Error::Field {
        field,
        value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
        reason: "not a non-negative integer".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn each_policy_is_joined_with_its_quota_and_window() {
        let h = headers(&[
            (
                "ratelimit-policy",
                r#""burst";q=100;w=60, "day";q=1000;w=86400"#,
            ),
            ("ratelimit", r#""burst";r=40;t=12, "day";r=900;t=3600"#),
        ]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[1].policy.as_deref(), Some("day"));
        assert_eq!((q[1].remaining, q[1].limit), (900, Some(1000)));
        assert_eq!(q[1].reset, Duration::from_secs(3600));
        assert_eq!(q[1].window, Some(Duration::from_secs(86_400)));
    }

    #[test]
    fn split_field_lines_are_one_list_and_tokens_name_policies() {
        let h = headers(&[("ratelimit", "a;r=1;t=2"), ("ratelimit", r#""b";r=0;t=5"#)]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(q.iter().map(|q| q.remaining).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(q[0].policy.as_deref(), Some("a"));
    }

    #[test]
    fn legacy_reset_reads_as_seconds_or_as_an_epoch_time() {
        let h = headers(&[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "7"),
            ("x-ratelimit-reset", "30"),
        ]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(
            (q[0].remaining, q[0].limit, q[0].reset),
            (7, Some(60), Duration::from_secs(30))
        );
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000060"),
        ]);
        let now = 1_700_000_000 * NANOS_PER_SEC;
        assert_eq!(quotas(&h, now).unwrap()[0].reset, Duration::from_secs(60));
    }

    #[test]
    fn the_draft_fields_win_over_the_legacy_ones() {
        let h = headers(&[
            ("ratelimit", r#""p";r=2;t=1"#),
            ("x-ratelimit-remaining", "9"),
        ]);
        assert_eq!(quotas(&h, 0).unwrap()[0].remaining, 2);
    }

    #[test]
    fn malformed_fields_are_errors_naming_field_and_value() {
        for (name, value) in [
            ("ratelimit", r#""p";t=1"#),
            ("ratelimit", "(a b);r=1"),
            ("ratelimit", "\"unterminated"),
            ("x-ratelimit-remaining", "-3"),
        ] {
            let e = quotas(&headers(&[(name, value)]), 0)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn no_fields_no_quotas() {
        assert!(quotas(&HeaderMap::new(), 0).unwrap().is_empty());
    }
}
