//! envoyproxy/ratelimit configuration files, loaded as they are, and descriptors resolved to
//! limits exactly as envoyproxy/ratelimit's `GetLimit` does.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: client_id              # per-client default: one counter per value
//!     rate_limit: {unit: minute, requests_per_unit: 600, name: per_client}
//!   - key: client_id
//!     value: partner-a            # an exact value beats the bare key
//!     rate_limit: {unit: minute, requests_per_unit: 6000}
//!     ratewarden: {algorithm: gcra, burst: 100}   # our extension, see below
//!   - key: path
//!     value: /api/*/export        # `*` matches zero or more characters, anywhere
//!     descriptors:
//!       - key: client_id
//!         rate_limit: {unit: hour, requests_per_unit: 10}
//!         shadow_mode: true
//! ```
//!
//! # Loading
//!
//! [`load`] reads one file, or every `*.yaml` / `*.yml` file of a directory (not its
//! subdirectories, in name order), each file one `domain`; [`parse`] reads text. A domain
//! defined by two files is an error naming both (envoyproxy/ratelimit's default, without
//! `MERGE_DOMAIN_CONFIG`). Every error carries the file, line and column (columns count
//! characters) and, as its `rule`, the descriptor's full key as envoyproxy/ratelimit names it
//! in statistics (`edge.path_/api/*/export.client_id`).
//!
//! Accepted as envoyproxy/ratelimit accepts them (it reads YAML 1.1 with Go's `yaml.v2`):
//! `true`/`false` also spelt `yes`/`no`/`on`/`off`/`y`/`n`; unit names in any case; numbers
//! and other scalars where a string is expected are read as their text (`value: 50.0.0.5`);
//! a `rate_limit` without `requests_per_unit` limits to 0 (every request over the limit);
//! anchors, aliases and `<<` merge keys; `metadata` maps (kept out of [`Resolved`]);
//! `share_threshold` on a value without `*` (it then changes nothing).
//!
//! Rejected, each with its position: a key it does not know (with a did-you-mean hint), a
//! key given twice in one map, a missing or empty `domain` or `key`, an unknown `unit`, a
//! `rate_limit` with neither `unit` nor `unlimited: true`, `unlimited: true` with a `unit`, two
//! sibling descriptors with the same key and value (compared as envoyproxy/ratelimit does, by
//! the composite `key_value`), a `replaces` entry that is empty or names its own rule, and a
//! `requests_per_unit` that is negative or above 4,294,967,295 (a `uint32`).
//!
//! # Units and the default algorithm
//!
//! A rule decides with envoyproxy/ratelimit's algorithm unless told otherwise: a fixed window
//! aligned on the Unix epoch whose length is the unit's "divider" in seconds
//! ([`Unit::divider`]): 1, 60, 3,600, 86,400, 604,800 (week), 2,592,000 (month: 30 days) and
//! 31,536,000 (year: 365 days). A month window is therefore 30 days from an epoch-aligned
//! start, not a calendar month, exactly as envoyproxy/ratelimit counts it; for a calendar
//! month use the extension's `quota` algorithm.
//!
//! # The `ratewarden` extension
//!
//! A descriptor with a `rate_limit` may add a `ratewarden` map choosing another algorithm for
//! the same rule; envoyproxy/ratelimit itself rejects this key, so such a file is ours only.
//!
//! | `algorithm` | decides with | other keys |
//! |---|---|---|
//! | `fixed-window` (default) | [`FixedWindow`], `requests_per_unit` per divider | none |
//! | `sliding-window` | [`SlidingWindow`], `requests_per_unit` per divider | none |
//! | `sliding-log` | [`SlidingLog`], `requests_per_unit` per divider | none |
//! | `token-bucket`, `leaky-bucket`, `leaky-queue`, `gcra` | that bucket at `requests_per_unit` per divider | `burst` (default `requests_per_unit`) |
//! | `quota` | [`Quota`]: a calendar second, minute, hour, day, ISO week, month or year | `timezone` (IANA name, default `UTC`) |
//!
//! The extension needs a `rate_limit` with a `unit` and a `requests_per_unit` above zero.
//! `concurrency` is refused: it is not a rate. The counter key stays envoyproxy/ratelimit's.
//!
//! # Resolving
//!
//! [`EnvoyConfig::resolve`] walks a descriptor's entries level by level: the exact
//! `key_value`, else the first wildcard value that matches (in file order), else the bare
//! key. A limit applies only when found at the level of the last entry; a walk that finds no
//! node, or a node without nested descriptors before the last entry, ends with no limit. A
//! node with neither `rate_limit` nor `descriptors` so resolves to none (it whitelists). The
//! caller then drops replaced rules with [`apply_replaces`], decides each rule, and combines
//! the statuses with [`overall`] (shadow and quota modes).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use ratewarden_core::{
    AlgorithmKind, CalendarUnit, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit, Quota, Rate,
    SlidingLog, SlidingWindow, TokenBucket,
};
use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};

use crate::{ConfigError, ConfigErrors};

