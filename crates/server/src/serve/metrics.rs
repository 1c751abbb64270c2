//! `/metrics`: what each rule did, how long decisions took, in flight, shed, keys, version.

use std::fmt;
use std::sync::Arc;

use super::store::AnyStore;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use ratewarden_policy::{Engine, OnStoreFailure};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    listener: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) decision_seconds: Histogram,
    pub(crate) in_flight: Gauge,
    shed: Family<ReasonLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    responses: Family<StatusLabels, Counter>,
}

/// Reads the engine's own per-rule counters at scrape time, so a decision pays for no
/// metric of its own: `decisions`, `keys` and `config_version`.
struct EngineCollector {
    engine: Arc<Engine<AnyStore>>,
}

impl fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EngineCollector")
    }
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let rules = self.engine.rule_list();
        let stats = self.engine.stats();
        {
            let mut family = encoder.encode_descriptor(
                "decisions",
                "Decisions per rule and outcome since its rules came into force: allowed, \
                 rejected, skipped (allowed by this rule, not charged: another rule rejected \
                 the request), shadow_rejected (would have rejected in shadow mode or outside a \
                 rollout), and failed_open, failed_closed or fell_back (the store failed and \
                 the rule's on_store_failure answered; also counted as allowed or rejected). \
                 envoyproxy/ratelimit YAML rules are labelled by their place in the file, \
                 domain/key=value/key2",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            // YAML rules fail closed (the call is UNAVAILABLE for Envoy to decide).
            let envoy = self.engine.envoy_stats();
            let failed_as = |name: &str| match rules
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.on_store_failure)
            {
                Some(OnStoreFailure::Closed) => "failed_closed",
                Some(OnStoreFailure::Local { .. }) => "fell_back",
                _ => "failed_open",
            };
            let native = stats.iter().map(|(name, s)| (name, s, failed_as(name)));
            let yaml = envoy.iter().map(|(label, s)| (label, s, "failed_closed"));
            for (name, s, failed) in native.chain(yaml) {
                for (outcome, value) in [
                    ("allowed", s.allowed),
                    ("rejected", s.rejected),
                    ("skipped", s.skipped),
                    ("shadow_rejected", s.would_have_rejected),
                    (failed, s.store_failures),
                ] {
                    let labels = RuleLabels {
                        rule: name.clone(),
                        outcome,
                    };
                    ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        if let Some(len) = self.engine.store().len() {
            let keys = ConstGauge::new(len as i64);
            keys.encode(encoder.encode_descriptor(
                "keys",
                "Keys held by the in-memory store",
                None,
                keys.metric_type(),
            )?)?;
        }
        if let Some(state) = self.engine.store().breaker() {
            let value = match state {
                ratewarden_redis::BreakerState::Closed => 0,
                ratewarden_redis::BreakerState::Open => 1,
                ratewarden_redis::BreakerState::HalfOpen => 2,
            };
            let breaker = ConstGauge::new(value);
            breaker.encode(encoder.encode_descriptor(
                "store_breaker",
                "The shared store's circuit breaker: 0 closed, 1 open (failing fast), 2 half-open (probing)",
                None,
                breaker.metric_type(),
            )?)?;
        }
        let version = ConstGauge::new(self.engine.version() as i64);
        version.encode(encoder.encode_descriptor(
            "config_version",
            "The version of the rules in force: 1 at start, one more per reload",
            None,
            version.metric_type(),
        )?)?;
        Ok(())
    }
}

impl Metrics {
    pub(crate) fn new(engine: Arc<Engine<AnyStore>>) -> Self {
        let mut registry = Registry::with_prefix("ratewarden");
        registry.register_collector(Box::new(EngineCollector { engine }));
        // 1 µs to about 4 s.
        let decision_seconds = Histogram::new(exponential_buckets(1e-6, 4.0, 12));
        registry.register(
            "decision_duration_seconds",
            "Time to decide a request against every matching rule, store included",
            decision_seconds.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "in_flight",
            "Requests being served now (the load-shedding count)",
            in_flight.clone(),
        );
        let shed = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "shed",
            "Requests answered 503 before any rule, to protect the server",
            shed.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reloads, by result (ok, error: the old rules stayed)",
            reloads.clone(),
        );
        let responses = Family::<StatusLabels, Counter>::default();
        registry.register(
            "responses",
            "Responses by listener and status code",
            responses.clone(),
        );
        Self {
            registry,
            decision_seconds,
            in_flight,
            shed,
            reloads,
            responses,
        }
    }

    pub(crate) fn shed(&self, reason: &'static str) {
        self.shed.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    pub(crate) fn responded(&self, listener: &'static str, code: u16) {
        self.responses
            .get_or_create(&StatusLabels { listener, code })
            .inc();
    }

    /// The Prometheus text exposition.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
