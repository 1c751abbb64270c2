//! Nanoseconds per decision, one key.
//!
//! - `decide/manual_clock/<algorithm>`: every algorithm; each iteration advances a
//!   `ManualClock` by one emission interval (1 µs), reads it through the `Clock` trait and
//!   decides a cost of 1, so the steady state is allowed (and the sliding window split into
//!   10 sub-windows, and a sliding log with 10 entries alive).
//! - `decide/real_clock/<algorithm>`: the same, reading `RealClock` each iteration (the loop
//!   runs faster than the rate, so after the burst most decisions are rejections).
//! - `decide/limit_enum/<algorithm>`: through the `Limit` enum, the path the policy engine
//!   takes, with the manual clock.
//! - `gcra_vs_governor/<clock>`: our GCRA and `governor`'s direct limiter with the same quota
//!   (1,000,000/s, burst 1000) in one group, so their ratio comes from a single run. Ours
//!   always computes remaining, reset and retry times; governor computes a rejection's wait
//!   only when asked, so the rejected case also measures `governor_with_wait`.
//! - `clock/now`: the cost of one clock reading alone.
//!
//! Before each benchmark a pre-pass of the same loop prints the share of allowed decisions to
//! stderr, so the table can say which path (allowed or rejected) was measured. The pre-pass is
//! skipped under `--profile-time`, so a profile holds the profiled benchmark alone.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_main, BenchmarkGroup, Criterion};
use governor::clock::{Clock as _, DefaultClock, FakeRelativeClock};
use governor::{Quota as GovernorQuota, RateLimiter};
use ratewarden_core::{
    Algorithm, AlgorithmKind, CalendarUnit, Clock, Concurrency, Decision, FixedWindow, Gcra,
    LeakyBucket, LeakyQueue, Limit, ManualClock, Quota, Rate, RealClock, SlidingLog, SlidingWindow,
    TokenBucket,
};

/// 2025-01-01T00:00:00Z: the manual clock's start, so calendar quotas see a real date.
const START_NS: u64 = 1_735_689_600_000_000_000;
/// The rate of the bucket algorithms, per second.
const RATE_PER_SEC: u64 = 1_000_000;
/// The burst of the bucket algorithms.
const BURST: u64 = 1_000;
/// One emission interval at `RATE_PER_SEC`: the manual clock's step per decision.
const TICK: Duration = Duration::from_micros(1);
/// The window of the window algorithms: 1000 ticks, so 1000 requests arrive per window.
const WINDOW: Duration = Duration::from_millis(1);
/// The window algorithms' limit: twice what arrives per window, so the steady state is allowed.
const WINDOW_LIMIT: u64 = 2 * BURST;
/// A calendar quota far above what the benchmark can spend in a day.
const QUOTA_LIMIT: u64 = 1_000_000_000_000;
/// Decisions in the pre-pass that reports the allowed share.
const PREPASS: usize = 200_000;

/// Runs `$body` with `$a` bound to the concrete algorithm inside `$limit` (static dispatch).
macro_rules! with_algorithm {
    ($limit:expr, |$a:ident| $body:expr) => {
        match $limit {
            Limit::FixedWindow($a) => $body,
            Limit::SlidingLog($a) => $body,
            Limit::SlidingWindow($a) => $body,
            Limit::TokenBucket($a) => $body,
            Limit::LeakyBucket($a) => $body,
            Limit::LeakyQueue($a) => $body,
            Limit::Gcra($a) => $body,
            Limit::Quota($a) => $body,
            Limit::Concurrency($a) => $body,
        }
    };
}

/// A rate the optimiser cannot see through (governor's parameters are runtime values too).
fn rate(per_second: u64) -> Rate {
    Rate::per_second(black_box(per_second)).expect("non-zero rate")
}

/// The benchmarked limit of each algorithm.
fn limit_of(kind: AlgorithmKind) -> Limit {
    let burst = black_box(BURST);
    let window_limit = black_box(WINDOW_LIMIT);
    let window = black_box(WINDOW);
    let limit: Result<Limit, _> = match kind {
        AlgorithmKind::FixedWindow => FixedWindow::new(window_limit, window).map(Limit::from),
        AlgorithmKind::SlidingLog => SlidingLog::new(window_limit, window).map(Limit::from),
        AlgorithmKind::SlidingWindow => SlidingWindow::new(window_limit, window).map(Limit::from),
        AlgorithmKind::TokenBucket => TokenBucket::new(rate(RATE_PER_SEC), burst).map(Limit::from),
        AlgorithmKind::LeakyBucket => LeakyBucket::new(rate(RATE_PER_SEC), burst).map(Limit::from),
        AlgorithmKind::LeakyQueue => LeakyQueue::new(rate(RATE_PER_SEC), burst).map(Limit::from),
        AlgorithmKind::Gcra => Gcra::new(rate(RATE_PER_SEC), burst).map(Limit::from),
        AlgorithmKind::Quota => {
            Quota::new(black_box(QUOTA_LIMIT), CalendarUnit::Day, "UTC").map(Limit::from)
        }
        // Permits that only their lease ends: each decision holds one for a window.
        AlgorithmKind::Concurrency => Concurrency::new(window_limit, window).map(Limit::from),
    };
    limit.expect("valid benchmark parameters")
}