/// The unit of an envoyproxy/ratelimit rule, as in `RateLimitResponse.RateLimit.Unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// `SECOND`.
    Second,
    /// `MINUTE`.
    Minute,
    /// `HOUR`.
    Hour,
    /// `DAY`.
    Day,
    /// `WEEK` (in the response enum only, not in `envoy.type.v3.RateLimitUnit`).
    Week,
    /// `MONTH`: 30 days for envoyproxy/ratelimit.
    Month,
    /// `YEAR`: 365 days for envoyproxy/ratelimit.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The name in config files (lowercase; files may use any case).
    pub fn as_str(&self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The window length in seconds, envoyproxy/ratelimit's `UnitToDivider`.
    pub fn divider(&self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The number of this unit in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`
    /// (`SECOND = 1` … `YEAR = 6`, `WEEK = 7`).
    pub fn response_number(&self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a request's `RateLimitOverride`, by its number in `envoy.type.v3.RateLimitUnit`
    /// (`SECOND = 1` … `YEAR = 6`; that enum has no week). `UNKNOWN` and undefined numbers give
    /// `None`.
    pub fn from_override_number(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            _ => return None,
        })
    }

    /// A unit name in any case, as envoyproxy/ratelimit reads `unit`.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `rate_limit` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyRule {
    /// `name`, for `replaces`.
    pub name: Option<String>,
    /// `unit`; `None` only when `unlimited`.
    pub unit: Option<Unit>,
    /// `requests_per_unit` (0 when not given).
    pub requests_per_unit: u32,
    /// `unlimited: true`: always OK, no counter.
    pub unlimited: bool,
    /// The names in `replaces`.
    pub replaces: Vec<String>,
    /// What to decide with: `None` when `unlimited`, or when `requests_per_unit` is 0 (every
    /// request is over the limit).
    pub limit: Option<Limit>,
}

/// One descriptor node of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// `key`.
    pub key: String,
    /// `value`, empty when not given (any value matches, one counter per value).
    pub value: String,
    /// `rate_limit`.
    pub rule: Option<EnvoyRule>,
    /// `descriptors`: the next level.
    pub descriptors: Vec<Descriptor>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric`.
    pub detailed_metric: bool,
    /// `value_to_metric`.
    pub value_to_metric: bool,
    /// `share_threshold`.
    pub share_threshold: bool,
    /// Line and column of the node in its file.
    pub position: (usize, usize),
    /// The next level indexed: composite `key_value` (or `key`) to index in `descriptors`.
    exact: HashMap<String, usize>,
    /// Indexes in `descriptors` of wildcard values, in file order.
    wildcards: Vec<usize>,
}

impl Descriptor {
    /// envoyproxy/ratelimit's map key for the node: `key`, or `key_value`.
    pub fn composite(&self) -> String {
        composite(&self.key, &self.value)
    }

    /// Whether `value` holds a `*`.
    pub fn is_wildcard(&self) -> bool {
        self.value.contains('*')
    }
}

fn composite(key: &str, value: &str) -> String {
    if value.is_empty() {
        key.to_owned()
    } else {
        format!("{key}_{value}")
    }
}

/// One domain: its file and its top-level descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// The file that defined it.
    pub file: String,
    /// Line and column of its `domain` value.
    pub position: (usize, usize),
    /// The top-level descriptors.
    pub descriptors: Vec<Descriptor>,
    exact: HashMap<String, usize>,
    wildcards: Vec<usize>,
}

/// Every domain of one or more envoyproxy/ratelimit config files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvoyConfig {
    domains: BTreeMap<String, Domain>,
}

/// A request descriptor's `limit` field: a limit given by the request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitOverride {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit` (see [`Unit::from_override_number`]).
    pub unit: Unit,
}

/// The rule a descriptor resolved to, with the counter key to decide it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The rule's `name`.
    pub name: Option<String>,
    /// Its `unit` (`None` for an unlimited rule).
    pub unit: Option<Unit>,
    /// Its `requests_per_unit`.
    pub requests_per_unit: u32,
    /// Always OK, no counter (answer `limit_remaining = u32::MAX`).
    pub unlimited: bool,
    /// Decide and count, but answer OK for this rule.
    pub shadow_mode: bool,
    /// A soft limit: see [`overall`].
    pub quota_mode: bool,
    /// The rule names this rule replaces (see [`apply_replaces`]).
    pub replaces: Vec<String>,
    /// `detailed_metric` of the matched node.
    pub detailed_metric: bool,
    /// `value_to_metric` of the matched node.
    pub value_to_metric: bool,
    /// What to decide with: `None` when `unlimited` (always OK) or when `requests_per_unit`
    /// is 0 (always over the limit, as `hits > 0` is).
    pub limit: Option<Limit>,
    /// The counter key as envoyproxy/ratelimit builds it, without its prefix and window:
    /// `domain_` then `key_value_` for each entry, the wildcard pattern standing for the
    /// value where a matched node has `share_threshold` (`edge_path_/api/*_client_id_abc_`).
    /// See [`Resolved::cache_key`].
    pub key: String,
    /// The statistics key (`domain.key_value.key`): the matched nodes' composite keys joined
    /// by dots, a node with `value_to_metric` giving the request's value instead, and
    /// `_value` of the last entry appended when the rule's node has `detailed_metric` and no
    /// nested descriptors (README Example 8).
    pub stats_key: String,
}

