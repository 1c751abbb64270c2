//! One `[[limit]]` table validated into a [`Rule`]: its name, match, mode, cost and failure
//! policy here; its algorithm in `limit.rs` and its key in `key.rs`.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::adaptive::{adaptive, ADAPTIVE_CONCURRENCY};
use super::error::Errors;
use super::key::key;
use super::limit::{divided, limit};
use super::raw::{RawCost, RawLimit, RawMatch};
use super::{
    BodyTerm, Cost, KeyPart, Match, Mode, OnStoreFailure, Regions, Rule, SettleFrom, StoreKind,
    StoreSettings,
};

/// How long a reservation the gateway settles from the answer (`settle_from`) waits for
/// it when the rule gives no `settle`: long enough for a long streamed answer. A stream
/// that outlasts it settles at its estimate.
pub const SETTLE_FROM_WITHIN: Duration = Duration::from_secs(600);

/// The rule of one `[[limit]]` table at `span`, `None` when anything was wrong with it (all
/// of which is recorded).
pub(super) fn rule(
    raw: RawLimit,
    span: Range<usize>,
    store: &StoreSettings,
    regions: Option<&Regions>,
    errors: &mut Errors<'_>,
) -> Option<Rule> {
    let failures = errors.found.len();
    let name = name(&raw, &span, errors)?;
    // A name with control characters is refused, but the rule's other errors still name it,
    // escaped, so that none of them writes those characters into a terminal or a log.
    let shown = name.escape_debug().to_string();
    let rule = Some(shown.as_str());

    let is_adaptive = raw
        .algorithm
        .as_ref()
        .is_some_and(|a| a.get_ref().trim() == ADAPTIVE_CONCURRENCY);
    let (limit, mut adaptive) = if is_adaptive {
        adaptive(&raw, &span, rule, errors)
    } else {
        if let Some(q) = &raw.queue {
            super::queue::stray(q.span(), rule, errors);
        }
        for (field, given) in [
            ("strategy", raw.strategy.is_some()),
            ("adaptive", raw.adaptive.is_some()),
        ] {
            if given {
                let message =
                    format!("`{field}` applies only to `algorithm = \"{ADAPTIVE_CONCURRENCY}\"`");
                errors.at(Some(span.clone()), rule, message);
            }
        }
        (limit(&raw, &span, rule, errors), None)
    };
    let (key, when_key_missing) = key(&raw, &span, rule, errors);
    if let (Some(raw_queue), true) = (&raw.queue, is_adaptive) {
        // The queue's `ip` groups addresses as the rule's own key does.
        let grouping = key
            .iter()
            .find_map(|p| match p {
                KeyPart::Ip(g) => Some(*g),
                _ => None,
            })
            .unwrap_or_default();
        let queue = super::queue::queue(raw_queue, grouping, rule, errors);
        if let Some(a) = adaptive.as_mut() {
            a.queue = queue;
        }
    }
    let cost = cost(&raw, rule, errors);
    let settle_within = errors.duration(raw.settle.as_ref(), "`settle`", rule, false);
    let settle_from = settle_from(&raw, rule, errors);
    let always_charge = always_charge(&raw, rule, errors);
    let openai_headers = raw.openai_headers.as_ref().and_then(|given| {
        let family = ratewarden_http::OpenAiFamily::parse(given.get_ref().trim());
        if family.is_none() {
            let message = format!(
                "`openai_headers` is `requests` or `tokens` (which of OpenAI's x-ratelimit-* families), not `{}`",
                given.get_ref().escape_debug()
            );
            errors.at(Some(given.span()), rule, message);
        }
        family
    });
    let settle_within = match (&settle_from, settle_within) {
        (Some(_), None) if raw.settle.is_none() => Some(SETTLE_FROM_WITHIN),
        (_, within) => within,
    };
    let prefetch = prefetch(&raw, rule, errors);
    let global = scope(&raw, regions, rule, errors);
    // A global rule is an allowance taken from the home store: its own `prefetch`, if it
    // gives one, says how far ahead.
    let prefetch = match global {
        Some(horizon) => Some(prefetch.unwrap_or(horizon)),
        None => prefetch,
    };
    let mode = mode(&raw, rule, errors);
    let on_store_failure = on_store_failure(&raw, rule, errors);
    // Decided by one store call each, which can wait: not an allowance taken ahead, not
    // an adaptive rule (decided here), not a concurrency limit's permits.
    let decided_in_store = prefetch.is_none()
        && !is_adaptive
        && !matches!(limit, Some(ratewarden_core::Limit::Concurrency(_)));
    let wait_for_replicas = wait_for_replicas(
        &raw,
        &on_store_failure,
        decided_in_store,
        store,
        rule,
        errors,
    );
    if let Some(at) = raw.matches.as_ref().and_then(stray_header_value) {
        let message = "`match.header_value` needs `match.header`, the header whose value it is";
        errors.at(Some(at), rule, message.to_owned());
    }
    let bucket_given = raw.matches.as_ref().is_some_and(|m| m.bucket.is_some());
    let bucket = super::bucket::bucket(&raw, rule, errors);
    if let (Some(l), Some(at), false) = (
        &limit,
        raw.matches.as_ref().and_then(|m| m.bucket.as_ref()),
        is_adaptive,
    ) {
        super::bucket::no_rate(l, at.span(), rule, errors);
    }
    if !bucket_given && key.contains(&KeyPart::Bucket) {
        let at = raw
            .key
            .iter()
            .find(|p| p.get_ref().trim() == "bucket")
            .map_or(span.clone(), Spanned::span);
        let message =
            "the `bucket` key part needs `match.bucket`: only Envoy quota buckets carry one";
        errors.at(Some(at), rule, message.to_owned());
    }
    let mut matches = raw.matches.map(match_of).unwrap_or_default();
    matches.bucket = bucket;
    let mut refuse = |message: &str| errors.at(Some(span.clone()), rule, message.to_owned());
    if matches.domain.is_none() && !matches.descriptor.is_empty() {
        refuse("`match.descriptor` needs `match.domain`: descriptors come over Envoy's protocol, for a domain");
    }
    if matches.domain.as_deref() == Some("") {
        refuse("`match.domain` must not be empty");
    }
    if matches.domain.is_some() && raw.when_key_missing.is_some() {
        // Descriptors carry every entry a rule keys on, or do not match it.
        refuse("`when_key_missing` applies to HTTP rules, not to rules of an Envoy `match.domain`");
    }
    if matches.domain.is_none() && key.contains(&KeyPart::Descriptor) {
        refuse("the `descriptor` key part needs `match.domain` (and usually `match.descriptor`)");
    }
    if let Some(problem) = path_problem(&matches) {
        refuse(&problem);
    }
    if let Some(problem) = host_problem(&matches) {
        refuse(&problem);
    }

    if errors.found.len() > failures {
        return None;
    }
    let limit = limit?;
    let local = match on_store_failure {
        OnStoreFailure::Local { divide_by } => Some(divided(&limit, divide_by)),
        _ => None,
    };
    Some(Rule {
        name,
        matches,
        key,
        when_key_missing,
        limit,
        cost,
        settle_within,
        settle_from,
        local,
        mode,
        on_store_failure,
        wait_for_replicas,
        sensitive: raw.sensitive.unwrap_or(false),
        always_charge,
        openai_headers,
        local_first: raw.local_first.unwrap_or(false),
        prefetch,
        global: global.is_some(),
        adaptive,
        rendered: Default::default(),
    })
}

