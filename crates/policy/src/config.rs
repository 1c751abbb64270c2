//! The config file: parsed raw, then validated into rules, with errors that say where.
//!
//! ```toml
//! [server]
//! trusted_proxies = ["10.0.0.0/8"]
//!
//! [[limit]]
//! name = "per-key"
//! key = ["header:x-api-key"]
//! algorithm = "gcra"
//! rate = "50/s"
//! burst = 100
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use ratewarden_core::{
    parse_duration, AlgorithmKind, CalendarUnit, Concurrency, FixedWindow, Gcra, LeakyBucket,
    LeakyQueue, Limit, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};
use serde::Deserialize;
use toml::Spanned;

use crate::{IpGrouping, TrustedProxies};

/// One thing wrong with a config file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line and column of the offending value, when known.
    pub position: Option<(usize, usize)>,
    /// The rule (`[[limit]]` name) it belongs to, when it belongs to one.
    pub rule: Option<String>,
    /// What is wrong, and how to fix it where we can tell.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": ")?;
        if let Some(rule) = &self.rule {
            write!(f, "limit `{rule}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Every error found in one config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

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
            KeyPart::Literal(text) => write!(f, "literal:{text}"),
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
    /// The host, lowercase.
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
    /// Allow, count, alert: minutes without a limit beat an outage.
    Open,
    /// Reject with 503: for limits that guard money or security.
    Closed,
    /// Decide on a bucket in this process at `share` (a fraction `1 / share`) of the limit.
    Local {
        /// The limit is divided by this (for example the number of instances).
        divide_by: u32,
    },
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
    /// The algorithm with its numbers.
    pub limit: Limit,
    /// What one request costs.
    pub cost: Cost,
    /// When set, the cost is an estimate: the decision reserves it, and the caller settles
    /// the real cost within this long (or the estimate stands).
    pub settle_within: Option<Duration>,
    /// The bucket to decide on when the store fails and `on_store_failure = "local"`: the
    /// same algorithm at the limit divided as configured.
    pub local: Option<Limit>,
    /// Enforce, shadow, or a rollout.
    pub mode: Mode,
    /// When the store fails.
    pub on_store_failure: OnStoreFailure,
    /// Whether a rejection must leak nothing (a bare 429).
    pub sensitive: bool,
    /// Hybrid mode: a bucket in this process with the rule's own numbers is asked first,
    /// and a request it refuses never reaches the shared store (it would refuse it too:
    /// it sees all this process's admitted requests, and more).
    pub local_first: bool,
}

/// Where the `api_key` and `tenant` key parts are read from (`[keys]` in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySources {
    /// A header carrying the API key, read when there is no `Authorization: Bearer` token.
    pub api_key_header: Option<String>,
    /// The header carrying the tenant.
    pub tenant_header: String,
}

impl Default for KeySources {
    fn default() -> Self {
        Self {
            api_key_header: None,
            tenant_header: "x-tenant-id".to_owned(),
        }
    }
}

/// Where counters live (`[store]` in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process's memory.
    Memory,
    /// A Redis server at this URL.
    Redis {
        /// Such as `redis://127.0.0.1:6379`.
        url: String,
    },
    /// A Redis Cluster, found through these seed nodes.
    RedisCluster {
        /// Seed node URLs.
        nodes: Vec<String>,
    },
}

/// The `[store]` section, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// Where counters live.
    pub kind: StoreKind,
    /// The most keys the in-memory store (and the local fallback) holds.
    pub max_keys: usize,
    /// Whether a full in-memory store evicts (`"evict"`, the default) or refuses new keys
    /// (`"reject"`).
    pub evict_when_full: bool,
    /// The most one call to a shared store may take before the rule's failure policy
    /// answers.
    pub deadline: Duration,
    /// Consecutive failures of a shared store that open its circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker fails calls at once before one call probes again.
    pub breaker_cool_down: Duration,
    /// Put before every key in a shared store.
    pub key_prefix: String,
    /// For `rediss://` URLs: a CA certificate file (PEM) to trust instead of the system's.
    pub tls_ca_file: Option<std::path::PathBuf>,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            kind: StoreKind::Memory,
            max_keys: 1_000_000,
            evict_when_full: true,
            deadline: Duration::from_millis(10),
            breaker_failures: 5,
            breaker_cool_down: Duration::from_secs(1),
            key_prefix: "rw:".to_owned(),
            tls_ca_file: None,
        }
    }
}

