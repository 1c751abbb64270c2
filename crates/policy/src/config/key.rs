//! A rule's key, part by part (`key = ["ip", "header:x-api-key"]`).

use std::ops::Range;

use toml::Spanned;

use super::error::Errors;
use super::raw::RawLimit;
use super::{KeyPart, WhenKeyMissing};
use crate::hint::did_you_mean;
use crate::ip::IpGrouping;

/// The parts of the rule's key, and what the rule does without one of them; the wrong
/// ones are recorded and left out.
pub(super) fn key(
    raw: &RawLimit,
    span: &Range<usize>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> (Vec<KeyPart>, WhenKeyMissing) {
    let grouping = grouping(raw, rule, errors);
    let when_missing = when_key_missing(raw, grouping, rule, errors);
    if raw.key.is_empty() {
        errors.at(Some(span.clone()), rule, "`key` is missing: list its parts, such as `[\"ip\"]`, `[\"header:x-api-key\"]` or `[\"global\"]`".to_owned());
    }
    // The prefixes group the `ip` part's addresses; on a rule without one they would be
    // ignored.
    if !raw.key.iter().any(|p| p.get_ref().trim() == "ip") {
        for (field, given) in [
            ("ipv4_prefix", &raw.ipv4_prefix),
            ("ipv6_prefix", &raw.ipv6_prefix),
        ] {
            if let Some(at) = given {
                let message = format!("`{field}` applies only to a rule keyed on `ip`");
                errors.at(Some(at.span()), rule, message);
            }
        }
    }
    let mut key = Vec::new();
    for part in &raw.key {
        let text = part.get_ref().trim();
        match key_part(text, grouping) {
            Some(p) => key.push(p),
            None => {
                let hint = did_you_mean(text, ["ip", "api_key", "tenant", "route", "global"]);
                errors.at(Some(part.span()), rule, format!(
                    "unknown key part `{text}`: use ip, header:NAME, api_key, tenant, route, global, descriptor, bucket, json:PATH or literal:TEXT{hint}"
                ));
            }
        }
    }
    (key, when_missing)
}

/// `when_key_missing`: `client` (the default: the client's address, grouped as the rule's
/// `ipv4_prefix` and `ipv6_prefix` say, stands in for a missing part), `skip` or `refuse`.
fn when_key_missing(
    raw: &RawLimit,
    grouping: IpGrouping,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> WhenKeyMissing {
    let Some(given) = &raw.when_key_missing else {
        return WhenKeyMissing::Client(grouping);
    };
    let text = given.get_ref().trim();
    match text {
        "client" => WhenKeyMissing::Client(grouping),
        "skip" => WhenKeyMissing::Skip,
        "refuse" => WhenKeyMissing::Refuse,
        _ => {
            let hint = did_you_mean(text, ["client", "skip", "refuse"]);
            errors.at(
                Some(given.span()),
                rule,
                format!("`when_key_missing` is `client`, `skip` or `refuse`, not `{text}`{hint}"),
            );
            WhenKeyMissing::Client(grouping)
        }
    }
}

/// One key part as written (`ip`, `header:x-api-key`), `None` when it is no part.
pub(super) fn key_part(text: &str, grouping: IpGrouping) -> Option<KeyPart> {
    match text {
        "ip" => Some(KeyPart::Ip(grouping)),
        "api_key" => Some(KeyPart::ApiKey),
        "tenant" => Some(KeyPart::Tenant),
        "route" => Some(KeyPart::Route),
        "global" => Some(KeyPart::Global),
        "descriptor" => Some(KeyPart::Descriptor),
        "bucket" => Some(KeyPart::Bucket),
        "client_cert" => Some(KeyPart::ClientCert),
        _ => match text.split_once(':') {
            Some(("header", name)) if !name.trim().is_empty() => {
                Some(KeyPart::Header(name.trim().to_ascii_lowercase()))
            }
            Some(("literal", value)) => Some(KeyPart::Literal(value.to_owned())),
            // One field: a sum names no one value.
            Some(("json", path)) if !path.contains('+') => path.parse().ok().map(KeyPart::Json),
            _ => None,
        },
    }
}

/// How the `ip` part groups addresses (`ipv4_prefix`, `ipv6_prefix`).
pub(super) fn grouping(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> IpGrouping {
    let mut prefix = |v: &Option<Spanned<i64>>, default: u8, most: u8| -> u8 {
        let Some(p) = v else { return default };
        match u8::try_from(*p.get_ref()) {
            Ok(n) if n <= most => n,
            _ => {
                let message = format!("a prefix length between 0 and {most}, not {}", p.get_ref());
                errors.at(Some(p.span()), rule, message);
                default
            }
        }
    };
    let v4 = prefix(&raw.ipv4_prefix, 32, 32);
    let v6 = prefix(&raw.ipv6_prefix, 64, 128);
    IpGrouping::new(v4, v6).unwrap_or_default()
}
