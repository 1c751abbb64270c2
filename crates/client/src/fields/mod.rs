//! Reading what a server says about its limits.

mod ratelimit;
mod retry_after;

pub use ratelimit::{quotas, Quota};
pub use retry_after::retry_after;