/// The rule's name: present, not blank, and free of control characters (it is written into
/// logs, metrics labels and error messages).
fn name(raw: &RawLimit, span: &Range<usize>, errors: &mut Errors<'_>) -> Option<String> {
    let Some(given) = &raw.name else {
        errors.at(
            Some(span.clone()),
            None,
            "a `[[limit]]` needs a `name`".to_owned(),
        );
        return None;
    };
    let name = given.get_ref().trim();
    if name.is_empty() {
        errors.at(
            Some(given.span()),
            None,
            "`name` must not be empty".to_owned(),
        );
        return None;
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        let message = format!(
            "`name` must not hold control characters, and `{}` holds U+{:04X}",
            name.escape_debug(),
            u32::from(c)
        );
        errors.at(Some(given.span()), None, message);
    }
    Some(name.to_owned())
}

fn cost(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> Cost {
    let claimed = raw
        .cost
        .as_ref()
        .is_some_and(|c| matches!(c.get_ref(), RawCost::Header(_)));
    if let (Some(max), false) = (&raw.max_cost, claimed) {
        let message = "`max_cost` applies only to a cost read from the request (`cost = \"header:NAME\"` or an estimate from its body)";
        errors.at(Some(max.span()), rule, message.to_owned());
    }
    let Some(c) = &raw.cost else {
        return Cost::Fixed(1);
    };
    let max_cost = |errors: &mut Errors<'_>, what: &str| {
        let max = raw
            .max_cost
            .as_ref()
            .and_then(|m| errors.whole(m, "`max_cost`", rule, false));
        if raw.max_cost.is_none() {
            let message = format!("{what} needs `max_cost`, the most one request may claim");
            errors.at(Some(c.span()), rule, message);
        }
        max.unwrap_or(1)
    };
    match c.get_ref() {
        RawCost::Fixed(n) => match u64::try_from(*n) {
            Ok(n) => Cost::Fixed(n),
            Err(_) => {
                let message = format!("`cost` cannot be negative ({n})");
                errors.at(Some(c.span()), rule, message);
                Cost::Fixed(1)
            }
        },
        RawCost::Header(text) => match text.trim().strip_prefix("header:") {
            Some(name) if !name.trim().is_empty() => Cost::Header {
                name: name.trim().to_ascii_lowercase(),
                max: max_cost(errors, "a cost read from a header"),
            },
            _ => match body_terms(text) {
                Ok(terms) => Cost::Body {
                    terms,
                    max: max_cost(errors, "an estimate read from the body"),
                },
                Err(why) => {
                    let message = format!("`cost` is a whole number, \"header:NAME\", or an estimate from the JSON body (\"json:max_tokens + bytes/4\"), not `{text}`: {why}");
                    errors.at(Some(c.span()), rule, message);
                    Cost::Fixed(1)
                }
            },
        },
    }
}