/// Governor's quota for `per_second` cells a second with a burst of `BURST`.
fn governor_quota(per_second: u32) -> GovernorQuota {
    let nonzero = |n: u32| NonZeroU32::new(black_box(n)).expect("non-zero");
    let burst = u32::try_from(BURST).expect("burst fits in u32");
    GovernorQuota::per_second(nonzero(per_second)).allow_burst(nonzero(burst))
}

fn is_allowed(decision: &Decision) -> bool {
    decision.is_allowed()
}

fn governor_allowed<T, E>(result: &Result<T, E>) -> bool {
    result.is_ok()
}

/// A benchmark group that knows its name, for the allowed-share lines.
struct Group<'a> {
    name: &'static str,
    inner: BenchmarkGroup<'a, WallTime>,
}

impl<'a> Group<'a> {
    fn new(c: &'a mut Criterion, name: &'static str) -> Self {
        Self {
            name,
            inner: c.benchmark_group(name),
        }
    }

    /// Benchmarks the step built by `make` as `id`, after a pre-pass on a fresh step that
    /// reports the share of allowed decisions.
    ///
    /// `make` builds the step with its own clock and state, so the pre-pass leaves nothing
    /// behind. The step returns the whole result, which is black-boxed, so no part of a
    /// decision (its `remaining`, its `reset_after`) can be optimised away.
    fn bench<T, F>(&mut self, id: &str, allowed: fn(&T) -> bool, make: impl Fn() -> F)
    where
        F: FnMut() -> T,
    {
        if profiling() || !measuring() {
            // Under `--profile-time` the profile should hold the profiled benchmark alone, and
            // under `cargo test` (no `--bench`) the benchmark only has to prove it runs.
            return self.bench_only(id, make);
        }
        let mut step = make();
        let allowed_count = (0..PREPASS).filter(|_| allowed(&black_box(step()))).count();
        #[allow(clippy::cast_precision_loss)] // a percentage
        let share = 100.0 * allowed_count as f64 / PREPASS as f64;
        eprintln!("allowed-share {}/{id}: {share:.1}% of {PREPASS}", self.name);
        self.bench_only(id, make);
    }

    fn bench_only<T, F>(&mut self, id: &str, make: impl Fn() -> F)
    where
        F: FnMut() -> T,
    {
        self.inner.bench_function(id, |b| {
            let mut step = make();
            b.iter(|| black_box(step()));
        });
    }

    fn finish(self) {
        self.inner.finish();
    }
}

/// Whether criterion runs in `--profile-time` mode (no analysis, for profilers).
fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

fn profiling() -> bool {
    std::env::args().any(|arg| arg == "--profile-time")
}

/// A step of `algorithm` on a manual clock: advance one tick, read the clock, decide cost 1.
fn manual_step<A: Algorithm>(algorithm: &A) -> impl FnMut() -> Decision + '_ {
    let clock = ManualClock::new(START_NS);
    let mut state = A::State::default();
    move || {
        clock.advance(TICK);
        algorithm.decide(&mut state, clock.now(), 1)
    }
}

/// A step of `algorithm` on the real clock: read it, decide cost 1.
fn real_step<A: Algorithm>(algorithm: &A) -> impl FnMut() -> Decision + '_ {
    let clock = RealClock::new();
    let mut state = A::State::default();
    move || algorithm.decide(&mut state, clock.now(), 1)
}

fn decide_manual_clock(c: &mut Criterion) {
    let mut group = Group::new(c, "decide/manual_clock");
    for kind in AlgorithmKind::ALL {
        let limit = limit_of(kind);
        with_algorithm!(&limit, |a| group
            .bench(kind.as_str(), is_allowed, || { manual_step(a) }));
    }
    // The sliding log's cost grows with the entries alive in a window (1000 above); the same
    // rate with 10 alive, the size the log is meant for.
    let small_log = SlidingLog::new(black_box(20), black_box(Duration::from_micros(10)))
        .expect("valid parameters");
    group.bench("sliding-log-10-live", is_allowed, || {
        manual_step(&small_log)
    });
    // The sliding window split into 10 sub-windows: N + 1 counts rolled per decision.
    let ten = SlidingWindow::new(black_box(WINDOW_LIMIT), black_box(WINDOW))
        .and_then(|sw| sw.with_sub_windows(black_box(10)))
        .expect("valid parameters");
    group.bench("sliding-window-10-sub-windows", is_allowed, || {
        manual_step(&ten)
    });
    group.finish();
}