impl Resolved {
    /// envoyproxy/ratelimit's full counter key at `now_secs` (Unix seconds): `prefix`, then
    /// [`key`](Resolved::key), then the window start `now_secs / divider * divider`. `None`
    /// for an unlimited rule, which has no counter.
    pub fn cache_key(&self, prefix: &str, now_secs: u64) -> Option<String> {
        let divider = self.unit?.divider();
        Some(format!(
            "{prefix}{}{}",
            self.key,
            now_secs / divider * divider
        ))
    }
}

/// Drops (sets to `None`) every rule whose `name` is in the `replaces` of a rule resolved for
/// the same request (README Example 7). Names are collected from every rule first, so a rule
/// that is itself replaced still replaces others.
pub fn apply_replaces(resolved: &mut [Option<Resolved>]) {
    let replaced: Vec<String> = resolved
        .iter()
        .flatten()
        .flat_map(|r| r.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    for slot in resolved.iter_mut() {
        let gone = slot
            .as_ref()
            .and_then(|r| r.name.as_ref())
            .is_some_and(|n| replaced.contains(n));
        if gone {
            *slot = None;
        }
    }
}

/// The overall code of a request, true for OVER_LIMIT, as envoyproxy/ratelimit combines its
/// descriptors: each item is a descriptor's rule (after [`apply_replaces`]) and whether its
/// counter went over the limit. A shadow-mode rule always reports OK; the request is over
/// when any other rule without `quota_mode` is over, or when there is at least one
/// quota-mode rule and every quota-mode rule reports over. Descriptors without a rule and
/// unlimited rules are OK. The global `SHADOW_MODE` / `QUOTA_MODE` switches are the caller's.
pub fn overall<'a>(statuses: impl IntoIterator<Item = (Option<&'a Resolved>, bool)>) -> bool {
    let (mut quota_rules, mut quota_over) = (0usize, 0usize);
    for (rule, over) in statuses {
        let Some(rule) = rule else { continue };
        let reported = over && !rule.shadow_mode && !rule.unlimited;
        if rule.quota_mode {
            quota_rules += 1;
            quota_over += usize::from(reported);
        } else if reported {
            return true;
        }
    }
    quota_rules > 0 && quota_over == quota_rules
}