/// The terms of an estimate from the body: `json:PATH`, `bytes`, `bytes/N` and whole
/// numbers, joined by `+`; at least one of them read from the body.
fn body_terms(text: &str) -> Result<Vec<BodyTerm>, String> {
    let mut terms = Vec::new();
    for term in text.split('+') {
        let term = term.trim();
        let parsed = if let Some(path) = term.strip_prefix("json:") {
            BodyTerm::Field(
                path.parse()
                    .map_err(|e: crate::usage::UsagePathError| e.why.to_owned())?,
            )
        } else if term == "bytes" {
            BodyTerm::Bytes(1)
        } else if let Some(n) = term.strip_prefix("bytes/") {
            match n.trim().parse::<u64>() {
                Ok(n) if n > 0 => BodyTerm::Bytes(n),
                _ => return Err(format!("`{term}` divides by a whole number above 0")),
            }
        } else if let Ok(n) = term.parse::<u64>() {
            BodyTerm::Fixed(n)
        } else {
            return Err(format!(
                "`{term}` is not `json:PATH`, `bytes/N` or a whole number"
            ));
        };
        terms.push(parsed);
    }
    if terms.len() > crate::usage::MAX_TERMS {
        return Err(format!("more than {} terms", crate::usage::MAX_TERMS));
    }
    if terms.iter().all(|t| matches!(t, BodyTerm::Fixed(_))) {
        return Err("nothing in it is read from the body".to_owned());
    }
    Ok(terms)
}

