//! `/metrics` for `prefetch` rules and `scope = "global"` rules (allowances from the home
//! store): allowances fetched, units fetched and given back, and decisions made locally or
//! waiting on the store.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use ratewarden_policy::{Engine, PrefetchStats};

use crate::serve::store::AnyStore;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhereLabels {
    decided: &'static str,
}

/// Writes the prefetch families (`ratewarden_prefetch_*`) and the global rules' families
/// (`ratewarden_global_*`, the same counts against the home store); each nothing until such
/// a rule has decided.
pub(crate) fn encode(
    engine: &Engine<AnyStore>,
    encoder: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    family(
        "prefetch",
        "prefetch rules",
        "the store",
        engine.prefetch_stats(),
        encoder,
    )?;
    family(
        "global",
        "global rules",
        "the home store",
        engine.global_stats(),
        encoder,
    )
}

/// One set of allowance families, named `prefix_*`.
fn family(
    prefix: &str,
    rules: &str,
    store: &str,
    s: PrefetchStats,
    encoder: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    if s.local_decisions == 0 && s.remote_decisions == 0 {
        return Ok(());
    }
    let counters: [(&str, String, u64); 3] = [
        (
            "fetches",
            format!("Calls to {store} that took an allowance of {rules} (a partial grant of up to the units asked)"),
            s.fetches,
        ),
        (
            "units_fetched",
            format!("Units those calls granted, charged in {store} before any was spent"),
            s.units_fetched,
        ),
        (
            "units_returned",
            format!("Unspent units given back to {store} (lapsed allowances, a stopping server)"),
            s.units_returned,
        ),
    ];
    for (name, help, value) in counters {
        let name = format!("{prefix}_{name}");
        let metric = encoder.encode_descriptor(&name, &help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(metric)?;
    }
    {
        let help = format!(
            "Decisions of {rules} by where they were made: local (from an allowance in hand, \
             or refused while {store} is contested) or remote (waited on a call to {store})"
        );
        let name = format!("{prefix}_decisions");
        let mut family = encoder.encode_descriptor(&name, &help, None, MetricType::Counter)?;
        for (decided, value) in [("local", s.local_decisions), ("remote", s.remote_decisions)] {
            ConstCounter::new(value).encode(family.encode_family(&WhereLabels { decided })?)?;
        }
    }
    let (name, help) = (
        format!("{prefix}_keys"),
        format!("Keys of {rules} holding an allowance now"),
    );
    let keys = encoder.encode_descriptor(&name, &help, None, MetricType::Gauge)?;
    ConstGauge::new(s.keys as i64).encode(keys)
}
