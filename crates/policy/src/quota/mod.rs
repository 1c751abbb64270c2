//! One budget split among the Envoys that share it: max-min fair shares of a rule's rate by
//! the demand each reports (Envoy's rate limit quota service), never assigning more than
//! the rate in all, shrinking before growing.
//!
//! Pure and clock-free: the gRPC service feeds it reports and stream ends with the time,
//! and sends the assignments it returns.

mod board;
mod fair;
mod fleet;

pub use board::{Assignment, BucketEntries, Budget, Demand, QuotaBoard, Report};
pub use fair::{max_min, max_min_weighted};
pub use fleet::{FleetBoard, Usage, RENEW_EVERY};

pub use crate::engine::QuotaBucket;