impl EnvoyConfig {
    /// The domains, in name order.
    pub fn domains(&self) -> impl Iterator<Item = (&str, &Domain)> {
        self.domains.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// One domain.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Adds `other`'s domains.
    ///
    /// # Errors
    ///
    /// A domain both define, naming both files (nothing is added then).
    pub fn merge(&mut self, other: EnvoyConfig) -> Result<(), ConfigErrors> {
        let clashes: Vec<ConfigError> = other
            .domains
            .iter()
            .filter_map(|(name, d)| {
                let first = self.domains.get(name)?;
                Some(ConfigError {
                    file: d.file.clone(),
                    position: Some(d.position),
                    rule: None,
                    message: format!(
                        "duplicate domain `{name}`: already defined in {}:{}:{}",
                        first.file, first.position.0, first.position.1
                    ),
                })
            })
            .collect();
        if !clashes.is_empty() {
            return Err(ConfigErrors(clashes));
        }
        self.domains.extend(other.domains);
        Ok(())
    }

    /// The rule for one request descriptor of `domain`, as envoyproxy/ratelimit's `GetLimit`
    /// finds it from configuration (see the module docs); `None` for no limit (unknown
    /// domain, no match, a depth mismatch, a whitelisting node, no entries).
    pub fn resolve(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Resolved> {
        let d = self.domains.get(domain)?;
        let (mut nodes, mut exact, mut wildcards) = (&d.descriptors, &d.exact, &d.wildcards);
        let mut found: Option<&Descriptor> = None;
        let mut shared: Vec<Option<&str>> = Vec::with_capacity(entries.len());
        let mut stats = domain.to_owned();
        let last = entries.len().checked_sub(1)?;
        for (i, (key, value)) in entries.iter().enumerate() {
            let wanted = format!("{key}_{value}");
            let by_value = exact.get(&wanted).map(|&n| &nodes[n]);
            let by_pattern = || {
                wildcards
                    .iter()
                    .map(|&n| &nodes[n])
                    .find(|n| glob(&n.composite(), &wanted))
            };
            let by_key = || exact.get(*key).map(|&n| &nodes[n]);
            let Some(node) = by_value.or_else(by_pattern).or_else(by_key) else {
                break;
            };
            shared
                .push((node.share_threshold && node.is_wildcard()).then_some(node.value.as_str()));
            stats.push('.');
            if node.value_to_metric {
                stats.push_str(&composite(key, value));
            } else {
                stats.push_str(&node.composite());
            }
            if node.rule.is_some() && i == last {
                found = Some(node);
            }
            if node.descriptors.is_empty() {
                if found.is_some() && node.detailed_metric {
                    stats.push('_');
                    stats.push_str(value);
                }
                break;
            }
            (nodes, exact, wildcards) = (&node.descriptors, &node.exact, &node.wildcards);
        }
        let node = found?;
        let rule = node.rule.as_ref()?;
        let mut key = format!("{domain}_");
        for (i, (k, v)) in entries.iter().enumerate() {
            key.push_str(k);
            key.push('_');
            key.push_str(shared.get(i).copied().flatten().unwrap_or(v));
            key.push('_');
        }
        Some(Resolved {
            name: rule.name.clone(),
            unit: rule.unit,
            requests_per_unit: rule.requests_per_unit,
            unlimited: rule.unlimited,
            shadow_mode: node.shadow_mode,
            quota_mode: node.quota_mode,
            replaces: rule.replaces.clone(),
            detailed_metric: node.detailed_metric,
            value_to_metric: node.value_to_metric,
            limit: rule.limit.clone(),
            key,
            stats_key: stats,
        })
    }

    /// The rule for a request descriptor that carries its own `limit`: it bypasses the
    /// configuration (no shadow mode, no name, no replaces; envoyproxy/ratelimit's fixed
    /// window), keyed by the descriptor's entries. `None` when `domain` is not configured, as
    /// envoyproxy/ratelimit looks the domain up first.
    pub fn resolve_override(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        limit: RateLimitOverride,
    ) -> Option<Resolved> {
        self.domains.get(domain)?;
        let mut key = format!("{domain}_");
        let mut stats = format!("{domain}.");
        for (i, (k, v)) in entries.iter().enumerate() {
            key.push_str(&format!("{k}_{v}_"));
            if i > 0 {
                stats.push('.');
            }
            stats.push_str(&composite(k, v));
        }
        Some(Resolved {
            name: None,
            unit: Some(limit.unit),
            requests_per_unit: limit.requests_per_unit,
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            replaces: Vec::new(),
            detailed_metric: false,
            value_to_metric: false,
            limit: fixed_window(limit.requests_per_unit, limit.unit),
            key,
            stats_key: stats,
        })
    }
}

/// envoyproxy/ratelimit's fixed window: `None` for a limit of 0.
fn fixed_window(requests: u32, unit: Unit) -> Option<Limit> {
    FixedWindow::new(u64::from(requests), Duration::from_secs(unit.divider()))
        .ok()
        .map(Limit::from)
}

/// Whether `text` matches `pattern`, each `*` standing for zero or more characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut tail: Option<&str> = None;
    for part in parts {
        if let Some(middle) = tail {
            match rest.find(middle) {
                Some(at) => rest = &rest[at + middle.len()..],
                None => return false,
            }
        }
        tail = Some(part);
    }
    match tail {
        None => rest.is_empty(),
        Some(end) => rest.ends_with(end),
    }
}

/// Reads the config file at `path`, or every `*.yaml` / `*.yml` file of the directory at
/// `path` (in name order, not recursing).
///
/// # Errors
///
/// Every problem found in every file, each with its file, line and column.
pub fn load(path: &Path) -> Result<EnvoyConfig, ConfigErrors> {
    let unreadable = |file: &Path, e: std::io::Error| ConfigError {
        file: file.display().to_string(),
        position: None,
        rule: None,
        message: format!("cannot read: {e}"),
    };
    let files = if path.is_dir() {
        let listing =
            std::fs::read_dir(path).map_err(|e| ConfigErrors(vec![unreadable(path, e)]))?;
        let mut files: Vec<_> = listing
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut config = EnvoyConfig::default();
    let mut errors = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(unreadable(&file, e));
                continue;
            }
        };
        let parsed = parse(&file.display().to_string(), &text).and_then(|c| config.merge(c));
        if let Err(ConfigErrors(found)) = parsed {
            errors.extend(found);
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Reads one config file's `text`, naming it `file` in errors.
///
/// # Errors
///
/// Every problem found, in file order, each with its line and column.
pub fn parse(file: &str, text: &str) -> Result<EnvoyConfig, ConfigErrors> {
    let mut errors = Errors {
        file,
        found: Vec::new(),
    };
    let root = match read_yaml(text) {
        Ok(root) => root,
        Err(e) => {
            let at = (e.marker().line(), e.marker().col() + 1);
            errors.at(at, None, format!("invalid YAML: {}", e.info()));
            return Err(ConfigErrors(errors.found));
        }
    };
    let Some(root) = root else {
        errors.at(
            (1, 1),
            None,
            "the file is empty: it needs a `domain`".to_owned(),
        );
        return Err(ConfigErrors(errors.found));
    };
    let domain = validate_root(&root, &mut errors);
    errors
        .found
        .sort_by_key(|e| e.position.unwrap_or((usize::MAX, 0)));
    match domain {
        Some((name, domain)) if errors.found.is_empty() => {
            let mut config = EnvoyConfig::default();
            config.domains.insert(name, domain);
            Ok(config)
        }
        _ => Err(ConfigErrors(errors.found)),
    }
}

struct Errors<'a> {
    file: &'a str,
    found: Vec<ConfigError>,
}

impl Errors<'_> {
    fn at(&mut self, position: (usize, usize), rule: Option<&str>, message: String) {
        self.found.push(ConfigError {
            file: self.file.to_owned(),
            position: Some(position),
            rule: rule.map(str::to_owned),
            message,
        });
    }
}

