//! The policy core on a manual clock: which attempts are retried, how long they wait, and
//! what is counted.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode, Uri};
use ratewarden_client::{
    AdaptiveThrottle, Attempt, Backoff, Error, Next, Policy, RetryBudget, Settings,
};
use ratewarden_core::ManualClock;

const URI: &str = "http://partner.test:8080/send";

fn policy(settings: Settings) -> (Policy, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    (Policy::new(settings, Arc::new(clock.clone())), clock)
}

fn origin() -> String {
    ratewarden_client::origin_of(&URI.parse::<Uri>().unwrap())
}

fn status(code: u16, headers: &HeaderMap) -> Attempt<'_> {
    Attempt::Response {
        status: StatusCode::from_u16(code).unwrap(),
        headers,
    }
}

#[test]
fn a_post_without_an_idempotency_key_is_never_retried() {
    let (p, _) = policy(Settings::default());
    let none = HeaderMap::new();
    let mut call = p.start(origin(), &Method::POST, &none).unwrap();
    p.before_attempt(&mut call).unwrap();
    assert_eq!(p.after_attempt(&mut call, status(503, &none)), Next::Done);
    assert_eq!(
        p.after_attempt(&mut call, Attempt::ConnectError),
        Next::Done
    );
    assert_eq!(p.stats().not_repeatable, 2);

    let mut keyed = HeaderMap::new();
    keyed.insert("idempotency-key", "k-1".parse().unwrap());
    let mut call = p.start(origin(), &Method::POST, &keyed).unwrap();
    p.before_attempt(&mut call).unwrap();
    assert!(matches!(
        p.after_attempt(&mut call, status(503, &none)),
        Next::Retry(_)
    ));
}

#[test]
fn only_429_503_connect_errors_and_timeouts_are_retried() {
    let (p, _) = policy(Settings::default());
    let none = HeaderMap::new();
    for (attempt, retried) in [
        (status(429, &none), true),
        (status(503, &none), true),
        (Attempt::ConnectError, true),
        (Attempt::Timeout, true),
        (status(500, &none), false),
        (status(502, &none), false),
        (status(200, &none), false),
        (Attempt::OtherError, false),
    ] {
        let mut call = p.start(origin(), &Method::GET, &none).unwrap();
        p.before_attempt(&mut call).unwrap();
        let next = p.after_attempt(&mut call, attempt);
        assert_eq!(matches!(next, Next::Retry(_)), retried, "{attempt:?}");
    }
}

#[test]
fn the_wait_is_the_longer_of_retry_after_and_the_backoff() {
    let settings = Settings {
        backoff: Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        },
        pacing: false,
        ..Settings::default()
    };
    let (p, _) = policy(settings);
    let mut ra = HeaderMap::new();
    ra.insert("retry-after", "3".parse().unwrap());
    let mut call = p.start(origin(), &Method::GET, &HeaderMap::new()).unwrap();
    let mut waits = Vec::new();
    for _ in 0..3 {
        p.before_attempt(&mut call).unwrap();
        match p.after_attempt(&mut call, status(429, &ra)) {
            Next::Retry(w) => waits.push(w.as_secs()),
            Next::Done => unreachable!(),
        }
    }
    // Backoff 1, 2, 4 s against Retry-After 3 s.
    assert_eq!(waits, [3, 3, 4]);
    p.before_attempt(&mut call).unwrap();
    assert_eq!(
        p.after_attempt(&mut call, status(429, &ra)),
        Next::Done,
        "4 attempts is the default maximum"
    );
}

#[test]
fn a_retry_that_would_end_past_the_deadline_is_not_made() {
    let settings = Settings {
        deadline: Some(Duration::from_secs(10)),
        ..Settings::default()
    };
    let (p, clock) = policy(settings);
    let mut ra = HeaderMap::new();
    ra.insert("retry-after", "6".parse().unwrap());
    let mut call = p.start(origin(), &Method::GET, &HeaderMap::new()).unwrap();
    p.before_attempt(&mut call).unwrap();
    assert!(matches!(
        p.after_attempt(&mut call, status(503, &ra)),
        Next::Retry(_)
    ));
    clock.advance(Duration::from_secs(6));
    p.before_attempt(&mut call).unwrap();
    // 6 s in, another 6 s would end at 12 s: past the 10 s deadline.
    assert_eq!(p.after_attempt(&mut call, status(503, &ra)), Next::Done);
    assert_eq!(p.stats().deadline_give_ups, 1);
    assert_eq!(p.time_left(&call), Some(Duration::from_secs(4)));
}

