//! Why the engine refused to decide, settle or release: the caller's mistakes (a 4xx).

/// A request the engine cannot decide: it is malformed (a 4xx, not a limit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A rule's cost header is not a whole number.
    #[error("limit `{rule}`: header `{header}` must be a whole number, not `{value}`")]
    Cost {
        /// The rule whose cost could not be read.
        rule: String,
        /// The cost header.
        header: String,
        /// What it said.
        value: String,
    },
    /// A rule's cost header claims more than the rule's `max_cost`.
    #[error("limit `{rule}`: header `{header}` claims {claimed}, over the most of {max}")]
    CostOverMax {
        /// The rule.
        rule: String,
        /// The cost header.
        header: String,
        /// What it claimed.
        claimed: u64,
        /// The rule's `max_cost`.
        max: u64,
    },
    /// A rule's estimate from the request's body comes to more than its `max_cost`.
    #[error("limit `{rule}`: the body's estimate ({estimate}) comes to {claimed}, over the most of {max}")]
    BodyCostOverMax {
        /// The rule.
        rule: String,
        /// The estimate as configured (`json:max_tokens + bytes/4`).
        estimate: String,
        /// What it came to.
        claimed: u64,
        /// The rule's `max_cost`.
        max: u64,
    },
    /// A header a matching rule keys on (or reads its cost from) came more than once:
    /// a proxy and the upstream may each read a different line, so neither is trusted.
    #[error("limit `{rule}`: header `{header}` appears more than once; send it once")]
    RepeatedHeader {
        /// The rule that keys on it.
        rule: String,
        /// The header's name.
        header: String,
    },
    /// `Authorization: Bearer` and the configured API-key header both carry a key, and the
    /// two differ: which one the upstream authenticates is unknown.
    #[error("limit `{rule}`: `Authorization: Bearer` and header `{header}` carry different API keys; send one")]
    ConflictingApiKeys {
        /// The rule keyed on the API key.
        rule: String,
        /// The configured API-key header.
        header: String,
    },
    /// The request's host is not a host (`a..b`, `user@host`, a port that is no number):
    /// servers read it apart, so no rule can say whether it names its host (RFC 9112 §3.2
    /// answers it 400).
    #[error("the request's host: {0}")]
    Host(crate::host::HostError),
    /// A matching rule keys on a part the request lacks, and says to refuse such requests
    /// (`when_key_missing = "refuse"`).
    #[error("limit `{rule}`: the request has no {part}, which the rule keys on; send it")]
    MissingKeyPart {
        /// The rule.
        rule: String,
        /// The part, in words (`tenant (the `x-tenant-id` header)`).
        part: String,
    },
    /// The request's `Authorization` cannot be read one way: a bearer credential that is
    /// not one token, or a scheme not followed by a space.
    #[error("limit `{rule}`: `Authorization` {reason}; send `Bearer TOKEN`")]
    Credentials {
        /// The rule keyed on the API key.
        rule: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A trusted proxy put something other than an address where the client's address
    /// belongs: the client cannot be told apart from the proxy's other clients.
    #[error("{0}")]
    ClientAddress(#[from] crate::ip::ClientIpError),
    /// A descriptor call without what it needs (a domain, a descriptor).
    #[error("{0}")]
    Descriptors(String),
}

impl RequestError {
    /// Whether the request is malformed (HTTP 400: it cannot be read one way only), rather
    /// than well formed and refused for what it asks (HTTP 422: a cost over `max_cost`).
    /// Every front door answers by this, so one meaning has one status.
    pub fn is_malformed(&self) -> bool {
        !matches!(
            self,
            RequestError::CostOverMax { .. } | RequestError::BodyCostOverMax { .. }
        )
    }
}

/// Why a settle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// No such reservation: never made, settled already, or expired (the estimate stood).
    #[error("no such reservation: never made, already settled, or expired (its estimate stands)")]
    Unknown,
    /// The reservation was issued for another client: the caller's key under one of its
    /// rules is not the reservation's. Nothing was charged; it stands for its owner.
    #[error("the reservation was issued for another client: under limit `{rule}` this call's key is not the reservation's (settle with the attributes the check named: ip, api_key, tenant, headers, method, path)")]
    NotOwner {
        /// The first rule whose key differs.
        rule: String,
    },
    /// The actual cost is more than a rule of the reservation takes from one request: its
    /// `max_cost`, or its limit's burst. Nothing was charged; the reservation stands.
    #[error("limit `{rule}`: a cost of {actual} is over the most of {max} one request may take")]
    TooCostly {
        /// The rule whose bound it is.
        rule: String,
        /// The cost asked for.
        actual: u64,
        /// The most a request may cost under that rule.
        max: u64,
    },
}

/// Why a release was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// No such permit: never granted, released already, or lapsed after its lease.
    #[error("no such permit: never granted, already released, or lapsed after its lease")]
    Unknown,
    /// The permit was granted to another client: the caller's key under one of its rules
    /// is not the permit's. Nothing went back; the permit stays its owner's.
    #[error("the permit was granted to another client: under limit `{rule}` this call's key is not the permit's (release with the attributes the check named: ip, api_key, tenant, headers, method, path)")]
    NotOwner {
        /// The first rule whose key differs.
        rule: String,
    },
}
