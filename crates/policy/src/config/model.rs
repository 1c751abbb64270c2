//! A validated rule: what it matches, what it keys on, what it costs and how it fails.

use std::fmt;
use std::time::Duration;

use ratewarden_core::Limit;

use crate::ip::IpGrouping;

/// What a rule's key is built from, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The client address, grouped by prefix.
    Ip(IpGrouping),
    /// A request header's value (names are case-insensitive, stored lowercase).
    Header(String),
    /// The API key: the bearer token of `Authorization`, or the configured header. Keys
    /// hold a 64-bit digest of it, never the secret itself.
    ApiKey,
    /// The tenant, from the configured header (`x-tenant-id` by default).
    Tenant,
    /// The request's method and path.
    Route,
    /// One key for everyone.
    Global,
    /// A fixed text.
    Literal(String),
    /// The values of an Envoy descriptor, in order (rules matched by `domain` and
    /// `descriptor`, decided over Envoy's rate limit protocol).
    Descriptor,
    /// An Envoy quota bucket's id: its entries sorted by key, each as `key=value` (rules
    /// matched by `match.bucket`, whose budgets Envoy's quota service splits).
    Bucket,
    /// A string or number at a path of the request's JSON body (`json:model`: a budget per
    /// LLM model), when the door read the body (the gateway, for a rule that asks).
    Json(crate::usage::UsagePath),
    /// The subject of the client's TLS certificate (`CN=dashboard,O=ops`), on a listener
    /// that requires one (`[tls.*] client_ca`): the certificate was verified against that
    /// CA in the handshake, so the client cannot choose it.
    ClientCert,
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Ip(_) => f.write_str("ip"),
            KeyPart::Header(h) => write!(f, "header:{h}"),
            KeyPart::ApiKey => f.write_str("api_key"),
            KeyPart::Tenant => f.write_str("tenant"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Global => f.write_str("global"),
            KeyPart::Descriptor => f.write_str("descriptor"),
            KeyPart::Bucket => f.write_str("bucket"),
            KeyPart::Literal(text) => write!(f, "literal:{text}"),
            KeyPart::Json(path) => write!(f, "json:{path}"),
            KeyPart::ClientCert => f.write_str("client_cert"),
        }
    }
}

/// Which requests a rule applies to; every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    /// The method, uppercase.
    pub method: Option<String>,
    /// A path: exact, or a prefix when it ends in `*`.
    pub path: Option<String>,
    /// Whether `path` matches byte for byte (after RFC 3986 normalization). By default
    /// (`false`) ASCII case and a trailing slash are ignored, as many upstreams ignore them,
    /// and a `route` key part keeps one spelling of those aliases (see [`crate::path`]).
    pub path_exact: bool,
    /// The host in its one spelling (lowercase, no trailing dot, no port; see
    /// [`crate::host`]): requests are matched on theirs.
    pub host: Option<String>,
    /// A header that must be present (lowercase name), with the value it must have if given.
    pub header: Option<(String, Option<String>)>,
    /// An Envoy rate limit domain: the rule is decided over Envoy's protocol (gRPC
    /// `ShouldRateLimit`, `POST /json`), for descriptors in this domain, never for HTTP
    /// requests.
    pub domain: Option<String>,
    /// The descriptor's entries, in order: each key, with the value it must have when given
    /// (`*` matches any run of characters). Only with `domain`.
    pub descriptor: Vec<(String, Option<String>)>,
    /// The Envoy quota buckets of `domain` the rule takes, and how they weigh in the split
    /// of its budget: a rule with one is for Envoy's quota service only, never for a
    /// descriptor nor an HTTP request.
    pub bucket: Option<BucketMatch>,
}

/// A rule's `match.bucket` and `weights`: which quota bucket ids it takes, and each
/// bucket's weight in the split of the budget it draws on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketMatch {
    /// The entries a bucket's id must hold (in any order, among any others): each key,
    /// with the value it must have when given (`*` matches any run of characters).
    pub entries: Vec<(String, Option<String>)>,
    /// `(key, value, weight)`: a bucket whose id holds exactly `key=value` weighs `weight`
    /// (the largest of those it holds); a bucket holding none weighs 1.
    pub weights: Vec<(String, String, u64)>,
}

