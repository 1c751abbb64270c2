//! What the adaptive limiters report: their limits and queues, and why they shed.

use ratewarden_core::adaptive::Criticality;

/// One adaptive limiter's numbers, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveState {
    /// The key (`rule@fingerprint|value`).
    pub key: String,
    /// The current limit.
    pub limit: u64,
    /// Requests in flight.
    pub in_flight: u64,
    /// Requests waiting in its queue.
    pub waiting: u64,
}

/// Why an adaptive rule shed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// The limit was reached and the request could not wait: the rule has no queue, the
    /// front door cannot hold a request, or a sheddable one found the queue past its share.
    Limit,
    /// Every lane of its flow's hand was full.
    QueueFull,
    /// It waited `max_wait` without a place.
    WaitedTooLong,
}

impl ShedReason {
    /// Every reason, in the order counters keep them.
    pub const ALL: [ShedReason; 3] = [
        ShedReason::Limit,
        ShedReason::QueueFull,
        ShedReason::WaitedTooLong,
    ];

    /// The reason as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::Limit => "limit",
            ShedReason::QueueFull => "queue_full",
            ShedReason::WaitedTooLong => "waited_too_long",
        }
    }
}

/// The upper bounds of the wait-time buckets, in nanoseconds (1 ms to 10 s).
pub const WAIT_BUCKETS_NS: [u64; 10] = [
    1_000_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// How long dispatched waiters waited: a histogram over [`WAIT_BUCKETS_NS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Waiters dispatched.
    pub count: u64,
    /// Their waits added up, in nanoseconds.
    pub sum_ns: u64,
    /// Waiters whose wait was at most each bound of [`WAIT_BUCKETS_NS`] (not cumulative).
    pub buckets: [u64; 10],
}

/// Waiting requests of one rule and class, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// The rule's name.
    pub rule: String,
    /// The waiters' class.
    pub class: Criticality,
    /// How many wait now (over all the rule's keys).
    pub waiting: u64,
    /// How long those dispatched so far waited.
    pub waits: WaitStats,
}
