//! Why a layer could not be built.

/// A limit written in code that cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A limit's name is empty, or holds a control character (names reach logs, metric
    /// labels and the RateLimit fields).
    #[error("limit name {name:?}: a name must not be blank nor hold control characters")]
    BadName {
        /// The name given.
        name: String,
    },
    /// Two limits of one layer have one name: their counters would be mixed up.
    #[error("limit `{name}` is given twice; every limit of a layer needs a name of its own")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// A layer without a limit would decide nothing.
    #[error("the layer has no limit; add one with `Builder::limit`")]
    NoLimits,
}
