//! The file as serde reads it: every field optional and spanned, so that validation can say
//! what is missing, and where a wrong value is.

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) server: Option<RawServer>,
    pub(super) store: Option<RawStore>,
    pub(super) keys: Option<RawKeys>,
    pub(super) envoy: Option<RawEnvoy>,
    pub(super) tls: Option<RawTlsListeners>,
    pub(super) regions: Option<Spanned<RawRegions>>,
    #[serde(default)]
    pub(super) limit: Vec<Spanned<RawLimit>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) admin: Option<Spanned<String>>,
    // Who may use the admin listener, and by which names (`admin.rs`).
    pub(super) admin_token_file: Option<Spanned<String>>,
    pub(super) admin_insecure: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) admin_hosts: Vec<Spanned<String>>,
    pub(super) api: Option<Spanned<String>>,
    pub(super) grpc: Option<Spanned<String>>,
    pub(super) upstream: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) trusted_proxies: Vec<Spanned<String>>,
    pub(super) client_ip_header: Option<Spanned<String>>,
    pub(super) legacy_headers: Option<bool>,
    pub(super) retry_after_jitter: Option<Spanned<String>>,
    pub(super) max_in_flight: Option<Spanned<i64>>,
    pub(super) queue_timeout: Option<Spanned<String>>,
    pub(super) critical_reserve: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) critical: Vec<Spanned<RawMatch>>,
    #[serde(default)]
    pub(super) sheddable: Vec<Spanned<RawMatch>>,
    pub(super) shutdown_grace: Option<Spanned<String>>,
    pub(super) max_body: Option<Spanned<i64>>,
    pub(super) header_read_timeout: Option<Spanned<String>>,
    pub(super) idle_timeout: Option<Spanned<String>>,
    pub(super) send_timeout: Option<Spanned<String>>,
    pub(super) max_header_bytes: Option<Spanned<i64>>,
    pub(super) api_body_timeout: Option<Spanned<String>>,
    pub(super) body_idle_timeout: Option<Spanned<String>>,
    pub(super) body_min_rate: Option<Spanned<i64>>,
    pub(super) body_rate_grace: Option<Spanned<String>>,
    pub(super) upstream_connect_timeout: Option<Spanned<String>>,
    pub(super) upstream_response_timeout: Option<Spanned<String>>,
    pub(super) upstream_idle_timeout: Option<Spanned<String>>,
    pub(super) upstream_pool_idle: Option<Spanned<String>>,
    pub(super) max_connections_per_client: Option<Spanned<i64>>,
    pub(super) http2_max_streams: Option<Spanned<i64>>,
    pub(super) upgraded_idle_timeout: Option<Spanned<String>>,
    pub(super) upgraded_max_duration: Option<Spanned<String>>,
    pub(super) method_override: Option<Spanned<String>>,
    pub(super) method_override_scan: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRegions {
    pub(super) name: Option<Spanned<String>>,
    pub(super) horizon: Option<Spanned<String>>,
    pub(super) home: Option<Spanned<RawStore>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) kind: Option<Spanned<String>>,
    pub(super) max_keys: Option<Spanned<i64>>,
    pub(super) max_bytes: Option<Spanned<i64>>,
    pub(super) when_full: Option<Spanned<String>>,
    pub(super) url: Option<Spanned<String>>,
    pub(super) nodes: Option<Spanned<Vec<String>>>,
    pub(super) deadline: Option<Spanned<String>>,
    pub(super) breaker_failures: Option<Spanned<i64>>,
    pub(super) breaker_cool_down: Option<Spanned<String>>,
    pub(super) key_prefix: Option<String>,
    pub(super) tls_ca_file: Option<Spanned<String>>,
    // `kind = "redis-sentinel"`: the Sentinels, the master's name, and how to speak to it.
    pub(super) sentinels: Option<Spanned<Vec<String>>>,
    pub(super) master_name: Option<Spanned<String>>,
    pub(super) master_username: Option<Spanned<String>>,
    pub(super) master_password: Option<Spanned<String>>,
    pub(super) master_tls: Option<Spanned<bool>>,
    pub(super) wait_for_replicas: Option<Spanned<i64>>,
    // How calls to a Redis store are coalesced.
    pub(super) batch_calls: Option<Spanned<i64>>,
    pub(super) batch_bytes: Option<Spanned<i64>>,
    pub(super) batch_in_flight: Option<Spanned<i64>>,
}

/// `[tls.listen]`, `[tls.api]`, `[tls.admin]`, `[tls.grpc]`: TLS on the listener of that
/// `[server]` field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTlsListeners {
    pub(super) listen: Option<Spanned<RawTls>>,
    pub(super) api: Option<Spanned<RawTls>>,
    pub(super) admin: Option<Spanned<RawTls>>,
    pub(super) grpc: Option<Spanned<RawTls>>,
}

/// One listener's TLS: a certificate (`cert` and `key`), or several (`certificates`),
/// and the CA its clients' certificates must be signed by.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) certificates: Vec<Spanned<RawCertificate>>,
    pub(super) client_ca: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCertificate {
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
}