/// The `[server]` section, validated: what `ratewarden serve` listens on and how it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The main listener: the gateway when `upstream` is set, the decision API otherwise.
    pub listen: SocketAddr,
    /// A listener of its own for the decision API (so a gateway can serve it too).
    pub api: Option<SocketAddr>,
    /// Envoy's rate limit service (gRPC `ShouldRateLimit`), for envoyproxy/ratelimit configs.
    pub grpc: Option<SocketAddr>,
    /// The admin listener (`/metrics`, `/live`, `/ready`, `/reload`); `"off"` for none.
    pub admin: Option<SocketAddr>,
    /// The service the gateway forwards allowed requests to, `http://host:port`.
    pub upstream: Option<String>,
    /// Also send `X-RateLimit-Limit/-Remaining/-Reset`.
    pub legacy_headers: bool,
    /// Up to this much, in whole seconds, added at random to `Retry-After` so throttled
    /// clients do not all return at once.
    pub retry_after_jitter: Duration,
    /// The most requests in flight at once; beyond it the server sheds with 503.
    pub max_in_flight: usize,
    /// How long a request may wait for an in-flight slot before it is shed.
    pub queue_timeout: Duration,
    /// In-flight slots only critical routes may take.
    pub critical_reserve: usize,
    /// The critical routes.
    pub critical: Vec<Match>,
    /// How long shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
    /// The largest decision API request body, in bytes.
    pub max_body: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            api: None,
            grpc: None,
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            upstream: None,
            legacy_headers: false,
            retry_after_jitter: Duration::ZERO,
            max_in_flight: 10_000,
            queue_timeout: Duration::from_millis(100),
            critical_reserve: 1_000,
            critical: Vec::new(),
            shutdown_grace: Duration::from_secs(30),
            max_body: 64 * 1024,
        }
    }
}

/// A validated config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The proxies whose forwarding headers are believed.
    pub trusted_proxies: TrustedProxies,
    /// Where the `api_key` and `tenant` key parts come from.
    pub keys: KeySources,
    /// Where counters live.
    pub store: StoreSettings,
    /// Listeners, the upstream, the response contract and load shedding.
    pub server: ServerSettings,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: Option<RawServer>,
    store: Option<RawStore>,
    keys: Option<RawKeys>,
    #[serde(default)]
    limit: Vec<Spanned<RawLimit>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<Spanned<String>>,
    admin: Option<Spanned<String>>,
    api: Option<Spanned<String>>,
    grpc: Option<Spanned<String>>,
    upstream: Option<Spanned<String>>,
    #[serde(default)]
    trusted_proxies: Vec<Spanned<String>>,
    legacy_headers: Option<bool>,
    retry_after_jitter: Option<Spanned<String>>,
    max_in_flight: Option<Spanned<i64>>,
    queue_timeout: Option<Spanned<String>>,
    critical_reserve: Option<Spanned<i64>>,
    #[serde(default)]
    critical: Vec<RawMatch>,
    shutdown_grace: Option<Spanned<String>>,
    max_body: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    kind: Option<Spanned<String>>,
    max_keys: Option<Spanned<i64>>,
    when_full: Option<Spanned<String>>,
    url: Option<String>,
    #[serde(default)]
    nodes: Vec<String>,
    deadline: Option<Spanned<String>>,
    breaker_failures: Option<Spanned<i64>>,
    breaker_cool_down: Option<Spanned<String>>,
    key_prefix: Option<String>,
    tls_ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeys {
    api_key_header: Option<String>,
    tenant_header: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    method: Option<String>,
    path: Option<String>,
    host: Option<String>,
    header: Option<String>,
    header_value: Option<String>,
    domain: Option<String>,
    descriptor: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCost {
    Fixed(i64),
    Header(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    matches: Option<RawMatch>,
    #[serde(default)]
    key: Vec<Spanned<String>>,
    algorithm: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    burst: Option<Spanned<i64>>,
    limit: Option<Spanned<i64>>,
    window: Option<Spanned<String>>,
    period: Option<Spanned<String>>,
    timezone: Option<Spanned<String>>,
    lease: Option<Spanned<String>>,
    cost: Option<Spanned<RawCost>>,
    max_cost: Option<Spanned<i64>>,
    settle: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
    rollout: Option<Spanned<String>>,
    sensitive: Option<bool>,
    local_first: Option<bool>,
    on_store_failure: Option<Spanned<String>>,
    local_divide_by: Option<Spanned<i64>>,
    ipv4_prefix: Option<Spanned<i64>>,
    ipv6_prefix: Option<Spanned<i64>>,
}

/// Collects errors for one file, turning byte spans into lines and columns.
struct Errors<'a> {
    file: &'a str,
    text: &'a str,
    found: Vec<ConfigError>,
}

impl Errors<'_> {
    fn at(&mut self, span: Option<Range<usize>>, rule: Option<&str>, message: String) {
        let position = span.map(|s| line_column(self.text, s.start));
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            position,
            rule: rule.map(str::to_owned),
            message,
        });
    }

    /// A duration field of a section (`[server]`, `[store]`): `default` when absent, and
    /// when wrong (after recording what was wrong). Zero is refused unless `zero_ok`.
    fn section_duration(
        &mut self,
        section: &str,
        field: &str,
        value: Option<Spanned<String>>,
        default: Duration,
        zero_ok: bool,
    ) -> Duration {
        let Some(v) = value else { return default };
        let message = match parse_duration(v.get_ref()) {
            Ok(d) if zero_ok || !d.is_zero() => return d,
            Ok(_) => format!("`{section}`: `{field}` must be longer than zero"),
            Err(e) => format!("`{section}`: `{field}`: {e}"),
        };
        self.at(Some(v.span()), None, message);
        default
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// The known name closest to `wrong`, if one is close enough to be a typo.
fn nearest<'a>(wrong: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(wrong, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| k)
}

