//! Calendar quotas: a count per hour, day, week, month or year of a named time zone.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{RoundMode, Span, Timestamp, Unit, Zoned, ZonedRound};

use super::Algorithm;
use crate::{Decision, Error, Outcome};

/// A calendar period a quota resets on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalendarUnit {
    /// Each second.
    Second,
    /// Each minute.
    Minute,
    /// Each hour of local time.
    Hour,
    /// Each local day, from midnight (a day across a DST change lasts 23 or 25 hours).
    Day,
    /// Each ISO week, from Monday midnight.
    Week,
    /// Each calendar month, from midnight on the 1st.
    Month,
    /// Each calendar year, from midnight on 1 January.
    Year,
}

impl CalendarUnit {
    /// Every unit, shortest first.
    pub const ALL: [CalendarUnit; 7] = [
        Self::Second,
        Self::Minute,
        Self::Hour,
        Self::Day,
        Self::Week,
        Self::Month,
        Self::Year,
    ];

    /// The name used in config files and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
            Self::Year => "year",
        }
    }

    /// The unit whose every period lasts exactly `d`, if any (seconds, minutes, hours).
    pub fn of_fixed_length(d: Duration) -> Option<Self> {
        match d.as_nanos() {
            1_000_000_000 => Some(Self::Second),
            60_000_000_000 => Some(Self::Minute),
            3_600_000_000_000 => Some(Self::Hour),
            _ => None,
        }
    }

    /// The period holding `now`, as `[start, end)` in Unix nanoseconds.
    fn period(self, tz: &TimeZone, now: u64) -> Option<(u64, u64)> {
        let zoned = Timestamp::from_nanosecond(i128::from(now))
            .ok()?
            .to_zoned(tz.clone());
        let start: Zoned = match self {
            Self::Second | Self::Minute | Self::Hour => {
                let unit = match self {
                    Self::Second => Unit::Second,
                    Self::Minute => Unit::Minute,
                    _ => Unit::Hour,
                };
                zoned
                    .round(ZonedRound::new().smallest(unit).mode(RoundMode::Trunc))
                    .ok()?
            }
            Self::Day => zoned.start_of_day().ok()?,
            Self::Week => {
                let back = i64::from(zoned.weekday().to_monday_zero_offset());
                let monday = zoned.date().checked_sub(Span::new().days(back)).ok()?;
                monday.to_zoned(tz.clone()).ok()?
            }
            Self::Month => zoned.date().first_of_month().to_zoned(tz.clone()).ok()?,
            Self::Year => zoned.date().first_of_year().to_zoned(tz.clone()).ok()?,
        };
        let step = match self {
            Self::Second => Span::new().seconds(1),
            Self::Minute => Span::new().minutes(1),
            Self::Hour => Span::new().hours(1),
            Self::Day => Span::new().days(1),
            Self::Week => Span::new().weeks(1),
            Self::Month => Span::new().months(1),
            Self::Year => Span::new().years(1),
        };
        let end = start.checked_add(step).ok()?;
        let ns = |z: &Zoned| u64::try_from(z.timestamp().as_nanosecond()).ok();
        Some((ns(&start)?, ns(&end)?))
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CalendarUnit {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let name = s.trim().to_ascii_lowercase();
        let name = name.strip_suffix("ly").unwrap_or(&name);
        let name = match name {
            "dai" => "day",
            "annual" => "year",
            other => other,
        };
        Self::ALL
            .into_iter()
            .find(|u| u.as_str() == name)
            .ok_or_else(|| Error::UnknownPeriod { name: s.to_owned() })
    }
}

/// At most `limit` units per calendar period of a time zone, resetting at the boundary.
///
/// "A million calls a month, resetting on the 1st" in the customer's time zone: periods follow
/// the calendar (a month is 28 to 31 days, a day across a DST change 23 or 25 hours), so `now`
/// is read as nanoseconds since the Unix epoch. The period is computed once and kept in the
/// state, so most decisions are a comparison and an addition.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Algorithm, CalendarUnit, Quota};
///
/// let quota = Quota::new(2, CalendarUnit::Month, "UTC")?;
/// let mut state = Default::default();
/// let jan_31 = 1_769_817_600_000_000_000; // 2026-01-31T00:00:00Z
/// assert!(quota.decide(&mut state, jan_31, 2).is_allowed());
/// let d = quota.decide(&mut state, jan_31, 1);
/// assert_eq!(d.retry_after().unwrap().as_secs(), 86_400); // until 1 February
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    limit: NonZeroU64,
    unit: CalendarUnit,
    tz: TimeZone,
}

