//! `ratewarden simulate`, end to end: the real binary on the lesson's Figure 1 and on files.

use std::fs;

use ratewarden_core::AlgorithmKind;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const EXPECTED: &str = include_str!("../../fixtures/figure1.expected.csv");

fn ratewarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Writes `trace` to a scratch file and simulates it with `args`.
fn simulate_file(name: &str, trace: &str, args: &str) -> (PathBuf, Output) {
    let path = scratch(name);
    fs::write(&path, trace).unwrap();
    let mut all = vec!["simulate", "--trace", path.to_str().unwrap()];
    all.extend(args.split_whitespace());
    let out = ratewarden(&all);
    (path, out)
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The lesson's table: algorithm name → the twenty expected decisions.
fn expected() -> Vec<(String, Vec<bool>)> {
    let mut lines = EXPECTED.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    header[1..]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let column = rows.iter().map(|r| r[i + 1] == "1").collect();
            (name.to_string(), column)
        })
        .collect()
}

#[test]
fn the_table_shows_every_algorithm_deciding_figure1_as_the_lesson_says() {
    let out = ratewarden(&[
        "simulate", "--trace", "figure1", "--all", "--limit", "5", "--window", "1s",
    ]);
    let text = stdout(&out);
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let columns: Vec<&str> = ["time_s", "key", "cost"]
        .into_iter()
        .chain(AlgorithmKind::ALL.map(|k| k.as_str()))
        .collect();
    assert_eq!(header, columns);
    let rows: Vec<Vec<String>> = lines
        .by_ref()
        .take(20)
        .map(|l| {
            // Cells are two spaces apart; a rejected cell reads `no 50ms`.
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 20);
    for (name, want) in expected() {
        let column = header.iter().position(|h| *h == name).unwrap() - 1;
        for (row, allowed) in rows.iter().zip(&want) {
            let cell = &row[column + 1];
            assert_eq!(
                cell.starts_with("pass"),
                *allowed,
                "{name} at {}: {cell}",
                row[0]
            );
        }
    }
    let gcra = header.iter().position(|h| *h == "gcra").unwrap();
    assert_eq!(
        rows[6][gcra], "no 100ms",
        "GCRA at 1.00 s retries at 1.10 s"
    );
    let queue = header.iter().position(|h| *h == "leaky-queue").unwrap();
    assert_eq!(rows[1][queue], "pass+150ms");
    let totals: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        totals,
        [
            "passed", "14/20", "10/20", "12/20", "14/20", "14/20", "15/20", "14/20", "14/20",
            "10/20"
        ]
    );
}