/// Reads and validates the config file at `path`.
///
/// # Errors
///
/// Every problem found, each with the file, line, column, rule and a hint.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: file.clone(),
            position: None,
            rule: None,
            message: format!("cannot read the file: {e}"),
        }])
    })?;
    parse(&file, &text)
}

/// Validates config `text`, naming it `file` in errors.
///
/// # Errors
///
/// Every problem found, each with the file, line, column, rule and a hint.
pub fn parse(file: &str, text: &str) -> Result<Config, ConfigErrors> {
    let mut errors = Errors {
        file,
        text,
        found: Vec::new(),
    };
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let mut message = e.message().trim().to_owned();
            // "unknown field `algoritm`, expected one of `a`, `b`": name the likely one.
            if let Some((wrong, expected)) = message
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split_once('`'))
            {
                let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
                if let Some(fix) = nearest(wrong, known) {
                    message = format!("{message}; did you mean `{fix}`?");
                }
            }
            errors.at(e.span(), None, message);
            return Err(ConfigErrors(errors.found));
        }
    };
    let store = raw.store.map_or_else(StoreSettings::default, |raw| {
        store_settings(raw, &mut errors)
    });
    let mut trusted = Vec::new();
    let (server, proxies) = match raw.server {
        Some(mut raw) => {
            let proxies = std::mem::take(&mut raw.trusted_proxies);
            (server_settings(raw, &mut errors), proxies)
        }
        None => (ServerSettings::default(), Vec::new()),
    };
    for proxy in proxies {
        match TrustedProxies::parse([proxy.get_ref().as_str()]) {
            Ok(_) => trusted.push(proxy.into_inner()),
            Err(e) => errors.at(Some(proxy.span()), None, format!("`trusted_proxies`: {e}")),
        }
    }
    let trusted_proxies =
        TrustedProxies::parse(trusted.iter().map(String::as_str)).unwrap_or_default();
    let mut rules: Vec<Rule> = Vec::new();
    for raw in raw.limit {
        let span = raw.span();
        let name_span = raw.get_ref().name.as_ref().map(Spanned::span);
        if let Some(rule) = validate(raw.into_inner(), span, &mut errors) {
            if rules.iter().any(|r| r.name == rule.name) {
                let message = "the name is used by another limit; names must be unique";
                errors.at(name_span, Some(&rule.name), message.to_owned());
            }
            rules.push(rule);
        }
    }
    // In file order, as an editor walks them.
    errors
        .found
        .sort_by_key(|e| e.position.unwrap_or((usize::MAX, 0)));
    let keys = raw.keys.map_or_else(KeySources::default, |k| KeySources {
        api_key_header: k.api_key_header.map(|h| h.trim().to_ascii_lowercase()),
        tenant_header: k.tenant_header.map_or_else(
            || KeySources::default().tenant_header,
            |h| h.trim().to_ascii_lowercase(),
        ),
    });
    if errors.found.is_empty() {
        Ok(Config {
            trusted_proxies,
            keys,
            store,
            server,
            rules,
        })
    } else {
        Err(ConfigErrors(errors.found))
    }
}