/// `[envoy]`: what one call to Envoy's front doors may carry, and who may call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEnvoy {
    pub(super) clients: Option<Vec<Spanned<String>>>,
    pub(super) max_descriptors: Option<Spanned<i64>>,
    pub(super) max_entries: Option<Spanned<i64>>,
    pub(super) max_message_bytes: Option<Spanned<i64>>,
    pub(super) max_quota_buckets: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKeys {
    pub(super) api_key_header: Option<String>,
    pub(super) tenant_header: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMatch {
    pub(super) method: Option<String>,
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) path_exact: bool,
    pub(super) host: Option<String>,
    pub(super) header: Option<String>,
    pub(super) header_value: Option<Spanned<String>>,
    pub(super) domain: Option<String>,
    pub(super) descriptor: Option<String>,
    pub(super) bucket: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawCost {
    Fixed(i64),
    Header(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pub(super) matches: Option<RawMatch>,
    #[serde(default)]
    pub(super) key: Vec<Spanned<String>>,
    pub(super) when_key_missing: Option<Spanned<String>>,
    pub(super) algorithm: Option<Spanned<String>>,
    pub(super) scope: Option<Spanned<String>>,
    pub(super) rate: Option<Spanned<String>>,
    pub(super) burst: Option<Spanned<i64>>,
    pub(super) limit: Option<Spanned<i64>>,
    pub(super) window: Option<Spanned<String>>,
    pub(super) period: Option<Spanned<String>>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) lease: Option<Spanned<String>>,
    pub(super) sub_windows: Option<Spanned<i64>>,
    pub(super) cost: Option<Spanned<RawCost>>,
    pub(super) max_cost: Option<Spanned<i64>>,
    pub(super) settle: Option<Spanned<String>>,
    pub(super) settle_from: Option<Spanned<String>>,
    pub(super) mode: Option<Spanned<String>>,
    pub(super) rollout: Option<Spanned<String>>,
    pub(super) sensitive: Option<bool>,
    pub(super) always_charge: Option<Spanned<bool>>,
    pub(super) openai_headers: Option<Spanned<String>>,
    pub(super) local_first: Option<bool>,
    pub(super) prefetch: Option<Spanned<String>>,
    pub(super) on_store_failure: Option<Spanned<String>>,
    pub(super) local_divide_by: Option<Spanned<i64>>,
    pub(super) wait_for_replicas: Option<Spanned<i64>>,
    pub(super) ipv4_prefix: Option<Spanned<i64>>,
    pub(super) ipv6_prefix: Option<Spanned<i64>>,
    pub(super) strategy: Option<Spanned<String>>,
    pub(super) adaptive: Option<RawAdaptive>,
    pub(super) queue: Option<Spanned<RawQueue>>,
    pub(super) weights: Option<Spanned<std::collections::BTreeMap<String, Spanned<i64>>>>,
}

/// `[limit.queue]`: where an adaptive rule's excess waits, and how it is shared.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    pub(super) key: Option<Spanned<String>>,
    pub(super) max_wait: Option<Spanned<String>>,
    pub(super) queues: Option<Spanned<i64>>,
    pub(super) hand: Option<Spanned<i64>>,
    pub(super) queue_length: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) weights: std::collections::BTreeMap<String, Spanned<i64>>,
}

/// A number that may be written whole or with decimals (`smoothing = 0.2`, `reserve = 0`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawNumber {
    Int(i64),
    Float(f64),
}

/// `[limit.adaptive]`: an adaptive concurrency rule's parameters.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdaptive {
    pub(super) initial: Option<Spanned<i64>>,
    pub(super) min: Option<Spanned<i64>>,
    pub(super) max: Option<Spanned<i64>>,
    pub(super) backoff: Option<Spanned<RawNumber>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) probe_multiplier: Option<Spanned<i64>>,
    pub(super) smoothing: Option<Spanned<RawNumber>>,
    pub(super) queue_size: Option<Spanned<i64>>,
    pub(super) long_window: Option<Spanned<i64>>,
    pub(super) tolerance: Option<Spanned<RawNumber>>,
    pub(super) interval: Option<Spanned<String>>,
    pub(super) percentile: Option<Spanned<RawNumber>>,
    pub(super) buffer: Option<Spanned<RawNumber>>,
    pub(super) min_rtt_interval: Option<Spanned<String>>,
    pub(super) jitter: Option<Spanned<RawNumber>>,
    pub(super) request_count: Option<Spanned<i64>>,
    pub(super) window: Option<Spanned<String>>,
    pub(super) window_samples: Option<Spanned<i64>>,
    pub(super) min_rtt: Option<Spanned<String>>,
    pub(super) reserve: Option<Spanned<RawNumber>>,
}

impl RawAdaptive {
    /// The parameters given, by name.
    pub(super) fn given(&self) -> Vec<&'static str> {
        [
            ("initial", self.initial.is_some()),
            ("min", self.min.is_some()),
            ("max", self.max.is_some()),
            ("backoff", self.backoff.is_some()),
            ("timeout", self.timeout.is_some()),
            ("probe_multiplier", self.probe_multiplier.is_some()),
            ("smoothing", self.smoothing.is_some()),
            ("queue_size", self.queue_size.is_some()),
            ("long_window", self.long_window.is_some()),
            ("tolerance", self.tolerance.is_some()),
            ("interval", self.interval.is_some()),
            ("percentile", self.percentile.is_some()),
            ("buffer", self.buffer.is_some()),
            ("min_rtt_interval", self.min_rtt_interval.is_some()),
            ("jitter", self.jitter.is_some()),
            ("request_count", self.request_count.is_some()),
            ("window", self.window.is_some()),
            ("window_samples", self.window_samples.is_some()),
            ("min_rtt", self.min_rtt.is_some()),
            ("reserve", self.reserve.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}