#[test]
fn pacing_that_would_hold_a_request_past_its_deadline_is_an_error() {
    let settings = Settings {
        deadline: Some(Duration::from_secs(2)),
        ..Settings::default()
    };
    let (p, _) = policy(settings);
    let mut ra = HeaderMap::new();
    ra.insert("retry-after", "5".parse().unwrap());
    let mut post = p.start(origin(), &Method::POST, &HeaderMap::new()).unwrap();
    p.before_attempt(&mut post).unwrap();
    p.after_attempt(&mut post, status(429, &ra));
    // The origin said 5 s: a new request would wait past its 2 s deadline.
    let mut call = p.start(origin(), &Method::GET, &HeaderMap::new()).unwrap();
    let e = p.before_attempt(&mut call).unwrap_err();
    assert!(matches!(e, Error::Deadline { attempts: 0, .. }), "{e}");
    assert!(e.to_string().contains("partner.test:8080"), "{e}");
}

#[test]
fn the_budget_refuses_retries_past_its_share_and_counts_them() {
    // No floor, 50%: 4 requests earn 2 retries.
    let settings = Settings {
        budget: Some(RetryBudget::new(Duration::from_secs(10), 0, 0.5)),
        ..Settings::default()
    };
    let (p, _) = policy(settings);
    let none = HeaderMap::new();
    let mut calls: Vec<_> = (0..4)
        .map(|_| p.start(origin(), &Method::GET, &none).unwrap())
        .collect();
    let mut retried = 0;
    for call in &mut calls {
        p.before_attempt(call).unwrap();
        if let Next::Retry(_) = p.after_attempt(call, status(503, &none)) {
            retried += 1;
        }
    }
    assert_eq!(retried, 2);
    assert_eq!(p.stats().budget_refusals, 2);
}

