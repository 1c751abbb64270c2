//! Ratewarden's policy: which limits apply to a request, and under which keys.
//!
//! This crate grows with the policy engine; so far it holds the config file (parsed raw, then
//! validated into [`Rule`]s, every error naming the file, line, column and rule) and how a
//! request's client address is found and keyed:
//!
//! - [`client_ip`]: the address of the client, from the socket, or from the one header the
//!   configured [`TrustedProxies`] write it in ([`ClientIpHeader`], `X-Forwarded-For` by
//!   default), walking the list from the right, so that a client can never choose its own
//!   key by sending that header, or another one, itself.
//! - [`IpGrouping`]: the key of an address: IPv4 by /32 and IPv6 by /64 by default (a host
//!   picks its own 64-bit interface ID, so it could otherwise rotate through 2^64 keys),
//!   IPv4-mapped IPv6 unwrapped first.

pub mod config;
mod engine;
pub mod envoy;
mod hint;
pub mod host;
mod ip;
pub mod method_override;
pub mod parts;
pub mod path;
pub mod quota;
#[cfg(feature = "tokio")]
mod runtime;
pub mod usage;

pub use config::{
    Adaptive, AdminAccess, AdminToken, BodyTerm, Bounds, BucketMatch, Config, ConfigError,
    ConfigErrors, Cost, KeyPart, KeySources, Match, MethodOverride, Mode, OnStoreFailure, Queue,
    Regions, Rule, ServerSettings, SettleFrom, StoreKind, StoreSettings, WhenKeyMissing,
    ADMIN_TOKEN_ENV, GLOBAL_HORIZON, HOME_IN_FLIGHT, MAX_WEIGHT, MIN_HEADER_BYTES, MIN_STORE_BYTES,
};
pub use engine::{
    api_key_digest, fingerprint, rollout_bucket, AdaptiveState, Answer, DescriptorStatus,
    DescriptorVerdict, Engine, GrantId, Identity, Jitter, Owner, ReleaseError, Request,
    RequestDescriptor, RequestError, RuleOutcome, RuleStats, SettleError, Verdict,
    CRITICALITY_HEADER,
};
pub use engine::{
    outcome_words, Explanation, Finding, KeyState, KeyStateError, Offender, RuleExplanation,
    RuleTop, TopKeys, TopReport,
};
pub use engine::{PrefetchStats, QueueState, ShedReason, Timer, WaitStats, WAIT_BUCKETS_NS};
pub use ip::{
    client_ip, push_ip, push_ip_net, ClientIpError, ClientIpHeader, HeaderNameError, IpGrouping,
    PrefixError, TrustedProxies,
};
#[cfg(feature = "tokio")]
pub use runtime::{release_soon, ClockTimer, PermitGuard, Release};
