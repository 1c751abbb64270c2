//! Envoy's gradient controller: a latency percentile each interval against a min RTT that
//! is measured now and then with the concurrency pinned low.

use super::{Controller, Jitter, Sample};

/// The gradient controller's parameters (Envoy's defaults: p50, buffer 25 %, min RTT every
/// 60 s ± 15 % over 50 requests at concurrency 3, max 1000; the update interval, which
/// Envoy requires, defaults here to the docs' 100 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GradientConfig {
    /// How often the limit is recomputed, in nanoseconds.
    pub interval_ns: u64,
    /// The percentile of an interval's RTTs compared, in thousandths (500: the median).
    pub percentile_permille: u64,
    /// How far above the min RTT latency may be before the limit comes down, in thousandths.
    pub buffer_permille: u64,
    /// How often the min RTT is measured again, in nanoseconds.
    pub min_rtt_interval_ns: u64,
    /// Up to this much of `min_rtt_interval` is added at random, in thousandths, so a fleet
    /// does not measure all at once.
    pub jitter_permille: u64,
    /// Requests the min RTT is measured over.
    pub request_count: u64,
    /// The concurrency while the min RTT is measured, and the lowest limit.
    pub min_concurrency: u64,
    /// The highest limit.
    pub max: u64,
}

impl Default for GradientConfig {
    fn default() -> Self {
        Self {
            interval_ns: 100_000_000,
            percentile_permille: 500,
            buffer_permille: 250,
            min_rtt_interval_ns: 60_000_000_000,
            jitter_permille: 150,
            request_count: 50,
            min_concurrency: 3,
            max: 1000,
        }
    }
}

/// Intervals in a row at the lowest limit that force a min RTT measurement (Envoy #10647:
/// a min RTT taken during a slow spell would otherwise hold the limit down for a minute).
const STUCK_AT_MIN: u32 = 5;

#[derive(Debug, Clone)]
enum Phase {
    /// Measuring the min RTT with the limit pinned; the limit to go back to.
    Measuring {
        since: u64,
        rtts: Vec<u64>,
        deferred: u64,
    },
    /// Adjusting the limit each interval.
    Running {
        interval_end: u64,
        rtts: Vec<u64>,
        max_in_flight: u64,
        dropped: bool,
        next_measure: u64,
    },
}

/// Envoy's gradient controller.
///
/// It starts by measuring the min RTT: the limit is pinned at `min_concurrency` and the
/// `percentile` of the next `request_count` RTTs is taken. Then each interval:
/// `gradient = clamp(min_rtt · (1 + buffer) / sample, 0.5, 2)` with `sample` the interval's
/// percentile, `l = L · gradient`, `L = clamp(⌊l + √l⌋, min_concurrency, max)`. Every
/// `min_rtt_interval` (plus jitter), or after five intervals in a row at the lowest limit,
/// it measures again.
///
/// Two departures from Envoy, each for a failure its issues record: a request that started
/// before a measurement began does not count towards it (it was queued behind the high
/// concurrency, and the min RTT would ratchet up under sustained load, Envoy #11579); and
/// the limit grows only when it was used (`in_flight · 2 ≥ L`) and an interval with a drop
/// takes the gradient 0.5, as in the other controllers here (the `√l` headroom would
/// otherwise take an idle or failing upstream's limit to the max).
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{Controller, Gradient, GradientConfig, Sample};
///
/// let config = GradientConfig { request_count: 2, ..GradientConfig::default() };
/// let mut g = Gradient::new(config, 100_000, 0, 1);
/// assert_eq!(g.limit(), 3); // pinned while the min RTT is measured
/// let s = Sample { rtt_ns: 10_000_000, in_flight: 3, dropped: false };
/// g.sample(20_000_000, s);
/// assert_eq!(g.sample(30_000_000, s), 3); // measured: 10 ms
/// assert_eq!(g.min_rtt(), Some(10_000_000));
/// ```
#[derive(Debug, Clone)]
pub struct Gradient {
    config: GradientConfig,
    min_rtt_threshold: u64,
    limit: u64,
    min_rtt: Option<u64>,
    phase: Phase,
    at_min: u32,
    jitter: Jitter,
}

