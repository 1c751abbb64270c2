//! The `[server]` section: listeners, the upstream, the response contract, load shedding.

use std::net::SocketAddr;

use toml::Spanned;

use super::admin::{admin_access, RawAdmin};
use super::error::Errors;
use super::raw::{RawMatch, RawServer};
use super::rule::{host_problem, match_of, path_problem, stray_header_value};
use super::{Bounds, Match, MethodOverride, ServerSettings, MIN_HEADER_BYTES};

pub(super) fn server_settings(raw: RawServer, errors: &mut Errors<'_>) -> ServerSettings {
    let defaults = ServerSettings::default();
    let bounds = bounds(&raw, errors);
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
    let listen_span = raw.listen.as_ref().map(Spanned::span);
    let listen = address("listen", raw.listen);
    let listen_off = matches!(listen, Some(None));
    let listen = listen.flatten().unwrap_or(defaults.listen);
    let api = address("api", raw.api).flatten();
    let grpc = address("grpc", raw.grpc).flatten();
    let admin_span = raw.admin.as_ref().map(Spanned::span);
    let admin = address("admin", raw.admin).unwrap_or(defaults.admin);
    if listen_off {
        errors.at(
            listen_span,
            None,
            "`[server]`: `listen` cannot be \"off\": it is the main listener (the gateway or the decision API)".to_owned(),
        );
    }
    let admin_access = admin_access(
        RawAdmin {
            token_file: raw.admin_token_file,
            insecure: raw.admin_insecure,
            hosts: raw.admin_hosts,
        },
        admin,
        admin_span,
        errors,
    );
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
    let mut duration = |field: &str, value: Option<Spanned<String>>, zero_ok: bool| {
        errors.duration(
            value.as_ref(),
            &format!("`[server]`: `{field}`"),
            None,
            zero_ok,
        )
    };
    let retry_after_jitter = duration("retry_after_jitter", raw.retry_after_jitter, true)
        .unwrap_or(defaults.retry_after_jitter);
    let queue_timeout =
        duration("queue_timeout", raw.queue_timeout, true).unwrap_or(defaults.queue_timeout);
    let shutdown_grace =
        duration("shutdown_grace", raw.shutdown_grace, true).unwrap_or(defaults.shutdown_grace);
    let mut count = |field: &str, value: &Option<Spanned<i64>>, zero_ok: bool| -> Option<usize> {
        errors.whole(
            value.as_ref()?,
            &format!("`[server]`: `{field}`"),
            None,
            zero_ok,
        )
    };
    let max_in_flight =
        count("max_in_flight", &raw.max_in_flight, false).unwrap_or(defaults.max_in_flight);
    let critical_reserve =
        count("critical_reserve", &raw.critical_reserve, true).unwrap_or(max_in_flight / 10);
    let max_body = count("max_body", &raw.max_body, false).unwrap_or(defaults.max_body);
    let method_override_scan = count("method_override_scan", &raw.method_override_scan, false)
        .unwrap_or(defaults.method_override_scan);
    let method_override = match raw.method_override.as_ref() {
        None => defaults.method_override,
        Some(v) => match v.get_ref().trim() {
            "refuse" => MethodOverride::Refuse,
            "decide" => MethodOverride::Decide,
            other => {
                errors.at(
                    Some(v.span()),
                    None,
                    format!(
                        "`[server]`: `method_override` must be \"refuse\" or \"decide\", not `{other}`"
                    ),
                );
                defaults.method_override
            }
        },
    };
    if critical_reserve >= max_in_flight {
        errors.at(
            raw.critical_reserve.as_ref().map(Spanned::span),
            None,
            format!(
                "`[server]`: `critical_reserve` ({critical_reserve}) must be below `max_in_flight` ({max_in_flight}), or nothing but critical routes gets through"
            ),
        );
    }
    // Each route checked where it is written: a path no normalized request can have.
    let mut routes = |field: &str, given: Vec<Spanned<RawMatch>>| -> Vec<Match> {
        given
            .into_iter()
            .map(|m| {
                let span = m.span();
                let r = m.get_ref();
                if r.domain.is_some() || r.descriptor.is_some() || r.bucket.is_some() {
                    let message = format!(
                        "`[server] {field}`: `domain`, `descriptor` and `bucket` are for Envoy descriptors and quota buckets; a route matches HTTP requests"
                    );
                    errors.at(Some(span.clone()), None, message);
                }
                if let Some(at) = stray_header_value(m.get_ref()) {
                    let message = format!(
                        "`[server] {field}`: `header_value` needs `header`, the header whose value it is"
                    );
                    errors.at(Some(at), None, message);
                }
                let m = match_of(m.into_inner());
                for problem in [path_problem(&m), host_problem(&m)].into_iter().flatten() {
                    errors.at(
                        Some(span.clone()),
                        None,
                        format!("`[server] {field}`: {problem}"),
                    );
                }
                m
            })
            .collect()
    };
    let critical = routes("critical", raw.critical);
    let sheddable = routes("sheddable", raw.sheddable);
    ServerSettings {
        listen,
        api,
        grpc,
        admin,
        admin_access,
        upstream,
        legacy_headers: raw.legacy_headers.unwrap_or(false),
        retry_after_jitter,
        max_in_flight,
        queue_timeout,
        critical_reserve,
        critical,
        sheddable,
        shutdown_grace,
        max_body,
        bounds,
        envoy: defaults.envoy,
        method_override,
        method_override_scan,
        tls: defaults.tls,
    }
}

