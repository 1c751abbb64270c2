//! Reading what a server says about its limits.

mod ratelimit;
mod retry_after;

pub(crate) use ratelimit::{each_quota, has_quotas, Reported};
pub use ratelimit::{quotas, Quota};
pub use retry_after::retry_after;
