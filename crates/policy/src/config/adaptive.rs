//! An `algorithm = "adaptive-concurrency"` rule: its strategy and the parameters it takes.
//!
//! ```toml
//! [[limit]]
//! name = "upstream"
//! key = ["global"]
//! algorithm = "adaptive-concurrency"
//! strategy = "gradient2"
//!
//! [limit.adaptive]
//! max = 400
//! window = "100ms"
//! ```

use std::ops::Range;
use std::time::Duration;

use ratewarden_core::adaptive::{
    AimdConfig, Gradient2Config, GradientConfig, Strategy, VegasConfig, WindowConfig,
};
use ratewarden_core::{Concurrency, Limit, DEFAULT_LEASE};
use toml::Spanned;

use super::error::Errors;
use super::raw::{RawAdaptive, RawLimit, RawNumber};
use crate::hint::did_you_mean;

/// The algorithm's name in config files.
pub const ADAPTIVE_CONCURRENCY: &str = "adaptive-concurrency";

/// The strategies' names, the recommended one first.
const STRATEGIES: [&str; 4] = ["gradient2", "vegas", "aimd", "gradient"];

/// An adaptive concurrency rule's controller, window, reserve and queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adaptive {
    /// The controller and its parameters.
    pub strategy: Strategy,
    /// When a windowed controller updates, and which RTTs are too small to count.
    pub window: WindowConfig,
    /// The share of the limit only critical requests may take, in thousandths (sheddable
    /// ones are kept out of twice that).
    pub reserve_permille: u64,
    /// How long a place is held at most if never released, in nanoseconds.
    pub lease_ns: u64,
    /// Where the excess waits (`[limit.queue]`); `None`: it is refused at once.
    pub queue: Option<super::Queue>,
}