#[test]
fn throttling_refuses_locally_once_the_origin_refuses_most_requests() {
    let settings = Settings {
        throttle: Some(AdaptiveThrottle::default()),
        max_attempts: 1,
        ..Settings::default()
    };
    let (p, _) = policy(settings);
    let none = HeaderMap::new();
    let mut refused = 0;
    for _ in 0..200 {
        match p.start(origin(), &Method::GET, &none) {
            Ok(mut call) => {
                p.before_attempt(&mut call).unwrap();
                p.after_attempt(&mut call, status(503, &none));
            }
            Err(Error::Throttled { origin, .. }) => {
                assert_eq!(origin, "http://partner.test:8080");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 150, "{refused}");
    assert_eq!(p.stats().throttled, refused);
    assert_eq!(p.stats().attempts, 200 - refused);
}

#[test]
fn ratelimit_fields_pace_the_next_request_to_that_origin() {
    let (p, clock) = policy(Settings::default());
    let mut fields = HeaderMap::new();
    fields.insert("ratelimit-policy", r#""per-key";q=5;w=1"#.parse().unwrap());
    fields.insert("ratelimit", r#""per-key";r=2;t=1"#.parse().unwrap());
    let mut call = p.start(origin(), &Method::GET, &HeaderMap::new()).unwrap();
    p.before_attempt(&mut call).unwrap();
    assert_eq!(p.after_attempt(&mut call, status(200, &fields)), Next::Done);
    let quota = p
        .quota("http://partner.test:8080", Some("per-key"))
        .unwrap();
    assert_eq!((quota.remaining, quota.limit), (2, Some(5)));
    clock.advance(Duration::from_millis(100));
    let mut next = p.start(origin(), &Method::GET, &HeaderMap::new()).unwrap();
    // 2 left over 1 s: 500 ms apart, 100 ms of which have passed.
    assert_eq!(
        p.before_attempt(&mut next).unwrap(),
        Duration::from_millis(400)
    );
    assert_eq!(p.stats().paced, 1);
    assert_eq!(p.stats().pacing_ns, 400_000_000);
}

#[test]
fn calls_alternating_between_origins_keep_each_origins_pace() {
    let (p, _) = policy(Settings::default());
    let mut fields = HeaderMap::new();
    fields.insert("ratelimit", r#""p";r=1;t=1"#.parse().unwrap());
    let none = HeaderMap::new();
    let (a, b) = ("http://a.test", "http://b.test");
    let mut call = p.start(a, &Method::GET, &none).unwrap();
    p.before_attempt(&mut call).unwrap();
    p.after_attempt(&mut call, status(200, &fields));
    for round in 0..3 {
        let mut to_b = p.start(b, &Method::GET, &none).unwrap();
        assert_eq!(to_b.origin(), b);
        assert_eq!(
            p.before_attempt(&mut to_b).unwrap(),
            Duration::ZERO,
            "{round}"
        );
        let mut to_a = p.start(a, &Method::GET, &none).unwrap();
        assert_eq!(to_a.origin(), a);
        // One left over 1 s: each request to `a` a second after the one before.
        assert_eq!(
            p.before_attempt(&mut to_a).unwrap(),
            Duration::from_secs(round + 1),
            "{round}"
        );
    }
    assert_eq!(p.quota(a, Some("p")).unwrap().remaining, 1);
    assert!(p.quota(b, Some("p")).is_none());
}

/// The caller chooses the origins, and may be handed any number (a crawler, a webhook
/// sender): past `MAX_ORIGINS` the policy forgets them all rather than grow, and a call
/// begun before that still finishes, on its origin's fresh state.
#[test]
fn the_state_kept_per_origin_is_bounded() {
    let (p, _) = policy(Settings::default());
    let mut fields = HeaderMap::new();
    fields.insert("ratelimit", r#""p";r=1;t=1"#.parse().unwrap());
    let none = HeaderMap::new();
    let a = "http://a.test";
    let mut first = p.start(a, &Method::GET, &none).unwrap();
    p.before_attempt(&mut first).unwrap();
    p.after_attempt(&mut first, status(200, &fields));
    assert_eq!(p.quota(a, Some("p")).unwrap().remaining, 1);
    let mut open = p.start(a, &Method::GET, &none).unwrap();
    for i in 0..ratewarden_client::MAX_ORIGINS {
        let mut call = p
            .start(format!("http://{i}.test"), &Method::GET, &none)
            .unwrap();
        p.before_attempt(&mut call).unwrap();
    }
    // Forgotten: `a` paces no more until it answers again.
    assert!(p.quota(a, Some("p")).is_none());
    assert_eq!(p.before_attempt(&mut open).unwrap(), Duration::ZERO);
    p.after_attempt(&mut open, status(200, &fields));
    assert_eq!(p.quota(a, Some("p")).unwrap().remaining, 1);
    let mut next = p.start(a, &Method::GET, &none).unwrap();
    assert!(p.before_attempt(&mut next).unwrap() > Duration::ZERO);
}

/// `begin` is `start` then `before_attempt` at one reading of the clock: driven through the
/// same answers, a policy begun each way holds, refuses, retries and counts alike (pacing
/// holds, Retry-After, throttling, retries, the budget).
#[test]
fn begin_is_start_then_before_attempt() {
    let settings = Settings {
        deadline: Some(Duration::from_secs(4)),
        throttle: Some(AdaptiveThrottle::default()),
        adaptive_rate: true,
        budget: Some(RetryBudget::new(Duration::from_secs(10), 1, 0.2)),
        ..Settings::default()
    };
    let (begun, begun_clock) = policy(settings.clone());
    let (started, started_clock) = policy(settings);
    let mut answers = Vec::new();
    for (code, fields) in [
        (200, r#""p";r=4;t=1"#),
        (200, r#""p";r=0;t=2"#),
        (429, r#""p";r=0;t=1"#),
        (503, ""),
        (503, ""),
        (200, r#""p";r=9;t=1"#),
    ] {
        let mut h = HeaderMap::new();
        if !fields.is_empty() {
            h.insert("ratelimit", fields.parse().unwrap());
        }
        if code == 429 {
            h.insert("retry-after", "1".parse().unwrap());
        }
        answers.push((code, h));
    }
    let none = HeaderMap::new();
    for i in 0..60 {
        let (code, headers) = &answers[i % answers.len()];
        let a = begun.begin(origin(), &Method::GET, &none);
        let b = started
            .start(origin(), &Method::GET, &none)
            .and_then(|mut call| Ok((started.before_attempt(&mut call)?, call)));
        let (mut a, mut b) = match (a, b) {
            (Ok((a, hold_a)), Ok((hold_b, b))) => {
                assert_eq!(hold_a, hold_b, "request {i}");
                begun_clock.advance(hold_a);
                started_clock.advance(hold_b);
                assert_eq!(begun.time_left(&a), started.time_left(&b), "request {i}");
                (a, b)
            }
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "request {i}");
                continue;
            }
            (a, b) => panic!("request {i}: {a:?} against {b:?}"),
        };
        assert_eq!(a.attempts(), b.attempts());
        let next = begun.after_attempt(&mut a, status(*code, headers));
        assert_eq!(next, started.after_attempt(&mut b, status(*code, headers)));
        if let Next::Retry(wait) = next {
            begun_clock.advance(wait);
            started_clock.advance(wait);
            let (ra, rb) = (begun.before_attempt(&mut a), started.before_attempt(&mut b));
            assert_eq!(format!("{ra:?}"), format!("{rb:?}"), "request {i}'s retry");
        }
        begun_clock.advance(Duration::from_millis(300));
        started_clock.advance(Duration::from_millis(300));
    }
    assert_eq!(begun.stats(), started.stats());
    let stats = begun.stats();
    assert!(
        stats.paced > 0 && stats.retries > 0 && stats.attempts > 60,
        "{stats:?}"
    );
}
