//! What can go wrong on the calling side.

use std::time::Duration;

/// A boxed error from the service or client underneath.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a call did not produce a response.
///
/// Being told to wait is not an error: a 429 whose retries are spent comes back as the
/// response it is. These are the cases where the client itself gives up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rate limit field the server sent cannot be read.
    #[error("cannot read the {field} field {value:?}: {reason}")]
    Field {
        /// The field's name, such as `retry-after`.
        field: &'static str,
        /// The value as received.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Adaptive throttling refused the request locally: the origin has been refusing most
    /// requests lately, so this one was not sent.
    #[error("{origin}: throttled locally (the origin refused most recent requests; sent with probability {accept_probability:.3})")]
    Throttled {
        /// The origin (`scheme://host:port`).
        origin: String,
        /// The chance the request had of being sent.
        accept_probability: f64,
    },
    /// The deadline over every attempt passed while an attempt was in flight or waiting.
    #[error("{origin}: the deadline of {deadline:?} over all attempts passed after {attempts} attempt(s)")]
    Deadline {
        /// The origin (`scheme://host:port`).
        origin: String,
        /// The deadline given.
        deadline: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// The outbound limiter would hold the call longer than its maximum wait.
    #[error("partner {partner:?}: the next slot is {wait:?} away, past the maximum wait of {max_wait:?}")]
    MaxWait {
        /// The partner's name.
        partner: String,
        /// How long the call would have waited (unknown waits read as the maximum).
        wait: Duration,
        /// The most a caller agreed to wait.
        max_wait: Duration,
    },
    /// The outbound limiter's store failed.
    #[error("partner {partner:?}: the limiter's store failed: {source}")]
    Store {
        /// The partner's name.
        partner: String,
        /// What the store said.
        source: BoxError,
    },
    /// An invalid setting.
    #[error("invalid {what}: {reason}")]
    Config {
        /// The setting.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The client underneath failed (after any retries).
    #[error(transparent)]
    Inner(BoxError),
}
