//! The `[store]` section: where counters live, and how long a shared store may take.

use toml::Spanned;

use super::error::Errors;
use super::raw::RawStore;
use super::{StoreKind, StoreSettings, MIN_STORE_BYTES};

/// `raw` validated; `section` names it in errors (`` `[store]` ``, or `` `[regions.home]` ``).
pub(super) fn store_settings(
    raw: RawStore,
    section: &str,
    errors: &mut Errors<'_>,
) -> StoreSettings {
    let defaults = StoreSettings::default();
    let kind_name = raw.kind.as_ref().map_or("memory", |k| k.get_ref().as_str());
    // A connection field of another kind of store would be ignored: the file would say one
    // store and run another.
    let stray = [
        (
            "url",
            raw.url.as_ref().map(Spanned::span),
            kind_name != "redis",
            "`kind = \"redis\"`",
        ),
        (
            "nodes",
            raw.nodes.as_ref().map(Spanned::span),
            kind_name != "redis-cluster",
            "`kind = \"redis-cluster\"`",
        ),
        (
            "tls_ca_file",
            raw.tls_ca_file.as_ref().map(Spanned::span),
            kind_name == "memory",
            "a Redis store",
        ),
        (
            "sentinels",
            raw.sentinels.as_ref().map(Spanned::span),
            kind_name != "redis-sentinel",
            "`kind = \"redis-sentinel\"`",
        ),
        (
            "master_name",
            raw.master_name.as_ref().map(Spanned::span),
            kind_name != "redis-sentinel",
            "`kind = \"redis-sentinel\"`",
        ),
        (
            "master_username",
            raw.master_username.as_ref().map(Spanned::span),
            kind_name != "redis-sentinel",
            "`kind = \"redis-sentinel\"`",
        ),
        (
            "master_password",
            raw.master_password.as_ref().map(Spanned::span),
            kind_name != "redis-sentinel",
            "`kind = \"redis-sentinel\"`",
        ),
        (
            "master_tls",
            raw.master_tls.as_ref().map(Spanned::span),
            kind_name != "redis-sentinel",
            "`kind = \"redis-sentinel\"`",
        ),
        (
            "batch_calls",
            raw.batch_calls.as_ref().map(Spanned::span),
            kind_name == "memory",
            "a Redis store",
        ),
        (
            "batch_bytes",
            raw.batch_bytes.as_ref().map(Spanned::span),
            kind_name == "memory",
            "a Redis store",
        ),
        (
            "batch_in_flight",
            raw.batch_in_flight.as_ref().map(Spanned::span),
            kind_name == "memory",
            "a Redis store",
        ),
        // `WAIT` answers for the server it is sent to; a Cluster's decisions span masters.
        (
            "wait_for_replicas",
            raw.wait_for_replicas.as_ref().map(Spanned::span),
            kind_name != "redis" && kind_name != "redis-sentinel",
            "`kind = \"redis\"` and `kind = \"redis-sentinel\"`",
        ),
    ];
    for (field, at, stray, applies_to) in stray {
        if let (Some(at), true) = (at, stray) {
            errors.at(
                Some(at),
                None,
                format!("{section}: `{field}` applies only to {applies_to} (the store is `{kind_name}`)"),
            );
        }
    }
    let nodes = raw.nodes.map(Spanned::into_inner).unwrap_or_default();
    let kind = match raw.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
        None | Some(("memory", _)) => StoreKind::Memory,
        Some(("redis", at)) => match raw.url {
            Some(url) => StoreKind::Redis {
                url: url.into_inner(),
            },
            None => {
                errors.at(
                    Some(at),
                    None,
                    format!("{section}: `kind = \"redis\"` needs `url`, such as \"redis://127.0.0.1:6379\""),
                );
                StoreKind::Memory
            }
        },
        Some(("redis-cluster", at)) => {
            if nodes.is_empty() {
                errors.at(
                    Some(at),
                    None,
                    format!(
                        "{section}: `kind = \"redis-cluster\"` needs `nodes`, the seed node URLs"
                    ),
                );
            }
            StoreKind::RedisCluster { nodes }
        }
        Some(("redis-sentinel", at)) => {
            let sentinels = raw.sentinels.map(Spanned::into_inner).unwrap_or_default();
            if sentinels.is_empty() {
                errors.at(
                    Some(at.clone()),
                    None,
                    format!("{section}: `kind = \"redis-sentinel\"` needs `sentinels`, the Sentinels' URLs, such as [\"redis://10.0.0.1:26379\"]"),
                );
            }
            let master_name = match raw.master_name {
                Some(name) if !name.get_ref().is_empty() => name.into_inner(),
                _ => {
                    errors.at(
                        Some(at),
                        None,
                        format!("{section}: `kind = \"redis-sentinel\"` needs `master_name`, the name the Sentinels monitor the master under"),
                    );
                    String::new()
                }
            };
            StoreKind::RedisSentinel {
                sentinels,
                master_name,
                username: raw.master_username.map(Spanned::into_inner),
                password: raw.master_password.map(Spanned::into_inner),
                tls: raw.master_tls.is_some_and(Spanned::into_inner),
            }
        }
        Some((other, at)) => {
            errors.at(
                Some(at),
                None,
                format!("{section}: `kind` is `memory`, `redis`, `redis-cluster` or `redis-sentinel`, not `{other}`"),
            );
            StoreKind::Memory
        }
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
                format!("{section}: `when_full` is `evict` or `reject`, not `{other}`"),
            );
            true
        }
    };
    let max_keys = count(errors, section, "max_keys", &raw.max_keys).unwrap_or(defaults.max_keys);
    let max_bytes = match count::<usize>(errors, section, "max_bytes", &raw.max_bytes) {
        Some(n) if n < MIN_STORE_BYTES => {
            errors.at(
                raw.max_bytes.as_ref().map(Spanned::span),
                None,
                format!(
                    "{section}: `max_bytes` must be at least {MIN_STORE_BYTES} (64 KiB: the store holds its keys in 64 shards, each its share), not {n}"
                ),
            );
            defaults.max_bytes
        }
        Some(n) => n,
        None => defaults.max_bytes,
    };
    let breaker_failures = count(errors, section, "breaker_failures", &raw.breaker_failures)
        .unwrap_or(defaults.breaker_failures);
    let wait_for_replicas = raw
        .wait_for_replicas
        .as_ref()
        .and_then(|n| errors.whole(n, &format!("{section}: `wait_for_replicas`"), None, true))
        .unwrap_or(defaults.wait_for_replicas);
    // 0 and 1 both send every call alone; the other two are at least 1.
    let batch_calls = raw
        .batch_calls
        .as_ref()
        .and_then(|n| errors.whole(n, &format!("{section}: `batch_calls`"), None, true))
        .unwrap_or(defaults.batch_calls);
    let batch_bytes =
        count(errors, section, "batch_bytes", &raw.batch_bytes).unwrap_or(defaults.batch_bytes);
    let batch_in_flight = count(errors, section, "batch_in_flight", &raw.batch_in_flight)
        .unwrap_or(defaults.batch_in_flight);
    let mut duration = |field: &str, value: &Option<Spanned<String>>| {
        errors.duration(
            value.as_ref(),
            &format!("{section}: `{field}`"),
            None,
            false,
        )
    };
    let deadline = duration("deadline", &raw.deadline).unwrap_or(defaults.deadline);
    let breaker_cool_down =
        duration("breaker_cool_down", &raw.breaker_cool_down).unwrap_or(defaults.breaker_cool_down);
    StoreSettings {
        kind,
        max_keys,
        max_bytes,
        evict_when_full,
        deadline,
        breaker_failures,
        breaker_cool_down,
        key_prefix: raw.key_prefix.unwrap_or(defaults.key_prefix),
        tls_ca_file: raw
            .tls_ca_file
            .map(|f| std::path::PathBuf::from(f.into_inner())),
        wait_for_replicas,
        batch_calls,
        batch_bytes,
        batch_in_flight,
    }
}

fn count<T: TryFrom<i64>>(
    errors: &mut Errors<'_>,
    section: &str,
    field: &str,
    value: &Option<Spanned<i64>>,
) -> Option<T> {
    errors.whole(
        value.as_ref()?,
        &format!("{section}: `{field}`"),
        None,
        false,
    )
}
