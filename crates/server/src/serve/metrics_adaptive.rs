//! `/metrics` for adaptive concurrency rules: the learnt limit and the in-flight count per
//! rule and key (a bounded set: keys come from clients), and requests shed per class.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use ratewarden_policy::Engine;

use super::store::AnyStore;

/// The most limiters a scrape shows (the busiest first).
const SHOWN: usize = 100;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    rule: String,
    key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

/// Writes the adaptive families; nothing when no adaptive rule has decided yet.
pub(super) fn encode(
    engine: &Engine<AnyStore>,
    encoder: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    let states = engine.adaptive_states(SHOWN);
    if states.is_empty() {
        return Ok(());
    }
    // `rule@fingerprint|value`: the rule's name and the key's value apart.
    let labels = |key: &str| {
        let (rule, value) = key.split_once('|').unwrap_or((key, ""));
        let rule = rule.rsplit_once('@').map_or(rule, |(name, _)| name);
        KeyLabels {
            rule: rule.to_owned(),
            key: value.to_owned(),
        }
    };
    for (name, help, value) in [
        (
            "adaptive_limit",
            "The concurrency limit an adaptive rule has learnt, per rule and key (the busiest keys)",
            (|s: &ratewarden_policy::AdaptiveState| s.limit) as fn(&_) -> u64,
        ),
        (
            "adaptive_in_flight",
            "Requests in flight under an adaptive rule, per rule and key (the busiest keys)",
            |s: &ratewarden_policy::AdaptiveState| s.in_flight,
        ),
    ] {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for state in &states {
            let gauge = ConstGauge::new(i64::try_from(value(state)).unwrap_or(i64::MAX));
            gauge.encode(family.encode_family(&labels(&state.key))?)?;
        }
    }
    let mut family = encoder.encode_descriptor(
        "adaptive_shed",
        "Requests adaptive rules shed (503), per criticality class",
        None,
        MetricType::Counter,
    )?;
    for (class, count) in engine.adaptive_shed() {
        let labels = ClassLabels {
            class: class.as_str(),
        };
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
