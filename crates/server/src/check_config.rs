//! `ratewarden check-config`: validate a config file and show the rules it resolves to.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use ratewarden_core::{Algorithm, DisplayDuration, Limit};
use ratewarden_policy::{
    config, Bounds, Cost, KeyPart, Mode, OnStoreFailure, Rule, ServerSettings, StoreKind,
    StoreSettings, TrustedProxies, WhenKeyMissing,
};
use ratewarden_redis::{RedisConfig, RedisStore, SentinelTarget, Target, TimeSource};

/// The config at `path`, or `None` after printing every error found in it to standard
/// error (the commands that read a config then exit with status 1).
pub(crate) fn load_or_report(path: &Path) -> Option<config::Config> {
    match config::load(path) {
        Ok(config) => Some(config),
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("error: {e}");
            }
            eprintln!("error: {} problem(s) in {}", errors.0.len(), path.display());
            None
        }
    }
}

/// Validates `path`; prints its rules as a table, or every error found.
///
/// # Errors
///
/// Only when standard output cannot be written.
pub fn main(path: &Path) -> anyhow::Result<ExitCode> {
    let Some(config) = load_or_report(path) else {
        return Ok(ExitCode::from(1));
    };
    // What `serve` refuses beyond the file's own checks: a Redis URL the client cannot use,
    // a CA file it cannot read. Built as `serve` builds it; nothing is connected.
    if let Err(e) = shared_store(&config.store) {
        eprintln!("error: {}: {e:#}", path.display());
        eprintln!("error: 1 problem(s) in {}", path.display());
        return Ok(ExitCode::from(1));
    }
    if let Some(upstream) = config.server.upstream.as_deref() {
        if let Err(why) = reach(upstream, config.server.bounds.upstream_connect_timeout) {
            // Not an error: the upstream may start after us, and `serve` starts without it.
            eprintln!(
                "warning: {}: `[server] upstream` {upstream}: {why}; until it answers, the \
                 gateway answers 502",
                path.display()
            );
        }
    }
    let mut out = io::stdout().lock();
    let rows: Vec<[String; 6]> = config.rules.iter().map(row).collect();
    let header = [
        "limit",
        "applies to",
        "key",
        "algorithm",
        "mode",
        "store down",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut io::StdoutLock<'_>, cells: &[String]| -> io::Result<()> {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", text.join("  ").trim_end())
    };
    line(&mut out, &header.map(str::to_owned))?;
    for row in &rows {
        line(&mut out, row)?;
    }
    writeln!(out)?;
    for row in bounds(&config.server.bounds) {
        writeln!(out, "{row}")?;
    }
    writeln!(out, "[server] admin: {}", admin_protection(&config.server))?;
    writeln!(out)?;
    for row in call_bounds(&config.server.envoy, &config.trusted_proxies) {
        writeln!(out, "{row}")?;
    }
    writeln!(
        out,
        "{}: {} rule(s), valid",
        path.display(),
        config.rules.len()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Whether a TCP connection to `upstream` (`http://host[:port]`) opens within `timeout`, as
/// the gateway's first request would open it.
fn reach(upstream: &str, timeout: std::time::Duration) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let authority = upstream.strip_prefix("http://").unwrap_or(upstream);
    // A bracketed IPv6 address keeps its colons; a port after the last one, else 80.
    let with_port = match authority.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => authority.to_owned(),
        _ => format!("{authority}:80"),
    };
    let addrs: Vec<_> = with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve it ({e})"))?
        .collect();
    let mut last = None;
    for addr in &addrs {
        match std::net::TcpStream::connect_timeout(addr, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(format!("cannot connect to {addr} ({e})")),
        }
    }
    Err(last.unwrap_or_else(|| "it resolves to no address".to_owned()))
}

/// Where the admin listener is and how it is protected: where its token came from (never
/// the token), or why it has none. `check-config` and the start log line say the same.
pub(crate) fn admin_protection(settings: &ServerSettings) -> String {
    let access = &settings.admin_access;
    let Some(admin) = settings.admin else {
        return "off".to_owned();
    };
    match &access.token {
        Some(token) => format!("{admin}, bearer token from {}", token.source()),
        None if access.insecure => format!("{admin}, no token (admin_insecure)"),
        None => format!("{admin}, no token (loopback only)"),
    }
}