fn validate(raw: RawLimit, span: Range<usize>, errors: &mut Errors<'_>) -> Option<Rule> {
    let failures = errors.found.len();
    let Some(name) = raw.name.as_ref().map(|n| n.get_ref().trim().to_owned()) else {
        errors.at(Some(span), None, "a `[[limit]]` needs a `name`".to_owned());
        return None;
    };
    let rule = Some(name.as_str());
    let fail = |errors: &mut Errors<'_>, span: Option<Range<usize>>, message: String| {
        errors.at(span, rule, message)
    };

    let kind = match &raw.algorithm {
        None => {
            fail(
                errors,
                Some(span.clone()),
                format!(
                    "`algorithm` is missing; one of: {}",
                    AlgorithmKind::ALL.map(|k| k.as_str()).join(", ")
                ),
            );
            None
        }
        Some(a) => match a.get_ref().parse::<AlgorithmKind>() {
            Ok(kind) => Some(kind),
            Err(e) => {
                let hint = nearest(a.get_ref(), AlgorithmKind::ALL.map(|k| k.as_str()))
                    .map(|k| format!("; did you mean `{k}`?"))
                    .unwrap_or_default();
                fail(errors, Some(a.span()), format!("`algorithm`: {e}{hint}"));
                None
            }
        },
    };

    let positive =
        |errors: &mut Errors<'_>, field: &str, value: &Option<Spanned<i64>>| -> Option<u64> {
            let v = value.as_ref()?;
            match u64::try_from(*v.get_ref()) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    errors.at(
                        Some(v.span()),
                        rule,
                        format!(
                            "`{field}` must be a whole number above zero, not {}",
                            v.get_ref()
                        ),
                    );
                    None
                }
            }
        };
    let duration = |errors: &mut Errors<'_>,
                    field: &str,
                    value: &Option<Spanned<String>>|
     -> Option<Duration> {
        let v = value.as_ref()?;
        match parse_duration(v.get_ref()) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                errors.at(
                    Some(v.span()),
                    rule,
                    format!("`{field}` must be longer than zero"),
                );
                None
            }
            Err(e) => {
                errors.at(Some(v.span()), rule, format!("`{field}`: {e}"));
                None
            }
        }
    };
    let burst = positive(errors, "burst", &raw.burst);
    let count = positive(errors, "limit", &raw.limit);
    let window = duration(errors, "window", &raw.window);
    let lease = duration(errors, "lease", &raw.lease);
    let rate = raw
        .rate
        .as_ref()
        .and_then(|r| match r.get_ref().parse::<Rate>() {
            Ok(rate) => Some(rate),
            Err(e) => {
                errors.at(Some(r.span()), rule, format!("`rate`: {e}"));
                None
            }
        });

    // Each algorithm takes some fields and not others: a stray one is a mistake to point out.
    let limit = kind.and_then(|kind| {
        let needs = |errors: &mut Errors<'_>, field: &str| {
            errors.at(
                Some(span.clone()),
                rule,
                format!("`{kind}` needs `{field}`"),
            );
        };
        let stray: &[(&str, bool)] = &[
            ("rate", raw.rate.is_some()),
            ("burst", raw.burst.is_some()),
            ("limit", raw.limit.is_some()),
            ("window", raw.window.is_some()),
            ("period", raw.period.is_some()),
            ("timezone", raw.timezone.is_some()),
            ("lease", raw.lease.is_some()),
        ];
        let takes: &[&str] = match kind {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingLog
            | AlgorithmKind::SlidingWindow => &["limit", "window"],
            AlgorithmKind::TokenBucket
            | AlgorithmKind::LeakyBucket
            | AlgorithmKind::LeakyQueue
            | AlgorithmKind::Gcra => &["rate", "burst"],
            AlgorithmKind::Quota => &["limit", "period", "timezone"],
            AlgorithmKind::Concurrency => &["limit", "lease"],
        };
        for (field, given) in stray {
            if *given && !takes.contains(field) {
                errors.at(
                    Some(span.clone()),
                    rule,
                    format!(
                        "`{field}` does not apply to `{kind}`, which takes {}",
                        takes.join(" and ")
                    ),
                );
            }
        }
        // Fields an algorithm cannot do without (a quota's zone and a permit's lease default).
        let given = |field: &str| stray.iter().any(|(f, g)| *f == field && *g);
        let missing: Vec<&&str> = takes
            .iter()
            .filter(|f| !matches!(**f, "timezone" | "lease") && !given(f))
            .collect();
        for field in &missing {
            needs(errors, field);
        }
        if !missing.is_empty() {
            return None;
        }
        let built: Result<Limit, ratewarden_core::Error> = match kind {
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingLog
            | AlgorithmKind::SlidingWindow => {
                let (Some(n), Some(w)) = (count, window) else {
                    return None;
                };
                match kind {
                    AlgorithmKind::FixedWindow => FixedWindow::new(n, w).map(Limit::from),
                    AlgorithmKind::SlidingLog => SlidingLog::new(n, w).map(Limit::from),
                    _ => SlidingWindow::new(n, w).map(Limit::from),
                }
            }
            AlgorithmKind::TokenBucket
            | AlgorithmKind::LeakyBucket
            | AlgorithmKind::LeakyQueue
            | AlgorithmKind::Gcra => {
                let (Some(r), Some(b)) = (rate, burst) else {
                    return None;
                };
                match kind {
                    AlgorithmKind::TokenBucket => TokenBucket::new(r, b).map(Limit::from),
                    AlgorithmKind::LeakyBucket => LeakyBucket::new(r, b).map(Limit::from),
                    AlgorithmKind::LeakyQueue => LeakyQueue::new(r, b).map(Limit::from),
                    _ => Gcra::new(r, b).map(Limit::from),
                }
            }
            AlgorithmKind::Quota => {
                let period =
                    raw.period
                        .as_ref()
                        .and_then(|p| match p.get_ref().parse::<CalendarUnit>() {
                            Ok(unit) => Some(unit),
                            Err(e) => {
                                errors.at(Some(p.span()), rule, format!("`period`: {e}"));
                                None
                            }
                        });
                let (Some(n), Some(unit)) = (count, period) else {
                    return None;
                };
                let tz = raw
                    .timezone
                    .as_ref()
                    .map_or("UTC", |t| t.get_ref().as_str());
                Quota::new(n, unit, tz).map(Limit::from).map_err(|e| {
                    let at = raw.timezone.as_ref().map(|t| t.span());
                    errors.at(at, rule, format!("`timezone`: {e}"));
                    e
                })
            }
            AlgorithmKind::Concurrency => {
                let n = count?;
                // A permit outlives any sane request: five minutes unless told otherwise.
                Concurrency::new(n, lease.unwrap_or(Duration::from_secs(300))).map(Limit::from)
            }
        };
        match built {
            Ok(limit) => Some(limit),
            Err(ratewarden_core::Error::TimeZone { .. }) => None,
            Err(e) => {
                errors.at(Some(span.clone()), rule, e.to_string());
                None
            }
        }
    });

    let grouping = {
        let prefix =
            |errors: &mut Errors<'_>, v: &Option<Spanned<i64>>, default: u8, most: i64| -> u8 {
                match v {
                    None => default,
                    Some(p) if (0..=most).contains(p.get_ref()) => *p.get_ref() as u8,
                    Some(p) => {
                        errors.at(
                            Some(p.span()),
                            rule,
                            format!("a prefix length between 0 and {most}, not {}", p.get_ref()),
                        );
                        default
                    }
                }
            };
        let v4 = prefix(errors, &raw.ipv4_prefix, 32, 32);
        let v6 = prefix(errors, &raw.ipv6_prefix, 64, 128);
        IpGrouping::new(v4, v6).unwrap_or_default()
    };
    let mut key = Vec::new();
    if raw.key.is_empty() {
        fail(errors, Some(span.clone()), "`key` is missing: list its parts, such as `[\"ip\"]`, `[\"header:x-api-key\"]` or `[\"global\"]`".to_owned());
    }
    for part in &raw.key {
        let text = part.get_ref().trim();
        let parsed = match text {
            "ip" => Some(KeyPart::Ip(grouping)),
            "api_key" => Some(KeyPart::ApiKey),
            "tenant" => Some(KeyPart::Tenant),
            "route" => Some(KeyPart::Route),
            "global" => Some(KeyPart::Global),
            "descriptor" => Some(KeyPart::Descriptor),
            _ => match text.split_once(':') {
                Some(("header", name)) if !name.trim().is_empty() => {
                    Some(KeyPart::Header(name.trim().to_ascii_lowercase()))
                }
                Some(("literal", value)) => Some(KeyPart::Literal(value.to_owned())),
                _ => None,
            },
        };
        match parsed {
            Some(p) => key.push(p),
            None => {
                let hint = nearest(text, ["ip", "api_key", "tenant", "route", "global"])
                    .map(|k| format!("; did you mean `{k}`?"))
                    .unwrap_or_default();
                fail(errors, Some(part.span()), format!(
                    "unknown key part `{text}`: use ip, header:NAME, api_key, tenant, route, global, descriptor or literal:TEXT{hint}"
                ));
            }
        }
    }

    let cost = match &raw.cost {
        None => Cost::Fixed(1),
        Some(c) => match c.get_ref() {
            RawCost::Fixed(n) => match u64::try_from(*n) {
                Ok(n) => Cost::Fixed(n),
                Err(_) => {
                    fail(
                        errors,
                        Some(c.span()),
                        format!("`cost` cannot be negative ({n})"),
                    );
                    Cost::Fixed(1)
                }
            },
            RawCost::Header(text) => match text.trim().strip_prefix("header:") {
                Some(name) if !name.trim().is_empty() => {
                    let max = positive(errors, "max_cost", &raw.max_cost);
                    if raw.max_cost.is_none() {
                        fail(errors, Some(c.span()), "a cost read from a header needs `max_cost`, the most one request may claim".to_owned());
                    }
                    Cost::Header {
                        name: name.trim().to_ascii_lowercase(),
                        max: max.unwrap_or(1),
                    }
                }
                _ => {
                    fail(
                        errors,
                        Some(c.span()),
                        format!("`cost` is a whole number or \"header:NAME\", not `{text}`"),
                    );
                    Cost::Fixed(1)
                }
            },
        },
    };
    let settle_within = duration(errors, "settle", &raw.settle);
    let mode = match (&raw.mode, &raw.rollout) {
        (_, Some(r)) => {
            let text = r.get_ref().trim();
            let value = text
                .strip_suffix('%')
                .map(str::trim)
                .and_then(|n| ratewarden_core::parse_decimal(n, 100).ok());
            match value {
                Some(bp) if bp <= 10_000 => Mode::Rollout {
                    basis_points: bp as u32,
                },
                _ => {
                    fail(
                        errors,
                        Some(r.span()),
                        format!(
                            "`rollout` is a percentage from 0% to 100%, like \"10%\", not `{text}`"
                        ),
                    );
                    Mode::Enforce
                }
            }
        }
        (None, None) => Mode::Enforce,
        (Some(m), None) => match m.get_ref().as_str() {
            "enforce" => Mode::Enforce,
            "shadow" => Mode::Shadow,
            other => {
                fail(errors, Some(m.span()), format!("`mode` is `enforce` or `shadow`, not `{other}` (for a share of keys, set `rollout = \"10%\"`)"));
                Mode::Enforce
            }
        },
    };
    let on_store_failure = match raw
        .on_store_failure
        .as_ref()
        .map(|f| (f.get_ref().as_str(), f.span()))
    {
        None | Some(("open", _)) => OnStoreFailure::Open,
        Some(("closed", _)) => OnStoreFailure::Closed,
        Some(("local", _)) => {
            let divide_by = raw
                .local_divide_by
                .as_ref()
                .map_or(1, |d| u32::try_from(*d.get_ref()).unwrap_or(0));
            if divide_by == 0 {
                let at = raw.local_divide_by.as_ref().map(|d| d.span());
                fail(errors, at, "`local_divide_by` must be a whole number above zero (the number of instances sharing the limit)".to_owned());
            }
            OnStoreFailure::Local {
                divide_by: divide_by.max(1),
            }
        }
        Some((other, at)) => {
            fail(
                errors,
                Some(at),
                format!("`on_store_failure` is `open`, `closed` or `local`, not `{other}`"),
            );
            OnStoreFailure::Open
        }
    };
    let matches = raw.matches.map(match_of).unwrap_or_default();
    if matches.domain.is_none() && !matches.descriptor.is_empty() {
        fail(
            errors,
            Some(span.clone()),
            "`match.descriptor` needs `match.domain`: descriptors come over Envoy's protocol, for a domain".to_owned(),
        );
    }
    if matches.domain.as_deref() == Some("") {
        fail(
            errors,
            Some(span.clone()),
            "`match.domain` must not be empty".to_owned(),
        );
    }
    if matches.domain.is_none() && key.contains(&KeyPart::Descriptor) {
        fail(
            errors,
            Some(span.clone()),
            "the `descriptor` key part needs `match.domain` (and usually `match.descriptor`)"
                .to_owned(),
        );
    }

    if errors.found.len() > failures {
        return None;
    }
    let limit = limit?;
    let local = match on_store_failure {
        OnStoreFailure::Local { divide_by } => Some(divided(&limit, divide_by)),
        _ => None,
    };
    Some(Rule {
        name,
        matches,
        key,
        limit,
        cost,
        settle_within,
        local,
        mode,
        on_store_failure,
        sensitive: raw.sensitive.unwrap_or(false),
        local_first: raw.local_first.unwrap_or(false),
    })
}

