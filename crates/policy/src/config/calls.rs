//! The `[envoy]` section: what one call to Envoy's front doors may carry, and who may make
//! it on the gRPC listener.

use toml::Spanned;

use super::error::Errors;
use super::raw::RawEnvoy;
use crate::ip::TrustedProxies;

/// What one call to the Envoy front doors may carry (`[envoy]` in the file): the gRPC
/// `ShouldRateLimit` and `Check`, and `POST /json`. A call past a bound is refused whole,
/// `INVALID_ARGUMENT` (gRPC) or 400 (`/json`), naming the bound and its setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallBounds {
    /// Who may call the gRPC listener's `ShouldRateLimit`: `None` when the file names no
    /// `clients`, and then `[server] trusted_proxies` when it names some, else anyone.
    pub clients: Option<TrustedProxies>,
    /// The most descriptors one rate limit request may carry.
    pub max_descriptors: usize,
    /// The most entries one descriptor may carry.
    pub max_entries: usize,
    /// The largest gRPC message the listener decodes, in bytes (`POST /json` has
    /// `[server] max_body`).
    pub max_message_bytes: usize,
    /// The most quota buckets (one per stream and bucket id) the quota service holds at
    /// once; past it a new bucket is abandoned. Each is state here, and with a shared store
    /// a lease renewed four times a second.
    pub max_quota_buckets: usize,
}

impl Default for CallBounds {
    /// 64 descriptors of 16 entries each (Envoy's route actions make a handful of each), in
    /// messages up to 1 MiB (room for an `ext_authz` request of Envoy's largest headers),
    /// and 10,000 quota buckets (a bucket per tenant of a large API).
    fn default() -> Self {
        Self {
            clients: None,
            max_descriptors: 64,
            max_entries: 16,
            max_message_bytes: 1 << 20,
            max_quota_buckets: 10_000,
        }
    }
}

impl CallBounds {
    /// Whether `peer` may call `ShouldRateLimit`: in `clients` when given, else in
    /// `trusted` when that names any proxy, else anyone (a config naming neither is open).
    pub fn admits(&self, trusted: &TrustedProxies, peer: Option<std::net::IpAddr>) -> bool {
        let list = match &self.clients {
            Some(clients) => clients,
            None if !trusted.is_empty() => trusted,
            None => return true,
        };
        peer.is_some_and(|ip| list.contains(ip))
    }
}

pub(super) fn call_bounds(raw: RawEnvoy, errors: &mut Errors<'_>) -> CallBounds {
    let d = CallBounds::default();
    let mut count = |field: &str, value: &Option<Spanned<i64>>, default: usize| {
        value
            .as_ref()
            .and_then(|v| errors.whole(v, &format!("`[envoy]`: `{field}`"), None, false))
            .unwrap_or(default)
    };
    let max_descriptors = count("max_descriptors", &raw.max_descriptors, d.max_descriptors);
    let max_entries = count("max_entries", &raw.max_entries, d.max_entries);
    let max_message_bytes = count(
        "max_message_bytes",
        &raw.max_message_bytes,
        d.max_message_bytes,
    );
    let max_quota_buckets = count(
        "max_quota_buckets",
        &raw.max_quota_buckets,
        d.max_quota_buckets,
    );
    let clients = raw.clients.map(|given| {
        let mut good = Vec::new();
        for client in given {
            match TrustedProxies::parse([client.get_ref().as_str()]) {
                Ok(_) => good.push(client.into_inner()),
                Err(e) => errors.at(
                    Some(client.span()),
                    None,
                    format!("`[envoy]`: `clients`: {e}"),
                ),
            }
        }
        TrustedProxies::parse(good.iter().map(String::as_str)).unwrap_or_default()
    });
    CallBounds {
        clients,
        max_descriptors,
        max_entries,
        max_message_bytes,
        max_quota_buckets,
    }
}
