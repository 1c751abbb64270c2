//! The adaptive controllers' known failure modes, each from an issue of the projects they
//! come from, and their behaviour in front of a simulated saturated server.

use ratewarden_core::adaptive::{
    AimdConfig, Controller, Gradient, Gradient2Config, GradientConfig, Sample, Strategy,
    VegasConfig, WindowConfig,
};

const MS: u64 = 1_000_000;

/// Windows of 10 samples and 100 ms.
fn window() -> WindowConfig {
    WindowConfig {
        min_samples: 10,
        min_time_ns: 100 * MS,
        min_rtt_ns: 100_000,
    }
}

fn strategies() -> Vec<Strategy> {
    vec![
        Strategy::Aimd(AimdConfig {
            initial: 50,
            min: 5,
            max: 200,
            ..AimdConfig::default()
        }),
        Strategy::Vegas(VegasConfig {
            initial: 50,
            min: 5,
            max: 200,
            ..VegasConfig::default()
        }),
        Strategy::Gradient2(Gradient2Config {
            initial: 50,
            min: 5,
            max: 200,
            ..Gradient2Config::default()
        }),
        Strategy::Gradient(GradientConfig {
            request_count: 10,
            min_concurrency: 5,
            max: 200,
            ..GradientConfig::default()
        }),
    ]
}

/// Feeds `c` for `seconds`, 10 ms apart, each sample from `at(limit)`.
fn run(c: &mut dyn Controller, start: u64, seconds: u64, at: impl Fn(u64) -> Sample) -> u64 {
    let mut now = start;
    let mut highest = 0;
    for _ in 0..seconds * 100 {
        now += 10 * MS;
        let limit = c.limit();
        highest = highest.max(c.sample(now, at(limit)));
    }
    highest
}

/// Gets the Envoy controller out of its first min RTT measurement with healthy samples, so
/// every strategy starts the failure from a working limit.
fn warm(c: &mut dyn Controller) -> u64 {
    run(c, 0, 1, |limit| Sample {
        rtt_ns: 10 * MS,
        in_flight: limit,
        dropped: false,
    });
    1_000 * MS
}

#[test]
fn constant_timeouts_never_raise_the_limit() {
    for strategy in strategies() {
        let mut c = strategy.build(window(), 0, 7);
        let now = warm(&mut *c);
        let before = c.limit();
        // Every request times out after 5 s with the limit full: the RTT is the timeout,
        // so an average of RTTs learns it and a gradient reads "no queue".
        let highest = run(&mut *c, now, 60, |limit| Sample {
            rtt_ns: 5_000 * MS,
            in_flight: limit,
            dropped: true,
        });
        assert!(
            highest <= before,
            "{}: the limit climbed from {before} to {highest} under constant timeouts",
            strategy.name()
        );
        assert!(
            c.limit() <= 10,
            "{}: the limit is still {} after a minute of timeouts",
            strategy.name(),
            c.limit()
        );
    }
}

#[test]
fn aimd_counts_an_rtt_over_its_timeout_as_a_drop() {
    let strategy = Strategy::Aimd(AimdConfig {
        initial: 50,
        min: 5,
        max: 200,
        timeout_ns: 1_000 * MS,
        ..AimdConfig::default()
    });
    let mut c = strategy.build(window(), 0, 7);
    let highest = run(&mut *c, 0, 10, |limit| Sample {
        rtt_ns: 1_500 * MS,
        in_flight: limit,
        dropped: false,
    });
    assert_eq!(highest, 50);
    assert_eq!(c.limit(), 5);
}

#[test]
fn the_queue_term_does_not_creep_the_limit_up_when_it_is_not_used() {
    for strategy in strategies() {
        let mut c = strategy.build(window(), 0, 7);
        let now = warm(&mut *c);
        let idle = |_| Sample {
            rtt_ns: 10 * MS,
            in_flight: 2,
            dropped: false,
        };
        // The window the busy warm-up left open closes first.
        run(&mut *c, now, 1, idle);
        let before = c.limit();
        // Two requests in flight, fast and steady, for ten minutes: nothing says the
        // upstream could take more, and the queue (or √L) headroom must not add up.
        let highest = run(&mut *c, now + 1_000 * MS, 600, idle);
        assert!(
            highest <= before.max(10),
            "{}: the limit crept from {before} to {highest} with two in flight",
            strategy.name()
        );
    }
}