/// `limit` at `1 / n` of its size (never below one unit), for a local fallback shared by `n`
/// instances.
fn divided(limit: &Limit, n: u32) -> Limit {
    use ratewarden_core::Algorithm;
    let n = u64::from(n.max(1));
    let share = |x: u64| (x / n).max(1);
    let rate = |r: Rate| {
        // The same period, a share of the count; a count below one per period becomes one
        // per `n` periods.
        if r.count() >= n {
            Rate::new(r.count() / n, r.period())
        } else {
            Rate::new(
                1,
                r.period()
                    .saturating_mul(u32::try_from(n / r.count()).unwrap_or(u32::MAX)),
            )
        }
        .unwrap_or(r)
    };
    let built: Result<Limit, ratewarden_core::Error> = match limit {
        Limit::FixedWindow(l) => FixedWindow::new(share(l.limit()), l.window()).map(Limit::from),
        Limit::SlidingLog(l) => SlidingLog::new(share(l.limit()), l.window()).map(Limit::from),
        Limit::SlidingWindow(l) => {
            SlidingWindow::new(share(l.limit()), l.window()).map(Limit::from)
        }
        Limit::TokenBucket(l) => {
            TokenBucket::new(rate(l.rate()), share(l.burst())).map(Limit::from)
        }
        Limit::LeakyBucket(l) => {
            LeakyBucket::new(rate(l.rate()), share(l.burst())).map(Limit::from)
        }
        Limit::LeakyQueue(l) => LeakyQueue::new(rate(l.rate()), l.burst() / n).map(Limit::from),
        Limit::Gcra(l) => Gcra::new(rate(l.rate()), share(l.burst())).map(Limit::from),
        Limit::Quota(l) => Quota::new(share(l.limit()), l.unit(), l.timezone()).map(Limit::from),
        Limit::Concurrency(l) => Concurrency::new(share(l.limit()), l.lease()).map(Limit::from),
    };
    built.unwrap_or_else(|_| limit.clone())
}