/// Whether a rule rejects, only records, or rejects for a share of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reject over the limit.
    Enforce,
    /// Decide and count, log "would have rejected", allow everything.
    Shadow,
    /// Enforce for a stable share of keys (in hundredths of a percent), shadow for the rest.
    Rollout {
        /// 0 to 10,000.
        basis_points: u32,
    },
}

/// What a rule does when its store fails or is too slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreFailure {
    /// Never a 503: the rule is enforced at its own numbers in this process (a fleet of N
    /// admits at most N times the limit), counted and logged, so overload cannot switch it off.
    Open,
    /// Reject with 503: for limits that guard money or security.
    Closed,
    /// Decide on a bucket in this process at `share` (a fraction `1 / share`) of the limit.
    Local {
        /// The limit is divided by this (for example the number of instances).
        divide_by: u32,
    },
}

/// What a rule does with a request that lacks a part of its key (no API key, no tenant,
/// no header the key reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenKeyMissing {
    /// Count it under the client's address (grouped as given) in place of each missing
    /// part, in keys of their own: the default, so that leaving a part out never escapes a
    /// limit.
    Client(IpGrouping),
    /// The rule does not apply (for a part the upstream itself requires, or rules meant
    /// only for requests that carry it).
    Skip,
    /// Refuse the request with a 400 naming the rule and the part.
    Refuse,
}

/// The policy as the file spells it (`open`, `closed`, `local / 3`), for logs.
impl std::fmt::Display for OnStoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open => f.write_str("open"),
            Self::Closed => f.write_str("closed"),
            Self::Local { divide_by: 1 } => f.write_str("local"),
            Self::Local { divide_by } => write!(f, "local / {divide_by}"),
        }
    }
}

impl Default for WhenKeyMissing {
    fn default() -> Self {
        WhenKeyMissing::Client(IpGrouping::default())
    }
}

impl fmt::Display for WhenKeyMissing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WhenKeyMissing::Client(_) => "client",
            WhenKeyMissing::Skip => "skip",
            WhenKeyMissing::Refuse => "refuse",
        })
    }
}

/// What one request costs under a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cost {
    /// Always this much.
    Fixed(u64),
    /// Read from a request header (a whole number, such as an estimated token count),
    /// refused above `max`; 1 when the header is absent.
    Header {
        /// The header, lowercase.
        name: String,
        /// The most one request may claim.
        max: u64,
    },
    /// An estimate read from the request's JSON body (an LLM request's `max_tokens`, its
    /// prompt's bytes): the terms added up, refused above `max`; `max` itself when the
    /// body was not read whole or a field is missing (the most one request may claim,
    /// which a settle corrects).
    Body {
        /// What is added up, in the order written.
        terms: Vec<BodyTerm>,
        /// The most one request may claim.
        max: u64,
    },
}

/// One term of a [`Cost::Body`] estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyTerm {
    /// A whole number at a path of the JSON body (`json:max_tokens`).
    Field(crate::usage::UsagePath),
    /// The body's length in bytes divided by this, rounded up (`bytes/4`: OpenAI's rule of
    /// thumb of four bytes a token).
    Bytes(u64),
    /// A fixed number.
    Fixed(u64),
}

impl std::fmt::Display for BodyTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyTerm::Field(path) => write!(f, "json:{path}"),
            BodyTerm::Bytes(1) => f.write_str("bytes"),
            BodyTerm::Bytes(n) => write!(f, "bytes/{n}"),
            BodyTerm::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Cost {
    /// Whether the cost is read from the request's body: the door must read it first.
    pub fn reads_body(&self) -> bool {
        matches!(self, Cost::Body { .. })
    }
}

