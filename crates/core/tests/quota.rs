//! Calendar quotas reset on calendar boundaries of a named time zone: month ends, leap days and
//! DST changes included.

use std::time::Duration;

use ratewarden_core::{Algorithm, CalendarUnit, Error, Outcome, Quota};

const HOUR: u64 = 3_600;
const DAY: u64 = 24 * HOUR;

/// Unix nanoseconds of a zoned civil time such as `2026-03-08T12:00[America/New_York]`.
fn at(zoned: &str) -> u64 {
    let z: jiff::Zoned = zoned.parse().unwrap();
    u64::try_from(z.timestamp().as_nanosecond()).unwrap()
}

fn secs(d: Duration) -> u64 {
    assert_eq!(d.subsec_nanos(), 0, "{d:?} is not whole seconds");
    d.as_secs()
}

#[test]
fn a_monthly_quota_resets_at_midnight_on_the_first() {
    let quota = Quota::new(3, CalendarUnit::Month, "UTC").unwrap();
    let mut state = Default::default();
    let last_ns = at("2026-01-31T23:59:59.999999999[UTC]");
    assert!(quota.decide(&mut state, last_ns, 3).is_allowed());
    let d = quota.decide(&mut state, last_ns, 1);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(1)));
    let first = at("2026-02-01T00:00[UTC]");
    let d = quota.decide(&mut state, first, 1);
    assert!(d.is_allowed());
    assert_eq!(d.remaining, 2);
    // February 2026 has 28 days.
    assert_eq!(secs(d.reset_after()), 28 * DAY);
}

#[test]
fn february_of_a_leap_year_has_a_29th() {
    let monthly = Quota::new(1, CalendarUnit::Month, "UTC").unwrap();
    let mut state = Default::default();
    assert!(monthly
        .decide(&mut state, at("2028-02-01T00:00[UTC]"), 1)
        .is_allowed());
    let d = monthly.decide(&mut state, at("2028-02-01T00:00[UTC]"), 1);
    assert_eq!(secs(d.retry_after().unwrap()), 29 * DAY);

    let daily = Quota::new(1, CalendarUnit::Day, "UTC").unwrap();
    let mut state = Default::default();
    assert!(daily
        .decide(&mut state, at("2028-02-29T18:00[UTC]"), 1)
        .is_allowed());
    let d = daily.decide(&mut state, at("2028-02-29T18:00[UTC]"), 1);
    assert_eq!(secs(d.retry_after().unwrap()), 6 * HOUR);
    assert!(daily
        .decide(&mut state, at("2028-03-01T00:00[UTC]"), 1)
        .is_allowed());
}

#[test]
fn days_across_dst_changes_last_23_and_25_hours() {
    let daily = Quota::new(1, CalendarUnit::Day, "America/New_York").unwrap();
    // Spring forward: 2026-03-08 skips 02:00-03:00.
    let mut state = Default::default();
    let d = daily.decide(&mut state, at("2026-03-08T00:00[America/New_York]"), 1);
    assert_eq!(secs(d.reset_after()), 23 * HOUR);
    let d = daily.decide(&mut state, at("2026-03-08T12:00[America/New_York]"), 1);
    assert_eq!(secs(d.retry_after().unwrap()), 12 * HOUR);
    // Fall back: 2026-11-01 repeats 01:00-02:00.
    let mut state = Default::default();
    let d = daily.decide(&mut state, at("2026-11-01T00:00[America/New_York]"), 1);
    assert_eq!(secs(d.reset_after()), 25 * HOUR);
}

#[test]
fn the_repeated_hour_at_fall_back_is_two_hourly_periods() {
    let hourly = Quota::new(1, CalendarUnit::Hour, "America/New_York").unwrap();
    let mut state = Default::default();
    // 01:30 EDT (05:30 UTC), then 01:30 EST (06:30 UTC): different hours, an hour apart.
    let first = at("2026-11-01T01:30-04:00[America/New_York]");
    let second = at("2026-11-01T01:30-05:00[America/New_York]");
    assert_eq!(second - first, HOUR * 1_000_000_000);
    assert!(hourly.decide(&mut state, first, 1).is_allowed());
    let d = hourly.decide(&mut state, first, 1);
    assert_eq!(secs(d.retry_after().unwrap()), 30 * 60);
    assert!(hourly.decide(&mut state, second, 1).is_allowed());
}

#[test]
fn hours_follow_local_time_in_half_hour_zones() {
    let hourly = Quota::new(1, CalendarUnit::Hour, "Asia/Kolkata").unwrap();
    let mut state = Default::default();
    assert!(hourly
        .decide(&mut state, at("2026-06-01T10:59[Asia/Kolkata]"), 1)
        .is_allowed());
    let d = hourly.decide(&mut state, at("2026-06-01T10:59[Asia/Kolkata]"), 1);
    assert_eq!(secs(d.retry_after().unwrap()), 60);
}

#[test]
fn weeks_start_on_monday_and_can_lose_an_hour() {
    let weekly = Quota::new(1, CalendarUnit::Week, "Europe/Paris").unwrap();
    let mut state = Default::default();
    // Wednesday of the week whose Sunday moves clocks forward (2026-03-29).
    let wednesday = at("2026-03-25T12:00[Europe/Paris]");
    assert!(weekly.decide(&mut state, wednesday, 1).is_allowed());
    let d = weekly.decide(&mut state, wednesday, 1);
    let monday = at("2026-03-30T00:00[Europe/Paris]");
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_nanos(monday - wednesday))
    );
    // The period is 7 days less the skipped hour.
    let state_start = at("2026-03-23T00:00[Europe/Paris]");
    let mut state = Default::default();
    let d = weekly.decide(&mut state, state_start, 1);
    assert_eq!(secs(d.reset_after()), 7 * DAY - HOUR);
}

#[test]
fn yearly_quota_resets_on_the_first_of_january_local_time() {
    let yearly = Quota::new(1, CalendarUnit::Year, "Pacific/Auckland").unwrap();
    let mut state = Default::default();
    let nye = at("2026-12-31T23:00[Pacific/Auckland]");
    assert!(yearly.decide(&mut state, nye, 1).is_allowed());
    assert_eq!(
        secs(yearly.decide(&mut state, nye, 1).retry_after().unwrap()),
        HOUR
    );
}

#[test]
fn quota_errors_name_the_problem() {
    let e = Quota::new(1, CalendarUnit::Day, "Mars/Olympus").unwrap_err();
    assert!(matches!(e, Error::TimeZone { ref name, .. } if name == "Mars/Olympus"));
    assert!(e.to_string().contains("Mars/Olympus"));
    assert_eq!(
        Quota::new(0, CalendarUnit::Day, "UTC").unwrap_err(),
        Error::Zero { field: "limit" }
    );
    let e = "fortnight".parse::<CalendarUnit>().unwrap_err().to_string();
    assert!(e.contains("fortnight") && e.contains("month"), "{e}");
    assert_eq!(
        "monthly".parse::<CalendarUnit>().unwrap(),
        CalendarUnit::Month
    );
    assert_eq!("daily".parse::<CalendarUnit>().unwrap(), CalendarUnit::Day);
}

#[test]
fn a_cost_above_the_quota_can_never_fit() {
    let quota = Quota::new(10, CalendarUnit::Month, "UTC").unwrap();
    let mut state = Default::default();
    let d = quota.decide(&mut state, at("2026-05-05T00:00[UTC]"), 11);
    assert_eq!(d.outcome, Outcome::CostTooHigh);
    assert_eq!(d.remaining, 10);
}
