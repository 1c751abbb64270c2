//! Errors from building limits and parsing their numbers.

/// An invalid limit parameter or an unparsable number.
///
/// Each variant names the field or the input that was wrong, so callers can add the file,
/// line and rule name around it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A count, window, rate or burst was zero, which would reject everything or divide by zero.
    #[error("`{field}` must be greater than zero")]
    Zero {
        /// The parameter's name, as in config files (`limit`, `burst`, `window`, `rate`).
        field: &'static str,
    },
    /// An algorithm was given without a number it needs.
    #[error("`{algorithm}` needs `{field}`")]
    Missing {
        /// The algorithm's name.
        algorithm: &'static str,
        /// The missing number's name, as in config files.
        field: &'static str,
    },
    /// A number too large to represent (for example a window longer than 584 years).
    #[error("`{field}` is too large: {reason}")]
    TooLarge {
        /// The parameter's name.
        field: &'static str,
        /// What the bound is.
        reason: String,
    },
    /// A rate such as `50/s` could not be read.
    #[error("invalid rate `{input}`: {reason} (write it as COUNT/PERIOD, like `50/s`, `1000/15m` or `5/1h`)")]
    Rate {
        /// The text as given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A duration such as `15m` could not be read.
    #[error("invalid duration `{input}`: {reason} (write a number and a unit: ns, us, ms, s, m, h, d, w; like `200ms` or `1.5s`)")]
    Duration {
        /// The text as given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A decimal number such as `0.70` could not be read.
    #[error("invalid number `{input}`: {reason}")]
    Number {
        /// The text as given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// An algorithm name that is not one of ours.
    #[error("unknown algorithm `{name}`; known algorithms: {known}")]
    UnknownAlgorithm {
        /// The name as given.
        name: String,
        /// The names we know, comma separated.
        known: String,
    },
    /// A calendar period name that is not one of ours.
    #[error("unknown calendar period `{name}`; known periods: second, minute, hour, day, week, month, year")]
    UnknownPeriod {
        /// The name as given.
        name: String,
    },
    /// A time zone that is not in the time zone database.
    #[error(
        "unknown time zone `{name}`: {reason} (use an IANA name such as `UTC` or `Europe/Paris`)"
    )]
    TimeZone {
        /// The name as given.
        name: String,
        /// What the time zone database said.
        reason: String,
    },
}