/// Where the gateway reads what a request really cost, from the upstream's answer, to
/// settle the rule's estimate with (`settle_from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleFrom {
    /// A response header holding a whole number (`header:NAME`; the name lowercase).
    Header(String),
    /// A field of the answer, or a sum of fields (`usage.total_tokens`): read from a JSON
    /// answer, or from the last event of a `text/event-stream` answer that carries it.
    Usage(crate::usage::UsagePath),
}

impl std::fmt::Display for SettleFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettleFrom::Header(name) => write!(f, "header:{name}"),
            SettleFrom::Usage(path) => path.fmt(f),
        }
    }
}

impl Rule {
    /// Whether the rule reads the request's body (its cost is estimated from it, or a key
    /// part is in it): the gateway reads a JSON body before deciding when one does.
    pub fn reads_body(&self) -> bool {
        self.cost.reads_body() || self.key.iter().any(|p| matches!(p, KeyPart::Json(_)))
    }
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its name, unique in the file.
    pub name: String,
    /// Which requests it applies to.
    pub matches: Match,
    /// What its key is built from.
    pub key: Vec<KeyPart>,
    /// What it does with a request that lacks a part of its key.
    pub when_key_missing: WhenKeyMissing,
    /// The algorithm with its numbers.
    pub limit: Limit,
    /// What one request costs.
    pub cost: Cost,
    /// When set, the cost is an estimate: the decision reserves it, and the caller settles
    /// the real cost within this long (or the estimate stands).
    pub settle_within: Option<Duration>,
    /// Where the gateway reads the real cost from the upstream's answer, to settle the
    /// estimate with itself (the rule then has `settle_within`, by default
    /// [`SETTLE_FROM_WITHIN`](crate::config::SETTLE_FROM_WITHIN)).
    pub settle_from: Option<SettleFrom>,
    /// The bucket to decide on when the store fails and `on_store_failure = "local"`: the
    /// same algorithm at the limit divided as configured.
    pub local: Option<Limit>,
    /// Enforce, shadow, or a rollout.
    pub mode: Mode,
    /// When the store fails.
    pub on_store_failure: OnStoreFailure,
    /// Replicas that must hold each of its decisions before it counts (Redis `WAIT`, on a
    /// connection of its own): a decision a failover could lose is not admitted. By
    /// default 1 for a `closed` rule behind Sentinel, else `[store] wait_for_replicas`.
    pub wait_for_replicas: u32,
    /// Whether a rejection must leak nothing (a bare 429).
    pub sensitive: bool,
    /// A refused request's cost is charged all the same (into debt): for reports of what
    /// was spent rather than asks, such as Envoy's token usage at a stream's end
    /// (`apply_on_stream_done`), which must count even when the key is already over.
    pub always_charge: bool,
    /// Also send the rule's numbers in OpenAI's `x-ratelimit-*-requests` or
    /// `x-ratelimit-*-tokens` headers, which LLM clients read (`openai_headers`).
    pub openai_headers: Option<ratewarden_http::OpenAiFamily>,
    /// Hybrid mode: a bucket in this process with the rule's own numbers is asked first,
    /// and a request it refuses never reaches the shared store (it would refuse it too:
    /// it sees all this process's admitted requests, and more).
    pub local_first: bool,
    /// On a shared store: how far ahead this process takes units of a key from the store
    /// (an allowance charged before it is spent) and decides locally from them.
    pub prefetch: Option<Duration>,
    /// `scope = "global"`: counted for every region in `[regions.home]`, its units taken
    /// ahead from there (then `prefetch` is the horizon) and spent in this process.
    pub global: bool,
    /// For `algorithm = "adaptive-concurrency"`: the controller that learns the limit (then
    /// `limit` is a concurrency limit at its ceiling, and the rule is decided in this
    /// process, never in the store).
    pub adaptive: Option<crate::config::Adaptive>,
    /// Not configuration: its `RateLimit-Policy` value, rendered by the first response that
    /// shows it and shared by the rest (`RenderedPolicy::default()` when building a rule;
    /// a clone starts empty, and rules compare equal whatever it holds).
    pub rendered: ratewarden_http::RenderedPolicy,
}