/// A quota's state: the period it counts and the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QuotaState {
    /// Start of the counted period, in Unix nanoseconds.
    pub start: u64,
    /// End of the counted period (exclusive), in Unix nanoseconds.
    pub end: u64,
    /// Units charged in the period.
    pub used: u64,
}

impl Quota {
    /// At most `limit` units per `unit` of the IANA time zone `timezone` (such as `UTC` or
    /// `America/New_York`).
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `limit` is zero; [`Error::TimeZone`] for an unknown zone.
    pub fn new(limit: u64, unit: CalendarUnit, timezone: &str) -> Result<Self, Error> {
        let tz = TimeZone::get(timezone).map_err(|e| Error::TimeZone {
            name: timezone.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            limit: NonZeroU64::new(limit).ok_or(Error::Zero { field: "limit" })?,
            unit,
            tz,
        })
    }

    /// The calendar period.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The time zone's name, if it has one.
    pub fn timezone(&self) -> &str {
        self.tz.iana_name().unwrap_or("UTC")
    }

    /// The calendar period holding `now` (Unix nanoseconds), as `[start, end)` in Unix
    /// nanoseconds: where a key's count starts when `now` is past its period.
    ///
    /// A shared store whose transitions run where time zones cannot be computed (a Redis
    /// script) is sent these boundaries by the caller. A period that does not fit in 64 bits
    /// of nanoseconds (its end is past the year 2554) is counted as the second from `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{CalendarUnit, Quota};
    ///
    /// let quota = Quota::new(10, CalendarUnit::Day, "UTC")?;
    /// let noon = 1_769_860_800_000_000_000; // 2026-01-31T12:00:00Z
    /// let day = 86_400_000_000_000;
    /// assert_eq!(quota.period_at(noon), (noon - day / 2, noon + day / 2));
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    pub fn period_at(&self, now: u64) -> (u64, u64) {
        // A timestamp jiff cannot place (past the year 9999) never happens for u64
        // nanoseconds (they end in 2554); count it in a one-second period rather than panic.
        self.unit
            .period(&self.tz, now)
            .unwrap_or((now, now.saturating_add(crate::NANOS_PER_SEC)))
    }

    /// The state counting the period that holds `now`.
    fn current(&self, state: &QuotaState, now: u64) -> QuotaState {
        if state.start <= now && now < state.end {
            return *state;
        }
        let (start, end) = self.period_at(now);
        QuotaState {
            start,
            end,
            used: 0,
        }
    }
}

impl Algorithm for Quota {
    type State = QuotaState;

    fn decide(&self, state: &mut QuotaState, now: u64, cost: u64) -> Decision {
        let limit = self.limit.get();
        let current = self.current(state, now);
        let ends_in = current.end - now;
        let outcome = if cost > limit {
            Outcome::CostTooHigh
        } else if current.used.saturating_add(cost) <= limit {
            *state = QuotaState {
                used: current.used.saturating_add(cost),
                ..current
            };
            Outcome::Allowed
        } else {
            Outcome::Limited {
                retry_after_ns: ends_in,
            }
        };
        let used = if outcome == Outcome::Allowed {
            state.used
        } else {
            current.used
        };
        let reset = if used == 0 { 0 } else { ends_in };
        Decision::new(outcome, limit, limit.saturating_sub(used), reset)
    }

    fn settle(&self, state: &mut QuotaState, now: u64, delta: i64) {
        let mut current = self.current(state, now);
        current.used = current.used.saturating_add_signed(delta);
        *state = current;
    }

    fn is_fresh(&self, state: &QuotaState, now: u64) -> bool {
        self.current(state, now).used == 0
    }

    fn limit(&self) -> u64 {
        self.limit.get()
    }
}
