//! Invariants every algorithm must keep, checked on random traces.
//!
//! Failing cases are saved next to this file in `properties.proptest-regressions` and replayed
//! first on every run; commit that file when it changes.

use std::time::Duration;

use proptest::prelude::*;
use ratewarden_core::{
    Algorithm, CalendarUnit, Concurrency, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit,
    LimitState, Outcome, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

/// One arrival: nanoseconds since the previous one, and its cost.
type Arrival = (u64, u64);

fn rates() -> impl Strategy<Value = Rate> {
    // Counts that do not divide the period are the interesting ones for exactness.
    (1u64..=50, 1u64..=3_000).prop_map(|(count, ms)| {
        Rate::new(count, Duration::from_millis(ms)).expect("non-zero by construction")
    })
}

fn arrivals(max_cost: u64) -> impl Strategy<Value = Vec<Arrival>> {
    let gap = prop_oneof![
        3 => 0u64..1_000,
        3 => 0u64..400_000_000,
        1 => 0u64..5_000_000_000,
    ];
    prop::collection::vec((gap, 1..=max_cost), 1..80)
}

/// Runs `limit` over the arrivals, returning each arrival's time and decision.
fn run<A: Algorithm>(limit: &A, trace: &[Arrival]) -> Vec<(u64, u64, ratewarden_core::Decision)> {
    let mut state = A::State::default();
    let mut now = 1_000_000_000_000;
    trace
        .iter()
        .map(|&(gap, cost)| {
            now += gap;
            (now, cost, limit.decide(&mut state, now, cost))
        })
        .collect()
}

fn admitted(decisions: &[(u64, u64, ratewarden_core::Decision)]) -> Vec<(u64, u64)> {
    decisions
        .iter()
        .filter(|(_, _, d)| d.is_allowed())
        .map(|&(t, c, _)| (t, c))
        .collect()
}

/// Checks `sum(cost)·period ≤ burst·period + count·span` over every span of admitted requests.
fn assert_bucket_bound(
    admitted: &[(u64, u64)],
    rate: Rate,
    burst: u64,
) -> Result<(), TestCaseError> {
    let period = u128::from(rate.period_ns());
    for i in 0..admitted.len() {
        let mut spent = 0u128;
        for j in i..admitted.len() {
            spent += u128::from(admitted[j].1);
            let span = u128::from(admitted[j].0 - admitted[i].0);
            prop_assert!(
                spent * period <= u128::from(burst) * period + u128::from(rate.count()) * span,
                "{spent} admitted in {span} ns at {rate} with burst {burst}"
            );
        }
    }
    Ok(())
}

/// Units admitted at times `t` with `within(t)`.
fn held(admitted: &[(u64, u64)], within: impl Fn(u64) -> bool) -> u64 {
    admitted
        .iter()
        .filter(|(t, _)| within(*t))
        .map(|(_, c)| c)
        .sum()
}

/// Walks `trace` from a fresh state, calling `check` with the state, each arrival's time and
/// its cost; `check` decides what to do with them.
fn each_arrival(
    trace: &[Arrival],
    mut check: impl FnMut(&mut LimitState, u64, u64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut state = LimitState::default();
    let mut now = 1_000_000_000_000u64;
    for &(gap, cost) in trace {
        now += gap;
        check(&mut state, now, cost)?;
    }
    Ok(())
}

fn all_limits(rate: Rate, burst: u64, window: Duration) -> Vec<Limit> {
    let limit = burst;
    vec![
        FixedWindow::new(limit, window).unwrap().into(),
        SlidingLog::new(limit, window).unwrap().into(),
        SlidingWindow::new(limit, window).unwrap().into(),
        TokenBucket::new(rate, burst).unwrap().into(),
        LeakyBucket::new(rate, burst).unwrap().into(),
        LeakyQueue::new(rate, burst).unwrap().into(),
        Gcra::new(rate, burst).unwrap().into(),
        Quota::new(limit, CalendarUnit::Second, "UTC")
            .unwrap()
            .into(),
        Concurrency::new(limit, window).unwrap().into(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn token_bucket_and_gcra_admit_at_most_burst_plus_rate_times_span(
        rate in rates(), burst in 1u64..=10, trace in arrivals(4),
    ) {
        let bucket = TokenBucket::new(rate, burst).unwrap();
        assert_bucket_bound(&admitted(&run(&bucket, &trace)), rate, burst)?;
        let gcra = Gcra::new(rate, burst).unwrap();
        assert_bucket_bound(&admitted(&run(&gcra, &trace)), rate, burst)?;
    }

    #[test]
    fn token_bucket_leaky_meter_and_gcra_decide_identically(
        rate in rates(), burst in 1u64..=10, trace in arrivals(12),
    ) {
        let tb = run(&TokenBucket::new(rate, burst).unwrap(), &trace);
        let lb = run(&LeakyBucket::new(rate, burst).unwrap(), &trace);
        let gcra = run(&Gcra::new(rate, burst).unwrap(), &trace);
        prop_assert_eq!(&tb, &gcra);
        prop_assert_eq!(&lb, &gcra);
    }

    #[test]
    fn leaky_queue_accepts_what_gcra_with_one_more_cell_accepts(
        rate in rates(), burst in 0u64..=10, trace in arrivals(12),
    ) {
        let queue = run(&LeakyQueue::new(rate, burst).unwrap(), &trace);
        let gcra = run(&Gcra::new(rate, burst + 1).unwrap(), &trace);
        for ((t, _, q), (_, _, g)) in queue.iter().zip(&gcra) {
            prop_assert_eq!(q.is_allowed(), g.is_allowed(), "at {}", t);
            prop_assert_eq!(q.retry_after(), g.retry_after(), "at {}", t);
        }
    }

    #[test]
    fn sliding_log_never_holds_more_than_limit_in_any_window(
        limit in 1u64..=10, window_ms in 1u64..=2_000, trace in arrivals(4),
    ) {
        let window = window_ms * 1_000_000;
        let log = SlidingLog::new(limit, Duration::from_nanos(window)).unwrap();
        let admitted = admitted(&run(&log, &trace));
        for &(end, _) in &admitted {
            let held = held(&admitted, |t| t <= end && t + window > end);
            prop_assert!(held <= limit, "{held} in the window ending at {end}");
        }
    }

    #[test]
    fn fixed_window_admits_at_most_twice_the_limit_across_any_window_span(
        limit in 1u64..=10, window_ms in 1u64..=2_000, trace in arrivals(4),
    ) {
        let window = window_ms * 1_000_000;
        let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
        let admitted = admitted(&run(&fw, &trace));
        for &(start, _) in &admitted {
            let held = held(&admitted, |t| t >= start && t < start + window);
            prop_assert!(held <= 2 * limit);
        }
    }

    #[test]
    fn retry_after_is_exact_for_every_algorithm(
        rate in rates(), burst in 1u64..=10, window_ms in 1u64..=3_000, trace in arrivals(12),
    ) {
        for limit in all_limits(rate, burst, Duration::from_millis(window_ms)) {
            each_arrival(&trace, |state, now, cost| {
                let decision = limit.decide(state, now, cost);
                let Outcome::Limited { retry_after_ns: wait } = decision.outcome else {
                    return Ok(());
                };
                prop_assert!(wait > 0, "{:?}: limited with no wait", limit.kind());
                prop_assert!(
                    !limit.peek(state, now + wait - 1, cost).is_allowed(),
                    "{:?}: allowed 1 ns before the retry time {wait} at {now}", limit.kind()
                );
                prop_assert!(
                    limit.peek(state, now + wait, cost).is_allowed(),
                    "{:?}: still limited at the retry time {wait} at {now}", limit.kind()
                );
                Ok(())
            })?;
        }
    }

    #[test]
    fn rejected_requests_and_peeks_change_nothing(
        rate in rates(), burst in 1u64..=10, window_ms in 1u64..=3_000, trace in arrivals(12),
    ) {
        for limit in all_limits(rate, burst, Duration::from_millis(window_ms)) {
            each_arrival(&trace, |state, now, cost| {
                let before = state.clone();
                let peeked = limit.peek(state, now, cost);
                prop_assert_eq!(&*state, &before);
                let decision = limit.decide(state, now, cost);
                prop_assert_eq!(peeked, decision);
                if !decision.is_allowed() {
                    prop_assert_eq!(&*state, &before, "{:?} changed on rejection", limit.kind());
                }
                Ok(())
            })?;
        }
    }

    #[test]
    fn n_requests_of_cost_one_spend_what_one_request_of_cost_n_does(
        rate in rates(), burst in 1u64..=10, window_ms in 1u64..=3_000,
        trace in arrivals(3), gap in 0u64..1_000_000_000, n in 1u64..=10,
    ) {
        for limit in all_limits(rate, burst, Duration::from_millis(window_ms)) {
            let mut state = LimitState::default();
            let mut now = 1_000_000_000_000u64;
            for &(g, cost) in &trace {
                now += g;
                limit.decide(&mut state, now, cost);
            }
            now += gap;
            let mut one = state.clone();
            let single = limit.decide(&mut one, now, n).is_allowed();
            let mut many = state.clone();
            let all = (0..n).all(|_| limit.decide(&mut many, now, 1).is_allowed());
            if single || all {
                prop_assert!(single && all, "{:?}: single {single}, units {all}", limit.kind());
                for probe in [0, 1, 50_000_000, 700_000_000, 3_000_000_000] {
                    prop_assert_eq!(
                        limit.peek(&one, now + probe, 1),
                        limit.peek(&many, now + probe, 1),
                        "{:?}", limit.kind()
                    );
                }
            }
        }
    }

    #[test]
    fn a_settled_debt_delays_the_next_request_by_exactly_the_debt(
        rate in rates(), burst in 1u64..=10, debt in 0i64..=20, cost in 1u64..=10,
    ) {
        let cost = cost.min(burst);
        let buckets: Vec<Limit> = vec![
            TokenBucket::new(rate, burst).unwrap().into(),
            LeakyBucket::new(rate, burst).unwrap().into(),
            Gcra::new(rate, burst).unwrap().into(),
        ];
        let now = 5_000_000_000;
        for limit in buckets {
            let mut state = LimitState::default();
            prop_assert!(limit.decide(&mut state, now, burst).is_allowed());
            limit.settle(&mut state, now, debt);
            // Owed: the debt plus this request's cost, each unit period/count long.
            let owed = (u128::from(debt.unsigned_abs()) + u128::from(cost))
                * u128::from(rate.period_ns());
            let want = owed.div_ceil(u128::from(rate.count()));
            let got = limit.decide(&mut state, now, cost).retry_after().unwrap();
            prop_assert_eq!(got.as_nanos(), want, "{:?}", limit.kind());
        }
    }

    #[test]
    fn refunds_give_back_units_but_never_beyond_a_fresh_key(
        rate in rates(), burst in 1u64..=10, spend in 1u64..=10, refund in 0i64..=20,
        window_ms in 1u64..=3_000,
    ) {
        let spend = spend.min(burst);
        let now = 7_000_000_000;
        for limit in all_limits(rate, burst, Duration::from_millis(window_ms)) {
            let mut state = LimitState::default();
            prop_assert!(limit.decide(&mut state, now, spend).is_allowed());
            let before = limit.peek(&state, now, 0).remaining;
            limit.settle(&mut state, now, -refund);
            let after = limit.peek(&state, now, 0).remaining;
            let want = (before + refund.unsigned_abs()).min(limit.limit());
            prop_assert_eq!(after, want, "{:?}", limit.kind());
        }
    }
}
