//! `/metrics`: what each rule did, how long decisions took, in flight, shed, what the store
//! holds and had to do (keys, bytes, evictions, late timeouts), version.

pub(crate) mod adaptive;
mod prefetch;

use std::fmt;
use std::sync::{Arc, OnceLock};

use super::store::AnyStore;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use ratewarden_core::Clock;
use ratewarden_memory::StoreStats;
use ratewarden_policy::{Engine, OnStoreFailure};
use ratewarden_redis::BreakerState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OffenderLabels {
    rule: String,
    /// `limited` or `shadow`.
    kind: &'static str,
    rank: u8,
    key: String,
}

/// Offenders per rule and kind in `ratewarden_top_offender`: the cardinality stays at most
/// rules × 2 × this, whoever is sending.
const TOP_GAUGED: usize = 3;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettledLabels {
    rule: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvictedLabels {
    state: &'static str,
}

/// What the store reports at a scrape: the in-memory store's stats, or the Redis store's
/// breaker and late timeouts.
#[derive(Debug, Default)]
struct StoreFigures {
    memory: Option<StoreStats>,
    breaker: Option<BreakerState>,
    late_timeouts: Option<u64>,
}

impl StoreFigures {
    fn of(store: &AnyStore) -> Self {
        Self {
            memory: store.memory_stats(),
            breaker: store.breaker(),
            late_timeouts: store.late_timeouts(),
        }
    }

    /// Writes them, in the families documented in `docs/serving.md`.
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let mut gauge = |name: &str, help: &str, value: i64| {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        };
        if let Some(stats) = &self.memory {
            let bytes = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            gauge(
                "keys",
                "Keys held by the in-memory store",
                bytes(stats.keys),
            )?;
            gauge(
                "store_key_bytes",
                "Heap bytes of the keys the in-memory store holds (keys longer than 24 bytes; \
                 with a 64-byte slot per key and the states' heap, what [store] max_bytes bounds)",
                bytes(stats.key_bytes),
            )?;
            gauge(
                "store_state_bytes",
                "Heap bytes of the states the in-memory store holds (sliding logs' entries, \
                 concurrency permits), counted by [store] max_bytes",
                bytes(stats.state_bytes),
            )?;
            gauge(
                "store_allocated_bytes",
                "Bytes the in-memory store has allocated for its keys and states",
                bytes(stats.allocated_bytes),
            )?;
        }
        // The in-memory store has no breaker and makes no calls that could be late: both
        // series are 0 on it, so a dashboard or an alert on them reads 0, not "no data".
        let breaker = match self.breaker {
            None | Some(BreakerState::Closed) => 0,
            Some(BreakerState::Open) => 1,
            Some(BreakerState::HalfOpen) => 2,
        };
        gauge(
            "store_breaker",
            "The shared store's circuit breaker: 0 closed, 1 open (failing fast), 2 half-open \
             (probing); always 0 on the in-memory store, which cannot fail",
            breaker,
        )?;
        if let Some(stats) = &self.memory {
            let mut family = encoder.encode_descriptor(
                "store_evicted",
                "Keys the full in-memory store dropped to make room, by the state they were \
                 in: fresh (deciding as a new key would: nothing changes), live (budget left: \
                 they start afresh), limited (only when nothing else could go; still answered \
                 as limited until their state would have been fresh)",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (state, value) in [
                ("fresh", stats.evicted_fresh),
                ("live", stats.evicted_live),
                ("limited", stats.evicted_limited),
            ] {
                ConstCounter::new(value).encode(family.encode_family(&EvictedLabels { state })?)?;
            }
            let refused = ConstCounter::new(stats.rejected_new_keys);
            refused.encode(encoder.encode_descriptor(
                "store_rejected_new_keys",
                "Requests of new keys the full in-memory store refused (when_full = \"reject\", \
                 or no room could be made without resetting a limited key)",
                None,
                refused.metric_type(),
            )?)?;
        }
        let late = ConstCounter::new(self.late_timeouts.unwrap_or(0));
        late.encode(encoder.encode_descriptor(
            "store_late_timeouts",
            "Shared store calls that missed their deadline because this process was too \
             busy to see the answer in time, not because Redis was slow (not held against \
             Redis by the breaker; the rule's on_store_failure answered); always 0 on the \
             in-memory store",
            None,
            late.metric_type(),
        )?)?;
        Ok(())
    }
}

pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) decision_seconds: Histogram,
    pub(crate) in_flight: Gauge,
    shed: Family<ReasonLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    responses: Family<StatusLabels, Counter>,
    tls_failed: Family<ListenerLabels, Counter>,
    /// Each listener's counter of 200s (gateway, api, admin), taken from `responses` once:
    /// nearly every response is one, and the family's lookup hashes the labels with
    /// SipHash under a lock. The listeners the server starts with take theirs at start,
    /// so their series exist at 0 before the first answer (a `rate()` over a series that
    /// appears at its first increment misses that increment, and a dashboard shows "no
    /// data" until it); another takes its own at its first answer.
    ok: [OnceLock<Counter>; 3],
    /// The gateway's requests by the path that served them: the lean one, then hyper's.
    /// Taken from their family at start, so a request pays one atomic add.
    gateway_path: [Counter; 2],
    /// Envoy quota service streams open now.
    quota_streams: Gauge,
    /// Bucket actions sent to Envoys: a token bucket, deny-all, abandon.
    quota_actions: Family<ActionLabels, Counter>,
    /// Reservations the gateway settled from the answer, by rule and result.
    settled: Family<SettledLabels, Counter>,
}

