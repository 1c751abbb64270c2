//! One budget split among the Envoys that share it: max-min fair shares of a rule's rate by
//! the demand each reports (Envoy's rate limit quota service), never assigning more than
//! the rate in all, shrinking before growing.
//!
//! Clock-free: the gRPC service feeds it reports and stream ends with the time, and sends
//! the assignments it returns. The board (`board`) is pure; the fleet's side (`fleet`)
//! asks the store for this process's share of each budget and has the board split that.

mod board;
mod bucket;
mod fair;
mod fleet;

pub use board::{Assignment, BucketEntries, Budget, Demand, QuotaBoard, Report};
pub use fair::{max_min, max_min_weighted};
pub use fleet::{FleetBoard, Usage, RENEW_EVERY};

pub use bucket::QuotaBucket;
