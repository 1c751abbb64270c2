//! Every call behind the circuit breaker and within the deadline.

use std::sync::atomic::Ordering;

use super::{RedisError, RedisStore};
use crate::deadline::{self, Blame};

impl RedisStore {
    /// Behind the breaker and within the deadline, with the connection.
    ///
    /// A deadline missed while the caller was saturated (its timer fired late, see
    /// [`deadline`](crate::deadline)) fails the call but is not held against Redis.
    pub(super) async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisError> {
        if !self.breaker.allow() {
            return Err(RedisError::BreakerOpen);
        }
        let deadline = self.config.deadline;
        // Begun before the connection is made, a call waits on the handshake.
        let connecting = self.connection.get().is_none();
        match deadline::within(deadline, call).await {
            Ok(Ok(value)) => {
                self.breaker.succeeded();
                Ok(value)
            }
            // The master answered in time; its replicas are behind (or none is attached,
            // as after a failover until one is). Held against the master, a missing replica
            // would open the breaker for every rule, the ones that wait for none included.
            Ok(Err(error @ RedisError::NotReplicated { .. })) => {
                self.breaker.succeeded();
                Err(error)
            }
            Ok(Err(error)) => {
                self.breaker.failed();
                Err(error)
            }
            // Begun while connecting: the handshake (the library's load alone takes Redis
            // about 12 ms, past the default deadline) says nothing of Redis's health, and
            // counted it opened the breaker at start under traffic. A handshake that fails
            // is counted, by the call that waited for it to the end.
            Err(Blame::Redis) if connecting => {
                self.breaker.inconclusive();
                Err(RedisError::Timeout(deadline))
            }
            Err(Blame::Redis) => {
                self.breaker.failed();
                Err(RedisError::Timeout(deadline))
            }
            Err(Blame::Caller) => {
                self.late_timeouts.fetch_add(1, Ordering::Relaxed);
                self.breaker.inconclusive();
                Err(RedisError::Timeout(deadline))
            }
        }
    }

    /// Calls that timed out because this process was saturated (every timer of the call
    /// fired late), not held against Redis by the circuit breaker. For metrics: a count
    /// that grows means the process, not Redis, needs capacity.
    pub fn late_timeouts(&self) -> u64 {
        self.late_timeouts.load(Ordering::Relaxed)
    }
}