// ----- A YAML tree with positions -----

#[derive(Debug, Clone)]
enum Yaml {
    Scalar { text: String, plain: bool },
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone)]
struct Node {
    at: (usize, usize),
    yaml: Yaml,
}

fn position(span: &Span) -> (usize, usize) {
    (span.start.line(), span.start.col() + 1)
}

/// The first document of `text`, `None` when there is none.
fn read_yaml(text: &str) -> Result<Option<Node>, ScanError> {
    let mut reader = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
    };
    loop {
        let (event, span) = reader.next()?;
        match event {
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => {}
            Event::StreamEnd => return Ok(None),
            event => return reader.node(event, span).map(Some),
        }
    }
}

struct Reader<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: HashMap<usize, Node>,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), ScanError> {
        match self.parser.next_event() {
            Some(event) => event,
            None => Err(ScanError::new_str(
                saphyr_parser::Marker::default(),
                "unexpected end of input",
            )),
        }
    }

    fn node(&mut self, event: Event<'a>, span: Span) -> Result<Node, ScanError> {
        let at = position(&span);
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, _) => (
                Node {
                    at,
                    yaml: Yaml::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    },
                },
                anchor,
            ),
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if event == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(event, span)?);
                }
                (
                    Node {
                        at,
                        yaml: Yaml::List(items),
                    },
                    anchor,
                )
            }
            Event::MappingStart(anchor, _) => {
                let mut pairs: Vec<(Node, Node)> = Vec::new();
                let mut merged: Vec<(Node, Node)> = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if event == Event::MappingEnd {
                        break;
                    }
                    let key = self.node(event, span)?;
                    let (event, span) = self.next()?;
                    let value = self.node(event, span)?;
                    // `<<: *base` (YAML 1.1 merge keys, which Go's yaml.v2 applies).
                    if matches!(&key.yaml, Yaml::Scalar { text, plain: true } if text == "<<") {
                        let sources = match value.yaml {
                            Yaml::List(items) => items,
                            other => vec![Node {
                                at: value.at,
                                yaml: other,
                            }],
                        };
                        for source in sources {
                            match source.yaml {
                                Yaml::Map(p) => merged.extend(p),
                                _ => {
                                    return Err(ScanError::new_str(
                                        span.start,
                                        "a `<<` merge key needs a map or a list of maps",
                                    ))
                                }
                            }
                        }
                        continue;
                    }
                    pairs.push((key, value));
                }
                for (k, v) in merged {
                    if !pairs.iter().any(|(p, _)| same_key(p, &k)) {
                        pairs.push((k, v));
                    }
                }
                (
                    Node {
                        at,
                        yaml: Yaml::Map(pairs),
                    },
                    anchor,
                )
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(node) => return Ok(node.clone()),
                None => return Err(ScanError::new_str(span.start, "unknown alias")),
            },
            _ => return Err(ScanError::new_str(span.start, "unexpected YAML event")),
        };
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(node)
    }
}

fn same_key(a: &Node, b: &Node) -> bool {
    matches!((&a.yaml, &b.yaml), (Yaml::Scalar { text: x, .. }, Yaml::Scalar { text: y, .. }) if x == y)
}

// ----- Validation -----

const ROOT_KEYS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "ratewarden",
];
const RATE_LIMIT_KEYS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];
const REPLACES_KEYS: &[&str] = &["name"];
const EXTENSION_KEYS: &[&str] = &["algorithm", "burst", "timezone"];