#[test]
fn jsonl_has_one_object_per_arrival_and_algorithm() {
    let out = ratewarden(&[
        "simulate", "--trace", "figure1", "--all", "--format", "jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let objects = json_lines(&out);
    assert_eq!(objects.len(), 20 * 9);
    for (name, want) in expected() {
        let got: Vec<bool> = objects
            .iter()
            .filter(|o| o["algorithm"] == name.as_str())
            .map(|o| o["allowed"].as_bool().unwrap())
            .collect();
        assert_eq!(got, want, "{name}");
    }
    let find = |algorithm: &str, t: f64| {
        objects
            .iter()
            .find(|o| o["algorithm"] == algorithm && o["t"].as_f64() == Some(t))
            .unwrap()
            .clone()
    };
    let gcra = find("gcra", 1.0);
    assert_eq!(gcra["retry_after_ms"], 100);
    assert_eq!(gcra["outcome"], "limited");
    assert_eq!(gcra["key"], "k_8f2a");
    let queued = find("leaky-queue", 0.75);
    assert_eq!(queued["delay_ms"], 150);
    assert_eq!(queued["outcome"], "delayed");
    assert_eq!(find("token-bucket", 0.7)["remaining"], 4);
    assert!(find("token-bucket", 0.7)["retry_after_ms"].is_null());
}

#[test]
fn svg_draws_a_row_per_algorithm_with_passed_and_rejected_marked_apart() {
    let path = scratch("figure1.svg");
    let _ = fs::remove_file(&path);
    let out = ratewarden(&[
        "simulate",
        "--trace",
        "figure1",
        "--all",
        "--format",
        "summary",
        "--svg",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    for name in AlgorithmKind::ALL.map(|k| k.as_str()) {
        assert!(svg.contains(name), "row label {name}");
    }
    // Passed arrivals are filled green circles (plus one in the legend): 117 of 180 decisions.
    assert_eq!(svg.matches("fill=\"#1B9E4B\"").count(), 117 + 1);
    // Rejected ones are red crosses, drawn as two strokes each (plus the legend's).
    assert_eq!(
        svg.matches("stroke=\"#D62728\"").count(),
        2 * (180 - 117) + 2
    );
}

#[test]
fn bad_lines_are_reported_with_file_line_and_reason_and_the_rest_still_runs() {
    let trace = "time_s,cost,key\n0.1,1,a\n0.2,lots,a\n0.3\n0.25,1,b\n";
    let (path, out) = simulate_file("bad.csv", trace, "-a gcra -f summary");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let file = path.display();
    let want = [
        format!("{file}:line 3: cost `lots` is not a whole number"),
        format!("{file}:line 5: time 0.25 s goes back"),
        "2 bad line(s) skipped; 2 arrivals decided".to_owned(),
    ];
    for line in want {
        assert!(err.contains(&line), "{err}");
    }
    assert!(stdout(&out).contains("2 arrivals"));
}

#[test]
fn keys_have_their_own_state_and_costs_are_weights() {
    let trace = "0,3,a\n0,3,b\n0,3,a\n0,2,b\n0,9,a\n";
    let args = "-a token-bucket --rate 5/s --burst 5 -f jsonl";
    let (_, out) = simulate_file("keys.csv", trace, args);
    let outcomes: Vec<String> = json_lines(&out)
        .iter()
        .map(|o| o["outcome"].as_str().unwrap().to_owned())
        .collect();
    let want = ["allowed", "allowed", "limited", "allowed", "cost-too-high"];
    assert_eq!(outcomes, want);
}

#[test]
fn a_trace_can_come_from_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args([
            "simulate",
            "--trace",
            "-",
            "-a",
            "fixed-window",
            "-l",
            "1",
            "-f",
            "summary",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"0\n0.5\n1\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("fixed-window"))
        .unwrap();
    assert_eq!(row.split_whitespace().collect::<Vec<_>>()[1..3], ["2", "0"]);
}

#[test]
fn a_large_trace_streams_through() {
    let path = scratch("large.csv");
    let mut file = std::io::BufWriter::new(fs::File::create(&path).unwrap());
    for i in 0..200_000u64 {
        writeln!(file, "{}.{:03},1,k{}", i / 1000, i % 1000, i % 7).unwrap();
    }
    drop(file);
    let out = ratewarden(&[
        "simulate",
        "--trace",
        path.to_str().unwrap(),
        "--all",
        "-l",
        "100",
        "-f",
        "summary",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("200000 arrivals"));
}

#[test]
fn bad_arguments_say_what_is_wrong() {
    let out = ratewarden(&["simulate", "-a", "leaky"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("known algorithms: fixed-window"),
        "{}",
        stderr(&out)
    );

    let out = ratewarden(&["simulate", "-a", "quota", "-w", "15m"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--period"), "{}", stderr(&out));

    let out = ratewarden(&["simulate", "--rate", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no `/`"), "{}", stderr(&out));

    let out = ratewarden(&["simulate", "-a", "gcra", "--burst", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`burst` must be greater than zero"),
        "{}",
        stderr(&out)
    );

    let out = ratewarden(&["simulate", "--trace", "/no/such/trace.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot open the trace `/no/such/trace.csv`"));

    let out = ratewarden(&[
        "simulate",
        "-a",
        "quota",
        "--period",
        "month",
        "--timezone",
        "Mars/Base",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown time zone `Mars/Base`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn quotas_follow_the_calendar_from_the_start_instant() {
    // 2026-01-31T23:00Z plus 0 s, 1800 s and 3600 s (the last is in February).
    let args = "-a quota -l 1 --period month --start 2026-01-31T23:00:00Z -f jsonl";
    let (_, out) = simulate_file("month.csv", "0\n1800\n3600\n", args);
    let allowed: Vec<bool> = json_lines(&out)
        .iter()
        .map(|o| o["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, false, true]);
}

#[test]
fn help_explains_the_trace_format_and_the_algorithms() {
    let out = ratewarden(&["simulate", "--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("time_s[,cost[,key]]"));
    assert!(help.contains("leaky-queue"));
    assert!(help.contains("--svg"));
}
