//! The file's sections other than its rules, validated: `[keys]`, `[store]`, `[server]`, and
//! the whole config.

use std::net::SocketAddr;
use std::time::Duration;

use ratewarden_core::shared_store;

use super::{AdminAccess, Bounds, CallBounds, Match, Rule};
use crate::ip::TrustedProxies;

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
    /// A master and its replicas behind Redis Sentinel.
    RedisSentinel {
        /// The Sentinels' URLs (their own AUTH in the URL).
        sentinels: Vec<String>,
        /// The name the Sentinels monitor the master under.
        master_name: String,
        /// The master's AUTH user.
        username: Option<String>,
        /// The master's AUTH password.
        password: Option<String>,
        /// Whether the master speaks TLS.
        tls: bool,
    },
}

/// The store as logs name it, without credentials: `memory`, `redis redis://10.0.0.5:6379/0`,
/// `redis-cluster redis://a:6379, redis://b:6379`, `redis-sentinel mymaster via
/// redis://s1:26379, redis://s2:26379`.
impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            Self::Redis { url } => write!(f, "redis {}", without_credentials(url)),
            Self::RedisCluster { nodes } => {
                f.write_str("redis-cluster ")?;
                for (i, node) in nodes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&without_credentials(node))?;
                }
                Ok(())
            }
            Self::RedisSentinel {
                sentinels,
                master_name,
                ..
            } => {
                write!(f, "redis-sentinel {master_name} via ")?;
                for (i, sentinel) in sentinels.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&without_credentials(sentinel))?;
                }
                Ok(())
            }
        }
    }
}

/// `url` without its user and password, nor its query (where a password may be passed too):
/// what a log may carry.
fn without_credentials(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

/// The `[store]` section, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// Where counters live.
    pub kind: StoreKind,
    /// The most keys the in-memory store (and the local fallback) holds.
    pub max_keys: usize,
    /// The most bytes the in-memory store's keys may take (a 64-byte slot each, plus the
    /// text of keys longer than 24 bytes and the heap of their states, a sliding log's
    /// entries): 256 MiB by default, at least [`MIN_STORE_BYTES`]. `max_keys` bounds the
    /// count; this bounds the memory whatever the keys' length or the logs' size.
    pub max_bytes: usize,
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
    /// Replicas that must acknowledge each decision (Redis `WAIT`) before it counts; 0
    /// waits for none. One Redis or Sentinel only.
    pub wait_for_replicas: u32,
    /// The most calls one coalesced call to Redis holds (0 or 1: every call its own).
    pub batch_calls: usize,
    /// The most bytes of arguments one coalesced call holds.
    pub batch_bytes: usize,
    /// Calls in flight to one place (a slot, on a Cluster) before the next ones wait to go
    /// together: 1 for `[store]`, [`HOME_IN_FLIGHT`] for `[regions.home]`.
    pub batch_in_flight: usize,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            kind: StoreKind::Memory,
            max_keys: 1_000_000,
            max_bytes: ratewarden_memory::StoreConfig::default().max_bytes,
            evict_when_full: true,
            deadline: shared_store::DEADLINE,
            breaker_failures: shared_store::BREAKER_FAILURES,
            breaker_cool_down: shared_store::BREAKER_COOL_DOWN,
            key_prefix: shared_store::KEY_PREFIX.to_owned(),
            tls_ca_file: None,
            wait_for_replicas: 0,
            batch_calls: shared_store::BATCH_CALLS,
            batch_bytes: shared_store::BATCH_BYTES,
            batch_in_flight: shared_store::BATCH_IN_FLIGHT,
        }
    }
}

/// The home store's calls in flight before more are coalesced, by default: a call to it is
/// a WAN round trip long, and a take of the next allowance must not queue behind a
/// give-back of the last one (`[store]` keeps one: a call there is a LAN round trip).
pub const HOME_IN_FLIGHT: usize = 8;

/// The `[regions]` section, validated: this server's region, and the home store that
/// counts the `scope = "global"` rules for every region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regions {
    /// This server's region (logs and metrics name it).
    pub name: String,
    /// How far ahead a `global` rule's units are taken from the home store, by default
    /// [`GLOBAL_HORIZON`] (a rule's own `prefetch` sets its own).
    pub horizon: Duration,
    /// The store every region's servers take `global` rules' units from (`[regions.home]`,
    /// as `[store]` is written): a Redis, a Cluster or a Sentinel-watched master.
    pub home: StoreSettings,
}

