//! `ratewarden simulate load`: deterministic, and showing what issue 14 promises of an
//! adaptive limit in front of an overloaded upstream.

use std::process::Command;
use std::time::Duration;

use ratewarden_simulate::load::{settle_ns, simulate, STRATEGIES};
use ratewarden_simulate::{LoadArgs, LoadStrategy, Noise, Scenario};

const SEC: u64 = 1_000_000_000;

fn args() -> LoadArgs {
    LoadArgs {
        scenario: Scenario::Spike,
        strategy: LoadStrategy::Gradient2,
        defaults: false,
        window: None,
        phase: None,
        workers: 8,
        service: Duration::from_millis(100),
        noise: Noise::None,
        svg: None,
    }
}

fn capacity(strategy: LoadStrategy) -> LoadArgs {
    LoadArgs {
        scenario: Scenario::Capacity,
        strategy,
        ..args()
    }
}

#[test]
fn the_settle_time_is_from_the_step_until_the_limit_stays_in_the_band() {
    // Buckets of 100 ms from 10 s; steady 10, so the band is 8..=12 (20 %, at least 2).
    let limits: Vec<(u64, u64)> = [16, 14, 13, 11, 12, 13, 12, 10, 10, 10]
        .iter()
        .enumerate()
        .map(|(i, &l)| (10 * SEC + i as u64 * SEC / 10, l))
        .collect();
    // Last out of the band: 13 in the bucket from 10.5 s, so settled at 0.6 s.
    assert_eq!(
        settle_ns(&limits, 10 * SEC, 10, 10 * SEC + 7 * SEC / 10),
        Some(600_000_000)
    );
    // Out of the band inside the steady stretch: never settled.
    assert_eq!(settle_ns(&limits, 10 * SEC, 10, 10 * SEC + SEC / 2), None);
    // Never out: settled at once.
    assert_eq!(settle_ns(&limits[7..], 10 * SEC, 10, 11 * SEC), Some(0));
}

#[test]
fn gradient2_settles_within_2s_of_each_capacity_step() {
    let run = simulate(
        &capacity(LoadStrategy::Gradient2),
        Some(LoadStrategy::Gradient2),
    );
    let [full, half, again] = &run.steps[..] else {
        panic!("three steps: {run:?}");
    };
    assert_eq!((full.workers, half.workers, again.workers), (8, 4, 8));
    // The limit moves with the capacity, so the settle time means something: measured
    // 16 -> 9 -> 19.
    let steady = |s: &ratewarden_simulate::load::StepFigures| s.steady.unwrap();
    assert!(steady(half) * 10 <= steady(full) * 7, "{run:?}");
    assert!(steady(again) * 10 >= steady(half) * 14, "{run:?}");
    // Measured 1.3 s down and 1.9 s back up.
    for step in [half, again] {
        let settled = step.settled_ns.unwrap_or(u64::MAX);
        assert!(settled <= 2 * SEC, "{step:?}");
        // And the upstream kept busy throughout: goodput at its capacity.
        assert!(step.goodput >= 0.9 * 10.0 * step.workers as f64, "{step:?}");
    }
}

#[test]
fn every_strategy_settle_times_on_the_capacity_steps() {
    let settled = |which| {
        let run = simulate(&capacity(which), Some(which));
        (run.steps[1], run.steps[2])
    };
    // Vegas follows fastest: measured 0.5 s down, 1.4 s back up.
    let (half, again) = settled(LoadStrategy::Vegas);
    assert!(half.settled_ns.unwrap() <= SEC, "{half:?}");
    assert!(again.settled_ns.unwrap() <= 2 * SEC, "{again:?}");
    // AIMD comes down in 0.8 s, but at 8 workers it is a sawtooth (11-19 around 15): it
    // never stays within 20 %.
    let (half, again) = settled(LoadStrategy::Aimd);
    assert!(half.settled_ns.unwrap() <= 2 * SEC, "{half:?}");
    assert_eq!(again.settled_ns, None, "{again:?}");
    let (low, high) = again.wobble.unwrap();
    assert!(high * 10 >= low * 14, "{again:?}");
    // Envoy's gradient never settles: it swings between 4 and 25 and is pinned at 3 while
    // it measures its min RTT.
    let (half, again) = settled(LoadStrategy::Gradient);
    assert_eq!(
        (half.settled_ns, again.settled_ns),
        (None, None),
        "{half:?} {again:?}"
    );
}

