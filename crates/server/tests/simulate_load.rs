//! `ratewarden simulate load`: deterministic, and showing what issue 14 promises of an
//! adaptive limit in front of an overloaded upstream.

use std::process::Command;
use std::time::Duration;

use ratewarden_server::cli::{LoadArgs, LoadStrategy, Scenario};
use ratewarden_server::simulate::load::simulate;

fn args() -> LoadArgs {
    LoadArgs {
        scenario: Scenario::Spike,
        strategy: LoadStrategy::Gradient2,
        workers: 8,
        service: Duration::from_millis(100),
        svg: None,
    }
}

#[test]
fn a_run_is_the_same_every_time() {
    for strategy in [
        LoadStrategy::Gradient2,
        LoadStrategy::Vegas,
        LoadStrategy::Aimd,
        LoadStrategy::Gradient,
    ] {
        assert_eq!(
            simulate(&args(), Some(strategy)),
            simulate(&args(), Some(strategy))
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
    // The trace simulator is still there beside it.
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args([
            "simulate", "--trace", "figure1", "--all", "--format", "summary",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
}
