//! What a store is told: where Redis is, whose clock decides, how long to wait.

use std::time::Duration;

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis server (or a primary with replicas behind a stable address), such as
    /// `redis://127.0.0.1:6379` or `rediss://user:password@host:6380` for TLS with AUTH.
    Single(String),
    /// A Redis Cluster, found through these seed nodes.
    Cluster(Vec<String>),
    /// A master and its replicas behind Redis Sentinel, followed across failovers.
    Sentinel(SentinelTarget),
}

/// A master found through Redis Sentinel: where the Sentinels are, which master, and how
/// to speak to the master once found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The Sentinels, such as `redis://10.0.0.1:26379`; Sentinel's own AUTH goes in the URL
    /// (`redis://:password@host:26379`, the same on every Sentinel), `rediss://` for TLS.
    pub sentinels: Vec<String>,
    /// The name the Sentinels monitor the master under (`sentinel monitor <name> ...`).
    pub master_name: String,
    /// The master's AUTH user (none for the default user).
    pub username: Option<String>,
    /// The master's AUTH password.
    pub password: Option<String>,
    /// Whether the master (and its replicas) speak TLS.
    pub tls: bool,
}

/// Whose clock decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis's `TIME`, read inside the script: every server of a fleet decides on one
    /// clock, however skewed their own are.
    Redis,
    /// The `now` each call is given: for deterministic tests, and differential runs against
    /// the in-memory store. Keys then live an hour past their reset on Redis's clock (which
    /// the caller's need not follow: a test's stands still), so decisions stay exact while
    /// the caller's clock lags Redis's by less than that.
    Caller,
}

/// How to reach Redis and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Where the counters live.
    pub target: Target,
    /// The most one call may take, connecting included; past it the call fails and the
    /// rule's failure policy answers. A deadline missed because this process was saturated
    /// (its timer fired more than half the deadline late) is not counted against Redis: the
    /// call waits on for the reply it already asked for, up to four deadlines more.
    pub deadline: Duration,
    /// Consecutive failures that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker fails calls at once before one probes again.
    pub breaker_cool_down: Duration,
    /// Whose clock decides.
    pub time: TimeSource,
    /// Put before every key, so several deployments can share one Redis.
    pub key_prefix: String,
    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the system's.
    pub tls_ca: Option<Vec<u8>>,
    /// Concurrent calls share the connection and are pipelined (the default). Off, calls
    /// wait for each other, one round trip at a time: only for measuring what pipelining
    /// is worth.
    pub pipeline: bool,
    /// Replicas that must acknowledge each decision's write (Redis `WAIT`, for at most the
    /// deadline) before it counts as made; 0 (the default) waits for none. Replication is
    /// asynchronous: a decision the master acknowledged just before it died may never reach
    /// the replica that takes over, which then admits those units again. Waiting closes
    /// that window at the cost of a replica's round trip on every decision; a decision not
    /// acknowledged in time fails, and the rule's failure policy answers. One server or
    /// Sentinel only (a Cluster refuses it).
    pub wait_for_replicas: u32,
    /// The most calls one batch holds. While `batch_in_flight` calls are in flight to Redis
    /// (to their slot, on a Cluster), the calls that arrive for the same place wait for one
    /// and then go together in one script call, which pays Redis's cost of a call (and reads
    /// `TIME`) once for them all; a call that finds fewer in flight goes at once. 0 or 1:
    /// every call its own.
    /// Calls that wait for replicas, and calls with `pipeline` off, are never batched.
    pub batch_calls: usize,
    /// The most bytes of arguments one batch holds (a call larger than this goes alone).
    pub batch_bytes: usize,
    /// Calls (or batches) in flight to one place before the next ones wait to be batched
    /// (at least 1). One makes the largest batches, hence the least work for Redis; two
    /// keep Redis busy while the client turns the last reply around, for more decisions a
    /// second where the client, not Redis, is the limit.
    pub batch_in_flight: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            target: Target::Single("redis://127.0.0.1:6379".to_owned()),
            deadline: ratewarden_core::shared_store::DEADLINE,
            breaker_failures: ratewarden_core::shared_store::BREAKER_FAILURES,
            breaker_cool_down: ratewarden_core::shared_store::BREAKER_COOL_DOWN,
            time: TimeSource::Redis,
            key_prefix: ratewarden_core::shared_store::KEY_PREFIX.to_owned(),
            tls_ca: None,
            pipeline: true,
            wait_for_replicas: 0,
            batch_calls: ratewarden_core::shared_store::BATCH_CALLS,
            batch_bytes: ratewarden_core::shared_store::BATCH_BYTES,
            batch_in_flight: ratewarden_core::shared_store::BATCH_IN_FLIGHT,
        }
    }
}
