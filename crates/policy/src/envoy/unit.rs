//! The units of envoyproxy/ratelimit rules, with their windows and protocol numbers.

use std::fmt;

/// The unit of an envoyproxy/ratelimit rule, as in `RateLimitResponse.RateLimit.Unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// `SECOND`.
    Second,
    /// `MINUTE`.
    Minute,
    /// `HOUR`.
    Hour,
    /// `DAY`.
    Day,
    /// `WEEK` (in the response enum only, not in `envoy.type.v3.RateLimitUnit`).
    Week,
    /// `MONTH`: 30 days for envoyproxy/ratelimit.
    Month,
    /// `YEAR`: 365 days for envoyproxy/ratelimit.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The name in config files (lowercase; files may use any case).
    pub fn as_str(&self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The window length in seconds, envoyproxy/ratelimit's `UnitToDivider`.
    pub fn divider(&self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The number of this unit in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`
    /// (`SECOND = 1` … `YEAR = 6`, `WEEK = 7`).
    pub fn response_number(&self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a request's `RateLimitOverride`, by its number in `envoy.type.v3.RateLimitUnit`
    /// (`SECOND = 1` … `YEAR = 6`; that enum has no week). `UNKNOWN` and undefined numbers give
    /// `None`.
    pub fn from_override_number(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            _ => return None,
        })
    }

    /// A unit name in any case, as envoyproxy/ratelimit reads `unit`.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