/// The rule's ceiling (a concurrency limit at the strategy's max, which is what decisions
/// report as the limit) and its controller; `None`s after recording what was wrong.
pub(super) fn adaptive(
    raw: &RawLimit,
    span: &Range<usize>,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> (Option<Limit>, Option<Adaptive>) {
    let refuse = |errors: &mut Errors<'_>, at: Range<usize>, message: String| {
        errors.at(Some(at), rule, message);
    };
    let stray: [(&str, bool, &str); 11] = [
        ("rate", raw.rate.is_some(), ""),
        ("burst", raw.burst.is_some(), ""),
        (
            "limit",
            raw.limit.is_some(),
            " (the limit is learnt; bound it with `adaptive.max`)",
        ),
        (
            "window",
            raw.window.is_some(),
            " (the samples window is `adaptive.window`)",
        ),
        ("period", raw.period.is_some(), ""),
        ("timezone", raw.timezone.is_some(), ""),
        (
            "cost",
            raw.cost.is_some(),
            " (every request holds one place)",
        ),
        ("max_cost", raw.max_cost.is_some(), ""),
        ("settle", raw.settle.is_some(), ""),
        (
            "local_first",
            raw.local_first.is_some(),
            " (the limiter is always in this process)",
        ),
        (
            "on_store_failure",
            raw.on_store_failure.is_some(),
            " (the limiter is in this process, not in the store)",
        ),
    ];
    for (field, _, why) in stray.iter().filter(|(_, given, _)| *given) {
        let message = format!("`{field}` does not apply to `{ADAPTIVE_CONCURRENCY}`{why}");
        refuse(errors, span.clone(), message);
    }
    if raw.matches.as_ref().is_some_and(|m| m.domain.is_some()) {
        let message = format!("`{ADAPTIVE_CONCURRENCY}` limits requests through the gateway, not Envoy descriptors (`match.domain`)");
        refuse(errors, span.clone(), message);
    }
    let name = raw
        .strategy
        .as_ref()
        .map_or("gradient2", |s| s.get_ref().trim());
    let Some(name) = STRATEGIES.iter().find(|s| **s == name) else {
        let given = raw.strategy.as_ref().map(Spanned::get_ref);
        let hint = did_you_mean(given.map_or("", |s| s), STRATEGIES);
        let at = raw.strategy.as_ref().map_or(span.clone(), Spanned::span);
        let message = format!(
            "`strategy` is one of {}, not `{}`{hint}",
            STRATEGIES.join(", "),
            given.map_or("", |s| s)
        );
        refuse(errors, at, message);
        return (None, None);
    };
    let default = RawAdaptive::default();
    let params = raw.adaptive.as_ref().unwrap_or(&default);
    let failures = errors.found.len();
    let mut read = Reader {
        params,
        strategy: name,
        rule,
        errors,
        table: span.clone(),
    };
    read.takes_only();
    let strategy = match *name {
        "aimd" => {
            let d = AimdConfig::default();
            let backoff = read.ratio("backoff", &params.backoff, d.backoff_permille);
            if !(500..1000).contains(&backoff) {
                read.wrong(
                    params.backoff.as_ref(),
                    format!(
                        "`adaptive.backoff` is a ratio from 0.5 up to (not including) 1, not {}",
                        backoff as f64 / 1000.0
                    ),
                );
            }
            Strategy::Aimd(AimdConfig {
                initial: read.count("initial", &params.initial, d.initial),
                min: read.count("min", &params.min, d.min),
                max: read.count("max", &params.max, d.max),
                backoff_permille: backoff,
                timeout_ns: read.duration("timeout", &params.timeout, d.timeout_ns),
            })
        }
        "vegas" => {
            let d = VegasConfig::default();
            Strategy::Vegas(VegasConfig {
                initial: read.count("initial", &params.initial, d.initial),
                min: read.count("min", &params.min, d.min),
                max: read.count("max", &params.max, d.max),
                probe_multiplier: read.count(
                    "probe_multiplier",
                    &params.probe_multiplier,
                    d.probe_multiplier,
                ),
            })
        }
        "gradient2" => {
            let d = Gradient2Config::default();
            let smoothing = read.ratio("smoothing", &params.smoothing, d.smoothing_permille);
            if smoothing == 0 || smoothing > 1000 {
                read.wrong(
                    params.smoothing.as_ref(),
                    "`adaptive.smoothing` is a ratio above 0, at most 1".to_owned(),
                );
            }
            let tolerance = read.ratio("tolerance", &params.tolerance, d.tolerance_permille);
            if tolerance < 1000 {
                read.wrong(
                    params.tolerance.as_ref(),
                    "`adaptive.tolerance` is at least 1 (1.5: latency may grow by half above the no-load RTT before the limit comes down)".to_owned(),
                );
            }
            Strategy::Gradient2(Gradient2Config {
                initial: read.count("initial", &params.initial, d.initial),
                min: read.count("min", &params.min, d.min),
                max: read.count("max", &params.max, d.max),
                smoothing_permille: smoothing,
                // Unset: the headroom grows with the limit (`auto_queue`).
                queue_size: params
                    .queue_size
                    .is_some()
                    .then(|| read.whole("queue_size", &params.queue_size, 0)),
                long_window: read.count("long_window", &params.long_window, d.long_window),
                tolerance_permille: tolerance,
            })
        }
        _ => {
            let d = GradientConfig::default();
            let percentile = read.ratio(
                "percentile",
                &params.percentile,
                d.percentile_permille * 100,
            ) / 100;
            if percentile == 0 || percentile > 1000 {
                read.wrong(
                    params.percentile.as_ref(),
                    "`adaptive.percentile` is a percentage above 0, at most 100 (50: the median)"
                        .to_owned(),
                );
            }
            let jitter = read.ratio("jitter", &params.jitter, d.jitter_permille);
            if jitter > 1000 {
                read.wrong(
                    params.jitter.as_ref(),
                    "`adaptive.jitter` is a ratio from 0 to 1".to_owned(),
                );
            }
            Strategy::Gradient(GradientConfig {
                interval_ns: read.duration("interval", &params.interval, d.interval_ns),
                percentile_permille: percentile,
                buffer_permille: read.ratio("buffer", &params.buffer, d.buffer_permille),
                min_rtt_interval_ns: read.duration(
                    "min_rtt_interval",
                    &params.min_rtt_interval,
                    d.min_rtt_interval_ns,
                ),
                jitter_permille: jitter,
                request_count: read.count("request_count", &params.request_count, d.request_count),
                min_concurrency: read.count("min", &params.min, d.min_concurrency),
                max: read.count("max", &params.max, d.max),
            })
        }
    };
    let d = WindowConfig::default();
    let window = WindowConfig {
        min_samples: u32::try_from(read.count(
            "window_samples",
            &params.window_samples,
            u64::from(d.min_samples),
        ))
        .unwrap_or(u32::MAX),
        min_time_ns: read.duration("window", &params.window, d.min_time_ns),
        min_rtt_ns: read.duration_or_zero("min_rtt", &params.min_rtt, d.min_rtt_ns),
    };
    let reserve_permille = read.ratio("reserve", &params.reserve, 100);
    if reserve_permille >= 500 {
        read.wrong(
            params.reserve.as_ref(),
            "`adaptive.reserve` is a ratio below 0.5 (sheddable requests are kept out of twice it)"
                .to_owned(),
        );
    }
    let (min, max) = match strategy {
        Strategy::Aimd(c) => (c.min, c.max),
        Strategy::Vegas(c) => (c.min, c.max),
        Strategy::Gradient2(c) => (c.min, c.max),
        Strategy::Gradient(c) => (c.min_concurrency, c.max),
    };
    if min > max {
        let message = format!("`adaptive.min` ({min}) is above `adaptive.max` ({max})");
        read.errors.at(Some(span.clone()), rule, message);
    }
    let lease = read
        .errors
        .duration(raw.lease.as_ref(), "`lease`", rule, false)
        .unwrap_or(DEFAULT_LEASE);
    if errors_since(read.errors, failures) {
        return (None, None);
    }
    let ceiling = Concurrency::new(max, lease).map(Limit::from);
    let lease_ns = u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX);
    match ceiling {
        Ok(limit) => (
            Some(limit),
            Some(Adaptive {
                strategy,
                window,
                reserve_permille,
                lease_ns,
                queue: None,
            }),
        ),
        Err(e) => {
            errors.at(Some(span.clone()), rule, e.to_string());
            (None, None)
        }
    }
}

