//! Reading what a server says about its limits.

mod answer;
mod ratelimit;
mod retry_after;
mod unchanged;

pub(crate) use answer::{AnswerFields, Lines};
pub(crate) use ratelimit::{each_quota, each_stated_quota, PolicyTable, Reported};
pub use ratelimit::{quotas, Quota};
pub use retry_after::retry_after;
pub(crate) use unchanged::RawFields;

/// A response's headers with these `RateLimit` and `RateLimit-Policy` lines, one header
/// line each (for the tests of what reads them).
#[cfg(test)]
pub(crate) fn answer_with(state: &[&str], policy: &[&str]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for v in state {
        h.append("ratelimit", v.parse().unwrap());
    }
    for v in policy {
        h.append("ratelimit-policy", v.parse().unwrap());
    }
    h
}