/// Reads the engine's own per-rule counters at scrape time, so a decision pays for no
/// metric of its own: `decisions`, `keys` and `config_version`.
struct EngineCollector {
    engine: Arc<Engine<AnyStore>>,
    /// For the top offenders' decay.
    clock: Arc<dyn Clock>,
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
                 the request), shadow_allowed and shadow_rejected (would have allowed or \
                 rejected, in shadow mode or outside a rollout's share: with allowed, rejected \
                 and skipped, every request the rule matched), and failed_open, failed_closed or fell_back (the store failed and \
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
                    ("shadow_allowed", s.shadow_allowed),
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
        {
            let mut family = encoder.encode_descriptor(
                "top_offender",
                "The keys each rule rejected most (kind=limited) or would have rejected most \
                 (kind=shadow), the top 3 per rule and kind: decayed hits, halved every \
                 minute (Space-Saving, at most 1% of the rule's recent hits too high). API \
                 keys appear as their digest. All of them: GET /v1/top on this listener",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for top in self.engine.top_all(self.clock.now()) {
                for (kind, report) in [("limited", &top.limited), ("shadow", &top.shadow)] {
                    for (rank, offender) in report.keys.iter().take(TOP_GAUGED).enumerate() {
                        let labels = OffenderLabels {
                            rule: top.rule.clone(),
                            kind,
                            rank: rank as u8 + 1,
                            key: offender.key.clone(),
                        };
                        ConstGauge::new(offender.count).encode(family.encode_family(&labels)?)?;
                    }
                }
            }
        }
        StoreFigures::of(self.engine.store()).encode(&mut encoder)?;
        adaptive::encode(&self.engine, &mut encoder)?;
        prefetch::encode(&self.engine, &mut encoder)?;
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
    /// The server's metrics; `listeners` are the listeners it starts with (`gateway`,
    /// `api`, `admin`), whose 200s are counted from 0 at once.
    pub(crate) fn new(
        engine: Arc<Engine<AnyStore>>,
        clock: Arc<dyn Clock>,
        listeners: &[&'static str],
    ) -> Self {
        let mut registry = Registry::with_prefix("ratewarden");
        registry.register_collector(Box::new(EngineCollector { engine, clock }));
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
            "Requests answered 503 to protect the server or its upstream, by reason: \
             connections, in_flight (before any rule), adaptive (an adaptive concurrency rule)",
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
        let tls_failed = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "tls_handshakes_failed",
            "TLS handshakes that failed or timed out (`header_read_timeout`), by listener: \
             clients without a certificate the listener requires, with only old protocol \
             versions, or that are not speaking TLS",
            tls_failed.clone(),
        );
        let paths = Family::<PathLabels, Counter>::default();
        registry.register(
            "gateway_path",
            "Gateway requests by the HTTP/1.1 path that served them: lean (the gateway's own, \
             for plain GET and HEAD) or hyper (everything the lean path hands over: other \
             methods, bodies, forwarding headers from the client, rules it does not serve)",
            paths.clone(),
        );
        let gateway_path =
            ["lean", "hyper"].map(|path| paths.get_or_create(&PathLabels { path }).clone());
        let quota_streams = Gauge::default();
        registry.register(
            "quota_streams",
            "Envoy rate limit quota service (RLQS) streams open now: one per Envoy",
            quota_streams.clone(),
        );
        let quota_actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "quota_actions",
            "Bucket actions sent to Envoys over RLQS, by action: share (a token bucket of the \
             Envoy's share), deny_all (a share of none), abandon (a bucket no rule takes)",
            quota_actions.clone(),
        );
        let settled = Family::<SettledLabels, Counter>::default();
        registry.register(
            "settled",
            "Estimates the gateway settled from the upstream's answer (settle_from), by rule \
             and result: answer (at the cost the answer gave), absent (the answer gave none), \
             malformed (it gave one that could not be read), cut (the answer ended early), \
             late (past the rule's settle): all but answer leave the estimate standing",
            settled.clone(),
        );
        // Series that alerts watch exist at 0 from the start: a counter that appears only at
        // its first increment has no earlier sample, so `increase()` and `rate()` miss that
        // first failed reload or shed request (deploy/prometheus/alerts.yml).
        for result in ["ok", "error"] {
            let _ = reloads.get_or_create(&ResultLabels { result });
        }
        for reason in ["connections", "in_flight", "adaptive"] {
            let _ = shed.get_or_create(&ReasonLabels { reason });
        }
        let metrics = Self {
            registry,
            decision_seconds,
            in_flight,
            shed,
            reloads,
            responses,
            tls_failed,
            ok: Default::default(),
            gateway_path,
            quota_streams,
            quota_actions,
            settled,
        };
        for &listener in listeners {
            let _ = metrics.ok_counter(listener);
        }
        metrics
    }

    /// The counter of `listener`'s 200s, taken from `responses` at its first use.
    fn ok_counter(&self, listener: &'static str) -> Option<&Counter> {
        let slot = match listener {
            "gateway" => &self.ok[0],
            "api" => &self.ok[1],
            "admin" => &self.ok[2],
            _ => return None,
        };
        Some(slot.get_or_init(|| {
            self.responses
                .get_or_create(&StatusLabels {
                    listener,
                    code: 200,
                })
                .clone()
        }))
    }

    /// Counts an RLQS stream opened (`true`) or ended.
    pub(crate) fn quota_stream(&self, opened: bool) {
        if opened {
            self.quota_streams.inc();
        } else {
            self.quota_streams.dec();
        }
    }

    /// Counts a bucket action sent over RLQS (`share`, `deny_all` or `abandon`).
    pub(crate) fn quota_action(&self, action: &'static str) {
        self.quota_actions
            .get_or_create(&ActionLabels { action })
            .inc();
    }

    /// Counts an estimate settled from the answer under `rule`: `answer`, or why the
    /// estimate stood (`absent`, `malformed`, `cut`, `late`).
    pub(crate) fn settled(&self, rule: &str, result: &'static str) {
        self.settled
            .get_or_create(&SettledLabels {
                rule: rule.to_owned(),
                result,
            })
            .inc();
    }

    pub(crate) fn shed(&self, reason: &'static str) {
        self.shed.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Requests shed so far, by reason (`in_flight`, `connections`).
    pub(crate) fn shed_counts(&self) -> [(&'static str, u64); 2] {
        ["in_flight", "connections"].map(|reason| {
            (
                reason,
                self.shed.get_or_create(&ReasonLabels { reason }).get(),
            )
        })
    }

    /// Counts a gateway request served on the lean path, or by hyper.
    pub(crate) fn gateway_path(&self, lean: bool) {
        self.gateway_path[usize::from(!lean)].inc();
    }

    pub(crate) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    pub(crate) fn tls_handshake_failed(&self, listener: &'static str) {
        self.tls_failed
            .get_or_create(&ListenerLabels { listener })
            .inc();
    }

    pub(crate) fn responded(&self, listener: &'static str, code: u16) {
        if let Some(ok) = (code == 200).then(|| self.ok_counter(listener)).flatten() {
            ok.inc();
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Fixed figures, as a store would report them.
    #[derive(Debug)]
    struct Fixed(StoreFigures);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
            self.0.encode(&mut encoder)
        }
    }

    fn render(figures: StoreFigures) -> String {
        let mut registry = Registry::with_prefix("ratewarden");
        registry.register_collector(Box::new(Fixed(figures)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    /// A late timeout cannot be provoked on demand through a real server (it needs the
    /// process starved at the moment Redis answers): its rendering is checked here.
    #[test]
    fn the_redis_store_shows_its_late_timeouts_and_breaker() {
        let text = render(StoreFigures {
            memory: None,
            breaker: Some(BreakerState::HalfOpen),
            late_timeouts: Some(7),
        });
        assert!(
            text.contains("# TYPE ratewarden_store_late_timeouts counter"),
            "{text}"
        );
        assert!(
            text.contains("\nratewarden_store_late_timeouts_total 7\n"),
            "{text}"
        );
        assert!(text.contains("\nratewarden_store_breaker 2\n"), "{text}");
        assert!(!text.contains("ratewarden_keys"), "{text}");
        assert!(!text.contains("evicted"), "{text}");
    }

    #[test]
    fn the_memory_store_shows_its_keys_bytes_and_evictions() {
        let text = render(StoreFigures {
            memory: Some(StoreStats {
                keys: 3,
                key_bytes: 120,
                state_bytes: 640,
                allocated_bytes: 4096,
                evicted_fresh: 1,
                evicted_live: 2,
                evicted_limited: 4,
                rejected_new_keys: 5,
                contention: 0,
            }),
            ..StoreFigures::default()
        });
        for line in [
            "ratewarden_keys 3",
            "ratewarden_store_key_bytes 120",
            "ratewarden_store_state_bytes 640",
            "ratewarden_store_allocated_bytes 4096",
            r#"ratewarden_store_evicted_total{state="fresh"} 1"#,
            r#"ratewarden_store_evicted_total{state="live"} 2"#,
            r#"ratewarden_store_evicted_total{state="limited"} 4"#,
            "ratewarden_store_rejected_new_keys_total 5",
        ] {
            assert!(
                text.contains(&format!("\n{line}\n")),
                "missing `{line}` in:\n{text}"
            );
        }
        // No breaker, no late calls: 0, so a panel or alert on them reads 0 from the start.
        assert!(text.contains("\nratewarden_store_breaker 0\n"), "{text}");
        assert!(
            text.contains("\nratewarden_store_late_timeouts_total 0\n"),
            "{text}"
        );
    }
}
