//! Reading a config file: TOML into the raw model, then each section and rule validated,
//! every error collected in file order.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::calls::call_bounds;
use super::error::Errors;
use super::raw::RawConfig;
use super::rule::rule;
use super::server::server_settings;
use super::store::store_settings;
use super::{
    Config, ConfigError, ConfigErrors, KeySources, Regions, Rule, ServerSettings, StoreSettings,
};
use crate::hint::nearest;
use crate::ip::{ClientIpHeader, TrustedProxies};

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
/// Besides `text`, it reads what the admin listener's token is taken from: the file
/// `[server] admin_token_file` names, or the `RATEWARDEN_ADMIN_TOKEN` environment variable
/// (`serve`, `check-config` and a reload must agree on it, so all of them read it here).
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
            // toml names no place for its recursion limit (reached through dotted keys and
            // table headers of a hundred parts): point at the key with the most parts.
            let span = e.span().or_else(|| Some(deepest_key(text)));
            errors.at(span, None, message);
            return Err(ConfigErrors(errors.found));
        }
    };
    let store = raw.store.map_or_else(StoreSettings::default, |raw| {
        store_settings(raw, "`[store]`", &mut errors)
    });
    let regions = raw
        .regions
        .and_then(|raw| super::regions::regions(raw, &mut errors));
    let (server, proxies, header) = match raw.server {
        Some(mut raw) => {
            let proxies = std::mem::take(&mut raw.trusted_proxies);
            let header = raw.client_ip_header.take();
            (server_settings(raw, &mut errors), proxies, header)
        }
        None => (ServerSettings::default(), Vec::new(), None),
    };
    let mut server = server;
    if let Some(raw) = raw.envoy {
        server.envoy = call_bounds(raw, &mut errors);
    }
    if let Some(raw) = raw.tls {
        let on = [
            true,
            server.api.is_some(),
            server.admin.is_some(),
            server.grpc.is_some(),
        ];
        server.tls = super::tls::tls_listeners(raw, on, &mut errors);
    }
    let trusted_proxies =
        trusted_proxies(proxies, &mut errors).with_header(client_ip_header(header, &mut errors));
    let rules = rules(raw.limit, &store, regions.as_ref(), &mut errors);
    let keys = raw.keys.map_or_else(KeySources::default, |k| KeySources {
        api_key_header: k.api_key_header.map(|h| h.trim().to_ascii_lowercase()),
        tenant_header: k.tenant_header.map_or_else(
            || KeySources::default().tenant_header,
            |h| h.trim().to_ascii_lowercase(),
        ),
    });
    if !errors.found.is_empty() {
        // In file order, as an editor walks them.
        errors
            .found
            .sort_by_key(|e| e.position.unwrap_or((usize::MAX, 0)));
        return Err(ConfigErrors(errors.found));
    }
    Ok(Config {
        trusted_proxies,
        keys,
        store,
        regions,
        server,
        rules,
    })
}

/// `[server] trusted_proxies`, each checked on its own so that an error points at it.
fn trusted_proxies(proxies: Vec<Spanned<String>>, errors: &mut Errors<'_>) -> TrustedProxies {
    let mut trusted = Vec::new();
    for proxy in proxies {
        match TrustedProxies::parse([proxy.get_ref().as_str()]) {
            Ok(_) => trusted.push(proxy.into_inner()),
            Err(e) => errors.at(Some(proxy.span()), None, format!("`trusted_proxies`: {e}")),
        }
    }
    TrustedProxies::parse(trusted.iter().map(String::as_str)).unwrap_or_default()
}

/// `[server] client_ip_header`: `X-Forwarded-For` when not given.
fn client_ip_header(header: Option<Spanned<String>>, errors: &mut Errors<'_>) -> ClientIpHeader {
    let Some(header) = header else {
        return ClientIpHeader::default();
    };
    ClientIpHeader::parse(header.get_ref()).unwrap_or_else(|e| {
        errors.at(
            Some(header.span()),
            None,
            format!("`client_ip_header`: {e}"),
        );
        ClientIpHeader::default()
    })
}

/// The `[[limit]]` tables, in file order, names unique, each log fitting the store.
fn rules(
    tables: Vec<Spanned<super::raw::RawLimit>>,
    store: &StoreSettings,
    regions: Option<&Regions>,
    errors: &mut Errors<'_>,
) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for raw in tables {
        let span = raw.span();
        let name_span = raw.get_ref().name.as_ref().map(Spanned::span);
        let limit_span = raw
            .get_ref()
            .limit
            .as_ref()
            .map_or(span.clone(), Spanned::span);
        if let Some(rule) = rule(raw.into_inner(), span, store, regions, errors) {
            if rules.iter().any(|r| r.name == rule.name) {
                let message = "the name is used by another limit; names must be unique";
                errors.at(name_span, Some(&rule.name), message.to_owned());
            }
            if let Some(message) = log_too_large(&rule, store) {
                errors.at(Some(limit_span), Some(&rule.name), message);
            }
            rules.push(rule);
        }
    }
    rules
}

/// Why `rule`'s sliding log cannot be kept in the in-memory store `store` bounds (the main
/// store, or the in-process one its fallback and guards use, whatever the kind): one key's
/// full log would not fit the share of `[store] max_bytes` its shard has, so the store
/// would drop it as it filled, and the log would forget what it admitted.
fn log_too_large(rule: &Rule, store: &StoreSettings) -> Option<String> {
    let config = store.memory_config(ratewarden_memory::WhenFull::default());
    let share = config.shard_bytes();
    [Some(&rule.limit), rule.local.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|limit| {
            let ratewarden_core::Limit::SlidingLog(log) = limit else {
                return None;
            };
            let needs = ratewarden_memory::SLOT_BYTES + log.largest_heap_bytes();
            (needs > share).then(|| {
                format!(
                    "a sliding log of `limit` {} keeps up to {} entries a key ({needs} bytes), more \
                     than a store shard holds: `[store] max_bytes` ({}) over {} shards is {share} \
                     bytes each; raise `max_bytes` to at least {}, lower `limit`, or use \
                     `sliding-window`, which keeps two counts a key",
                    ratewarden_core::Algorithm::limit(log),
                    ratewarden_core::Algorithm::limit(log),
                    store.max_bytes,
                    config.shard_count(),
                    needs.saturating_mul(config.shard_count()),
                )
            })
        })
}

/// The span of the start of the key (or table header) with the most dotted parts, outside
/// quotes; the start of the file when there is none.
fn deepest_key(text: &str) -> Range<usize> {
    let mut best = (0, 0..0);
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset + (line.len() - line.trim_start().len());
        offset += line.len();
        let mut quote = None;
        let mut parts = 1;
        for c in line.trim_start().chars() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '.') => parts += 1,
                (None, '=' | '#' | ']') => break,
                _ => {}
            }
        }
        if parts > best.0 {
            best = (parts, start..start);
        }
    }
    best.1
}
