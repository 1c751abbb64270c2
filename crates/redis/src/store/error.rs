//! Why a call to Redis failed.

use std::time::Duration;

/// Why a call to Redis failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    /// No answer within the deadline.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The circuit breaker is open: Redis failed repeatedly, and is not asked again until
    /// the cool-down is over.
    #[error("redis failed repeatedly; the circuit breaker is open until its cool-down is over")]
    BreakerOpen,
    /// The client or the server reported an error.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// No master is known: the Sentinels have not named one that answers as master yet
    /// (a failover under way, or every Sentinel unreachable).
    #[error("redis-sentinel: no master of `{0}` is known yet")]
    NoMaster(String),
    /// The decision was made on the master, but fewer replicas than `wait_for_replicas`
    /// acknowledged it within the deadline: a failover now could lose it.
    #[error("redis: {acknowledged} of {wanted} replicas acknowledged the decision in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas the store waits for.
        wanted: u32,
    },
    /// The script answered something this build does not understand.
    #[error("unexpected reply from the ratewarden script: {0}")]
    Protocol(String),
}
