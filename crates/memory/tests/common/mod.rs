//! Set-up shared by the store's test files: every algorithm at small numbers, so a few
//! decisions reach each one's limit.

use std::time::Duration;

use ratewarden_core::{
    CalendarUnit, Concurrency, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Limit, Quota, Rate,
    SlidingLog, SlidingWindow, TokenBucket,
};

/// A second, in the nanoseconds every call takes.
pub const SEC: u64 = ratewarden_core::NANOS_PER_SEC;

/// One limit of every algorithm: three units (two queued for the leaky queue) at 5/s or in
/// 700 ms, so windows and refills fall between whole seconds.
pub fn every_limit() -> Vec<Limit> {
    let rate = Rate::new(5, Duration::from_secs(1)).unwrap();
    let window = Duration::from_millis(700);
    vec![
        FixedWindow::new(3, window).unwrap().into(),
        SlidingLog::new(3, window).unwrap().into(),
        SlidingWindow::new(3, window).unwrap().into(),
        TokenBucket::new(rate, 3).unwrap().into(),
        LeakyBucket::new(rate, 3).unwrap().into(),
        LeakyQueue::new(rate, 2).unwrap().into(),
        Gcra::new(rate, 3).unwrap().into(),
        Quota::new(3, CalendarUnit::Second, "UTC").unwrap().into(),
        Concurrency::new(3, window).unwrap().into(),
    ]
}