#[test]
fn a_run_is_the_same_every_time() {
    for strategy in STRATEGIES {
        assert_eq!(
            simulate(&args(), Some(strategy)),
            simulate(&args(), Some(strategy))
        );
        assert_eq!(
            simulate(&capacity(strategy), Some(strategy)),
            simulate(&capacity(strategy), Some(strategy))
        );
    }
}

#[test]
fn gradient2_holds_goodput_and_p99_through_the_spike_and_no_limit_does_not() {
    let capacity = 80.0;
    let with = simulate(&args(), Some(LoadStrategy::Gradient2));
    let unloaded = with.steps[0].p99_ns;
    for step in &with.steps[1..3] {
        assert!(step.goodput >= 0.9 * capacity, "{step:?}");
        assert!(step.p99_ns <= 2 * unloaded, "{step:?} vs {unloaded}");
        assert!(step.settled_ns.unwrap() <= 2_000_000_000, "{step:?}");
    }
    // Back at half the capacity, nothing is shed.
    assert_eq!(with.steps[3].shed, 0);
    let without = simulate(&args(), None);
    let p99: Vec<u64> = without.steps.iter().map(|s| s.p99_ns).collect();
    assert!(
        p99[1] > 10 * unloaded && p99[2] > 2 * p99[1] && p99[3] > p99[2],
        "{p99:?}"
    );
}