/// A map's entries by key, after rejecting unknown and repeated keys. `what` names the map in
/// messages ("a descriptor").
fn fields<'n>(
    node: &'n Node,
    what: &str,
    known: &[&str],
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<HashMap<&'n str, &'n Node>> {
    let Yaml::Map(pairs) = &node.yaml else {
        errors.at(node.at, rule, format!("{what} must be a map"));
        return None;
    };
    let mut found: HashMap<&str, &Node> = HashMap::new();
    let mut first: HashMap<&str, (usize, usize)> = HashMap::new();
    for (k, v) in pairs {
        let Yaml::Scalar { text, .. } = &k.yaml else {
            errors.at(k.at, rule, format!("{what} has a key that is not a string"));
            continue;
        };
        let name = text.as_str();
        if !known.contains(&name) {
            let hint = nearest(name, known.iter().copied())
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            errors.at(
                k.at,
                rule,
                format!(
                    "unknown key `{name}` in {what}; expected one of {}{hint}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        }
        if let Some((line, col)) = first.get(name) {
            errors.at(
                k.at,
                rule,
                format!("`{name}` is given twice in {what} (first at line {line}, column {col})"),
            );
            continue;
        }
        first.insert(name, k.at);
        found.insert(name, v);
    }
    Some(found)
}

fn nearest<'a>(wrong: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(wrong, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| k)
}

fn is_null(text: &str, plain: bool) -> bool {
    plain && matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A string field: any scalar's text (Go's yaml.v2 reads `123` into a string as "123"); null
/// is empty.
fn string(node: &Node, field: &str, rule: Option<&str>, errors: &mut Errors<'_>) -> Option<String> {
    match &node.yaml {
        Yaml::Scalar { text, plain } if is_null(text, *plain) => Some(String::new()),
        Yaml::Scalar { text, .. } => Some(text.clone()),
        _ => {
            errors.at(node.at, rule, format!("`{field}` must be a string"));
            None
        }
    }
}

/// A boolean field, with YAML 1.1's spellings as Go's yaml.v2 reads them.
fn boolean(node: &Node, field: &str, rule: Option<&str>, errors: &mut Errors<'_>) -> bool {
    if let Yaml::Scalar { text, plain: true } = &node.yaml {
        match text.as_str() {
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
                return true
            }
            "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
            | "N" | "" | "~" | "null" | "Null" | "NULL" => return false,
            _ => {}
        }
    }
    let shown = match &node.yaml {
        Yaml::Scalar { text, .. } => format!("`{text}`"),
        _ => "a list or map".to_owned(),
    };
    errors.at(
        node.at,
        rule,
        format!("`{field}` must be true or false, not {shown}"),
    );
    false
}

/// A whole number in `0..=max`.
fn number(
    node: &Node,
    field: &str,
    max: u64,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<u64> {
    let text = match &node.yaml {
        Yaml::Scalar { text, .. } => text.as_str(),
        _ => "",
    };
    let digits = text.strip_prefix('+').unwrap_or(text).replace('_', "");
    match digits.parse::<u64>() {
        Ok(n) if n <= max => Some(n),
        _ => {
            let shown = if text.is_empty() {
                "nothing".to_owned()
            } else {
                text.to_owned()
            };
            errors.at(
                node.at,
                rule,
                format!("`{field}` must be a whole number from 0 to {max}, not {shown}"),
            );
            None
        }
    }
}

fn validate_root(root: &Node, errors: &mut Errors<'_>) -> Option<(String, Domain)> {
    let fields = fields(root, "the file", ROOT_KEYS, None, errors)?;
    let domain = match fields.get("domain") {
        None => {
            errors.at(root.at, None, "`domain` is missing".to_owned());
            None
        }
        Some(node) => match string(node, "domain", None, errors) {
            Some(name) if name.is_empty() => {
                errors.at(node.at, None, "`domain` must not be empty".to_owned());
                None
            }
            Some(name) => Some((name, node.at)),
            None => None,
        },
    };
    let parent = domain.as_ref().map_or("?", |(d, _)| d.as_str()).to_owned();
    let (descriptors, exact, wildcards) = match fields.get("descriptors") {
        None => (Vec::new(), HashMap::new(), Vec::new()),
        Some(list) => level(list, &parent, errors),
    };
    let (name, position) = domain?;
    Some((
        name,
        Domain {
            file: errors.file.to_owned(),
            position,
            descriptors,
            exact,
            wildcards,
        },
    ))
}

type Level = (Vec<Descriptor>, HashMap<String, usize>, Vec<usize>);

/// A `descriptors` list under `parent` (the parent's full key, `domain.key_value`).
fn level(list: &Node, parent: &str, errors: &mut Errors<'_>) -> Level {
    let mut nodes = Vec::new();
    let mut exact = HashMap::new();
    let mut wildcards = Vec::new();
    let items: &[Node] = match &list.yaml {
        Yaml::List(items) => items,
        Yaml::Scalar { text, plain } if is_null(text, *plain) => &[],
        _ => {
            errors.at(
                list.at,
                Some(parent),
                "`descriptors` must be a list of descriptors".to_owned(),
            );
            &[]
        }
    };
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    for item in items {
        let Some(node) = descriptor(item, parent, errors) else {
            continue;
        };
        let composite = node.composite();
        if let Some((line, col)) = seen.get(&composite) {
            errors.at(
                node.position,
                Some(&format!("{parent}.{composite}")),
                format!(
                    "duplicate descriptor: another one with key `{}`{} is at line {line}, column {col}",
                    node.key,
                    if node.value.is_empty() {
                        " and no value".to_owned()
                    } else {
                        format!(" and value `{}`", node.value)
                    }
                ),
            );
            continue;
        }
        seen.insert(composite.clone(), node.position);
        if node.is_wildcard() {
            wildcards.push(nodes.len());
        }
        exact.insert(composite, nodes.len());
        nodes.push(node);
    }
    (nodes, exact, wildcards)
}

fn descriptor(item: &Node, parent: &str, errors: &mut Errors<'_>) -> Option<Descriptor> {
    let failures = errors.found.len();
    let parent_rule = Some(parent);
    let fields = fields(item, "a descriptor", DESCRIPTOR_KEYS, parent_rule, errors)?;
    let key = match fields.get("key") {
        None => {
            errors.at(
                item.at,
                parent_rule,
                "a descriptor needs a `key`".to_owned(),
            );
            None
        }
        Some(node) => match string(node, "key", parent_rule, errors) {
            Some(k) if k.is_empty() => {
                errors.at(node.at, parent_rule, "`key` must not be empty".to_owned());
                None
            }
            other => other,
        },
    };
    let value = fields
        .get("value")
        .and_then(|v| string(v, "value", parent_rule, errors))
        .unwrap_or_default();
    let full = format!(
        "{parent}.{}",
        composite(key.as_deref().unwrap_or("?"), &value)
    );
    let rule_name = Some(full.as_str());
    let flag = |errors: &mut Errors<'_>, name: &str| {
        fields
            .get(name)
            .is_some_and(|n| boolean(n, name, rule_name, errors))
    };
    let shadow_mode = flag(errors, "shadow_mode");
    let quota_mode = flag(errors, "quota_mode");
    let detailed_metric = flag(errors, "detailed_metric");
    let value_to_metric = flag(errors, "value_to_metric");
    let share_threshold = flag(errors, "share_threshold");
    let mut rule = fields
        .get("rate_limit")
        .and_then(|r| rate_limit(r, rule_name, errors));
    if let Some(ext) = fields.get("ratewarden") {
        match &mut rule {
            Some(rule) if rule.limit.is_some() => {
                if let Some(limit) = extension(ext, rule, rule_name, errors) {
                    rule.limit = Some(limit);
                }
            }
            Some(rule) => {
                let why = if rule.unlimited {
                    "an unlimited rule"
                } else {
                    "a rule of 0 requests"
                };
                errors.at(
                    ext.at,
                    rule_name,
                    format!("`ratewarden` cannot choose an algorithm for {why}"),
                );
            }
            None if fields.contains_key("rate_limit") => {}
            None => errors.at(
                ext.at,
                rule_name,
                "`ratewarden` needs a `rate_limit` on the same descriptor".to_owned(),
            ),
        }
    }
    let (descriptors, exact, wildcards) = match fields.get("descriptors") {
        Some(list) => level(list, &full, errors),
        None => (Vec::new(), HashMap::new(), Vec::new()),
    };
    if errors.found.len() > failures {
        return None;
    }
    Some(Descriptor {
        key: key?,
        value,
        rule,
        descriptors,
        shadow_mode,
        quota_mode,
        detailed_metric,
        value_to_metric,
        share_threshold,
        position: item.at,
        exact,
        wildcards,
    })
}

fn rate_limit(node: &Node, rule: Option<&str>, errors: &mut Errors<'_>) -> Option<EnvoyRule> {
    let failures = errors.found.len();
    let fields = fields(node, "`rate_limit`", RATE_LIMIT_KEYS, rule, errors)?;
    let unlimited = fields
        .get("unlimited")
        .is_some_and(|n| boolean(n, "unlimited", rule, errors));
    let unit = match fields.get("unit") {
        Some(u) => match string(u, "unit", rule, errors) {
            // An empty unit is no unit, as for envoyproxy/ratelimit.
            Some(text) if text.is_empty() => None,
            Some(text) => match Unit::parse(&text) {
                Some(unit) if unlimited => {
                    errors.at(
                        u.at,
                        rule,
                        format!("`unit: {unit}` must not be given with `unlimited: true`"),
                    );
                    None
                }
                Some(unit) => Some(unit),
                None => {
                    let hint = nearest(&text.to_ascii_lowercase(), Unit::ALL.map(|u| u.as_str()))
                        .map(|k| format!("; did you mean `{k}`?"))
                        .unwrap_or_default();
                    errors.at(
                        u.at,
                        rule,
                        format!(
                            "unknown `unit` `{text}`: use second, minute, hour, day, week, month or year{hint}"
                        ),
                    );
                    None
                }
            },
            None => None,
        },
        None => None,
    };
    if unit.is_none() && !unlimited && errors.found.len() == failures {
        errors.at(
            node.at,
            rule,
            "`rate_limit` needs a `unit` (second, minute, hour, day, week, month or year), or `unlimited: true`".to_owned(),
        );
    }
    let requests_per_unit = fields
        .get("requests_per_unit")
        .and_then(|n| number(n, "requests_per_unit", u64::from(u32::MAX), rule, errors))
        .map_or(0, |n| n as u32);
    let name = fields
        .get("name")
        .and_then(|n| string(n, "name", rule, errors))
        .filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    if let Some(list) = fields.get("replaces") {
        match &list.yaml {
            Yaml::List(items) => {
                for item in items {
                    let before = errors.found.len();
                    let Some(f) = fields_of_replaces(item, rule, errors) else {
                        continue;
                    };
                    if errors.found.len() > before {
                        continue;
                    }
                    let replaced = f
                        .get("name")
                        .and_then(|n| string(n, "name", rule, errors))
                        .unwrap_or_default();
                    if replaced.is_empty() {
                        errors.at(
                            item.at,
                            rule,
                            "a `replaces` entry needs a non-empty `name`".to_owned(),
                        );
                    } else if name.as_deref() == Some(replaced.as_str()) {
                        errors.at(
                            f.get("name").map_or(item.at, |n| n.at),
                            rule,
                            format!("`replaces` names this rule's own name `{replaced}`"),
                        );
                    } else {
                        replaces.push(replaced);
                    }
                }
            }
            Yaml::Scalar { text, plain } if is_null(text, *plain) => {}
            _ => errors.at(
                list.at,
                rule,
                "`replaces` must be a list of `- name: …` entries".to_owned(),
            ),
        }
    }
    if errors.found.len() > failures {
        return None;
    }
    let limit = match unit {
        Some(unit) if !unlimited => fixed_window(requests_per_unit, unit),
        _ => None,
    };
    Some(EnvoyRule {
        name,
        unit,
        requests_per_unit,
        unlimited,
        replaces,
        limit,
    })
}

fn fields_of_replaces<'n>(
    item: &'n Node,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<HashMap<&'n str, &'n Node>> {
    fields(item, "a `replaces` entry", REPLACES_KEYS, rule, errors)
}