/// How far ahead a `global` rule's units are taken by default: long enough that a top-up
/// lands (a round trip over the WAN, topped up while a horizon's demand is still in hand)
/// before the units in hand are spent, and short enough that what one region asks at a
/// window's start leaves the others theirs.
pub const GLOBAL_HORIZON: Duration = Duration::from_millis(500);

/// The smallest `[store] max_bytes`: 1 KiB for each of the in-memory store's 64 shards
/// (each holds its share), room for a few keys each. Less would refuse nearly every key.
pub const MIN_STORE_BYTES: usize = 64 * 1024;

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
    /// Who may use the admin listener (its bearer token) and which `Host` names it answers.
    pub admin_access: AdminAccess,
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
    /// The sheddable routes: the first an adaptive concurrency rule refuses (prefetch,
    /// batch work).
    pub sheddable: Vec<Match>,
    /// How long shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
    /// The largest decision API request body, in bytes.
    pub max_body: usize,
    /// Header bytes, connections per client, and how long heads and bodies may take, both
    /// ways through the gateway.
    pub bounds: Bounds,
    /// What one call to the Envoy front doors may carry, and who may call (`[envoy]`).
    pub envoy: CallBounds,
    /// What the gateway does with a request that asks the upstream for another method (an
    /// override header, a `_method` parameter).
    pub method_override: MethodOverride,
    /// How many bytes of a `POST`'s form or JSON body the gateway reads for `_method`
    /// before deciding; past them the body streams on, still read, and is cut if it names
    /// another method.
    pub method_override_scan: usize,
    /// TLS on the listeners that have it (`[tls.listen]`, `[tls.api]`, ...).
    pub tls: super::TlsListeners,
}

/// What the gateway does with a request that asks the upstream, by a header
/// (`X-HTTP-Method-Override`) or a `_method` parameter, to serve it as another method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MethodOverride {
    /// Refused with 400: the client sends the method it means (the default).
    #[default]
    Refuse,
    /// Decided as the method it asks for, and forwarded as sent, for upstreams whose forms
    /// send `DELETE` and `PUT` as `POST` (Rails, Laravel, Symfony).
    Decide,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            api: None,
            grpc: None,
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            admin_access: AdminAccess::default(),
            upstream: None,
            legacy_headers: false,
            retry_after_jitter: Duration::ZERO,
            max_in_flight: 10_000,
            queue_timeout: Duration::from_millis(100),
            critical_reserve: 1_000,
            critical: Vec::new(),
            sheddable: Vec::new(),
            shutdown_grace: Duration::from_secs(30),
            max_body: 64 * 1024,
            bounds: Bounds::default(),
            envoy: CallBounds::default(),
            method_override: MethodOverride::Refuse,
            method_override_scan: 64 * 1024,
            tls: super::TlsListeners::default(),
        }
    }
}

/// A validated config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The proxies whose forwarding header is believed, and which header that is
    /// (`[server] trusted_proxies` and `client_ip_header`).
    pub trusted_proxies: TrustedProxies,
    /// Where the `api_key` and `tenant` key parts come from.
    pub keys: KeySources,
    /// Where counters live.
    pub store: StoreSettings,
    /// Where `scope = "global"` rules are counted for every region (`[regions]`).
    pub regions: Option<Regions>,
    /// Listeners, the upstream, the response contract and load shedding.
    pub server: ServerSettings,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