/// The Redis client config of a shared `[store]` (`None` for the in-memory store), its CA
/// file read: the one place that turns `[store]` into a [`RedisConfig`].
///
/// # Errors
///
/// A `tls_ca_file` that cannot be read.
pub fn redis_config(settings: &StoreSettings) -> anyhow::Result<Option<RedisConfig>> {
    let target = match &settings.kind {
        StoreKind::Memory => return Ok(None),
        StoreKind::Redis { url } => Target::Single(url.clone()),
        StoreKind::RedisCluster { nodes } => Target::Cluster(nodes.clone()),
        StoreKind::RedisSentinel {
            sentinels,
            master_name,
            username,
            password,
            tls,
        } => Target::Sentinel(SentinelTarget {
            sentinels: sentinels.clone(),
            master_name: master_name.clone(),
            username: username.clone(),
            password: password.clone(),
            tls: *tls,
        }),
    };
    let tls_ca =
        match &settings.tls_ca_file {
            Some(path) => Some(std::fs::read(path).with_context(|| {
                format!("`[store] tls_ca_file`: cannot read {}", path.display())
            })?),
            None => None,
        };
    Ok(Some(RedisConfig {
        tls_ca,
        target,
        deadline: settings.deadline,
        breaker_failures: settings.breaker_failures,
        breaker_cool_down: settings.breaker_cool_down,
        time: TimeSource::Redis,
        key_prefix: settings.key_prefix.clone(),
        wait_for_replicas: settings.wait_for_replicas,
        ..RedisConfig::default()
    }))
}

/// The shared store of `settings` as `serve` starts it (`None` for the in-memory store): it
/// connects on first use, so building it checks the URLs and the CA file and nothing else.
///
/// # Errors
///
/// What [`redis_config`] refuses, and a URL the Redis client cannot use.
pub fn shared_store(settings: &StoreSettings) -> anyhow::Result<Option<RedisStore>> {
    let Some(config) = redis_config(settings)? else {
        return Ok(None);
    };
    RedisStore::new(config).map(Some).context("`[store]`")
}

/// The gateway's bounds as `[server]` fields, with their values and whether a reload
/// changes them (those set up once per connection or upstream pool take a restart).
fn bounds(b: &Bounds) -> Vec<String> {
    let d = |d: std::time::Duration| DisplayDuration(d).to_string();
    let rows = [
        ("header_read_timeout", d(b.header_read_timeout), false),
        ("idle_timeout", d(b.idle_timeout), false),
        ("send_timeout", d(b.send_timeout), false),
        ("max_header_bytes", b.max_header_bytes.to_string(), false),
        (
            "max_connections_per_client",
            b.max_connections_per_client.to_string(),
            false,
        ),
        ("api_body_timeout", d(b.api_body_timeout), true),
        ("body_idle_timeout", d(b.body_idle_timeout), true),
        (
            "body_min_rate",
            format!("{} bytes/s", b.body_min_rate),
            true,
        ),
        ("body_rate_grace", d(b.body_rate_grace), true),
        (
            "upstream_connect_timeout",
            d(b.upstream_connect_timeout),
            false,
        ),
        (
            "upstream_response_timeout",
            d(b.upstream_response_timeout),
            true,
        ),
        ("upstream_idle_timeout", d(b.upstream_idle_timeout), true),
        ("upstream_pool_idle", d(b.upstream_pool_idle), false),
    ];
    let mut lines = vec![format!("{:<28}{:<16}on reload", "[server] bound", "value")];
    for (field, value, reloads) in rows {
        let reload = if reloads { "applies" } else { "restart" };
        lines.push(format!("{field:<28}{value:<16}{reload}"));
    }
    lines
}

/// What one call to Envoy's front doors may carry, and who may call `ShouldRateLimit`, as
/// `[envoy]` fields with their values and whether a reload changes them.
fn call_bounds(b: &config::CallBounds, trusted: &TrustedProxies) -> Vec<String> {
    let clients = match &b.clients {
        Some(_) => "as listed",
        None if !trusted.is_empty() => "trusted_proxies",
        None => "anyone",
    };
    let rows = [
        ("max_descriptors", b.max_descriptors.to_string(), true),
        ("max_entries", b.max_entries.to_string(), true),
        ("max_message_bytes", b.max_message_bytes.to_string(), false),
        ("max_quota_buckets", b.max_quota_buckets.to_string(), true),
        ("clients", clients.to_owned(), true),
    ];
    let mut lines = vec![format!("{:<28}{:<16}on reload", "[envoy] bound", "value")];
    for (field, value, reloads) in rows {
        let reload = if reloads { "applies" } else { "restart" };
        lines.push(format!("{field:<28}{value:<16}{reload}"));
    }
    lines
}

