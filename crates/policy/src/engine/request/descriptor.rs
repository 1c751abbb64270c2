//! One descriptor of an Envoy rate limit request, as the engine reads it.

use crate::envoy::RateLimitOverride;

/// One descriptor of a rate limit request, free of any protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestDescriptor<'a> {
    /// Its entries, key and value, in order.
    pub entries: Vec<(&'a str, &'a str)>,
    /// Its own cost, winning over the request's (0 checks without counting).
    pub hits: Option<u64>,
    /// A limit the request gives itself, instead of the configured one.
    pub limit: Option<RateLimitOverride>,
}
