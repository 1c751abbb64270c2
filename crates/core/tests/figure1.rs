//! The lesson's Figure 1: twenty requests, every algorithm at 5 a second, decided exactly as the
//! lesson's text says.

use std::time::Duration;

use ratewarden_core::{
    parse_decimal, Algorithm, AlgorithmKind, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit,
    LimitState, Rate, SlidingLog, SlidingWindow, TokenBucket, NANOS_PER_SEC,
};

const TRACE: &str = include_str!("../fixtures/figure1.csv");
const EXPECTED: &str = include_str!("../fixtures/figure1.expected.csv");

fn rows(csv: &str) -> impl Iterator<Item = Vec<&str>> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("time_s") && !l.trim().is_empty())
        .map(|l| l.split(',').map(str::trim).collect())
}

fn arrivals() -> Vec<u64> {
    rows(TRACE)
        .map(|r| parse_decimal(r[0], NANOS_PER_SEC).unwrap())
        .collect()
}

fn limit(kind: AlgorithmKind) -> Limit {
    let window = Duration::from_secs(1);
    let rate = Rate::per_second(5).unwrap();
    match kind {
        AlgorithmKind::FixedWindow => FixedWindow::new(5, window).unwrap().into(),
        AlgorithmKind::SlidingLog => SlidingLog::new(5, window).unwrap().into(),
        AlgorithmKind::SlidingWindow => SlidingWindow::new(5, window).unwrap().into(),
        AlgorithmKind::TokenBucket => TokenBucket::new(rate, 5).unwrap().into(),
        AlgorithmKind::LeakyBucket => LeakyBucket::new(rate, 5).unwrap().into(),
        AlgorithmKind::Gcra => Gcra::new(rate, 5).unwrap().into(),
        other => panic!("{other} is not in the lesson's table"),
    }
}

#[test]
fn every_algorithm_decides_figure1_as_the_lesson_says() {
    let header = EXPECTED
        .lines()
        .find(|l| l.starts_with("time_s"))
        .unwrap()
        .split(',')
        .collect::<Vec<_>>();
    assert_eq!(header.len(), 7, "six algorithms in the expected table");
    let times = arrivals();
    let expected: Vec<Vec<&str>> = rows(EXPECTED).collect();
    assert_eq!(expected.len(), times.len());
    for (column, name) in header.iter().enumerate().skip(1) {
        let kind: AlgorithmKind = name.parse().unwrap();
        let limit = limit(kind);
        let mut state = LimitState::default();
        for (t, row) in times.iter().zip(&expected) {
            let allowed = limit.decide(&mut state, *t, 1).is_allowed();
            assert_eq!(allowed, row[column] == "1", "{name} at {} s", row[0]);
        }
    }
}

#[test]
fn figure1_token_bucket_passes_six_of_the_burst_then_one_in_four() {
    let limit = limit(AlgorithmKind::TokenBucket);
    let mut state = LimitState::default();
    let passed: Vec<u64> = arrivals()
        .into_iter()
        .filter(|&t| limit.decide(&mut state, t, 1).is_allowed())
        .map(|t| t / 1_000_000)
        .collect();
    assert_eq!(
        passed,
        [700, 750, 800, 850, 900, 950, 1100, 1300, 1620, 1870, 2120, 2370, 2620, 2870]
    );
}

#[test]
fn figure1_leaky_queue_delays_instead_of_rejecting() {
    // nginx `limit_req rate=5r/s burst=5`: at most five wait; each leaves 200 ms after the last.
    let queue = LeakyQueue::new(Rate::per_second(5).unwrap(), 5).unwrap();
    let mut state = Default::default();
    let delays: Vec<Option<u128>> = arrivals()
        .into_iter()
        .map(|t| {
            let d = queue.decide(&mut state, t, 1);
            d.is_allowed().then(|| d.delay().as_millis())
        })
        .collect();
    let want = [
        Some(0),
        Some(150),
        Some(300),
        Some(450),
        Some(600),
        Some(750),
        Some(900),
        None,
        Some(1000),
        None,
        None,
        None,
        Some(1000),
        None,
        Some(880),
        Some(830),
        Some(780),
        Some(730),
        Some(680),
        Some(630),
    ];
    assert_eq!(delays, want);
}

#[test]
fn gcra_lesson_example_sixth_request_waits_exactly_200ms() {
    let gcra = Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap();
    let mut tat = Default::default();
    for _ in 0..5 {
        assert!(gcra.decide(&mut tat, 0, 1).is_allowed());
    }
    let sixth = gcra.decide(&mut tat, 0, 1);
    assert_eq!(sixth.retry_after(), Some(Duration::from_millis(200)));
    assert_eq!(sixth.remaining, 0);
    assert_eq!(sixth.reset_after(), Duration::from_secs(1));
    assert!(!gcra.peek(&tat, 200_000_000 - 1, 1).is_allowed());
    assert!(gcra.decide(&mut tat, 200_000_000, 1).is_allowed());
}