impl ServerSettings {
    /// The fields read once at start that differ in `next`, as `[server] field`: a reload
    /// puts the per-request fields in force, and names these rather than ignore them
    /// (they take a restart).
    ///
    /// Read at start: the listeners and the upstream, shedding (`max_in_flight`,
    /// `critical_reserve`, `queue_timeout`), `shutdown_grace`, and the bounds set on a
    /// connection or on the upstream's pool ([`Bounds::needing_restart`]). Read per request,
    /// so changed by a reload: `legacy_headers`, `retry_after_jitter`, `critical`, `sheddable`,
    /// `max_body`, and the body and upstream response timeouts.
    pub fn needing_restart(&self, next: &ServerSettings) -> Vec<&'static str> {
        let mut changed: Vec<&'static str> = [
            ("[server] listen", self.listen != next.listen),
            ("[server] api", self.api != next.api),
            ("[server] grpc", self.grpc != next.grpc),
            ("[server] admin", self.admin != next.admin),
            ("[server] upstream", self.upstream != next.upstream),
            (
                "[server] max_in_flight",
                self.max_in_flight != next.max_in_flight,
            ),
            (
                "[server] queue_timeout",
                self.queue_timeout != next.queue_timeout,
            ),
            (
                "[server] critical_reserve",
                self.critical_reserve != next.critical_reserve,
            ),
            (
                "[server] shutdown_grace",
                self.shutdown_grace != next.shutdown_grace,
            ),
        ]
        .into_iter()
        .filter_map(|(field, differs)| differs.then_some(field))
        .collect();
        changed.extend(self.bounds.needing_restart(&next.bounds));
        changed.extend(self.tls.needing_restart(&next.tls));
        if self.envoy.max_message_bytes != next.envoy.max_message_bytes {
            // Set on the gRPC listener when it starts.
            changed.push("[envoy] max_message_bytes");
        }
        changed
    }
}

impl StoreSettings {
    /// An in-memory store's config under these bounds (`max_keys`, `max_bytes`), full
    /// stores doing `when_full`: the main store when `kind` is memory, and the engine's
    /// in-process buckets (local fallback, fail-open guard, `local_first`) whatever the
    /// kind, so that `[store]` bounds every map a client's keys can grow.
    pub fn memory_config(
        &self,
        when_full: ratewarden_memory::WhenFull,
    ) -> ratewarden_memory::StoreConfig {
        ratewarden_memory::StoreConfig {
            max_keys: self.max_keys,
            max_bytes: self.max_bytes,
            when_full,
            ..ratewarden_memory::StoreConfig::default()
        }
    }

    /// The fields that differ in `next`, as `[store] field`: the store is built once, at
    /// start, so a reload names every one of them rather than ignore it.
    pub fn needing_restart(&self, next: &StoreSettings) -> Vec<&'static str> {
        [
            ("[store] kind", self.kind != next.kind),
            ("[store] max_keys", self.max_keys != next.max_keys),
            ("[store] max_bytes", self.max_bytes != next.max_bytes),
            (
                "[store] when_full",
                self.evict_when_full != next.evict_when_full,
            ),
            ("[store] deadline", self.deadline != next.deadline),
            (
                "[store] breaker_failures",
                self.breaker_failures != next.breaker_failures,
            ),
            (
                "[store] breaker_cool_down",
                self.breaker_cool_down != next.breaker_cool_down,
            ),
            ("[store] key_prefix", self.key_prefix != next.key_prefix),
            ("[store] tls_ca_file", self.tls_ca_file != next.tls_ca_file),
            (
                "[store] wait_for_replicas",
                self.wait_for_replicas != next.wait_for_replicas,
            ),
            ("[store] batch_calls", self.batch_calls != next.batch_calls),
            ("[store] batch_bytes", self.batch_bytes != next.batch_bytes),
            (
                "[store] batch_in_flight",
                self.batch_in_flight != next.batch_in_flight,
            ),
        ]
        .into_iter()
        .filter_map(|(field, differs)| differs.then_some(field))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_named_without_its_credentials() {
        let redis = StoreKind::Redis {
            url: "rediss://app:s3cr@t@redis.internal:6380/2?password=x".to_owned(),
        };
        assert_eq!(redis.to_string(), "redis rediss://redis.internal:6380/2");
        let cluster = StoreKind::RedisCluster {
            nodes: vec!["redis://:pw@a:6379".to_owned(), "redis://b:6379".to_owned()],
        };
        assert_eq!(
            cluster.to_string(),
            "redis-cluster redis://a:6379, redis://b:6379"
        );
        assert_eq!(StoreKind::Memory.to_string(), "memory");
        let sentinel = StoreKind::RedisSentinel {
            sentinels: vec![
                "redis://:sentinel-pw@s1:26379".to_owned(),
                "rediss://s2:26379".to_owned(),
            ],
            master_name: "mymaster".to_owned(),
            username: Some("app".to_owned()),
            password: Some("master-pw".to_owned()),
            tls: true,
        };
        assert_eq!(
            sentinel.to_string(),
            "redis-sentinel mymaster via redis://s1:26379, rediss://s2:26379"
        );
    }
}
