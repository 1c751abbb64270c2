//! Reading what a server says about its limits.

mod ratelimit;
mod retry_after;
mod unchanged;

pub(crate) use ratelimit::{
    each_quota, each_stated_quota, has_legacy_quota, PolicyTable, Reported,
};
pub use ratelimit::{quotas, Quota};
pub use retry_after::retry_after;
pub(crate) use unchanged::RawFields;
