//! Nonsensical limits are errors naming the field, never panics.

use std::time::Duration;

use ratewarden_core::{
    AlgorithmKind, Error, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Rate, SlidingLog,
    SlidingWindow, TokenBucket,
};

#[test]
fn zero_limits_windows_rates_and_bursts_name_the_field() {
    let second = Duration::from_secs(1);
    let rate = Rate::per_second(1).unwrap();
    let zero = |field| Error::Zero { field };
    assert_eq!(FixedWindow::new(0, second).unwrap_err(), zero("limit"));
    assert_eq!(
        FixedWindow::new(1, Duration::ZERO).unwrap_err(),
        zero("window")
    );
    assert_eq!(SlidingLog::new(0, second).unwrap_err(), zero("limit"));
    assert_eq!(
        SlidingWindow::new(1, Duration::ZERO).unwrap_err(),
        zero("window")
    );
    assert_eq!(TokenBucket::new(rate, 0).unwrap_err(), zero("burst"));
    assert_eq!(LeakyBucket::new(rate, 0).unwrap_err(), zero("burst"));
    assert_eq!(Gcra::new(rate, 0).unwrap_err(), zero("burst"));
    assert_eq!(Rate::per_second(0).unwrap_err(), zero("rate"));
    assert_eq!(Rate::new(1, Duration::ZERO).unwrap_err(), zero("rate"));
    assert!(matches!(
        FixedWindow::new(1, Duration::MAX).unwrap_err(),
        Error::TooLarge {
            field: "window",
            ..
        }
    ));
    assert!(matches!(
        LeakyQueue::new(rate, u64::MAX).unwrap_err(),
        Error::TooLarge { field: "burst", .. }
    ));
}

#[test]
fn unknown_algorithm_lists_the_known_ones() {
    let e = "token_bucket".parse::<AlgorithmKind>().unwrap();
    assert_eq!(e, AlgorithmKind::TokenBucket);
    let msg = "leaky".parse::<AlgorithmKind>().unwrap_err().to_string();
    for kind in AlgorithmKind::ALL {
        assert!(msg.contains(kind.as_str()), "{msg}");
    }
}

#[test]
fn extreme_numbers_never_panic() {
    use ratewarden_core::{Algorithm, CalendarUnit, Limit, LimitState, Quota};
    let absurd = Rate::new(u64::MAX, Duration::from_nanos(u64::MAX)).unwrap();
    let big = Rate::new(u64::from(u32::MAX), Duration::from_secs(366 * 86_400)).unwrap();
    for rate in [absurd, big] {
        for n in [u64::from(u32::MAX), u64::MAX] {
            let window = Duration::from_nanos(u64::MAX);
            let limits: Vec<Limit> = vec![
                FixedWindow::new(n, window).unwrap().into(),
                SlidingLog::new(n, window).unwrap().into(),
                SlidingWindow::new(n, window).unwrap().into(),
                TokenBucket::new(rate, n).unwrap().into(),
                LeakyBucket::new(rate, n).unwrap().into(),
                LeakyQueue::new(rate, n - 1).unwrap().into(),
                Gcra::new(rate, n).unwrap().into(),
                Quota::new(n, CalendarUnit::Year, "UTC").unwrap().into(),
            ];
            for limit in limits {
                let mut state = LimitState::default();
                for now in [0, u64::MAX / 2, u64::MAX, 1] {
                    for cost in [0, 1, n, u64::MAX] {
                        limit.decide(&mut state, now, cost);
                        limit.peek(&state, now, cost);
                        limit.is_fresh(&state, now);
                    }
                    limit.settle(&mut state, now, i64::MAX);
                    limit.settle(&mut state, now, i64::MIN);
                }
            }
        }
    }
    // Within 64-bit rates the arithmetic stays exact at the end of time.
    let gcra = Gcra::new(big, u64::from(u32::MAX)).unwrap();
    let mut s = Default::default();
    assert!(gcra
        .decide(&mut s, u64::MAX, u64::from(u32::MAX))
        .is_allowed());
    assert!(!gcra.decide(&mut s, u64::MAX, 1).is_allowed());
}