fn match_of(m: RawMatch) -> Match {
    Match {
        method: m.method.map(|s| s.trim().to_ascii_uppercase()),
        path: m.path,
        host: m.host.map(|h| h.trim().to_ascii_lowercase()),
        header: m
            .header
            .map(|h| (h.trim().to_ascii_lowercase(), m.header_value)),
        domain: m.domain.map(|d| d.trim().to_owned()),
        // `client_id` or `path=/api/*,client_id`: entries in order, values optional.
        descriptor: m
            .descriptor
            .map(|d| {
                d.split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(|e| match e.split_once('=') {
                        Some((k, v)) => (k.trim().to_owned(), Some(v.trim().to_owned())),
                        None => (e.to_owned(), None),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn server_settings(raw: RawServer, errors: &mut Errors<'_>) -> ServerSettings {
    let defaults = ServerSettings::default();
    let mut address = |field: &str, value: Option<Spanned<String>>| -> Option<Option<SocketAddr>> {
        let v = value?;
        if v.get_ref().trim() == "off" {
            return Some(None);
        }
        match v.get_ref().trim().parse::<SocketAddr>() {
            Ok(a) => Some(Some(a)),
            Err(_) => {
                errors.at(
                    Some(v.span()),
                    None,
                    format!(
                        "`[server]`: `{field}` must be an address with a port, such as \"127.0.0.1:8080\" or \"[::1]:8080\", not `{}`",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    };
    let listen = address("listen", raw.listen)
        .flatten()
        .unwrap_or(defaults.listen);
    let api = address("api", raw.api).flatten();
    let grpc = address("grpc", raw.grpc).flatten();
    let admin = address("admin", raw.admin).unwrap_or(defaults.admin);
    let upstream = raw
        .upstream
        .and_then(|u| match parse_upstream(u.get_ref()) {
            Ok(up) => Some(up),
            Err(message) => {
                errors.at(
                    Some(u.span()),
                    None,
                    format!("`[server]`: `upstream`: {message}"),
                );
                None
            }
        });
    let mut duration = |field: &str, value: Option<Spanned<String>>, default: Duration| {
        errors.section_duration("[server]", field, value, default, true)
    };
    let retry_after_jitter = duration(
        "retry_after_jitter",
        raw.retry_after_jitter,
        defaults.retry_after_jitter,
    );
    let queue_timeout = duration("queue_timeout", raw.queue_timeout, defaults.queue_timeout);
    let shutdown_grace = duration(
        "shutdown_grace",
        raw.shutdown_grace,
        defaults.shutdown_grace,
    );
    let mut count = |field: &str, value: Option<Spanned<i64>>, zero: bool| -> Option<usize> {
        let v = value?;
        match usize::try_from(*v.get_ref()) {
            Ok(n) if zero || n > 0 => Some(n),
            _ => {
                let least = if zero { "zero or more" } else { "above zero" };
                errors.at(
                    Some(v.span()),
                    None,
                    format!(
                        "`[server]`: `{field}` must be a whole number {least}, not {}",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    };
    let max_in_flight =
        count("max_in_flight", raw.max_in_flight, false).unwrap_or(defaults.max_in_flight);
    let reserve_span = raw.critical_reserve.as_ref().map(Spanned::span);
    let critical_reserve =
        count("critical_reserve", raw.critical_reserve, true).unwrap_or(max_in_flight / 10);
    let max_body = count("max_body", raw.max_body, false).unwrap_or(defaults.max_body);
    if critical_reserve >= max_in_flight {
        errors.at(
            reserve_span,
            None,
            format!(
                "`[server]`: `critical_reserve` ({critical_reserve}) must be below `max_in_flight` ({max_in_flight}), or nothing but critical routes gets through"
            ),
        );
    }
    ServerSettings {
        listen,
        api,
        grpc,
        admin,
        upstream,
        legacy_headers: raw.legacy_headers.unwrap_or(false),
        retry_after_jitter,
        max_in_flight,
        queue_timeout,
        critical_reserve,
        critical: raw.critical.into_iter().map(match_of).collect(),
        shutdown_grace,
        max_body,
    }
}

/// `http://host:port`, the only kind of upstream the gateway speaks to (TLS ends in front).
fn parse_upstream(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let Some(authority) = text.strip_prefix("http://") else {
        return Err(format!(
            "must start with `http://` (TLS to the upstream is not supported), not `{text}`"
        ));
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', ' ', '@']) {
        return Err(format!(
            "must be `http://host[:port]`, without a path, query or credentials, not `{text}`"
        ));
    }
    Ok(text.to_owned())
}

fn store_settings(raw: RawStore, errors: &mut Errors<'_>) -> StoreSettings {
    let defaults = StoreSettings::default();
    let kind = match raw.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
        None | Some(("memory", _)) => StoreKind::Memory,
        Some(("redis", at)) => {
            match raw.url {
                Some(url) => StoreKind::Redis { url },
                None => {
                    errors.at(Some(at), None, "`[store]`: `kind = \"redis\"` needs `url`, such as \"redis://127.0.0.1:6379\"".to_owned());
                    StoreKind::Memory
                }
            }
        }
        Some(("redis-cluster", at)) => {
            if raw.nodes.is_empty() {
                errors.at(
                    Some(at),
                    None,
                    "`[store]`: `kind = \"redis-cluster\"` needs `nodes`, the seed node URLs"
                        .to_owned(),
                );
            }
            StoreKind::RedisCluster { nodes: raw.nodes }
        }
        Some((other, at)) => {
            errors.at(
                Some(at),
                None,
                format!("`[store]`: `kind` is `memory`, `redis` or `redis-cluster`, not `{other}`"),
            );
            StoreKind::Memory
        }
    };
    let max_keys = match &raw.max_keys {
        None => defaults.max_keys,
        Some(n) => match usize::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => n,
            _ => {
                errors.at(
                    Some(n.span()),
                    None,
                    format!(
                        "`[store]`: `max_keys` must be above zero, not {}",
                        n.get_ref()
                    ),
                );
                defaults.max_keys
            }
        },
    };
    let evict_when_full = match raw
        .when_full
        .as_ref()
        .map(|w| (w.get_ref().as_str(), w.span()))
    {
        None | Some(("evict", _)) => true,
        Some(("reject", _)) => false,
        Some((other, at)) => {
            errors.at(
                Some(at),
                None,
                format!("`[store]`: `when_full` is `evict` or `reject`, not `{other}`"),
            );
            true
        }
    };
    let mut duration = |field: &str, value: Option<Spanned<String>>, default: Duration| {
        errors.section_duration("[store]", field, value, default, false)
    };
    let deadline = duration("deadline", raw.deadline, defaults.deadline);
    let breaker_cool_down = duration(
        "breaker_cool_down",
        raw.breaker_cool_down,
        defaults.breaker_cool_down,
    );
    let breaker_failures = match &raw.breaker_failures {
        None => defaults.breaker_failures,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(n) if n > 0 => n,
            _ => {
                errors.at(
                    Some(n.span()),
                    None,
                    format!(
                        "`[store]`: `breaker_failures` must be a whole number above zero, not {}",
                        n.get_ref()
                    ),
                );
                defaults.breaker_failures
            }
        },
    };
    StoreSettings {
        kind,
        max_keys,
        evict_when_full,
        deadline,
        breaker_failures,
        breaker_cool_down,
        key_prefix: raw.key_prefix.unwrap_or(defaults.key_prefix),
        tls_ca_file: raw.tls_ca_file.map(std::path::PathBuf::from),
    }
}
