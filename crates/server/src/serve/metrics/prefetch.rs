//! `/metrics` for `prefetch` rules: allowances fetched, units fetched and given back, and
//! decisions made locally or waiting on the store.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use ratewarden_policy::Engine;

use crate::serve::store::AnyStore;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhereLabels {
    decided: &'static str,
}

/// Writes the prefetch families; nothing until a `prefetch` rule has decided.
pub(crate) fn encode(
    engine: &Engine<AnyStore>,
    encoder: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    let s = engine.prefetch_stats();
    if s.local_decisions == 0 && s.remote_decisions == 0 {
        return Ok(());
    }
    let counters: [(&str, &str, u64); 3] = [
        (
            "prefetch_fetches",
            "Store calls that took a prefetched allowance (a partial grant of up to the units asked)",
            s.fetches,
        ),
        (
            "prefetch_units_fetched",
            "Units those calls granted, charged in the store before any was spent",
            s.units_fetched,
        ),
        (
            "prefetch_units_returned",
            "Unspent units given back to the store (lapsed allowances, a stopping server)",
            s.units_returned,
        ),
    ];
    for (name, help, value) in counters {
        let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(metric)?;
    }
    {
        let mut family = encoder.encode_descriptor(
            "prefetch_decisions",
            "Decisions of prefetch rules by where they were made: local (from an allowance in \
             hand, or refused while the store is contested) or remote (waited on a store call)",
            None,
            MetricType::Counter,
        )?;
        for (decided, value) in [("local", s.local_decisions), ("remote", s.remote_decisions)] {
            ConstCounter::new(value).encode(family.encode_family(&WhereLabels { decided })?)?;
        }
    }
    let keys = encoder.encode_descriptor(
        "prefetch_keys",
        "Keys holding a prefetched allowance now",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(s.keys as i64).encode(keys)
}