/// The `ratewarden` map: another algorithm for `rule` (which has a unit and requests).
fn extension(
    node: &Node,
    rule: &EnvoyRule,
    name: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<Limit> {
    let failures = errors.found.len();
    let fields = fields(node, "`ratewarden`", EXTENSION_KEYS, name, errors)?;
    let unit = rule.unit?;
    let n = u64::from(rule.requests_per_unit);
    let window = Duration::from_secs(unit.divider());
    let kind = match fields.get("algorithm") {
        None => AlgorithmKind::FixedWindow,
        Some(a) => {
            let text = string(a, "algorithm", name, errors)?;
            match text.parse::<AlgorithmKind>() {
                Ok(AlgorithmKind::Concurrency) => {
                    errors.at(
                        a.at,
                        name,
                        "`algorithm: concurrency` is not a rate; use it in the native TOML config"
                            .to_owned(),
                    );
                    return None;
                }
                Ok(kind) => kind,
                Err(_) => {
                    let known: Vec<&str> = AlgorithmKind::ALL
                        .iter()
                        .filter(|k| **k != AlgorithmKind::Concurrency)
                        .map(|k| k.as_str())
                        .collect();
                    let hint = nearest(&text, known.iter().copied())
                        .map(|k| format!("; did you mean `{k}`?"))
                        .unwrap_or_default();
                    errors.at(
                        a.at,
                        name,
                        format!(
                            "unknown `algorithm` `{text}`: use {}{hint}",
                            known.join(", ")
                        ),
                    );
                    return None;
                }
            }
        }
    };
    let burst = fields.get("burst").and_then(|b| {
        if !kind.is_bucket() {
            errors.at(
                b.at,
                name,
                format!("`burst` does not apply to `{kind}`; only to token-bucket, leaky-bucket, leaky-queue and gcra"),
            );
            return None;
        }
        match number(b, "burst", u64::MAX, name, errors) {
            Some(0) => {
                errors.at(b.at, name, "`burst` must be above zero".to_owned());
                None
            }
            other => other,
        }
    });
    let timezone = fields.get("timezone").and_then(|t| {
        if kind != AlgorithmKind::Quota {
            errors.at(
                t.at,
                name,
                format!("`timezone` does not apply to `{kind}`; only to quota"),
            );
            return None;
        }
        string(t, "timezone", name, errors).map(|tz| (tz, t.at))
    });
    if errors.found.len() > failures {
        return None;
    }
    let at = fields.get("algorithm").map_or(node.at, |a| a.at);
    let built = match kind {
        AlgorithmKind::FixedWindow => FixedWindow::new(n, window).map(Limit::from),
        AlgorithmKind::SlidingWindow => SlidingWindow::new(n, window).map(Limit::from),
        AlgorithmKind::SlidingLog => SlidingLog::new(n, window).map(Limit::from),
        AlgorithmKind::Quota => {
            let calendar = match unit {
                Unit::Second => CalendarUnit::Second,
                Unit::Minute => CalendarUnit::Minute,
                Unit::Hour => CalendarUnit::Hour,
                Unit::Day => CalendarUnit::Day,
                Unit::Week => CalendarUnit::Week,
                Unit::Month => CalendarUnit::Month,
                Unit::Year => CalendarUnit::Year,
            };
            let (tz, tz_at) = timezone.unwrap_or(("UTC".to_owned(), at));
            match Quota::new(n, calendar, &tz) {
                Ok(q) => Ok(Limit::from(q)),
                Err(e) => {
                    errors.at(tz_at, name, format!("`timezone`: {e}"));
                    return None;
                }
            }
        }
        bucket => {
            let burst = burst.unwrap_or(n);
            Rate::new(n, window).and_then(|rate| match bucket {
                AlgorithmKind::TokenBucket => TokenBucket::new(rate, burst).map(Limit::from),
                AlgorithmKind::LeakyBucket => LeakyBucket::new(rate, burst).map(Limit::from),
                AlgorithmKind::LeakyQueue => LeakyQueue::new(rate, burst).map(Limit::from),
                _ => Gcra::new(rate, burst).map(Limit::from),
            })
        }
    };
    match built {
        Ok(limit) => Some(limit),
        Err(e) => {
            errors.at(at, name, format!("`ratewarden`: {e}"));
            None
        }
    }
}