/// A rule as the table shows it: name, applies to, key, algorithm, mode, store down.
pub(crate) fn row(rule: &Rule) -> [String; 6] {
    let m = &rule.matches;
    let mut applies: Vec<String> = Vec::new();
    if let Some(method) = &m.method {
        applies.push(method.clone());
    }
    if let Some(path) = &m.path {
        applies.push(path.clone());
    }
    if let Some(host) = &m.host {
        applies.push(format!("host {host}"));
    }
    if let Some((name, value)) = &m.header {
        applies.push(match value {
            Some(v) => format!("{name}: {v}"),
            None => format!("has {name}"),
        });
    }
    let entry = |(k, v): &(String, Option<String>)| match v {
        Some(v) => format!("{k}={v}"),
        None => k.clone(),
    };
    match (&m.domain, &m.bucket) {
        (Some(domain), Some(bucket)) => {
            let entries: Vec<String> = bucket.entries.iter().map(entry).collect();
            let weights: Vec<String> = bucket
                .weights
                .iter()
                .map(|(k, v, w)| format!(" {k}={v}:{w}"))
                .collect();
            applies.push(format!(
                "envoy {domain} bucket {{{}}}{}",
                entries.join(", "),
                if weights.is_empty() {
                    String::new()
                } else {
                    format!(" weights{}", weights.concat())
                }
            ));
        }
        (Some(domain), None) => {
            let entries: Vec<String> = m.descriptor.iter().map(entry).collect();
            applies.push(format!("envoy {domain} [{}]", entries.join(", ")));
        }
        (None, _) => {}
    }
    let applies = if applies.is_empty() {
        "every request".to_owned()
    } else {
        applies.join(" ")
    };
    let key: Vec<String> = rule.key.iter().map(ToString::to_string).collect();
    // An adaptive rule's `limit` is only its starting place: the limit moves.
    let mut algorithm = match &rule.adaptive {
        Some(adaptive) => {
            let mut text = format!("adaptive-concurrency ({})", adaptive.strategy.name());
            if let Some(queue) = &adaptive.queue {
                text.push_str(", ");
                text.push_str(&describe_queue(queue));
            }
            text
        }
        None => describe(&rule.limit),
    };
    match &rule.cost {
        Cost::Fixed(1) => {}
        Cost::Fixed(n) => algorithm.push_str(&format!(", cost {n}")),
        Cost::Header { name, max } => {
            algorithm.push_str(&format!(", cost from {name} (at most {max})"));
        }
    }
    if let Some(within) = rule.settle_within {
        algorithm.push_str(&format!(", settled within {}", DisplayDuration(within)));
    }
    let mut mode = match rule.mode {
        Mode::Enforce => "enforce".to_owned(),
        Mode::Shadow => "shadow".to_owned(),
        Mode::Rollout { basis_points } => {
            format!("rollout {}.{:02}%", basis_points / 100, basis_points % 100)
        }
    };
    if rule.sensitive {
        mode.push_str(", bare 429");
    }
    // The default (the client's address for a missing part) shows in the keys themselves,
    // `name@fingerprint~client|…`; the choices that let a request past or refuse it show here.
    let may_miss = rule
        .key
        .iter()
        .any(|p| matches!(p, KeyPart::ApiKey | KeyPart::Tenant | KeyPart::Header(_)));
    match rule.when_key_missing {
        WhenKeyMissing::Skip if may_miss => mode.push_str(", skipped without its key part"),
        WhenKeyMissing::Refuse if may_miss => mode.push_str(", refuses without its key part"),
        _ => {}
    }
    let failure = match rule.on_store_failure {
        OnStoreFailure::Open => "open".to_owned(),
        OnStoreFailure::Closed => "closed (503)".to_owned(),
        OnStoreFailure::Local { divide_by } => format!("local, limit / {divide_by}"),
    };
    [
        rule.name.clone(),
        applies,
        key.join(" + "),
        algorithm,
        mode,
        failure,
    ]
}

/// An adaptive rule's `[limit.queue]`: whose turn it is, how long a request may wait, the
/// lanes, and the weights named.
pub fn describe_queue(queue: &config::Queue) -> String {
    let shape = queue.shape;
    let mut text = format!(
        "queued by {} up to {} ({} queues, hand {}, {} each)",
        queue.key,
        DisplayDuration(std::time::Duration::from_nanos(shape.max_wait_ns)),
        shape.queues,
        shape.hand,
        shape.queue_length,
    );
    if !queue.weights.is_empty() {
        let weights: Vec<String> = queue
            .weights
            .iter()
            .map(|(value, weight)| format!("{value}={weight}"))
            .collect();
        text.push_str(&format!(", weights {}", weights.join(" ")));
    }
    text
}

/// An algorithm with its numbers, as a config would write them.
pub fn describe(limit: &Limit) -> String {
    let kind = limit.kind();
    match limit {
        Limit::FixedWindow(l) => {
            format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window()))
        }
        Limit::SlidingLog(l) => format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window())),
        Limit::SlidingWindow(l) if l.sub_windows() > 1 => format!(
            "{kind} {} per {} in {} sub-windows",
            l.limit(),
            DisplayDuration(l.window()),
            l.sub_windows()
        ),
        Limit::SlidingWindow(l) => {
            format!("{kind} {} per {}", l.limit(), DisplayDuration(l.window()))
        }
        Limit::TokenBucket(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::LeakyBucket(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::LeakyQueue(l) => format!("{kind} {}, {} may wait", l.rate(), l.burst()),
        Limit::Gcra(l) => format!("{kind} {}, burst {}", l.rate(), l.burst()),
        Limit::Quota(l) => format!("{kind} {} per {} ({})", l.limit(), l.unit(), l.timezone()),
        Limit::Concurrency(l) => format!(
            "{kind} {} in flight, lease {}",
            l.limit(),
            DisplayDuration(l.lease())
        ),
    }
}