impl Gradient {
    /// A controller measuring its min RTT from `now`; RTTs under `min_rtt_threshold` are
    /// ignored; `seed` drives the jitter.
    pub fn new(config: GradientConfig, min_rtt_threshold: u64, now: u64, seed: u64) -> Self {
        let min_concurrency = config.min_concurrency.max(1);
        Self {
            limit: min_concurrency,
            min_rtt: None,
            phase: Phase::Measuring {
                since: now,
                rtts: Vec::new(),
                deferred: min_concurrency,
            },
            config,
            min_rtt_threshold,
            at_min: 0,
            jitter: Jitter::new(seed),
        }
    }

    /// The min RTT measured last, in nanoseconds.
    pub fn min_rtt(&self) -> Option<u64> {
        self.min_rtt
    }

    /// Whether the min RTT is being measured (the limit pinned).
    pub fn measuring(&self) -> bool {
        matches!(self.phase, Phase::Measuring { .. })
    }

    fn lowest(&self) -> u64 {
        self.config.min_concurrency.max(1)
    }

    fn run(&mut self, now: u64) {
        let spread = self
            .config
            .min_rtt_interval_ns
            .saturating_mul(self.config.jitter_permille)
            / 1000;
        self.phase = Phase::Running {
            interval_end: now.saturating_add(self.config.interval_ns),
            rtts: Vec::new(),
            max_in_flight: 0,
            dropped: false,
            next_measure: now
                .saturating_add(self.config.min_rtt_interval_ns)
                .saturating_add(self.jitter.below(spread.saturating_add(1))),
        };
    }

    fn measure(&mut self, now: u64) {
        self.phase = Phase::Measuring {
            since: now,
            rtts: Vec::new(),
            deferred: self.limit,
        };
        self.at_min = 0;
        self.limit = self.lowest();
    }

    fn next_limit(&mut self, sample: u64, max_in_flight: u64, dropped: bool) -> u64 {
        let min_rtt = self.min_rtt.unwrap_or(sample) as f64;
        let buffer = 1.0 + self.config.buffer_permille as f64 / 1000.0;
        let gradient = if dropped {
            0.5
        } else {
            (min_rtt * buffer / sample.max(1) as f64).clamp(0.5, 2.0)
        };
        let l = self.limit as f64 * gradient;
        // Finite and non-negative: the cast only drops the fraction.
        let new = (l + l.sqrt()) as u64;
        let new = if new > self.limit && max_in_flight.saturating_mul(2) < self.limit {
            self.limit
        } else {
            new
        };
        new.clamp(self.lowest(), self.config.max.max(self.lowest()))
    }
}

/// The `permille` percentile of `rtts` by nearest rank (sorts them).
fn percentile(rtts: &mut [u64], permille: u64) -> Option<u64> {
    if rtts.is_empty() {
        return None;
    }
    rtts.sort_unstable();
    let n = rtts.len() as u64;
    let rank = (n * permille.min(1000)).div_ceil(1000).max(1);
    rtts.get(usize::try_from(rank - 1).ok()?).copied()
}

impl Controller for Gradient {
    fn sample(&mut self, now: u64, sample: Sample) -> u64 {
        if sample.rtt_ns < self.min_rtt_threshold && !sample.dropped {
            return self.limit;
        }
        match &mut self.phase {
            Phase::Measuring {
                since,
                rtts,
                deferred,
            } => {
                // Started before the measurement: queued behind a high concurrency. A
                // drop is no latency measurement either.
                if now.saturating_sub(sample.rtt_ns) < *since || sample.dropped {
                    return self.limit;
                }
                rtts.push(sample.rtt_ns);
                if (rtts.len() as u64) < self.config.request_count.max(1) {
                    return self.limit;
                }
                let deferred = *deferred;
                self.min_rtt = percentile(rtts, self.config.percentile_permille);
                self.limit = deferred.max(self.lowest());
                self.run(now);
            }
            Phase::Running {
                interval_end,
                rtts,
                max_in_flight,
                dropped,
                next_measure,
            } => {
                rtts.push(sample.rtt_ns);
                *max_in_flight = (*max_in_flight).max(sample.in_flight);
                *dropped |= sample.dropped;
                if now < *interval_end {
                    return self.limit;
                }
                let (max_in_flight, dropped, next_measure) =
                    (*max_in_flight, *dropped, *next_measure);
                if let Some(p) = percentile(rtts, self.config.percentile_permille) {
                    self.limit = self.next_limit(p, max_in_flight, dropped);
                }
                if let Phase::Running {
                    interval_end,
                    rtts,
                    max_in_flight,
                    dropped,
                    ..
                } = &mut self.phase
                {
                    *interval_end = now.saturating_add(self.config.interval_ns);
                    rtts.clear();
                    *max_in_flight = 0;
                    *dropped = false;
                }
                self.at_min = if self.limit == self.lowest() {
                    self.at_min + 1
                } else {
                    0
                };
                if now >= next_measure || self.at_min >= STUCK_AT_MIN {
                    self.measure(now);
                }
            }
        }
        self.limit
    }

    fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn s(ms: u64, in_flight: u64) -> Sample {
        Sample {
            rtt_ns: ms * MS,
            in_flight,
            dropped: false,
        }
    }

    /// Worked by hand: min RTT 10 ms (p50 of 10, 10, 12), buffer 25 %, intervals of
    /// 100 ms, from a limit of 3.
    #[test]
    fn hand_worked_vector() {
        let config = GradientConfig {
            request_count: 3,
            ..GradientConfig::default()
        };
        let mut g = Gradient::new(config, 100_000, 0, 9);
        g.sample(10 * MS, s(10, 3));
        g.sample(20 * MS, s(12, 3));
        assert_eq!(g.sample(30 * MS, s(10, 3)), 3);
        assert_eq!(g.min_rtt(), Some(10 * MS));
        assert!(!g.measuring());
        // Interval to 130 ms, p50 of (8, 9) = 8 ms: gradient = 12.5/8 = 1.5625,
        // l = 4.6875, L = ⌊4.6875 + 2.165⌋ = 6.
        g.sample(60 * MS, s(8, 3));
        assert_eq!(g.sample(130 * MS, s(9, 3)), 6);
        // p50 of (10, 10) = 10 ms: gradient 1.25, l = 7.5, L = ⌊7.5 + 2.739⌋ = 10.
        g.sample(140 * MS, s(10, 6));
        assert_eq!(g.sample(230 * MS, s(10, 6)), 10);
        // p50 of (25, 30, 40) = 30 ms: gradient = 12.5/30 → 0.5, l = 5, L = ⌊5 + 2.236⌋ = 7.
        g.sample(240 * MS, s(25, 10));
        g.sample(250 * MS, s(40, 10));
        assert_eq!(g.sample(330 * MS, s(30, 10)), 7);
        // p50 of (5) = 5 ms: gradient 2.5 → 2, l = 14, ⌊14 + 3.742⌋ = 17; but only 3 were
        // in flight (3·2 < 7): no growth.
        assert_eq!(g.sample(430 * MS, s(5, 3)), 7);
    }

    #[test]
    fn the_min_rtt_is_measured_again_after_its_interval() {
        let config = GradientConfig {
            request_count: 1,
            min_rtt_interval_ns: 1_000 * MS,
            jitter_permille: 0,
            ..GradientConfig::default()
        };
        let mut g = Gradient::new(config, 0, 0, 1);
        g.sample(10 * MS, s(10, 1));
        assert!(!g.measuring());
        g.sample(1_010 * MS, s(10, 3));
        assert!(g.measuring());
        assert_eq!(g.limit(), 3);
    }

    #[test]
    fn five_intervals_at_the_lowest_limit_force_a_measurement() {
        let config = GradientConfig {
            request_count: 1,
            ..GradientConfig::default()
        };
        let mut g = Gradient::new(config, 0, 0, 1);
        g.sample(10 * MS, s(10, 3));
        for i in 1..=4 {
            g.sample((10 + 100 * i) * MS, s(100, 3));
            assert!(!g.measuring(), "interval {i}");
        }
        g.sample(510 * MS, s(100, 3));
        assert!(g.measuring());
    }
}
