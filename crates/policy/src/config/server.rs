//! The `[server]` section: listeners, the upstream, the response contract, load shedding.

use std::net::SocketAddr;

use toml::Spanned;

use super::error::Errors;
use super::raw::RawServer;
use super::rule::match_of;
use super::ServerSettings;

pub(super) fn server_settings(raw: RawServer, errors: &mut Errors<'_>) -> ServerSettings {
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
    if critical_reserve >= max_in_flight {
        errors.at(
            raw.critical_reserve.as_ref().map(Spanned::span),
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
