//! `ratewarden simulate retries`: the standard scenario's figures pinned, the lesson's
//! claims checked on them, and the command line (beside the trace simulation it joins).

use std::path::PathBuf;
use std::process::{Command, Output};

use ratewarden_simulate::retries::{run, table, Scenario, Strategy};

fn ratewarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// (strategy, attempts, amplification, in outage, succeeded %, recovery s) of the
/// standard scenario: 15,877 requests, seed 1.
type Row = (
    Strategy,
    u64,
    &'static str,
    &'static str,
    &'static str,
    Option<u64>,
);

const PINNED: [Row; 7] = [
    (Strategy::NoRetry, 15877, "1.00", "1.00", "75.0", Some(0)),
    (Strategy::Immediate, 31734, "2.00", "4.99", "75.1", Some(0)),
    (Strategy::Fixed, 31489, "1.98", "4.89", "76.1", Some(0)),
    (Strategy::Exponential, 62474, "3.93", "4.73", "29.5", None),
    (Strategy::Jitter, 31514, "1.98", "4.86", "77.0", Some(0)),
    (Strategy::Budget, 17093, "1.08", "1.31", "75.0", Some(0)),
    (Strategy::Throttling, 7812, "0.49", "0.95", "25.5", None),
];

#[test]
fn the_standard_scenarios_figures_are_pinned() {
    let scenario = Scenario::default();
    for (strategy, attempts, amplification, outage, succeeded, recovery) in PINNED {
        let f = run(&scenario, strategy).figures(&scenario);
        let got = (
            f.requests,
            f.attempts,
            format!("{:.2}", f.amplification),
            format!("{:.2}", f.outage_amplification),
            format!("{:.1}", f.success * 100.0),
            f.recovery,
        );
        let want = (
            15877,
            attempts,
            amplification.to_owned(),
            outage.to_owned(),
            succeeded.to_owned(),
            recovery,
        );
        assert_eq!(got, want, "{}", strategy.name());
    }
}

#[test]
fn the_lessons_claims_show_in_the_numbers() {
    let scenario = Scenario::default();
    let figures = |s| run(&scenario, s).figures(&scenario);
    // Naive retries multiply the load while the server is down...
    for naive in [Strategy::Immediate, Strategy::Fixed, Strategy::Exponential] {
        assert!(figures(naive).outage_amplification > 4.5, "{naive:?}");
    }
    // ...and synchronised backoff keeps the server in overload after it is back: timed-out
    // attempts it still works on are retried, a metastable failure.
    assert_eq!(figures(Strategy::Exponential).recovery, None);
    // Jitter plus a budget: amplification near 1.1, recovery at once.
    let budget = figures(Strategy::Budget);
    assert!(budget.amplification < 1.1, "{budget:?}");
    assert_eq!(budget.recovery, Some(0));
}

#[test]
fn a_run_is_deterministic() {
    let scenario = Scenario::default();
    assert_eq!(
        run(&scenario, Strategy::Jitter),
        run(&scenario, Strategy::Jitter)
    );
}

#[test]
fn the_command_prints_the_table_and_draws_the_picture() {
    let svg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("retry-storm.svg");
    let out = ratewarden(&[
        "simulate",
        "retries",
        "--strategy",
        "budget",
        "--strategy",
        "exponential",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let scenario = Scenario::default();
    let runs = [
        run(&scenario, Strategy::Budget),
        run(&scenario, Strategy::Exponential),
    ];
    assert_eq!(text, table(&scenario, &runs));
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg"), "{}", &picture[..80]);
    assert!(picture.contains("+ retry budget") && picture.contains("exponential"));
}

#[test]
fn the_trace_simulation_still_runs_without_a_subcommand() {
    let out = ratewarden(&["simulate", "--trace", "figure1", "--algorithm", "gcra"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8(out.stdout).unwrap().contains("gcra"));
}

#[test]
fn bad_settings_are_refused_with_their_name_and_value() {
    let out = ratewarden(&["simulate", "retries", "--rate", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--rate") && err.contains('0'), "{err}");
    // Trace options belong to the trace simulation, not to this one.
    let out = ratewarden(&["simulate", "--trace", "figure1", "retries"]);
    assert!(!out.status.success());
}