fn decide_real_clock(c: &mut Criterion) {
    let mut group = Group::new(c, "decide/real_clock");
    for kind in AlgorithmKind::ALL {
        let limit = limit_of(kind);
        with_algorithm!(&limit, |a| group
            .bench(kind.as_str(), is_allowed, || { real_step(a) }));
    }
    group.finish();
}

fn decide_limit_enum(c: &mut Criterion) {
    let mut group = Group::new(c, "decide/limit_enum");
    for kind in AlgorithmKind::ALL {
        let limit = limit_of(kind);
        group.bench(kind.as_str(), is_allowed, || manual_step(&limit));
    }
    group.finish();
}

fn gcra_vs_governor(c: &mut Criterion) {
    let gcra = Gcra::new(rate(RATE_PER_SEC), black_box(BURST)).expect("valid parameters");
    let quota = governor_quota(1_000_000);

    // Mostly allowed: time advances by one emission interval per decision.
    let mut group = Group::new(c, "gcra_vs_governor/manual_clock");
    group.bench("ratewarden", is_allowed, || manual_step(&gcra));
    group.bench("governor", governor_allowed, || {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
        move || {
            clock.advance(TICK);
            limiter.check()
        }
    });
    group.finish();

    // All rejected after the burst: the clock stands still.
    let mut group = Group::new(c, "gcra_vs_governor/manual_clock_limited");
    group.bench("ratewarden", is_allowed, || {
        let clock = ManualClock::new(START_NS);
        let mut state = Default::default();
        move || gcra.decide(&mut state, clock.now(), 1)
    });
    group.bench("governor", governor_allowed, || {
        let limiter = RateLimiter::direct_with_clock(quota, FakeRelativeClock::default());
        move || limiter.check()
    });
    // What a 429 needs: governor's rejection plus the wait it implies (ours always has it).
    group.bench("governor_with_wait", governor_allowed, || {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
        move || {
            limiter
                .check()
                .map_err(|not_until| not_until.wait_time_from(clock.now()))
        }
    });
    group.finish();

    // The same quota on the real clock: the loop outruns one per µs, so mostly rejected.
    let mut group = Group::new(c, "gcra_vs_governor/real_clock");
    group.bench("ratewarden", is_allowed, || real_step(&gcra));
    group.bench("governor", governor_allowed, || {
        let limiter = RateLimiter::direct(quota);
        move || limiter.check()
    });
    group.finish();

    // The real clock at 10^9/s, so that (nearly) every decision is allowed.
    let fast_gcra = Gcra::new(rate(1_000_000_000), black_box(BURST)).expect("valid parameters");
    let fast_quota = governor_quota(1_000_000_000);
    let mut group = Group::new(c, "gcra_vs_governor/real_clock_mostly_allowed");
    group.bench("ratewarden", is_allowed, || real_step(&fast_gcra));
    group.bench("governor", governor_allowed, || {
        let limiter = RateLimiter::direct(fast_quota);
        move || limiter.check()
    });
    group.finish();
}

fn clock_now(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock/now");
    let real = RealClock::new();
    group.bench_function("ratewarden_real", |b| b.iter(|| black_box(real.now())));
    let manual = ManualClock::new(START_NS);
    group.bench_function("ratewarden_manual_advance_and_read", |b| {
        b.iter(|| {
            manual.advance(TICK);
            black_box(manual.now())
        });
    });
    let default = DefaultClock::default();
    group.bench_function("governor_default", |b| b.iter(|| black_box(default.now())));
    let fake = FakeRelativeClock::default();
    group.bench_function("governor_fake_advance_and_read", |b| {
        b.iter(|| {
            fake.advance(TICK);
            black_box(fake.now())
        });
    });
    group.finish();
}

/// The group `criterion_main!` runs (in a private module: the macro's function has no docs).
mod group {
    use super::{
        clock_now, decide_limit_enum, decide_manual_clock, decide_real_clock, gcra_vs_governor,
    };
    use criterion::{criterion_group, Criterion};
    use std::time::Duration;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(50);
        targets = gcra_vs_governor, decide_manual_clock, decide_real_clock, decide_limit_enum,
            clock_now
    }
}

criterion_main!(group::benches);
