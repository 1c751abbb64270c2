//! `simulate accuracy` and `simulate trace`: the counter is exact where its estimate is, its
//! error falls as the window is split into more sub-windows, the generator is seeded, and the
//! sample trace in the repository is the generator's own output.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ratewarden_simulate::accuracy::{compare, Accuracy, WELL_BEHAVED};
use ratewarden_simulate::gen::{self, GenArgs};
use ratewarden_simulate::Arrival;

const SEC: u64 = 1_000_000_000;

fn args(sources: u32, seconds: u64, seed: u64) -> GenArgs {
    GenArgs {
        sources,
        seconds,
        abusive: 1,
        median: 1.0,
        sigma: 1.0,
        abusive_rate: "20-50".to_owned(),
        seed,
        shape: gen::Shape::Poisson,
    }
}

fn arrival(at: u64, key: &str) -> Arrival {
    Arrival {
        line: 0,
        at,
        cost: 1,
        key: key.to_owned(),
    }
}

fn wrong(accuracy: &Accuracy, counter: usize, class: &str) -> (u64, u64) {
    let c = &accuracy.counters[counter].classes[class];
    (c.wrongly_refused, c.wrongly_admitted)
}

/// Bursts of 15 at one instant, further apart than a window and a slot, and a steady 4 a
/// second: the log refuses 5 of each burst and nothing of the steady source, and the counter
/// at any number of sub-windows (on its own state or the log's history) decides the same.
#[test]
fn the_counter_is_exact_where_its_estimate_is() {
    let mut trace = Vec::new();
    for burst in 0..40u64 {
        for _ in 0..15 {
            trace.push(arrival(burst * 2_500_000_000 + 123, "bursty-1"));
        }
    }
    for i in 0..400u64 {
        trace.push(arrival(i * SEC / 4, "steady-1"));
    }
    trace.sort_by_key(|a| a.at);
    for own_state in [false, true] {
        let got = compare(
            trace.clone(),
            10,
            Duration::from_secs(1),
            &[1, 2, 10, 60],
            own_state,
        )
        .unwrap();
        assert_eq!(got.requests, 1_000);
        assert_eq!(got.log_refused, 200);
        for (i, counter) in got.counters.iter().enumerate() {
            assert_eq!(
                wrong(&got, i, "all"),
                (0, 0),
                "{} sub-windows, own state {own_state}",
                counter.sub_windows
            );
            assert_eq!(
                counter.classes[WELL_BEHAVED].sources, 1,
                "the steady source"
            );
        }
    }
}

/// On a generated trace, splitting the window cuts the counter's disagreements with the log,
/// and never makes it refuse more of the well-behaved sources than the two-window counter.
#[test]
fn the_error_falls_with_sub_windows() {
    let trace = gen::generate(&args(400, 90, 3)).unwrap();
    let got = compare(trace, 10, Duration::from_secs(1), &[1, 2, 10, 60], false).unwrap();
    let total = |i| {
        let (r, a) = wrong(&got, i, "all");
        r + a
    };
    let totals: Vec<u64> = (0..4).map(total).collect();
    assert!(
        totals.windows(2).all(|w| w[0] > w[1]),
        "disagreements by 1, 2, 10, 60 sub-windows: {totals:?}"
    );
    assert!(totals[0] > 1_000, "{totals:?}");
    let well = |i| wrong(&got, i, WELL_BEHAVED);
    // The log never refused these sources: the counter can only refuse them wrongly.
    assert!((0..4).all(|i| well(i).1 == 0));
    assert!(well(3).0 <= well(0).0, "{:?} {:?}", well(3), well(0));
    // Bytes a key: the two windows' index and counts, or the slot's index and N + 1 slots of
    // a count and its first and last charge's times.
    let bytes: Vec<usize> = got.counters.iter().map(|c| c.state_bytes).collect();
    assert_eq!(bytes, [24, 80, 272, 1_472]);
    assert!(got.log_max_bytes >= 10 * 16);
}

#[test]
fn the_generator_is_seeded_and_classes_its_sources() {
    let a = gen::generate(&args(50, 20, 9)).unwrap();
    assert_eq!(a, gen::generate(&args(50, 20, 9)).unwrap());
    assert_ne!(a, gen::generate(&args(50, 20, 10)).unwrap());
    assert!(a.windows(2).all(|w| w[0].at <= w[1].at), "in time order");
    assert!(a.iter().all(|x| x.at < 20 * SEC && x.at % 1_000 == 0));
    let abusive: std::collections::BTreeSet<&str> = a
        .iter()
        .filter(|x| gen::class_of(&x.key) == "abusive")
        .map(|x| x.key.as_str())
        .collect();
    assert_eq!(abusive.len(), 1, "1% of 50, rounded up");
    // An abusive source sends at 20 to 50 a second.
    let sent = a
        .iter()
        .filter(|x| abusive.contains(x.key.as_str()))
        .count();
    assert!((20 * 15..=50 * 25).contains(&sent), "{sent}");
}

/// The sample trace is what its header's command makes, byte for byte.
#[test]
fn the_sample_trace_is_the_generators_output() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/accuracy-sample.csv");
    let committed = std::fs::read_to_string(&path).unwrap();
    let spec = args(100, 30, 7);
    let mut made = Vec::new();
    gen::write(&mut made, &spec, &gen::generate(&spec).unwrap()).unwrap();
    assert!(
        committed == String::from_utf8(made).unwrap(),
        "fixtures/accuracy-sample.csv differs from `ratewarden simulate trace --sources 100 --seconds 30 --seed 7`"
    );
}

fn ratewarden(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_commands_print_a_table_a_trace_and_located_errors() {
    let (ok, out, err) = ratewarden(&[
        "simulate",
        "accuracy",
        "--trace",
        "fixtures/accuracy-sample.csv",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("5290 requests; limit 10 per 1s"), "{out}");
    assert!(
        out.contains("| `sub_windows = 10` | 272 | well-behaved | "),
        "{out}"
    );

    let (ok, out, err) = ratewarden(&["simulate", "trace", "--sources", "3", "--seconds", "2"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("# ratewarden simulate trace --sources 3 --seconds 2 "));
    assert!(
        out.lines().skip(1).all(|l| l.split(',').count() == 3),
        "{out}"
    );

    let (ok, _, err) = ratewarden(&[
        "simulate",
        "accuracy",
        "--sub-windows",
        "1,0",
        "--sources",
        "2",
    ]);
    assert!(
        !ok && err.contains("--sub-windows 0") && err.contains("sub_windows"),
        "{err}"
    );
    let (ok, _, err) = ratewarden(&["simulate", "trace", "--abusive-rate", "50"]);
    assert!(!ok && err.contains("--abusive-rate `50`"), "{err}");
    let (ok, _, err) = ratewarden(&[
        "simulate",
        "accuracy",
        "--trace",
        "crates/server/fixtures/figure1.expected.csv",
    ]);
    assert!(!ok && err.contains("figure1.expected.csv:line "), "{err}");
}