#[test]
fn the_command_prints_both_runs_and_draws_them() {
    let svg = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("spike.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["simulate", "load", "--scenario", "spike", "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("gradient2:") && text.contains("no limit:"),
        "{text}"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("gradient2: limit"));
    // The capacity steps, every strategy's settle times, and the steps drawn.
    let svg = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capacity.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["simulate", "load", "--scenario", "capacity", "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let table = text.split("every strategy").nth(1).unwrap_or_default();
    for which in STRATEGIES {
        let name = format!("{which:?}").to_lowercase();
        assert!(table.contains(&format!("{name:>10}  ")), "{name}: {text}");
    }
    assert!(table.contains("never"), "{text}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("upstream workers") && drawn.contains("losing half its workers"));
    // A phase too short to measure is refused, naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args([
            "simulate",
            "load",
            "--scenario",
            "capacity",
            "--phase",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--phase 1s") && err.contains("at least 2s"),
        "{err}"
    );
    // The trace simulator is still there beside it.
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args([
            "simulate", "--trace", "figure1", "--all", "--format", "summary",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn the_published_defaults_follow_each_capacity_step_to_the_workers_and_their_headroom() {
    // From a start of 4 in front of 64 workers, then 32, then 64 again (10 s each): the
    // slow start doubles to the workers, the standing queue is `√L / 2` (4 at 64), and
    // each step's limit sits between the workers and an eighth above them.
    let args = LoadArgs {
        defaults: true,
        workers: 64,
        ..capacity(LoadStrategy::Gradient2)
    };
    let run = simulate(&args, Some(LoadStrategy::Gradient2));
    for s in &run.steps {
        let limit = s.steady.unwrap();
        assert!(
            (s.workers..=s.workers + s.workers / 8).contains(&limit),
            "{} workers, the limit {limit}: {:?}",
            s.workers,
            run.steps
        );
        assert!(s.goodput >= 0.95 * s.workers as f64 * 10.0, "{s:?}");
    }
}

#[test]
fn phase_makes_every_step_that_long() {
    let args = LoadArgs {
        phase: Some(Duration::from_secs(60)),
        ..capacity(LoadStrategy::Vegas)
    };
    let run = simulate(&args, Some(LoadStrategy::Vegas));
    let starts: Vec<u64> = run.steps.iter().map(|s| s.start_ns).collect();
    assert_eq!(starts, [0, 60 * SEC, 120 * SEC]);
    assert_eq!(run.buckets.len(), 1800);
    // At capacity throughout: the upstream never idles.
    for step in &run.steps {
        assert!(step.goodput >= 0.9 * 10.0 * step.workers as f64, "{step:?}");
    }
}

#[test]
fn a_minute_of_sustained_overload_keeps_p99_within_2x_of_unloaded() {
    // Gradient2's long RTT and Vegas's re-probed no-load RTT followed the queue up: with
    // 60 s phases the spike's p99 at 3x reached 3.8x (Gradient2) and 4.5x (Vegas) the
    // unloaded one, and on the capacity steps Gradient2 ended at 47 in front of 8 workers
    // (p99 583 ms). Now a minute is no worse than 5 s.
    for which in [LoadStrategy::Gradient2, LoadStrategy::Vegas] {
        let long = LoadArgs {
            phase: Some(Duration::from_secs(60)),
            strategy: which,
            ..args()
        };
        let run = simulate(&long, Some(which));
        let unloaded = run.steps[0].p99_ns;
        for step in &run.steps[1..3] {
            assert!(step.goodput >= 0.9 * 80.0, "{which:?} {step:?}");
            assert!(
                step.p99_ns <= 2 * unloaded,
                "{which:?} {step:?} vs {unloaded}"
            );
        }
        // The capacity steps: back at 8 workers the limit comes back where it was, not
        // higher, and the p99 of a minute is within 10 % of that of 10 s.
        let long = LoadArgs {
            phase: Some(Duration::from_secs(60)),
            ..capacity(which)
        };
        let (short, long) = (
            simulate(&capacity(which), Some(which)),
            simulate(&long, Some(which)),
        );
        let (first, last) = (long.steps[0].steady.unwrap(), long.steps[2].steady.unwrap());
        assert!(last <= first + 2, "{which:?}: {first} then {last}");
        for (s, l) in short.steps.iter().zip(&long.steps) {
            assert!(
                l.p99_ns * 10 <= s.p99_ns * 11,
                "{which:?}: {s:?} then {l:?}"
            );
        }
    }
}

#[test]
fn the_published_defaults_settle_within_2s_of_each_capacity_step() {
    // Phases of a minute, so that each phase's steady limit is where the limit ends up,
    // not where a climb had got to; 32 workers, then 16, then 32.
    let args = LoadArgs {
        defaults: true,
        workers: 32,
        phase: Some(Duration::from_secs(60)),
        ..capacity(LoadStrategy::Gradient2)
    };
    let run = simulate(&args, Some(LoadStrategy::Gradient2));
    let settled: Vec<u64> = run
        .steps
        .iter()
        .map(|s| s.settled_ns.unwrap_or(u64::MAX))
        .collect();
    assert!(settled.iter().all(|&ns| ns <= 2 * SEC), "{settled:?}");
}

/// A noise the range test runs: the simulator's two tails.
const NOISES: [Noise; 2] = [Noise::Tail, Noise::Heavy];

#[test]
fn the_published_defaults_keep_95_percent_of_capacity_near_the_unloaded_p99_from_4_to_256_workers_and_10ms_to_1s(
) {
    // The spike (0.5x, 1.4x, 3x, 0.5x), 20 s a step, at the defaults a rule gets when it
    // names no parameters, on every upstream of the range: at 3x, goodput at least 95 %
    // of the capacity and p99 within 1.3x of the unloaded one (the 0.5x step's); the
    // table is printed (docs/adaptive.md has it beside the old defaults').
    let mut rows = Vec::new();
    for workers in [4, 16, 64, 256] {
        for service in [10, 100, 1_000] {
            for noise in NOISES {
                let args = LoadArgs {
                    defaults: true,
                    workers,
                    service: Duration::from_millis(service),
                    noise,
                    phase: Some(Duration::from_secs(20)),
                    ..args()
                };
                let run = simulate(&args, Some(LoadStrategy::Gradient2));
                let (unloaded, loaded) = (&run.steps[0], &run.steps[2]);
                let capacity = workers as f64 * 1_000.0 / service as f64;
                let goodput = loaded.goodput / capacity;
                let p99 = loaded.p99_ns as f64 / unloaded.p99_ns as f64;
                rows.push(format!(
                    "{workers:>3} workers, {service:>4} ms, {noise:?}: goodput {goodput:.3}, p99 \
                     {p99:.2}x, limit {:?}",
                    loaded.steady
                ));
                assert!(
                    goodput >= 0.95 && p99 <= 1.3,
                    "{workers} workers, {service} ms, {noise:?}: goodput {goodput:.3} of the \
                     capacity, p99 {p99:.2}x the unloaded\n{}",
                    rows.join("\n")
                );
            }
        }
    }
    println!("{}", rows.join("\n"));
}