fn errors_since(errors: &Errors<'_>, before: usize) -> bool {
    errors.found.len() > before
}

/// Reads `[limit.adaptive]` for one strategy, recording what is wrong.
struct Reader<'r, 'e, 'f> {
    params: &'r RawAdaptive,
    strategy: &'static str,
    rule: Option<&'r str>,
    errors: &'e mut Errors<'f>,
    table: Range<usize>,
}

impl Reader<'_, '_, '_> {
    /// Refuses parameters the strategy does not take.
    fn takes_only(&mut self) {
        let takes: &[&str] = match self.strategy {
            "aimd" => &["initial", "min", "max", "backoff", "timeout"],
            "vegas" => &["initial", "min", "max", "probe_multiplier"],
            "gradient2" => &[
                "initial",
                "min",
                "max",
                "smoothing",
                "queue_size",
                "long_window",
                "tolerance",
            ],
            _ => &[
                "min",
                "max",
                "interval",
                "percentile",
                "buffer",
                "min_rtt_interval",
                "jitter",
                "request_count",
            ],
        };
        let common = ["window", "window_samples", "min_rtt", "reserve"];
        for field in self.params.given() {
            if !takes.contains(&field) && !common.contains(&field) {
                let message = format!(
                    "`adaptive.{field}` does not apply to the `{}` strategy, which takes {} (and {})",
                    self.strategy,
                    takes.join(", "),
                    common.join(", ")
                );
                self.errors.at(Some(self.table.clone()), self.rule, message);
            }
        }
    }

    fn wrong<T>(&mut self, at: Option<&Spanned<T>>, message: String) {
        let at = at.map_or(self.table.clone(), Spanned::span);
        self.errors.at(Some(at), self.rule, message);
    }

    /// A count above zero.
    fn count(&mut self, field: &str, value: &Option<Spanned<i64>>, default: u64) -> u64 {
        match value {
            Some(v) => self
                .errors
                .whole(v, &format!("`adaptive.{field}`"), self.rule, false)
                .unwrap_or(default),
            None => default,
        }
    }

    /// A count, zero allowed.
    fn whole(&mut self, field: &str, value: &Option<Spanned<i64>>, default: u64) -> u64 {
        match value {
            Some(v) => self
                .errors
                .whole(v, &format!("`adaptive.{field}`"), self.rule, true)
                .unwrap_or(default),
            None => default,
        }
    }

    /// A ratio (`0.2`) in thousandths.
    fn ratio(&mut self, field: &str, value: &Option<Spanned<RawNumber>>, default: u64) -> u64 {
        let Some(v) = value else {
            return default;
        };
        let text = match v.get_ref() {
            RawNumber::Int(n) => n.to_string(),
            RawNumber::Float(x) => format!("{x}"),
        };
        match ratewarden_core::parse_decimal(&text, 1000) {
            Ok(n) => n,
            Err(e) => {
                let message = format!(
                    "`adaptive.{field}` is a number with at most three decimals, like 0.25: {e}"
                );
                self.errors.at(Some(v.span()), self.rule, message);
                default
            }
        }
    }

    fn duration(&mut self, field: &str, value: &Option<Spanned<String>>, default: u64) -> u64 {
        self.errors
            .duration(
                value.as_ref(),
                &format!("`adaptive.{field}`"),
                self.rule,
                false,
            )
            .map_or(default, nanos)
    }

    fn duration_or_zero(
        &mut self,
        field: &str,
        value: &Option<Spanned<String>>,
        default: u64,
    ) -> u64 {
        self.errors
            .duration(
                value.as_ref(),
                &format!("`adaptive.{field}`"),
                self.rule,
                true,
            )
            .map_or(default, nanos)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
