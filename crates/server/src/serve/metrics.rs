//! `/metrics`: what each rule did, how long decisions took, in flight, shed, keys, version.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use ratewarden_policy::{OnStoreFailure, Verdict};

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
    decisions: Family<RuleLabels, Counter>,
    pub(crate) decision_seconds: Histogram,
    pub(crate) in_flight: Gauge,
    shed: Family<ReasonLabels, Counter>,
    pub(crate) keys: Gauge,
    pub(crate) version: Gauge,
    reloads: Family<ResultLabels, Counter>,
    responses: Family<StatusLabels, Counter>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("ratewarden");
        let decisions = Family::<RuleLabels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions per rule and outcome: allowed, rejected, shadow_rejected (would have \
             rejected in shadow mode or outside a rollout), failed_open, failed_closed, \
             fell_back (the store failed and the rule's on_store_failure answered)",
            decisions.clone(),
        );
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
        let keys = Gauge::default();
        registry.register("keys", "Keys held by the in-memory store", keys.clone());
        let version = Gauge::default();
        registry.register(
            "config_version",
            "The version of the rules in force: 1 at start, one more per reload",
            version.clone(),
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
            decisions,
            decision_seconds,
            in_flight,
            shed,
            keys,
            version,
            reloads,
            responses,
        }
    }

    /// Counts each matching rule's outcome.
    pub(crate) fn record(&self, verdict: &Verdict) {
        for o in &verdict.outcomes {
            let rule = &verdict.rules[o.rule];
            let outcome = if o.store_failed {
                match rule.on_store_failure {
                    OnStoreFailure::Open => "failed_open",
                    OnStoreFailure::Closed => "failed_closed",
                    OnStoreFailure::Local { .. } => "fell_back",
                }
            } else {
                match (o.enforced, o.said_no()) {
                    (true, false) => "allowed",
                    (true, true) => "rejected",
                    (false, true) => "shadow_rejected",
                    (false, false) => continue,
                }
            };
            self.decisions
                .get_or_create(&RuleLabels {
                    rule: rule.name.clone(),
                    outcome,
                })
                .inc();
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