/// The bounds on slow and greedy peers; zero is refused wherever it would refuse every
/// request or cut every body (a zero `body_min_rate` is no minimum).
fn bounds(raw: &RawServer, errors: &mut Errors<'_>) -> Bounds {
    let d = Bounds::default();
    let mut duration = |field: &str, value: &Option<Spanned<String>>, default| {
        errors
            .duration(
                value.as_ref(),
                &format!("`[server]`: `{field}`"),
                None,
                false,
            )
            .unwrap_or(default)
    };
    let header_read_timeout = duration(
        "header_read_timeout",
        &raw.header_read_timeout,
        d.header_read_timeout,
    );
    let idle_timeout = duration("idle_timeout", &raw.idle_timeout, d.idle_timeout);
    let send_timeout = duration("send_timeout", &raw.send_timeout, d.send_timeout);
    let api_body_timeout = duration(
        "api_body_timeout",
        &raw.api_body_timeout,
        d.api_body_timeout,
    );
    let body_idle_timeout = duration(
        "body_idle_timeout",
        &raw.body_idle_timeout,
        d.body_idle_timeout,
    );
    let body_rate_grace = duration("body_rate_grace", &raw.body_rate_grace, d.body_rate_grace);
    let upstream_connect_timeout = duration(
        "upstream_connect_timeout",
        &raw.upstream_connect_timeout,
        d.upstream_connect_timeout,
    );
    let upstream_response_timeout = duration(
        "upstream_response_timeout",
        &raw.upstream_response_timeout,
        d.upstream_response_timeout,
    );
    let upstream_idle_timeout = duration(
        "upstream_idle_timeout",
        &raw.upstream_idle_timeout,
        d.upstream_idle_timeout,
    );
    let upstream_pool_idle = duration(
        "upstream_pool_idle",
        &raw.upstream_pool_idle,
        d.upstream_pool_idle,
    );
    let upgraded_idle_timeout = duration(
        "upgraded_idle_timeout",
        &raw.upgraded_idle_timeout,
        d.upgraded_idle_timeout,
    );
    let upgraded_max_duration = duration(
        "upgraded_max_duration",
        &raw.upgraded_max_duration,
        d.upgraded_max_duration,
    );
    let what = |field: &str| format!("`[server]`: `{field}`");
    let body_min_rate = raw
        .body_min_rate
        .as_ref()
        .and_then(|v| errors.whole(v, &what("body_min_rate"), None, true))
        .unwrap_or(d.body_min_rate);
    let max_connections_per_client = raw
        .max_connections_per_client
        .as_ref()
        .and_then(|v| errors.whole(v, &what("max_connections_per_client"), None, false))
        .unwrap_or(d.max_connections_per_client);
    let max_header_bytes = match raw
        .max_header_bytes
        .as_ref()
        .and_then(|v| errors.whole::<usize>(v, &what("max_header_bytes"), None, false))
    {
        Some(n) if n < MIN_HEADER_BYTES => {
            // hyper's parser cannot work with less, and would panic at start.
            errors.at(
                raw.max_header_bytes.as_ref().map(Spanned::span),
                None,
                format!(
                    "`[server]`: `max_header_bytes` must be at least {MIN_HEADER_BYTES} (8 KiB, the HTTP parser's floor), not {n}"
                ),
            );
            d.max_header_bytes
        }
        Some(n) => n,
        None => d.max_header_bytes,
    };
    let http2_max_streams = raw
        .http2_max_streams
        .as_ref()
        .and_then(|v| errors.whole(v, &what("http2_max_streams"), None, false))
        .unwrap_or(d.http2_max_streams);
    Bounds {
        header_read_timeout,
        idle_timeout,
        send_timeout,
        max_header_bytes,
        api_body_timeout,
        body_idle_timeout,
        body_min_rate,
        body_rate_grace,
        upstream_connect_timeout,
        upstream_response_timeout,
        upstream_idle_timeout,
        upstream_pool_idle,
        max_connections_per_client,
        http2_max_streams,
        upgraded_idle_timeout,
        upgraded_max_duration,
    }
}

/// `http://host:port` (HTTP/1.1) or `h2c://host:port` (HTTP/2 without TLS, by prior
/// knowledge: a gRPC service): the kinds of upstream the gateway speaks to.
fn parse_upstream(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let Some((scheme, authority)) = text
        .strip_prefix("http://")
        .map(|a| ("http", a))
        .or_else(|| text.strip_prefix("h2c://").map(|a| ("h2c", a)))
    else {
        let hint = if text.starts_with("https://") {
            " (TLS to the upstream is not supported yet)"
        } else {
            ""
        };
        return Err(format!(
            "must start with `http://` (HTTP/1.1) or `h2c://` (HTTP/2, such as a gRPC \
             service){hint}, not `{text}`"
        ));
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', ' ', '@']) {
        return Err(format!(
            "must be `{scheme}://host[:port]`, without a path, query or credentials, not `{text}`"
        ));
    }
    Ok(text.to_owned())
}
