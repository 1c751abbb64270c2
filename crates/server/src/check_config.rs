//! `ratewarden check-config`: validate a config file and show the rules it resolves to.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use ratewarden_core::DisplayDuration;
use ratewarden_policy::{config, Bounds, TrustedProxies};

use crate::describe::{admin_protection, row};
use crate::serve::store::shared_store;

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
    let home = config
        .regions
        .as_ref()
        .map(|regions| crate::serve::store::AnyStore::home(&regions.home).map(drop));
    if let Err(e) = shared_store(&config.store)
        .map(drop)
        .and(home.unwrap_or(Ok(())))
    {
        eprintln!("error: {}: {e:#}", path.display());
        eprintln!("error: 1 problem(s) in {}", path.display());
        return Ok(ExitCode::from(1));
    }
    // Every certificate, key and CA the `[tls.*]` sections name, read and checked as `serve`
    // reads them at start and on reload.
    if let Err(errors) = crate::serve::check_tls(&config.server.tls) {
        for e in &errors.0 {
            eprintln!("error: {e}");
        }
        eprintln!("error: {} problem(s) in {}", errors.0.len(), path.display());
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
    for (name, tls) in [
        ("listen", &config.server.tls.listen),
        ("api", &config.server.tls.api),
        ("admin", &config.server.tls.admin),
        ("grpc", &config.server.tls.grpc),
    ] {
        if let Some(tls) = tls {
            writeln!(
                out,
                "[tls.{name}]: {} certificate(s){}",
                tls.certificates.len(),
                if tls.client_ca.is_some() {
                    ", client certificates required"
                } else {
                    ""
                }
            )?;
        }
    }
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

/// Whether a TCP connection to `upstream` (`http://` or `h2c://host[:port]`) opens within `timeout`, as
/// the gateway's first request would open it.
fn reach(upstream: &str, timeout: std::time::Duration) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    let authority = upstream
        .strip_prefix("http://")
        .or_else(|| upstream.strip_prefix("h2c://"))
        .unwrap_or(upstream);
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
