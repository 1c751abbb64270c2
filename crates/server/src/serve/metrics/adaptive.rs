//! `/metrics` for adaptive concurrency rules: the learnt limit and the in-flight count per
//! rule and key (a bounded set: keys come from clients), requests shed per class and reason,
//! and their queues: how many wait and how long those let in waited, per rule and class.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use ratewarden_policy::{Engine, WAIT_BUCKETS_NS};

use crate::serve::store::AnyStore;

/// The most limiters a scrape shows (the busiest first).
const SHOWN: usize = 100;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    rule: String,
    key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    class: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    rule: String,
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
        "Requests adaptive rules shed (503), per criticality class and reason (limit: no \
         room and no queue to wait in; queue_full: its lanes were full; waited_too_long: \
         past the queue's max_wait)",
        None,
        MetricType::Counter,
    )?;
    for (class, reason, count) in engine.adaptive_shed_reasons() {
        let labels = ShedLabels {
            class: class.as_str(),
            reason: reason.as_str(),
        };
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    let queues = engine.adaptive_queues();
    if queues.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(
        "adaptive_queue_waiting",
        "Requests waiting in an adaptive rule's queue, per rule and class",
        None,
        MetricType::Gauge,
    )?;
    for q in &queues {
        let labels = QueueLabels {
            rule: q.rule.clone(),
            class: q.class.as_str(),
        };
        let gauge = ConstGauge::new(i64::try_from(q.waiting).unwrap_or(i64::MAX));
        gauge.encode(family.encode_family(&labels)?)?;
    }
    let mut family = encoder.encode_descriptor(
        "adaptive_queue_wait_seconds",
        "How long requests an adaptive rule's queue let in had waited, per rule and class",
        None,
        MetricType::Histogram,
    )?;
    for q in &queues {
        let labels = QueueLabels {
            rule: q.rule.clone(),
            class: q.class.as_str(),
        };
        let w = &q.waits;
        let mut buckets: Vec<(f64, u64)> = WAIT_BUCKETS_NS
            .iter()
            .zip(w.buckets)
            .map(|(&bound, n)| (bound as f64 / 1e9, n))
            .collect();
        let counted: u64 = w.buckets.iter().sum();
        buckets.push((f64::MAX, w.count.saturating_sub(counted)));
        family
            .encode_family(&labels)?
            .encode_histogram::<QueueLabels>(w.sum_ns as f64 / 1e9, w.count, &buckets, None)?;
    }
    Ok(())
}
