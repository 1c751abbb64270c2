//! Defaults of a shared store (Redis), written once for the config file's `[store]` section
//! and for the Redis crate's own `RedisConfig::default()`, which must agree.

use std::time::Duration;

/// The most one call to a shared store may take before the rule's failure policy answers: a
/// same-datacenter Redis answers in well under a millisecond, so 10 ms means it is sick.
pub const DEADLINE: Duration = Duration::from_millis(10);

/// Consecutive failures that open the circuit breaker.
pub const BREAKER_FAILURES: u32 = 5;

/// How long an open breaker fails calls at once before one call probes again.
pub const BREAKER_COOL_DOWN: Duration = Duration::from_secs(1);

/// Put before every key, so several deployments can share one Redis.
pub const KEY_PREFIX: &str = "rw:";

/// The most calls that go to the store together as one call.
pub const BATCH_CALLS: usize = 128;

/// The most bytes of arguments one such call holds (64 KiB).
pub const BATCH_BYTES: usize = 64 * 1024;

/// Calls in flight to one place before the next ones wait to go together.
pub const BATCH_IN_FLIGHT: usize = 1;