/// `always_charge`: on an algorithm whose units are spent (not held, queued or learnt).
fn always_charge(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> bool {
    let Some(given) = &raw.always_charge else {
        return false;
    };
    let algorithm = raw.algorithm.as_ref().map_or("", |a| a.get_ref().trim());
    if *given.get_ref()
        && matches!(
            algorithm,
            "concurrency" | "leaky-queue" | ADAPTIVE_CONCURRENCY
        )
    {
        let message = format!(
            "`always_charge` does not apply to `{algorithm}`: its units are held or queued per request, not spent"
        );
        errors.at(Some(given.span()), rule, message);
        return false;
    }
    *given.get_ref()
}

/// `settle_from`: `header:NAME`, or a usage path (`usage.total_tokens`, a sum of such);
/// not on a rule of Envoy's protocol (no answer comes back through it) nor on an adaptive
/// one (it counts requests in flight, not a cost).
fn settle_from(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> Option<SettleFrom> {
    let given = raw.settle_from.as_ref()?;
    let text = given.get_ref().trim();
    let from = match text.strip_prefix("header:") {
        Some(name)
            if !name.trim().is_empty() && http::HeaderName::try_from(name.trim()).is_ok() =>
        {
            SettleFrom::Header(name.trim().to_ascii_lowercase())
        }
        Some(name) => {
            let message = format!(
                "`settle_from`: `{}` is not a header name",
                name.escape_debug()
            );
            errors.at(Some(given.span()), rule, message);
            return None;
        }
        None => match text.parse::<crate::usage::UsagePath>() {
            Ok(path) => SettleFrom::Usage(path),
            Err(e) => {
                let message = format!("`settle_from`: {e}, or \"header:NAME\"");
                errors.at(Some(given.span()), rule, message);
                return None;
            }
        },
    };
    let domain = raw.matches.as_ref().is_some_and(|m| m.domain.is_some());
    let adaptive = raw
        .algorithm
        .as_ref()
        .is_some_and(|a| a.get_ref().trim() == ADAPTIVE_CONCURRENCY);
    let refused = if domain {
        Some("a rule of an Envoy `match.domain` sees no answer; Envoy settles with `hits_addend`")
    } else if adaptive {
        Some("an adaptive rule counts requests in flight, not a cost")
    } else {
        None
    };
    if let Some(why) = refused {
        errors.at(
            Some(given.span()),
            rule,
            format!("`settle_from` does not apply here: {why}"),
        );
        return None;
    }
    Some(from)
}

/// `prefetch`: a horizon longer than zero, on an algorithm whose units can be taken ahead
/// and given back exactly (the buckets, GCRA, the windows and quotas), and not beside
/// `local_first`.
fn prefetch(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> Option<Duration> {
    let given = raw.prefetch.as_ref()?;
    let horizon = errors.duration(Some(given), "`prefetch`", rule, false)?;
    let algorithm = raw.algorithm.as_ref().map_or("", |a| a.get_ref().trim());
    let refused = match algorithm {
        "sliding-log" => Some("its entries are times, and units taken ahead would be stamped when taken, not when spent"),
        "concurrency" | "leaky-queue" | ADAPTIVE_CONCURRENCY => Some("its units are held and released (or queued) per request, not spent"),
        _ => None,
    };
    if let Some(why) = refused {
        let message = format!("`prefetch` does not apply to `{algorithm}`: {why}");
        errors.at(Some(given.span()), rule, message);
        return None;
    }
    if raw.local_first == Some(true) {
        let message = "`prefetch` and `local_first` are both given: a prefetched allowance already decides in this process";
        errors.at(Some(given.span()), rule, message.to_owned());
        return None;
    }
    Some(horizon)
}

/// `scope`: `"region"` (the default: counted in `[store]`) or `"global"` (counted for
/// every region in `[regions.home]`, as an allowance taken ahead): the horizon of a global
/// rule's allowance, `None` for a regional rule.
fn scope(
    raw: &RawLimit,
    regions: Option<&Regions>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<Duration> {
    let given = raw.scope.as_ref()?;
    match given.get_ref().trim() {
        "region" => return None,
        "global" => {}
        other => {
            let message = format!(
                "`scope` is `region` (counted in `[store]`) or `global` (counted across regions in `[regions.home]`), not `{}`",
                other.escape_debug()
            );
            errors.at(Some(given.span()), rule, message);
            return None;
        }
    }
    let Some(regions) = regions else {
        let message = "`scope = \"global\"` needs a `[regions]` section: this server's region and the home store (`[regions.home]`) that counts the rule for every region";
        errors.at(Some(given.span()), rule, message.to_owned());
        return None;
    };
    let algorithm = raw.algorithm.as_ref().map_or("", |a| a.get_ref().trim());
    let refused = match algorithm {
        "sliding-log" => Some("its entries are times, and units taken ahead would be stamped when taken, not when spent"),
        "concurrency" | "leaky-queue" | ADAPTIVE_CONCURRENCY => Some("its units are held and released (or queued) per request, not spent"),
        _ => None,
    };
    if let Some(why) = refused {
        let message = format!("`scope = \"global\"` does not apply to `{algorithm}`: a global rule's units are taken ahead from the home store, and {why}");
        errors.at(Some(given.span()), rule, message);
        return None;
    }
    if raw.local_first == Some(true) {
        let message = "`scope = \"global\"` and `local_first` are both given: a global rule already decides in this process, from units taken ahead";
        errors.at(Some(given.span()), rule, message.to_owned());
        return None;
    }
    let corrected = [
        ("settle", raw.settle.is_some()),
        ("settle_from", raw.settle_from.is_some()),
        (
            "always_charge",
            raw.always_charge.as_ref().is_some_and(|a| *a.get_ref()),
        ),
    ];
    if let Some((field, _)) = corrected.iter().find(|(_, given)| *given) {
        let message = format!("`scope = \"global\"` and `{field}` are both given: a global rule charges each request from units taken ahead, and correcting a charge afterwards is not offered across regions (a regional rule beside it can settle)");
        errors.at(Some(given.span()), rule, message);
        return None;
    }
    Some(regions.horizon)
}

fn mode(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> Mode {
    match (&raw.mode, &raw.rollout) {
        (Some(_), Some(r)) => {
            // `rollout` decides per key between enforce and shadow: beside it, a `mode`
            // (say `shadow`, meant to keep the rule harmless) would silently not hold.
            let message = "`mode` and `rollout` are both given: `rollout` enforces for a share of keys and shadows the rest, so keep one";
            errors.at(Some(r.span()), rule, message.to_owned());
            Mode::Enforce
        }
        (None, Some(r)) => {
            let text = r.get_ref().trim();
            let value = text
                .strip_suffix('%')
                .map(str::trim)
                .and_then(|n| ratewarden_core::parse_decimal(n, 100).ok());
            match value.and_then(|bp| u32::try_from(bp).ok()) {
                Some(basis_points) if basis_points <= 10_000 => Mode::Rollout { basis_points },
                _ => {
                    let message = format!(
                        "`rollout` is a percentage from 0% to 100%, like \"10%\", not `{text}`"
                    );
                    errors.at(Some(r.span()), rule, message);
                    Mode::Enforce
                }
            }
        }
        (None, None) => Mode::Enforce,
        (Some(m), None) => match m.get_ref().as_str() {
            "enforce" => Mode::Enforce,
            "shadow" => Mode::Shadow,
            other => {
                errors.at(Some(m.span()), rule, format!("`mode` is `enforce` or `shadow`, not `{other}` (for a share of keys, set `rollout = \"10%\"`)"));
                Mode::Enforce
            }
        },
    }
}

fn on_store_failure(raw: &RawLimit, rule: Option<&str>, errors: &mut Errors<'_>) -> OnStoreFailure {
    let local = raw
        .on_store_failure
        .as_ref()
        .is_some_and(|f| f.get_ref() == "local");
    if let (Some(divide_by), false) = (&raw.local_divide_by, local) {
        let message = "`local_divide_by` applies only to `on_store_failure = \"local\"`";
        errors.at(Some(divide_by.span()), rule, message.to_owned());
    }
    let Some(given) = &raw.on_store_failure else {
        return OnStoreFailure::Open;
    };
    match given.get_ref().as_str() {
        "open" => OnStoreFailure::Open,
        "closed" => OnStoreFailure::Closed,
        "local" => {
            // The number of instances sharing the limit.
            let divide_by = raw
                .local_divide_by
                .as_ref()
                .map_or(Some(1), |d: &Spanned<i64>| {
                    errors.whole(d, "`local_divide_by`", rule, false)
                });
            OnStoreFailure::Local {
                divide_by: divide_by.unwrap_or(1),
            }
        }
        other => {
            let message =
                format!("`on_store_failure` is `open`, `closed` or `local`, not `{other}`");
            errors.at(Some(given.span()), rule, message);
            OnStoreFailure::Open
        }
    }
}

/// The replicas each of the rule's decisions waits for: `wait_for_replicas` as given, on a
/// store that has replicas to wait for and a rule whose decisions are single calls; else
/// the default. Behind Sentinel a `closed` rule waits for one: it guards what must not be
/// admitted twice (a login, a payment), and a decision the master acknowledged but never
/// sent its replica would be forgotten by the failover that promotes that replica.
fn wait_for_replicas(
    raw: &RawLimit,
    on_store_failure: &OnStoreFailure,
    decided_in_store: bool,
    store: &StoreSettings,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> u32 {
    let default = match (&store.kind, on_store_failure) {
        _ if store.wait_for_replicas > 0 => store.wait_for_replicas,
        (StoreKind::RedisSentinel { .. }, OnStoreFailure::Closed) if decided_in_store => 1,
        _ => 0,
    };
    let Some(given) = &raw.wait_for_replicas else {
        return default;
    };
    let Some(wanted) = errors.whole::<u32>(given, "`wait_for_replicas`", rule, true) else {
        return default;
    };
    let refused = match &store.kind {
        StoreKind::Memory => Some(
            "applies to a Redis store (`[store] kind = \"redis\"` or `\"redis-sentinel\"`): \
             the in-memory store has no replicas",
        ),
        StoreKind::RedisCluster { .. } => Some(
            "applies to `kind = \"redis\"` and `kind = \"redis-sentinel\"`: `WAIT` answers \
             for the one server it is sent to, and a Cluster's decisions span masters",
        ),
        _ if wanted > 0 && !decided_in_store => Some(
            "applies to rules decided by one store call each: not to a `prefetch` rule \
             (its allowance is taken ahead and spent here), an adaptive rule (decided in \
             this process) or a concurrency limit (its permits are held and released)",
        ),
        _ if wanted > 0 && store.wait_for_replicas > wanted => {
            Some("is below `[store] wait_for_replicas`, which every decision waits for")
        }
        _ => None,
    };
    if let Some(why) = refused {
        errors.at(
            Some(given.span()),
            rule,
            format!("`wait_for_replicas` {why}"),
        );
        return default;
    }
    wanted.max(store.wait_for_replicas)
}

/// What is wrong with a `match.path`, if anything: requests are matched on their
/// normalized path (`crate::path::normalize`: `//`, dot segments and needless
/// percent-encoding removed), so a path that normalization changes could never match.
pub(super) fn path_problem(m: &Match) -> Option<String> {
    let path = m.path.as_deref()?;
    let (base, star) = match path.strip_suffix('*') {
        Some(base) => (base, "*"),
        None => (path, ""),
    };
    if base.is_empty() && !star.is_empty() {
        // `*`: every path.
        return None;
    }
    match crate::path::normalize(base) {
        Err(e) => Some(format!("`match.path = {path:?}` can never match: {}", e.reason)),
        Ok(normal) if normal != base => Some(format!(
            "`match.path = {path:?}` can never match: requests are matched on their normalized path, where it is `{normal}{star}`; write that"
        )),
        Ok(_) => None,
    }
}

/// Where a `header_value` stands without the `header` it belongs to: alone it would be
/// dropped, and the match would take every request.
pub(super) fn stray_header_value(m: &RawMatch) -> Option<Range<usize>> {
    match (&m.header, &m.header_value) {
        (None, Some(value)) => Some(value.span()),
        _ => None,
    }
}

/// What is wrong with a `match.host`, if anything: requests are matched on their host
/// without case, one trailing dot and the port (see [`crate::host`]), so a host with a
/// port, or that is no host, could never match.
pub(super) fn host_problem(m: &Match) -> Option<String> {
    crate::host::rule_host(m.host.as_deref()?).err()
}

/// A `match` table (of a rule, or of `[server] critical`).
pub(super) fn match_of(m: RawMatch) -> Match {
    Match {
        method: m.method.map(|s| s.trim().to_ascii_uppercase()),
        path: m.path,
        path_exact: m.path_exact,
        // Its one spelling when it is a host; as written otherwise, for `host_problem`.
        host: m
            .host
            .map(|h| crate::host::rule_host(&h).unwrap_or_else(|_| h.trim().to_owned())),
        header: m.header.map(|h| {
            (
                h.trim().to_ascii_lowercase(),
                m.header_value.map(Spanned::into_inner),
            )
        }),
        domain: m.domain.map(|d| d.trim().to_owned()),
        // Read with the rule's `weights` (`bucket.rs`): a route never takes buckets.
        bucket: None,
        // `client_id` or `path=/api/*,client_id`: entries in order, values optional.
        descriptor: m
            .descriptor
            .map(|d| {
                d.split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(|e| match e.split_once('=') {
                        Some((k, v)) => (k.trim().to_owned(), Some(v.trim().to_owned())),
                        None => (e.to_owned(), None),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}