#[test]
fn the_min_rtt_does_not_ratchet_up_under_sustained_load() {
    let config = GradientConfig {
        request_count: 20,
        min_rtt_interval_ns: 2_000 * MS,
        jitter_permille: 0,
        min_concurrency: 3,
        max: 200,
        ..GradientConfig::default()
    };
    let mut g = Gradient::new(config, 100_000, 0, 1);
    let sample = |ms, in_flight| Sample {
        rtt_ns: ms * MS,
        in_flight,
        dropped: false,
    };
    // The first measurement, unloaded: 10 ms.
    let mut now = 0;
    for _ in 0..20 {
        now += 10 * MS;
        g.sample(now, sample(10, 1));
    }
    assert_eq!(g.min_rtt(), Some(10 * MS));
    // A minute of sustained load, latency growing with concurrency. When a measurement
    // starts, the requests let in at the old, high limit are still coming back, slowly
    // (150 ms: they queued behind each other); those started after it, at the pinned
    // concurrency, take 10 ms again.
    let mut since = None;
    let mut measurements = 0;
    for _ in 0..6_000 {
        now += 10 * MS;
        match (g.measuring(), since) {
            (true, None) => {
                since = Some(now);
                measurements += 1;
            }
            (false, Some(_)) => {
                since = None;
                assert_eq!(
                    g.min_rtt(),
                    Some(10 * MS),
                    "after measurement {measurements}"
                );
            }
            _ => {}
        }
        if let Some(start) = since {
            if now < start + 150 * MS {
                g.sample(now, sample(150, 100));
            }
            if now >= start + 10 * MS {
                g.sample(now, sample(10, 3));
            }
        } else {
            let limit = g.limit();
            g.sample(now, sample(10 + limit / 4, limit));
        }
    }
    assert!(measurements >= 10, "only {measurements} measurements");
    assert_eq!(g.min_rtt(), Some(10 * MS));
}

/// Gradient2's long RTT and Vegas's re-probed no-load RTT, learnt from windows the limit's
/// own queue shaped, followed that queue up under sustained load: the reference rose, the
/// limit rose `tolerance` (or the Vegas thresholds) above it, the queue with it, and so on
/// for as long as the load lasted (in `simulate load --phase 60s`, p99 5.8x the unloaded
/// one for Gradient2, 4.5x for Vegas). In front of 20 workers of 10 ms, saturated for ten
/// minutes, both must keep the limit near the workers: the RTT is `10 ms · limit / 20`, so a
/// limit of 40 is a queue as long as the service.
#[test]
fn the_no_load_reference_does_not_ratchet_up_under_sustained_load() {
    let saturated = |limit: u64| Sample {
        rtt_ns: 10 * MS * limit.max(20) / 20,
        in_flight: limit,
        dropped: false,
    };
    for strategy in [
        Strategy::Gradient2(Gradient2Config {
            initial: 10,
            min: 5,
            max: 200,
            ..Gradient2Config::default()
        }),
        Strategy::Vegas(VegasConfig {
            initial: 10,
            min: 5,
            max: 200,
            ..VegasConfig::default()
        }),
    ] {
        let mut c = strategy.build(window(), 0, 1);
        // A minute unloaded first (half the workers busy): the reference learns 10 ms.
        let start = 60 * 1_000 * MS;
        run(c.as_mut(), 0, 60, |limit| Sample {
            in_flight: limit.min(10),
            ..saturated(10)
        });
        run(c.as_mut(), start, 600, saturated);
        let last = run(c.as_mut(), start + 600 * 1_000 * MS, 60, saturated);
        assert!(
            last <= 40,
            "{strategy:?}: the limit reached {last} in the last minute"
        );
    }
}
